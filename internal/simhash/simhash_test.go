package simhash

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/waggle-archive/waggle/internal/websim"
)

func TestText(t *testing.T) {
	tests := []struct{ name, page, want string }{
		{"empty", "", ""},
		{"plain", "hello world", "hello world"},
		{"title and body", "<html><head><title>The Title</title><meta name=x content=y></head><body><p>Body text</p></body></html>", "The Title Body text"},
		{"hidden elements", "<p>a</p><script>var x = '<p>no</p>';</script><style>p{}</style><noscript>no js</noscript><template><p>inert</p><template>deep</template>still</template><iframe>fallback</iframe><noembed>x</noembed><noframes>y</noframes><p>b</p>", "a b"},
		{"self-closing script", "<p>a</p><script/>var x;</script><p>b</p>", "a b"},
		{"comments", "a<!-- hidden -->b <!-- also\nhidden --> c", "ab c"},
		{"entities", "<p>caf&eacute; &amp; &lt;tag&gt; &#x263A; &nbsp;x</p>", "café & <tag> ☺ x"},
		{"title entities", "<title>A &amp; B</title>", "A & B"},
		{"whitespace", "  a \n\t b\u00a0\u2003c\u200bd  ", "a b c d"},
		{"inline joins", "<p>multi<b>part</b><span>word</span><my-el>s</my-el></p>", "multipartwords"},
		{"blocks separate", "<li>one</li><li>two</li>three<br>four<div>five</div><td>six", "one two three four five six"},
		{"attributes ignored", `<a href="http://x/" title="not text">link</a> <img alt="alt text" src=x>`, "link"},
		{"unclosed", "<p>a<div>b<span>c", "a bc"},
		{"unclosed script", "<p>a</p><script>var never_closed = 1;", "a"},
		{"unclosed comment", "a<!-- never closed", "a"},
		{"textarea shown", "<textarea>typed &amp; text</textarea>", "typed & text"},
		{"invalid utf8", "a\xffb", "a\ufffdb"},
		{"nul", "a\x00b<title>c\x00d</title>", "ab c\ufffdd"},
	}
	for _, tt := range tests {
		if got := Text([]byte(tt.page)); got != tt.want {
			t.Errorf("%s: Text(%q) = %q, want %q", tt.name, tt.page, got, tt.want)
		}
	}
}

