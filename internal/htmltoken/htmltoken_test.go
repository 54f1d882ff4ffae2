package htmltoken

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// tokenizer is what the two tokenizers have in common.
type tokenizer interface {
	Next() html.TokenType
	Err() error
	Text() []byte
	TagName() ([]byte, bool)
	TagAttr() ([]byte, []byte, bool)
}

// stream describes every token of a document, as the tokenizer returns it.
func stream(z tokenizer) []string {
	var out []string
	for range 1 << 16 {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return append(out, fmt.Sprintf("error %v", z.Err()))
		case html.TextToken:
			out = append(out, fmt.Sprintf("text %q", z.Text()))
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, more := z.TagName()
			t := fmt.Sprintf("%v %q", tt, name)
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				t += fmt.Sprintf(" %q=%q", k, v)
			}
			out = append(out, t)
		default:
			out = append(out, tt.String())
		}
	}
	return append(out, "too many tokens")
}

func xnet(doc []byte, max int) []string {
	z := html.NewTokenizer(bytes.NewReader(doc))
	z.SetMaxBuf(max)
	return stream(z)
}

func ours(doc []byte, max int) []string {
	z := New(doc)
	z.SetMaxBuf(max)
	return stream(z)
}

var seeds = []string{
	``,
	`plain text`,
	`<html><head><title>A &amp; B</title></head><body><p class=x>Hi &lt;there&gt;</p></body></html>`,
	`<A HREF="/x?a=1&amp;b=2&c=3" Href=dup>link</A>`,
	`<img src=a.png/><br/><p a=/>x</p><input disabled>`,
	`<script>if (a < b && c > d) { x = "</scr" + "ipt>"; }</script><p>after`,
	`<script><!-- <script> </script> --></script>done`,
	`<style>p { background: url(a.png) }</style><textarea>&lt;b&gt;</textarea>`,
	`<!-- comment --><!DOCTYPE html><!doctype x><!--> <!---> <!-- a --!> b`,
	`<!x><?xml version="1.0"?></ ></><//>`,
	"a\r\nb\rc\x00d<p t='\x00\r\n'>\x00</p><title>\x00&copy</title>",
	`&copy &copyx &notit; &notin; &#65; &#x41; &#xZZ; &# &amp &ampx &semi; &fjlig;`,
	`<a href="&copyx &copy=1 &amp=2 &semi; &notit; &lt">`,
	`<a href="&#59; &#x38 &#38;amp; &#0; &#x110000; &#128;" title='&ampx&amp;'>`,
	`<plaintext><p>all text &amp;`,
	`<a b='unterminated`,
	`text then <`,
	`text then </`,
	`<p><<a>>`,
	`<xmp><b></xmp><iframe><p></IFRAME ><noscript>x</noscript/>`,
	`<a x y=1 z = "2" w=3/ v=4>`,
	`<a =b c==d>`,
	`<div a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8 i=9 j=10 A=dup k=11 B=dup>`,
	`<scrIPT>a</SCRipt x>b`,
	`<script><!--<script>--></script>x</script>y`,
	`<script><!--a<b</script>`,
	`<script><!--<!x</script>y`,
	`<script><!--<scriptx>--></script>y`,
	`<script><!--<script></script>--></script>y`,
	`<SCRIPT><!--<Script/>x</SCRIPT >--->y</script>z`,
	`<script><!--- -->-></script>z`,
	`<script><!-- -- > --></script>z<script><!--<script>--><</script>`,
	`<script><!`, `<script><!-`, `<script><!--<scrip`, `<script><!--<script>-</`,
	`<script><!--<!<script></script>x--></script>y`,
	`<script><!--x-><script></script>y</script>z`,
	`<script><!--><script></script>y</script>z`,
	`<title>a</titlex></title>`,
}

func TestMatchesXNetHTML(t *testing.T) {
	for _, doc := range seeds {
		for _, max := range []int{0, 1, 2, 3, 5, 8, 13, 40} {
			want, got := xnet([]byte(doc), max), ours([]byte(doc), max)
			if !equal(got, want) {
				t.Errorf("%q (max %d):\n got  %q\n want %q", doc, max, got, want)
			}
		}
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// FuzzMatchesXNetHTML holds the tokenizer to x/net/html's tokens, errors
// and token size bound.
func FuzzMatchesXNetHTML(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, doc []byte, max uint8) {
		in := bytes.Clone(doc)
		want, got := xnet(doc, int(max)), ours(doc, int(max))
		if !equal(got, want) {
			t.Fatalf("max %d:\n got  %q\n want %q", max, got, want)
		}
		if !bytes.Equal(doc, in) {
			t.Fatalf("the document was modified")
		}
	})
}

// The tokenizer never writes to the document, even where it returns
// changed names, values and text.
func TestDocumentUnchanged(t *testing.T) {
	for _, doc := range seeds {
		b := []byte(doc)
		ours(b, 0)
		if string(b) != doc {
			t.Errorf("%q became %q", doc, b)
		}
	}
}

func benchDoc() []byte {
	var doc bytes.Buffer
	doc.WriteString("<!DOCTYPE html><html><head><title>Bench &amp; more</title><link rel=stylesheet href=/s.css><script>var x = 1 < 2;</script></head><body>")
	for i := range 100 {
		fmt.Fprintf(&doc, `<p class="para">%s <a href="/page-%d.html?a=1&amp;b=2">link %d</a> <img src="/img/%d.png" alt="x"></p>`,
			strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 4), i, i, i)
	}
	doc.WriteString("</body></html>")
	return doc.Bytes()
}

func BenchmarkTokenize(b *testing.B) {
	doc := benchDoc()
	run := func(b *testing.B, z tokenizer) {
		for {
			switch z.Next() {
			case html.ErrorToken:
				return
			case html.TextToken:
				z.Text()
			case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
				_, more := z.TagName()
				for more {
					_, _, more = z.TagAttr()
				}
			}
		}
	}
	b.Run("htmltoken", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			run(b, New(doc))
		}
	})
	b.Run("x-net-html", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			run(b, html.NewTokenizer(bytes.NewReader(doc)))
		}
	})
}
