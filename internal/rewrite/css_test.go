package rewrite

import (
	"bytes"
	"testing"
)

func TestCSS(t *testing.T) {
	const base = "http://ex.com/css/site.css"
	const i = "/web/Xim_/http://ex.com/css/"
	tests := []struct{ name, in, want string }{
		{"unquoted", `a{background:url(a.png)}`, `a{background:url(` + i + `a.png)}`},
		{"double quotes", `a{background:url("a.png")}`, `a{background:url("` + i + `a.png")}`},
		{"single quotes", `a{background:url('a.png')}`, `a{background:url('` + i + `a.png')}`},
		{"spaces inside", `a{background:url(  "a.png"  )} b{c:url(  b.png  )}`, `a{background:url(  "` + i + `a.png"  )} b{c:url(  ` + i + `b.png  )}`},
		{"uppercase URL", `a{b:URL(a.png)}`, `a{b:URL(` + i + `a.png)}`},
		{"escaped name", `a{b:u\72l(a.png)}`, `a{b:u\72l(` + i + `a.png)}`},
		{"escapes unquoted, quoted when needed", `a{b:url(a\(1\).png)}`, `a{b:url("` + i + `a(1).png")}`},
		{"escapes quoted", `a{b:url("a\"b.png")}`, `a{b:url("` + i + `a%22b.png")}`},
		{"hex escape", `a{b:url(\61 .png)}`, `a{b:url(` + i + `a.png)}`},
		{"line continuation", "a{b:url('a\\\nb.png')}", "a{b:url('" + i + "ab.png')}"},
		{"absolute and root-relative", `a{b:url(/i/x.gif)} c{d:url(https://cdn.ex.com/y.gif)}`, `a{b:url(/web/Xim_/http://ex.com/i/x.gif)} c{d:url(/web/Xim_/https://cdn.ex.com/y.gif)}`},
		{"protocol-relative", `a{b:url(//cdn.ex.com/y.gif)}`, `a{b:url(/web/Xim_/http://cdn.ex.com/y.gif)}`},
		{"fragment kept", `a{filter:url(f.svg#blur)}`, `a{filter:url(` + i + `f.svg#blur)}`},
		{"fragment only untouched", `a{filter:url(#blur)}`, `a{filter:url(#blur)}`},
		{"data untouched", `a{b:url(data:image/png;base64,iVBO=)}`, `a{b:url(data:image/png;base64,iVBO=)}`},
		{"empty untouched", `a{b:url()} c{d:url("")}`, `a{b:url()} c{d:url("")}`},
		{"import string", `@import "b.css";`, `@import "/web/Xcs_/http://ex.com/css/b.css";`},
		{"import single", `@import 'b.css' screen;`, `@import '/web/Xcs_/http://ex.com/css/b.css' screen;`},
		{"import url", `@import url(b.css) print;`, `@import url(/web/Xcs_/http://ex.com/css/b.css) print;`},
		{"import url quoted", `@IMPORT url("b.css") layer(x) supports(display:grid);`, `@IMPORT url("/web/Xcs_/http://ex.com/css/b.css") layer(x) supports(display:grid);`},
		{"import then rule", `@import "a.css"; p{q:url(r.png)}`, `@import "/web/Xcs_/http://ex.com/css/a.css"; p{q:url(` + i + `r.png)}`},
		{"font extension", `a{b:url(f.woff2?v=1)} c{d:url(g.TTF#x)}`, `a{b:url(/web/Xoe_/http://ex.com/css/f.woff2?v=1)} c{d:url(/web/Xoe_/http://ex.com/css/g.TTF#x)}`},
		{"font-face block", `@font-face{font-family:a;src:url(/f?family=a) format("woff"),local("A")} p{b:url(x)}`,
			`@font-face{font-family:a;src:url(/web/Xoe_/http://ex.com/f?family=a) format("woff"),local("A")} p{b:url(` + i + `x)}`},
		{"image-set strings", `a{b:image-set("a.png" 1x, 'b.png' 2x, url(c.png) 3x)}`, `a{b:image-set("` + i + `a.png" 1x, '` + i + `b.png' 2x, url(` + i + `c.png) 3x)}`},
		{"webkit image-set", `a{b:-webkit-image-set("a.png" 1x)}`, `a{b:-webkit-image-set("` + i + `a.png" 1x)}`},
		{"other strings untouched", `a{content:"url(x.png)"; font-family:"a.png"}`, `a{content:"url(x.png)"; font-family:"a.png"}`},
		{"comments untouched", `/* url(a.png) @import "b.css"; */ a{}`, `/* url(a.png) @import "b.css"; */ a{}`},
		{"namespace untouched", `@namespace svg url(http://www.w3.org/2000/svg); a{b:url(c)}`, `@namespace svg url(http://www.w3.org/2000/svg); a{b:url(` + i + `c)}`},
		{"document untouched", `@-moz-document url-prefix(http://ex.com/), url(http://ex.com/) {a{b:url(c)}}`, `@-moz-document url-prefix(http://ex.com/), url(http://ex.com/) {a{b:url(` + i + `c)}}`},
		{"media block", `@media (min-width: 10px) { a { b: url(c.png) } }`, `@media (min-width: 10px) { a { b: url(` + i + `c.png) } }`},
		{"not a url function", `a{b:myurl(c.png) d:url-x(e)}`, `a{b:myurl(c.png) d:url-x(e)}`},
		{"bad url untouched", `a{b:url(c d.png)} e{f:url(g.png)}`, `a{b:url(c d.png)} e{f:url(` + i + `g.png)}`},
		{"bad string untouched", "a{b:url(\"c\nd)} e{f:url(g)}", "a{b:url(\"c\nd)} e{f:url(" + i + "g)}"},
		{"url at EOF", `a{b:url(c.png`, `a{b:url(` + i + `c.png`},
		{"string at EOF", `a{b:url("c.png`, `a{b:url("` + i + `c.png`},
		{"javascript untouched", `a{b:url(javascript:alert(1))}`, `a{b:url(javascript:alert(1))}`},
		{"nothing to do", "body { color: red; }\n\xe9\xff", "body { color: red; }\n\xe9\xff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(CSS([]byte(tc.in), base, testMapper)); got != tc.want {
				t.Errorf("CSS(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestCSSQuoting(t *testing.T) {
	// A Mapper whose URLs need escaping in CSS.
	m := func(u, mod string) string { return `/a b/"q'\(` + u }
	tests := []struct{ in, want string }{
		{`url(x)`, `url("/a b/\"q'\\(http://ex.com/x")`},
		{`url("x")`, `url("/a b/\"q'\\(http://ex.com/x")`},
		{`url('x')`, `url('/a b/"q\'\\(http://ex.com/x')`},
		{"url('x#a\nb')", "url('x#a\nb')"}, // a bad string: no URL
	}
	for _, tc := range tests {
		if got := string(CSS([]byte(tc.in), "http://ex.com/", m)); got != tc.want {
			t.Errorf("CSS(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got, want := cssQuote("a\nb", '"'), `a\a b`; got != want {
		t.Errorf("cssQuote newline = %q, want %q", got, want)
	}
}

func TestCSSUnchangedIsSame(t *testing.T) {
	in := []byte("a { color: red }")
	if out := CSS(in, "http://ex.com/", testMapper); &out[0] != &in[0] {
		t.Error("CSS copied a stylesheet with nothing to rewrite")
	}
}

func TestCSSUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{`a\62 c`, "abc"},
		{`\000041`, "A"},
		{`\0`, "\uFFFD"},
		{`\110000`, "\uFFFD"},
		{`\d800`, "\uFFFD"},
		{`a\"b`, `a"b`},
		{"a\\\nb", "ab"},
		{"a\\\r\nb", "ab"},
		{`a\`, "a\uFFFD"},
		{`\E9 t\E9`, "été"},
	}
	for _, tc := range tests {
		if got := cssUnescape([]byte(tc.in)); got != tc.want {
			t.Errorf("cssUnescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if !bytes.Equal([]byte(cssUnescape([]byte("plain"))), []byte("plain")) {
		t.Error("plain text changed")
	}
}
