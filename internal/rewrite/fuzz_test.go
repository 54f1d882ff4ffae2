package rewrite

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/html"
)

var htmlSeeds = []string{
	`<a href="b.html">x</a>`,
	`<base href="//cdn.ex.com/x/"><img src=a.png srcset="a,b.png 1x, c.png 2x">`,
	`<link rel=stylesheet href="s.css" integrity=x><script src=s.js></script>`,
	`<meta http-equiv=refresh content="0; URL='http://ex.com/n'">`,
	`<div style="background:url(&quot;http://ex.com/a.png&quot;)" onclick="location='x'">`,
	`<style>@import url(http://ex.com/s.css); a{b:url("http://ex.com/i.png")}</style>`,
	`<script>window.location.href = "http://ex.com/"</script>`,
	`<noscript><img src="http://ex.com/n.png"></noscript>`,
	`<iframe srcdoc="<img src=&quot;http://ex.com/s.png&quot;>"></iframe>`,
	`<script type=importmap>{"imports":{"a":"http://ex.com/a.js"}}</script>`,
	`<a href=http://ex.com/ href="http://ex.com/2">`,
	`<img src="http://ex.com/a.png"/ src=x>`,
	`<a b='c' / href=http://ex.com/>`,
	"<a href=\"http://ex.com/\xe9\">\xff<head>",
	`<svg><image xlink:href="http://ex.com/i.png"/></svg>`,
	`<a href="HTTP://EX.COM/%zz">`,
	`<object data="http://ex.com/o.swf"><param name=movie value="http://ex.com/m.swf"></object>`,
	`<a href="http://ex.com/&amp;&lt;&#x22;&quot;">`,
}

// FuzzHTML checks that HTML never fails or panics, that no src or href
// that is an http(s) URL survives rewriting, that every rewritten one is
// what the Mapper returned, that the tokenizer's raw tokens cover the input
// (which byte-for-byte passthrough rests on), and that parseTag reads
// attributes exactly as the tokenizer does.
func FuzzHTML(f *testing.F) {
	for _, s := range htmlSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		if err := checkSegments(page); err != nil {
			t.Fatal(err)
		}
		z := html.NewTokenizer(bytes.NewReader(page))
		for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
			if tt == html.StartTagToken || tt == html.SelfClosingTagToken {
				if err := compareAttrs(bytes.Clone(z.Raw())); err != nil {
					t.Fatalf("%q: %v", z.Raw(), err)
				}
			}
		}
		var out bytes.Buffer
		if err := HTML(&out, page, "https://ex.com/d/p.html", testMapper, HTMLOptions{Head: []byte(`<script src="/s.js"></script>`)}); err != nil {
			t.Fatal(err)
		}
		z = html.NewTokenizer(bytes.NewReader(out.Bytes()))
		for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
			if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
				continue
			}
			for {
				k, v, more := z.TagAttr()
				if key := string(k); key == "href" || key == "src" || key == "xlink:href" {
					if err := checkURLAttr(trimHTMLSpace(string(v))); err != nil {
						t.Fatalf("%s in %q: %v", key, z.Raw(), err)
					}
				}
				if !more {
					break
				}
			}
		}
	})
}

// checkURLAttr fails for a value that is an http(s) URL (which should have
// been mapped) and for a mapped value not of the Mapper's form.
func checkURLAttr(v string) error {
	if rest, ok := strings.CutPrefix(v, "/web/X"); ok {
		mod, abs, ok := strings.Cut(rest, "/")
		switch mod {
		case "", "mp_", "if_", "im_", "cs_", "js_", "oe_":
		default:
			ok = false
		}
		if !ok || !strings.HasPrefix(abs, "http://") && !strings.HasPrefix(abs, "https://") {
			return fmt.Errorf("%q is not a mapped URL", v)
		}
		return nil
	}
	if s, ok := scheme(v); ok && (s == "http" || s == "https") || strings.HasPrefix(v, "//") {
		// Left alone only if no browser could load it either.
		if _, _, ok := resolve("https://ex.com/", v); ok {
			return fmt.Errorf("%q was not rewritten", v)
		}
	}
	return nil
}

// checkSegments checks what tokens() relies on: raw tokens are contiguous
// from the start of the input, and what follows the last is a tail.
func checkSegments(page []byte) error {
	z := html.NewTokenizer(bytes.NewReader(page))
	var got []byte
	for z.Next() != html.ErrorToken {
		got = append(got, z.Raw()...)
	}
	if !bytes.HasPrefix(page, got) {
		return fmt.Errorf("raw tokens %q are not a prefix of the input", got)
	}
	return nil
}

