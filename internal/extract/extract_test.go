package extract

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/waggle-archive/waggle/internal/simhash"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

const page = "http://example.com/dir/page.html"

func links(res Result) map[string]Outlink {
	m := map[string]Outlink{}
	for _, l := range res.Links {
		m[l.URL] = l
	}
	return m
}

func TestHTMLElements(t *testing.T) {
	doc := `<!doctype html><html><head><title> The  Page </title>
<link rel="stylesheet" href="/css/site.css"><link rel=alternate href="feed.xml"><link rel="icon" href="/favicon.ico">
<style>body{background:url('/img/bg.png')} @import "print.css";</style>
<meta http-equiv="refresh" content="5; URL='/next.html'">
<script src="app.js"></script></head>
<body background="/img/body.gif"><a href="a.html#top">A</a><a href="javascript:void(0)">no</a><a href="mailto:x@y.z">no</a>
<img src="i.png" srcset="i-1x.png 1x, /abs/i-2x.png 2x"><picture><source srcset="p.webp"></picture>
<iframe src="//other.example/frame"></iframe><video poster="poster.jpg" src="v.mp4"></video>
<div style="background-image: url(&quot;inline.png&quot;)"></div><area href="/map"><object data="obj.swf"></object>
<input type="image" src="button.png"><input type="text" src="ignored.png"></body></html>`
	res, err := HTML([]byte(doc), "text/html", page, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Title != "The Page" {
		t.Errorf("title %q", res.Title)
	}
	want := map[string]Kind{
		"http://example.com/css/site.css":   Embed,
		"http://example.com/dir/feed.xml":   Link,
		"http://example.com/favicon.ico":    Embed,
		"http://example.com/img/bg.png":     Embed,
		"http://example.com/dir/print.css":  Embed,
		"http://example.com/next.html":      Redirect,
		"http://example.com/dir/app.js":     Embed,
		"http://example.com/img/body.gif":   Embed,
		"http://example.com/dir/a.html":     Link,
		"http://example.com/dir/i.png":      Embed,
		"http://example.com/dir/i-1x.png":   Embed,
		"http://example.com/abs/i-2x.png":   Embed,
		"http://example.com/dir/p.webp":     Embed,
		"http://other.example/frame":        Embed,
		"http://example.com/dir/poster.jpg": Embed,
		"http://example.com/dir/v.mp4":      Embed,
		"http://example.com/dir/inline.png": Embed,
		"http://example.com/map":            Link,
		"http://example.com/dir/obj.swf":    Embed,
		"http://example.com/dir/button.png": Embed,
	}
	got := links(res)
	for u, k := range want {
		if l, ok := got[u]; !ok || l.Kind != k {
			t.Errorf("%s: got %+v, want kind %d", u, l, k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d links, want %d: %v", len(got), len(want), res.Links)
	}
}

func TestBaseHref(t *testing.T) {
	res, _ := HTML([]byte(`<a href="before.html"></a><base href="http://cdn.example/root/"><a href="x.html"></a><base href="/ignored/">`), "", page, Limits{})
	got := links(res)
	if _, ok := got["http://cdn.example/root/x.html"]; !ok || res.Base != "http://cdn.example/root/" {
		t.Errorf("base not applied: %v base %q", res.Links, res.Base)
	}
	if _, ok := got["http://example.com/dir/before.html"]; !ok {
		t.Errorf("link before <base> resolved wrongly: %v", res.Links)
	}
}

func TestCharsets(t *testing.T) {
	// "café" in ISO-8859-1: é is 0xE9; the link must come out as UTF-8, percent-encoded.
	latin1 := []byte("<a href=\"caf\xe9.html\">x</a>")
	res, _ := HTML(latin1, "text/html; charset=iso-8859-1", page, Limits{})
	if _, ok := links(res)["http://example.com/dir/caf%C3%A9.html"]; !ok {
		t.Errorf("latin1: %v", res.Links)
	}
	// Shift_JIS declared in <meta>: 日本 is 0x93FA 0x967B.
	sjis := []byte("<meta charset=\"shift_jis\"><a href=\"/\x93\xfa\x96\x7b.html\">x</a>")
	res, _ = HTML(sjis, "text/html", page, Limits{})
	if _, ok := links(res)["http://example.com/%E6%97%A5%E6%9C%AC.html"]; !ok {
		t.Errorf("shift_jis: %v", res.Links)
	}
	// Invalid UTF-8 does not stop extraction.
	res, _ = HTML([]byte("<p>\xff\xfe\xc3</p><a href=\"ok.html\">"), "text/html; charset=utf-8", page, Limits{})
	if _, ok := links(res)["http://example.com/dir/ok.html"]; !ok {
		t.Errorf("invalid utf-8: %v", res.Links)
	}
}

func TestHostileHTML(t *testing.T) {
	deep := strings.Repeat("<div>", 100_000) + `<a href="deep.html">` + strings.Repeat("</div>", 100_000)
	res, err := HTML([]byte(deep), "text/html", page, Limits{})
	if err != nil || len(res.Links) != 1 {
		t.Errorf("deep nesting: %v %v", res.Links, err)
	}
	// A giant token costs its length; the links after it are still found.
	big := strings.Repeat("x", 10<<20)
	for name, giant := range map[string]string{
		"attribute":   `<img alt="` + big + `">`,
		"data: URI":   `<img src="data:image/png;base64,` + big + `">`,
		"script":      `<script>var x="` + big + `";</script>`,
		"inline JSON": `<script id=__NEXT_DATA__ type=application/json>{"a":"` + big + `"}</script>`,
		"text":        `<p>` + strings.Repeat("word ", 2<<20) + `</p>`,
		"SVG path":    `<svg><path d="` + strings.Repeat("M1 1L2 2", 1<<20) + `"/></svg>`,
		"style":       `<style>.a{content:"` + big + `"}</style>`,
		"comment":     `<!--` + big + `-->`,
	} {
		res, err = HTML([]byte(`<a href="first.html"></a>`+giant+`<a href="after.html"><img src="after.png">`), "text/html", page, Limits{})
		if err != nil || res.Truncated || len(res.Links) != 3 {
			t.Errorf("giant %s: links %v truncated %v err %v", name, res.Links, res.Truncated, err)
		}
	}
	// A title never closed runs to the end of the page; what is kept of
	// it is bounded (and only that much is copied).
	res, err = HTML([]byte("<title>"+strings.Repeat("a \u00e9", 4<<20)), "text/html; charset=utf-8", page, Limits{})
	if err != nil || len(res.Title) > maxTitleBytes || len(res.Title) < maxTitleBytes-4 || !utf8.ValidString(res.Title) {
		t.Errorf("unclosed title: %d bytes kept (valid UTF-8: %v), %v; want at most %d", len(res.Title), utf8.ValidString(res.Title), err, maxTitleBytes)
	}
	for name, raw := range map[string]string{
		"spaces":      "\n" + strings.Repeat(" ", 1100) + "Real  Title",
		"nbsp":        strings.Repeat("&nbsp;", 1100) + "Real\u00a0Title",
		"ideographic": strings.Repeat("\u3000", 1100) + "Real Title",
		"inner run":   "Real" + strings.Repeat(" \v", 1100) + "Title ",
	} {
		res, _ = HTML([]byte("<title>"+raw+"</title>"), "text/html; charset=utf-8", page, Limits{})
		if res.Title != "Real Title" {
			t.Errorf("a title with white space (%s): %q", name, res.Title)
		}
	}
	bin := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range bin {
		bin[i] = byte(r.Uint32())
	}
	if _, err := HTML(bin, "text/html", page, Limits{}); err != nil {
		t.Errorf("binary: %v", err)
	}
	var b bytes.Buffer
	for i := range 20_000 {
		fmt.Fprintf(&b, `<a href="p%d.html">`, i)
	}
	res, _ = HTML(b.Bytes(), "", page, Limits{MaxLinks: 100})
	if len(res.Links) != 100 || !res.Truncated {
		t.Errorf("link limit: %d links, truncated %v", len(res.Links), res.Truncated)
	}
	res, _ = HTML(b.Bytes(), "", page, Limits{MaxTokens: 10})
	if !res.Truncated || len(res.Links) > 10 {
		t.Errorf("token limit: %d links, truncated %v", len(res.Links), res.Truncated)
	}
}

func TestCSS(t *testing.T) {
	css := `@import url("a.css"); @import 'b.css' screen; /* url(comment.png) */
.x { background: URL( c.png ) } .y{src:url(d\.woff2) format("woff2")} .z{background:url('e.png')}
.w{background:url(data:image/png;base64,AAA)} .v{content:"url(not-a-url)"}`
	got := map[string]bool{}
	for _, l := range CSS([]byte(css), "http://example.com/css/site.css", Limits{}) {
		got[l.URL] = true
		if l.Kind != Embed {
			t.Errorf("%s is not an embed", l.URL)
		}
	}
	for _, u := range []string{"a.css", "b.css", "c.png", "d.woff2", "e.png"} {
		if !got["http://example.com/css/"+u] {
			t.Errorf("missing %s in %v", u, got)
		}
	}
	if got["http://example.com/css/comment.png"] {
		t.Error("url() inside a comment was extracted")
	}
}

func TestSrcset(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"a.png 1x, b.png 2x", []string{"a.png", "b.png"}},
		{"a.png", []string{"a.png"}},
		{" a,b.png 100w ,c.png", []string{"a,b.png", "c.png"}},
		{"a.png,b.png", []string{"a.png,b.png"}}, // a URL runs to whitespace (HTML spec)
		{"", nil},
	} {
		if got := Srcset(c.in); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Srcset(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func checkCanonical(t *testing.T, ls []Outlink) {
	for _, l := range ls {
		if c, err := urlkey.Canonical("", l.URL); err != nil || c != l.URL {
			t.Fatalf("outlink %q is not canonical (%q, %v)", l.URL, c, err)
		}
	}
}

func FuzzHTML(f *testing.F) {
	f.Add([]byte(`<base href="/x/"><a href="a">`), "text/html; charset=utf-8")
	f.Add([]byte(`<img srcset="a 1x, b 2x" style="background:url(c)">`), "")
	f.Add([]byte("<meta charset=shift_jis><a href=\"\x93\xfa\">"), "text/html")
	f.Fuzz(func(t *testing.T, doc []byte, ct string) {
		res, err := HTML(doc, ct, page, Limits{MaxTokens: 10_000})
		if err != nil {
			return
		}
		checkCanonical(t, res.Links)
	})
}

func FuzzCSS(f *testing.F) {
	f.Add([]byte(`@import "a.css"; x{background:url( 'b\'.png' )}`))
	f.Add([]byte(`url(\31 23.png) /* url(x) */ url(`))
	f.Fuzz(func(t *testing.T, css []byte) {
		checkCanonical(t, CSS(css, "http://example.com/s.css", Limits{}))
	})
}

func BenchmarkHTML(b *testing.B) {
	var doc bytes.Buffer
	doc.WriteString("<html><head><title>Bench</title><link rel=stylesheet href=/s.css></head><body>")
	for i := range 100 {
		fmt.Fprintf(&doc, `<p>%s <a href="/page-%d.html">link %d</a> <img src="/img/%d.png" alt="x"></p>`,
			strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 4), i, i, i)
	}
	doc.WriteString("</body></html>")
	b.SetBytes(int64(doc.Len()))
	b.ReportAllocs()
	for b.Loop() {
		HTML(doc.Bytes(), "text/html; charset=utf-8", page, Limits{})
	}
}

// The SimHash read in the extraction pass is the one package simhash
// gives for the page on its own.
func TestHTMLSimHash(t *testing.T) {
	for _, page := range []string{
		`<html><head><title>News of the day</title><script>var x = "not text";</script></head>
<body><p>The river rose by <b>three</b> metres overnight.</p><template><p>inert</p></template>
<div>Residents of the lower town were moved to the school.<br>More at noon.</div></body></html>`,
		`<p>one two three four five six seven<style>p{}</style><noscript>no</noscript>`,
		`plain text with no tags at all, but words enough for shingles`,
		``,
	} {
		res, err := HTML([]byte(page), "text/html; charset=utf-8", "http://example.com/", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if want := simhash.OfHTML([]byte(page)); res.SimHash != want {
			t.Errorf("%.40q: SimHash %016x from extraction, %016x from package simhash", page, res.SimHash, want)
		}
		if alone := SimHash([]byte(page), "text/html; charset=utf-8"); alone != res.SimHash {
			t.Errorf("%.40q: SimHash %016x without links, %016x with them", page, alone, res.SimHash)
		}
	}
}

// FuzzHTMLBytes: reading a valid UTF-8 body as it is gives what decoding
// it through its charset gives.
func FuzzHTMLBytes(f *testing.F) {
	f.Add([]byte("<p>caf\xc3\xa9</p>"), "text/html; charset=utf-8")
	f.Add([]byte("\xef\xbb\xbf<p>bom</p>"), "text/html")
	f.Add([]byte("<meta charset=latin1><p>caf\xe9</p>"), "text/html")
	f.Add([]byte("<p>\xff\xfe</p>"), "")
	f.Add([]byte("<p>plain ascii</p>"), "")
	f.Add([]byte("<p>caf\xe9</p>"), "text/html; charset=windows-1252")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		fast, err := htmlBytes(body, contentType)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		if r, err := charset.NewReader(bytes.NewReader(body), contentType); err != nil {
			want = body
		} else if want, err = io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fast, want) {
			t.Fatalf("read %q, decoding gives %q", fast, want)
		}
	})
}