func TestOfWords(t *testing.T) {
	same := [][2]string{
		{"Hello, World!", "hello world"},
		{"HELLO   world", "hello—world"},
		{"Ünïcode Straße", "ünïcode straße"},
		{"Visitors: 123456", "visitors 654321"}, // digits are folded
		{"日本語のテキスト", "日 本 語 の テ キ ス ト"},
		// Characters that are not shown are not breaks either.
		{"hyphen­ation of long­ish words", "hyphenation of longish words"},
		{"zero​width‍ joined ‎word⁠s", "zerowidth joined words"},
	}
	for _, p := range same {
		if a, b := Of(p[0]), Of(p[1]); a != b {
			t.Errorf("Of(%q) = %x, Of(%q) = %x, want equal", p[0], a, p[1], b)
		}
	}
	differ := [][2]string{
		{"hello world", "hello there"},
		{"one two three four", "one two three five"},
		{"visitors 12", "visitors 123"},
		{"日本語", "日本人"},
	}
	for _, p := range differ {
		if a, b := Of(p[0]), Of(p[1]); a == b {
			t.Errorf("Of(%q) = Of(%q) = %x, want different", p[0], p[1], a)
		}
	}
	for _, s := range []string{"", "   ", "!!! ... ---", "\u200b"} {
		if f := Of(s); f != 0 {
			t.Errorf("Of(%q) = %x, want 0 for a text without words", s, f)
		}
	}
	if Of("word") == 0 || Of("two words") == 0 || Of("two words") == Of("words two") {
		t.Errorf("short texts: Of(word)=%x Of(two words)=%x Of(words two)=%x", Of("word"), Of("two words"), Of("words two"))
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b uint64
		d    int
	}{
		{0, 0, 0}, {0, 1, 1}, {0, ^uint64(0), 64}, {0b1011, 0b0110, 3}, {1 << 63, 0b1111, 5},
	}
	for _, tt := range tests {
		if got := Distance(tt.a, tt.b); got != tt.d {
			t.Errorf("Distance(%x, %x) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
		if got := Near(tt.a, tt.b); got != (tt.d <= 3) {
			t.Errorf("Near(%x, %x) = %v at distance %d", tt.a, tt.b, got, tt.d)
		}
	}
}

// vocabulary is a large made-up lexicon of letter-only words.
func vocabulary() []string {
	rng := rand.New(rand.NewPCG(7, 7))
	const letters = "abcdefghijklmnopqrstuvwxyz"
	seen := map[string]bool{}
	var v []string
	for len(v) < 30000 {
		b := make([]byte, 2+rng.IntN(9))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		if !seen[string(b)] {
			seen[string(b)] = true
			v = append(v, string(b))
		}
	}
	return v
}

// words returns n words drawn with Zipf frequencies, as in natural
// language, where a few words ("the", "of") make up much of any text.
func words(rng *rand.Rand, vocab []string, n int) []string {
	z := rand.NewZipf(rng, 1.07, 2, uint64(len(vocab)-1))
	w := make([]string, n)
	for i := range w {
		w[i] = vocab[z.Uint64()]
	}
	return w
}

// article returns an HTML page whose visible text is the given words in
// paragraphs, surrounded by the boilerplate of a real page, with extra
// inserted into the main column.
func article(w []string, extra string) []byte {
	var b bytes.Buffer
	b.WriteString(`<!DOCTYPE html><html><head><meta charset="utf-8"><title>An article</title>
<link rel="stylesheet" href="/site.css"><script>window.dataLayer = [{"page": "article", "id": 1234}];</script>
<style>body { font-family: serif } .ad { float: right }</style></head>
<body><header><nav><a href="/">Home</a> | <a href="/news">News</a> | <a href="/about">About us</a></nav></header><main>`)
	b.WriteString(extra)
	for i := 0; i < len(w); i += 60 {
		b.WriteString("\n<p class=\"para\">")
		b.WriteString(strings.Join(w[i:min(i+60, len(w))], " "))
		b.WriteString(".</p>")
	}
	b.WriteString("</main><footer><p>&copy; 2026 The Example Times. All rights reserved.</p></footer></body></html>\n")
	return b.Bytes()
}

// websimPages returns the HTML of n pages of a synthetic web.
func websimPages(t testing.TB, n int) [][]byte {
	w := websim.New(websim.Config{Seed: 1})
	urls := w.Pages()
	if len(urls) < n {
		t.Fatalf("websim has %d pages, want %d", len(urls), n)
	}
	pages := make([][]byte, n)
	for i, u := range urls[:n] {
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", u, rec.Code, rec.Header().Get("Content-Type"))
		}
		pages[i] = rec.Body.Bytes()
	}
	return pages
}

func TestIdentical(t *testing.T) {
	for _, p := range websimPages(t, 20) {
		q := bytes.Clone(p)
		if a, b := OfHTML(p), OfHTML(q); a != b || a == 0 {
			t.Fatalf("OfHTML of identical pages: %x and %x", a, b)
		}
	}
}

func TestMarkupOnly(t *testing.T) {
	a := `<html><head><title>Report</title></head><body><h1>Annual report</h1><p>The <b>quick</b> brown fox jumps over the lazy dog.</p><ul><li>First item</li><li>Second item</li></ul></body></html>`
	variants := []string{
		// attributes, quoting, case and white space
		`<HTML lang=en><HEAD><TITLE>Report</TITLE><meta charset=utf-8></HEAD><BODY class="x y"><H1 id='top'>Annual   report</H1>
		<P style="color: red">The <B>quick</B>
		brown   fox jumps over the lazy dog.</P><UL><LI>First item<LI>Second item</UL></BODY></HTML>`,
		// other tags with the same flow, scripts, styles and comments
		`<title>Report</title><style>h2{}</style><h2>Annual report</h2><!-- generated 2026-11-22 --><div>The <strong class=s>quick</strong> brown fox <span>jumps</span> over the lazy dog.</div><script src=a.js></script><ol><li>First item</li><li>Second item</li></ol>`,
		// entities for plain characters
		`<title>Report</title><h1>Annual&#32;report</h1><p>The <em>quick</em> brown fox jumps over the lazy dog&period;</p><ul><li>First&nbsp;item</li><li>Second item</li></ul>`,
	}
	want, wantText := OfHTML([]byte(a)), Text([]byte(a))
	for i, v := range variants {
		if got := Text([]byte(v)); got != wantText {
			t.Errorf("variant %d: Text = %q, want %q", i, got, wantText)
		}
		if got := OfHTML([]byte(v)); got != want {
			t.Errorf("variant %d: OfHTML = %x, want %x", i, got, want)
		}
	}
}

// nearRate returns the fraction of the trials whose fingerprints are Near.
func nearRate(pairs [][2]uint64) float64 {
	n := 0
	for _, p := range pairs {
		if Near(p[0], p[1]) {
			n++
		}
	}
	return float64(n) / float64(len(pairs))
}

func TestNearDuplicates(t *testing.T) {
	vocab := vocabulary()
	rng := rand.New(rand.NewPCG(1, 2))
	const trials = 200
	var stamp, counter, ad, edit [][2]uint64
	for i := 0; i < trials; i++ {
		w := words(rng, vocab, 1500+rng.IntN(1500))
		base := article(w, "")
		// Timestamps and counters change digits only, which Of folds:
		// the fingerprints are equal, not just near.
		a := OfHTML(article(w, "<p>Last updated 2026-11-22 20:40:31 UTC. 1,234 readers</p>"))
		b := OfHTML(article(w, "<p>Last updated 2026-11-23 08:12:55 UTC. 5,678 readers</p>"))
		stamp = append(stamp, [2]uint64{a, b})
		a = OfHTML(article(w, `<div class="counter">You are visitor number 99812</div>`))
		b = OfHTML(article(w, `<div class="counter">You are visitor number 99813</div>`))
		counter = append(counter, [2]uint64{a, b})
		a = OfHTML(article(w, `<aside class="ad"><a href="/ad1">Cheap flights to Lisbon, book today</a></aside>`))
		b = OfHTML(article(w, `<aside class="ad"><a href="/ad2">Compare mortgage rates in your area</a></aside>`))
		ad = append(ad, [2]uint64{a, b})
		e := append([]string(nil), w...)
		for k := 0; k < 3; k++ {
			e[rng.IntN(len(e))] = vocab[rng.IntN(len(vocab))]
		}
		edit = append(edit, [2]uint64{OfHTML(base), OfHTML(article(e, ""))})
	}
	for _, p := range append(stamp, counter...) {
		if p[0] != p[1] {
			t.Fatalf("timestamp or counter change: %x and %x, want equal", p[0], p[1])
		}
	}
	// A change of a few words flips about 64·θ/π bits, where cos θ is the
	// texts' cosine similarity: for 9 of 2,000 shingles that is about 2, so
	// a minority of pairs land beyond 3 bits. The seeds are fixed, so the
	// rates are too.
	adRate, editRate := nearRate(ad), nearRate(edit)
	t.Logf("1,500–3,000 words: changed ad near %.1f%%, 3 words changed near %.1f%%", 100*adRate, 100*editRate)
	if adRate < 0.85 || editRate < 0.85 {
		t.Errorf("near-duplicate rates %.3f (ad), %.3f (3 words), want ≥ 0.85", adRate, editRate)
	}

	// Short pages: websim pages have about 250 words, a timestamp still
	// leaves them equal.
	for i, p := range websimPages(t, 100) {
		ins := func(s string) []byte { return bytes.Replace(p, []byte("</main>"), []byte(s+"</main>"), 1) }
		a := OfHTML(ins("<p>Generated 2026-11-22T20:40:31Z in 0.031 s</p>"))
		b := OfHTML(ins("<p>Generated 2026-11-23T08:12:55Z in 0.457 s</p>"))
		if a != b {
			t.Fatalf("websim page %d with a changed timestamp: %x and %x", i, a, b)
		}
	}
}

func TestUnrelated(t *testing.T) {
	// Pages of a synthetic web: a small shared vocabulary and, on each
	// host, shared navigation. Then natural-language-like articles.
	var fps []uint64
	for _, p := range websimPages(t, 400) {
		fps = append(fps, OfHTML(p))
	}
	vocab := vocabulary()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 400; i++ {
		fps = append(fps, OfHTML(article(words(rng, vocab, 100+rng.IntN(3000)), "")))
	}
	near, pairs, minDist := 0, 0, 64
	for i := range fps {
		for j := i + 1; j < len(fps); j++ {
			d := Distance(fps[i], fps[j])
			pairs++
			minDist = min(minDist, d)
			if d <= Threshold {
				near++
			}
		}
	}
	t.Logf("unrelated pages: %d of %d pairs near (%.2g), smallest distance %d", near, pairs, float64(near)/float64(pairs), minDist)
	if near > 0 {
		t.Errorf("%d of %d pairs of unrelated pages are near", near, pairs)
	}
}

func TestHostileInput(t *testing.T) {
	const size = 20 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	garbage := make([]byte, 1<<20)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	inputs := map[string][]byte{
		"nil":              nil,
		"garbage":          garbage,
		"text only":        bytes.Repeat([]byte("lorem ipsum dolor sit amet "), size/27),
		"one huge script":  append([]byte("<p>before</p><script>"), bytes.Repeat([]byte("x=1;"), size/4)...),
		"unclosed comment": append([]byte("<p>before</p><!--"), bytes.Repeat([]byte("-- > <"), size/6)...),
		"nested tags":      bytes.Repeat([]byte("<div><span>"), size/11),
		"unclosed tags":    bytes.Repeat([]byte("<a href='"), size/9),
		"lt signs":         bytes.Repeat([]byte("<<<< a"), size/6),
		"entities":         bytes.Repeat([]byte("&amp;&#x10FFFF;&#0;&bogus;"), size/26),
		"huge attribute":   append(append([]byte("<p title=\""), bytes.Repeat([]byte("a"), size)...), "\">after"...),
		"nested templates": bytes.Repeat([]byte("<template>"), size/10),
	}
	// Where the 1 MiB cut falls inside a character, at a space or at a
	// byte that is no UTF-8 (written as three): OfHTML reads the text
	// without writing it, and must cut it where Text does.
	inputs["space at the cut"] = []byte(strings.Repeat("a", maxText-1) + " bcd")
	for shift := range 4 {
		inputs[fmt.Sprintf("characters cut at the limit, shift %d", shift)] =
			append([]byte(strings.Repeat("a", shift)), bytes.Repeat([]byte("é日\xffx <p>y\x00 "), (2<<20)/14)...)
	}
	for name, in := range inputs {
		text := Text(in)
		if len(text) > maxText || !utf8.ValidString(text) || strings.TrimSpace(text) != text {
			t.Errorf("%s: Text returned %d bytes, valid UTF-8 %v, %q at its end", name, len(text), utf8.ValidString(text), text[max(0, len(text)-3):])
		}
		if f, g := OfHTML(in), Of(text); f != g {
			t.Errorf("%s: OfHTML = %x, Of(Text) = %x", name, f, g)
		}
	}
	if got := Text(inputs["one huge script"]); got != "before" {
		t.Errorf("huge script: Text = %.40q", got)
	}
	// The bound is exact: a text of maxText bytes is whole, a character
	// that would end past it is left out, and with it the space before it.
	for _, c := range []struct {
		page string
		want int
	}{
		{strings.Repeat("a", maxText), maxText},
		{strings.Repeat("a", maxText) + "b", maxText},
		{strings.Repeat("a", maxText-1) + "é", maxText - 1},
		{strings.Repeat("a", maxText-2) + "é", maxText},
		{strings.Repeat("a", maxText-2) + " b", maxText},
		{strings.Repeat("a", maxText-1) + " b", maxText - 1},
	} {
		if got := Text([]byte(c.page)); len(got) != c.want {
			t.Errorf("a text of %d bytes kept %d, want %d", len(c.page), len(got), c.want)
		}
	}
	if got := Text(inputs["text only"]); !strings.HasPrefix(got, "lorem ipsum dolor sit amet lorem") || len(got) < maxText-30 {
		t.Errorf("text only: Text = %.40q… (%d bytes)", got, len(got))
	}
}

func FuzzOfHTML(f *testing.F) {
	for _, s := range []string{
		"", "<", "<!--", "<script>", "<template><p>x", "<title>a &amp b",
		"<p>hello <b>world</b></p>", "\xff\xfe<\x00p>", "&#xFFFFFFFF;", "<plaintext><p>x",
		"<svg><title>t</title><style>s</style></svg>", "日本語<br>テキスト", "<script/>x</script>y",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		text := Text(page)
		if !utf8.ValidString(text) || strings.Contains(text, "  ") || strings.TrimSpace(text) != text {
			t.Fatalf("Text(%q) = %q: invalid UTF-8 or uncollapsed white space", page, text)
		}
		if a, b := OfHTML(page), Of(text); a != b {
			t.Fatalf("OfHTML = %x, Of(Text) = %x", a, b)
		}
		if !strings.ContainsFunc(text, isWordRune) && Of(text) != 0 {
			t.Fatalf("Of(%q) = %x, want 0 for a text without words", text, Of(text))
		}
	})
}

func isWordRune(r rune) bool {
	var s state
	s.words(string(r))
	return s.nwords > 0
}

func BenchmarkOfHTML(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	vocab := vocabulary()
	var page []byte
	for n := 500; len(page) < 50<<10; n += 100 {
		page = article(words(rng, vocab, n), "")
	}
	page = page[:50<<10]
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		OfHTML(page)
	}
	b.ReportMetric(float64(len(strings.Fields(Text(page)))), "words/page")
}