// compareAttrs checks parseTag and unescapeAttr against the tokenizer's
// TagAttr on one raw start tag.
func compareAttrs(raw []byte) error {
	z := html.NewTokenizer(bytes.NewReader(raw))
	if tt := z.Next(); tt != html.StartTagToken && tt != html.SelfClosingTagToken {
		return fmt.Errorf("not a start tag: %v", tt)
	}
	var want []string
	for {
		k, v, more := z.TagAttr()
		if k != nil {
			want = append(want, string(k)+"="+string(v))
		}
		if !more {
			break
		}
	}
	var got []string
	seen := map[string]bool{}
	for _, a := range parseTag(raw, nil) {
		name := string(asciiLower(bytes.ReplaceAll(raw[a.nameStart:a.nameEnd], []byte{0}, []byte("\uFFFD"))))
		if seen[name] {
			continue
		}
		seen[name] = true
		v, pos := unescapeAttr(bytes.ReplaceAll(raw[a.valStart:a.valEnd], []byte{0}, []byte("\uFFFD")))
		if pos != nil && (len(pos) != len(v)+1 || pos[len(v)] != len(raw[a.valStart:a.valEnd])+2*bytes.Count(raw[a.valStart:a.valEnd], []byte{0})) {
			return fmt.Errorf("bad position map for %q", raw[a.valStart:a.valEnd])
		}
		v = bytes.ReplaceAll(bytes.ReplaceAll(v, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
		got = append(got, name+"="+string(v))
	}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		return fmt.Errorf("parseTag read %q, tokenizer %q", got, want)
	}
	return nil
}

func FuzzCSS(f *testing.F) {
	for _, s := range cssSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, css []byte) {
		const base = "https://ex.com/s/a.css"
		out := CSS(css, base, testMapper)
		// Scanning the output again finds the same references, all mapped
		// (resolving to the archive path) and of the same kind: the
		// rewriting kept the stylesheet's structure and missed nothing.
		var err error
		c := cssRewriter{base: base, m: func(abs, mod string) string {
			rest, ok := strings.CutPrefix(abs, "https://ex.com/web/X")
			if !ok {
				err = fmt.Errorf("%s was not mapped", abs)
			} else if !strings.HasPrefix(rest, mod+"/") {
				err = fmt.Errorf("%s mapped again as %q", abs, mod)
			}
			return abs
		}}
		c.edits(out, nil)
		if err != nil {
			t.Fatalf("CSS(%q) = %q: %v", css, out, err)
		}
	})
}

var cssSeeds = []string{
	`a{background:url(a.png)}`,
	`@import "x.css"; @import url('y.css') screen;`,
	`a{b:url( "a\"b.png" )} c{d:url(e\)f.png)}`,
	`@font-face{src:url(f.woff2)format("woff2"),local(x)}`,
	`a{b:image-set("a.png" 1x, url(b.png) 2x)}`,
	`@namespace svg url(http://www.w3.org/2000/svg);`,
	`a{b:u\72l(x.png)} /* url(c.png) */ e{content:"url(d.png)"}`,
	"a{b:url(x\n",
	`a{b:url("unterminated`,
	`a{b:url(bad url)} c{d:url(ok)}`,
}

func FuzzJS(f *testing.F) {
	for _, s := range jsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		// JS only inserts one of two prefixes before whole identifiers
		// "location", each at most once.
		edits := jsEdits(js, nil)
		prev := -1
		for _, e := range edits {
			if e.start != e.end || e.start <= prev || (e.repl != "WB_wombat_" && e.repl != "location: WB_wombat_") ||
				!bytes.HasPrefix(js[e.start:], []byte("location")) ||
				e.start > 0 && (isJSIdent(js[e.start-1]) && !spaceEndsAt(js, e.start) || js[e.start-1] == '#') ||
				e.start+8 < len(js) && isJSIdent(js[e.start+8]) && jsSpace(js, e.start+8) == 0 {
				t.Fatalf("JS(%q): bad edit %+v", js, e)
			}
			prev = e.start
		}
		out := JS(js)
		if !bytes.Equal(out, apply(js, edits)) {
			t.Fatal("JS differs from its edits")
		}
		if utf8.Valid(js) && !utf8.Valid(out) {
			t.Fatalf("JS(%q) = %q broke UTF-8", js, out)
		}
		// The lexer stays in step with the rewritten code: rewriting again
		// changes nothing.
		if again := JS(out); !bytes.Equal(again, out) {
			t.Fatalf("JS not idempotent:\n in %q\nout %q\n 2x %q", js, out, again)
		}
	})
}

// spaceEndsAt reports whether a JS whitespace character (some are
// multi-byte, such as U+00A0) ends just before b[i].
func spaceEndsAt(b []byte, i int) bool {
	for w := 1; w <= 3 && w <= i; w++ {
		if jsSpace(b, i-w) == w {
			return true
		}
	}
	return false
}

var jsSeeds = []string{
	`window.location.href = "x"; var l = location;`,
	"`${location.href}` + '/* location */' + /location/.test(s)",
	`({location}) => location.pathname; a.location; {location: 1}`,
	`x = a ? location : b; switch (x) { case location: }`,
	`class A { location() {} get location() {} }`,
	`import { location } from "m"; export { location };`,
	"#!/usr/bin/env node\nlocation",
	`a = b / location / c; d = /[/]location/g`,
	"x = `a${ {a: location}.a }b${`${location}`}`",
}

func asciiLower(b []byte) []byte {
	out := bytes.Clone(b)
	for i, c := range out {
		if c >= 'A' && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return out
}
