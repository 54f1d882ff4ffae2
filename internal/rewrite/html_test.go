package rewrite

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// testMapper is the Wayback-style Mapper the tests use.
func testMapper(absURL, mod string) string { return "/web/X" + mod + "/" + absURL }

const testPage = "http://ex.com/dir/page.html"

func rewriteHTML(t testing.TB, page, pageURL string, opts HTMLOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := HTML(&b, []byte(page), pageURL, testMapper, opts); err != nil {
		t.Fatalf("HTML(%q): %v", page, err)
	}
	return b.String()
}

func TestHTMLAttributes(t *testing.T) {
	const p = "/web/X"
	const d = "http://ex.com/dir/"
	tests := []struct{ name, in, want string }{
		{"a href", `<a href="b.html">x</a>`, `<a href="` + p + `mp_/` + d + `b.html">x</a>`},
		{"a href fragment kept", `<a href="/x#y">`, `<a href="` + p + `mp_/http://ex.com/x#y">`},
		{"area href", `<area href="m.html">`, `<area href="` + p + `mp_/` + d + `m.html">`},
		{"link stylesheet", `<link rel="stylesheet" href="s.css">`, `<link rel="stylesheet" href="` + p + `cs_/` + d + `s.css">`},
		{"link alternate stylesheet", `<link rel="alternate stylesheet" href="s.css">`, `<link rel="alternate stylesheet" href="` + p + `cs_/` + d + `s.css">`},
		{"link shortcut icon", `<link rel="Shortcut Icon" href="/favicon.ico">`, `<link rel="Shortcut Icon" href="` + p + `im_/http://ex.com/favicon.ico">`},
		{"link apple-touch-icon", `<link rel=apple-touch-icon href=t.png>`, `<link rel=apple-touch-icon href=` + p + `im_/` + d + `t.png>`},
		{"link modulepreload", `<link rel=modulepreload href=m.js>`, `<link rel=modulepreload href=` + p + `js_/` + d + `m.js>`},
		{"link preload script", `<link rel=preload as=script href=m.js>`, `<link rel=preload as=script href=` + p + `js_/` + d + `m.js>`},
		{"link preload style", `<link rel=preload as=style href=m.css>`, `<link rel=preload as=style href=` + p + `cs_/` + d + `m.css>`},
		{"link preload image", `<link rel=preload as=image href=i.png imagesrcset="i.png 1x, j.png 2x">`, `<link rel=preload as=image href=` + p + `im_/` + d + `i.png imagesrcset="` + p + `im_/` + d + `i.png 1x, ` + p + `im_/` + d + `j.png 2x">`},
		{"link preload font", `<link rel=preload as=font href=f.woff2 crossorigin>`, `<link rel=preload as=font href=` + p + `oe_/` + d + `f.woff2 crossorigin>`},
		{"link manifest", `<link rel=manifest href=/m.json>`, `<link rel=manifest href=` + p + `oe_/http://ex.com/m.json>`},
		{"link alternate", `<link rel=alternate type=application/rss+xml href=/feed>`, `<link rel=alternate type=application/rss+xml href=` + p + `/http://ex.com/feed>`},
		{"link canonical", `<link rel=canonical href="http://ex.com/c">`, `<link rel=canonical href="` + p + `/http://ex.com/c">`},
		{"link preconnect", `<link rel=preconnect href="//cdn.ex.com">`, `<link rel=preconnect href="` + p + `/http://cdn.ex.com/">`},
		{"img src", `<img src="i.png" alt="">`, `<img src="` + p + `im_/` + d + `i.png" alt="">`},
		{"img srcset descriptors", `<img srcset="a.png 1x, b.png 2x">`, `<img srcset="` + p + `im_/` + d + `a.png 1x, ` + p + `im_/` + d + `b.png 2x">`},
		{"img srcset widths newlines", "<img srcset=\"a.png 100w,\n  b.png 200w\" sizes=\"50vw\">", "<img srcset=\"" + p + "im_/" + d + "a.png 100w,\n  " + p + "im_/" + d + "b.png 200w\" sizes=\"50vw\">"},
		{"img srcset comma in URL", `<img srcset="a,b.png 1x,c.png 2x">`, `<img srcset="` + p + `im_/` + d + `a,b.png 1x,` + p + `im_/` + d + `c.png 2x">`},
		{"img srcset trailing comma no descriptor", `<img srcset="a.png,b.png 2x">`, `<img srcset="` + p + `im_/` + d + `a.png,b.png 2x">`},
		{"img srcset URL ending in commas", `<img srcset="a.png,, b.png">`, `<img srcset="` + p + `im_/` + d + `a.png,, ` + p + `im_/` + d + `b.png">`},
		{"img srcset data URI", `<img srcset="data:image/png;base64,AAA= 1x, b.png 2x">`, `<img srcset="data:image/png;base64,AAA= 1x, ` + p + `im_/` + d + `b.png 2x">`},
		{"img longdesc", `<img longdesc="d.html">`, `<img longdesc="` + p + `mp_/` + d + `d.html">`},
		{"img data-src data-srcset", `<img data-src="l.png" data-srcset="l.png 1x">`, `<img data-src="` + p + `im_/` + d + `l.png" data-srcset="` + p + `im_/` + d + `l.png 1x">`},
		{"picture source", `<picture><source srcset="a.webp" type="image/webp"><img src="a.jpg"></picture><video><source src="v.mp4"></video>`,
			`<picture><source srcset="` + p + `im_/` + d + `a.webp" type="image/webp"><img src="` + p + `im_/` + d + `a.jpg"></picture><video><source src="` + p + `oe_/` + d + `v.mp4"></video>`},
		{"input image", `<input type="image" src="go.png" formaction="/go">`, `<input type="image" src="` + p + `im_/` + d + `go.png" formaction="` + p + `mp_/http://ex.com/go">`},
		{"button formaction", `<button formaction="s">`, `<button formaction="` + p + `mp_/` + d + `s">`},
		{"form action", `<form action="/search" method=get>`, `<form action="` + p + `mp_/http://ex.com/search" method=get>`},
		{"video poster and src", `<video poster="p.jpg" src="v.webm"><track src="t.vtt"></video>`, `<video poster="` + p + `im_/` + d + `p.jpg" src="` + p + `oe_/` + d + `v.webm"><track src="` + p + `oe_/` + d + `t.vtt"></video>`},
		{"audio src", `<audio src="a.mp3">`, `<audio src="` + p + `oe_/` + d + `a.mp3">`},
		{"iframe and frame", `<iframe src="f.html"></iframe><frame src="g.html">`, `<iframe src="` + p + `if_/` + d + `f.html"></iframe><frame src="` + p + `if_/` + d + `g.html">`},
		{"script src integrity removed", `<script src="s.js" integrity="sha384-abc" crossorigin="anonymous"></script>`, `<script src="` + p + `js_/` + d + `s.js" crossorigin="anonymous"></script>`},
		{"link integrity removed", `<link integrity=sha256-x rel=stylesheet href=s.css>`, `<link rel=stylesheet href=` + p + `cs_/` + d + `s.css>`},
		{"object data codebase", `<object data="m.swf" codebase="/cb/"></object>`, `<object data="` + p + `oe_/` + d + `m.swf" codebase="` + p + `oe_/http://ex.com/cb/"></object>`},
		{"param movie", `<param name="movie" value="m.swf"><param name="quality" value="high">`, `<param name="movie" value="` + p + `oe_/` + d + `m.swf"><param name="quality" value="high">`},
		{"embed src", `<embed src="e.swf">`, `<embed src="` + p + `oe_/` + d + `e.swf">`},
		{"applet codebase", `<applet codebase="j/">`, `<applet codebase="` + p + `oe_/` + d + `j/">`},
		{"background", `<body background="bg.gif"><table background=t.gif>`, `<body background="` + p + `im_/` + d + `bg.gif"><table background=` + p + `im_/` + d + `t.gif>`},
		{"cite", `<blockquote cite="q.html"><q cite="/q"></q><ins cite="i"></ins><del cite="d">`, `<blockquote cite="` + p + `mp_/` + d + `q.html"><q cite="` + p + `mp_/http://ex.com/q"></q><ins cite="` + p + `mp_/` + d + `i"></ins><del cite="` + p + `mp_/` + d + `d">`},
		{"menuitem icon", `<menuitem icon="i.png">`, `<menuitem icon="` + p + `im_/` + d + `i.png">`},
		{"html manifest", `<html manifest="app.appcache">`, `<html manifest="` + p + `oe_/` + d + `app.appcache">`},
		{"svg image use", `<svg><image xlink:href="s.png"/><use href="#icon"/><use xlink:href="sprite.svg#i"/></svg>`, `<svg><image xlink:href="` + p + `im_/` + d + `s.png"/><use href="#icon"/><use xlink:href="` + p + `im_/` + d + `sprite.svg#i"/></svg>`},
		{"unknown element src href", `<amp-img src="a.png"></amp-img><x-link href="l">`, `<amp-img src="` + p + `oe_/` + d + `a.png"></amp-img><x-link href="` + p + `/` + d + `l">`},
		{"data-* absolute only", `<div data-url="https://api.ex.com/x" data-name="n" data-rel="/r">`, `<div data-url="` + p + `oe_/https://api.ex.com/x" data-name="n" data-rel="/r">`},
		{"ping removed", `<a href="a" ping="/track">`, `<a href="` + p + `mp_/` + d + `a">`},
		{"csp meta disabled", `<meta http-equiv="Content-Security-Policy" content="default-src 'self'">`, `<meta _http-equiv="Content-Security-Policy" content="default-src 'self'">`},
		{"other meta untouched", `<meta http-equiv="content-type" content="text/html; charset=utf-8"><meta property="og:image" content="http://ex.com/i.png">`, `<meta http-equiv="content-type" content="text/html; charset=utf-8"><meta property="og:image" content="http://ex.com/i.png">`},
		{"event handler", `<button onclick="location.href='/next'; return false">`, `<button onclick="WB_wombat_location.href='/next'; return false">`},
		{"event handler escaped", `<a onclick="if (a &amp;&amp; b) top.location = &quot;x&quot;">`, `<a onclick="if (a &amp;&amp; b) top.WB_wombat_location = &quot;x&quot;">`},
		{"unquoted value", `<a href=b.html>`, `<a href=` + p + `mp_/` + d + `b.html>`},
		{"single quotes", `<a href='b.html'>`, `<a href='` + p + `mp_/` + d + `b.html'>`},
		{"whitespace around value kept", `<a href="  b.html ">`, `<a href="  ` + p + `mp_/` + d + `b.html ">`},
		{"entities in URL", `<a href="q?a=1&amp;b=2&lt=3">`, `<a href="` + p + `mp_/` + d + `q?a=1&amp;b=2&amp;lt=3">`},
		{"uppercase names kept", `<A HREF="B.html" TARGET=_blank>`, `<A HREF="` + p + `mp_/` + d + `B.html" TARGET=_blank>`},
		{"duplicate attributes all rewritten", `<a href="a" href="http://other/">`, `<a href="` + p + `mp_/` + d + `a" href="` + p + `mp_/http://other/">`},
		{"self-closing", `<img src="i.png"/>`, `<img src="` + p + `im_/` + d + `i.png"/>`},
		{"unusual spacing", "<img\n\tsrc = \"i.png\"\n>", "<img\n\tsrc = \"" + p + "im_/" + d + "i.png\"\n>"},
		{"absolute https", `<img src="https://cdn.ex.com/a.png">`, `<img src="` + p + `im_/https://cdn.ex.com/a.png">`},
		{"canonicalized", `<a href="HTTP://Ex.COM:80/a/../b">`, `<a href="` + p + `mp_/http://ex.com/b">`},
		{"empty value untouched", `<a href="">x</a><img src>`, `<a href="">x</a><img src>`},
		{"tel mailto javascript data untouched", `<a href="tel:+1">t</a><a href="mailto:a@b">m</a><a href="javascript:void(0)">j</a><img src="data:image/gif;base64,R0=">`,
			`<a href="tel:+1">t</a><a href="mailto:a@b">m</a><a href="javascript:void(0)">j</a><img src="data:image/gif;base64,R0=">`},
		{"about blob fragment untouched", `<iframe src="about:blank"></iframe><img src="blob:http://ex.com/uuid"><a href="#top">`, `<iframe src="about:blank"></iframe><img src="blob:http://ex.com/uuid"><a href="#top">`},
		{"javascript with whitespace untouched", "<a href=\" java\nscript:alert(1)\">", "<a href=\" java\nscript:alert(1)\">"},
		{"unparseable untouched", `<a href="http://[oops/">`, `<a href="http://[oops/">`},
		{"attribute-less tags untouched", `<p><br><hr/>`, `<p><br><hr/>`},
		{"end tags and comments untouched", `<!-- <a href="x"> --></a><!DOCTYPE html>`, `<!-- <a href="x"> --></a><!DOCTYPE html>`},
		{"textarea title untouched", `<title><a href=x></title><textarea><img src=y></textarea>`, `<title><a href=x></title><textarea><img src=y></textarea>`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewriteHTML(t, tc.in, testPage, HTMLOptions{}); got != tc.want {
				t.Errorf("HTML(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestHTMLProtocolRelative(t *testing.T) {
	for _, tc := range []struct{ page, want string }{
		{"https://ex.com/", `<img src="/web/Xim_/https://cdn.ex.com/a.png">`},
		{"http://ex.com/", `<img src="/web/Xim_/http://cdn.ex.com/a.png">`},
	} {
		if got := rewriteHTML(t, `<img src="//cdn.ex.com/a.png">`, tc.page, HTMLOptions{}); got != tc.want {
			t.Errorf("page %s: got %s, want %s", tc.page, got, tc.want)
		}
	}
}

func TestHTMLBase(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"absolute base", `<base href="http://other.com/sub/"><img src="a.png"><a href="/r">`,
			`<base href="/web/Xmp_/http://other.com/sub/"><img src="/web/Xim_/http://other.com/sub/a.png"><a href="/web/Xmp_/http://other.com/r">`},
		{"relative base", `<base href="../other/"><img src="a.png">`,
			`<base href="/web/Xmp_/http://ex.com/other/"><img src="/web/Xim_/http://ex.com/other/a.png">`},
		{"protocol-relative base", `<base href="//cdn.ex.com/x/"><img src="a.png">`,
			`<base href="/web/Xmp_/http://cdn.ex.com/x/"><img src="/web/Xim_/http://cdn.ex.com/x/a.png">`},
		{"URLs before base use the page", `<img src="a.png"><base href="/b/"><img src="a.png">`,
			`<img src="/web/Xim_/http://ex.com/dir/a.png"><base href="/web/Xmp_/http://ex.com/b/"><img src="/web/Xim_/http://ex.com/b/a.png">`},
		{"only the first base counts", `<base href="/b/"><base href="/c/"><img src="a.png">`,
			`<base href="/web/Xmp_/http://ex.com/b/"><base href="/web/Xmp_/http://ex.com/c/"><img src="/web/Xim_/http://ex.com/b/a.png">`},
		{"base target only", `<base target="_top"><img src="a.png">`, `<base target="_top"><img src="/web/Xim_/http://ex.com/dir/a.png">`},
		{"base in noscript ignored", `<noscript><base href="/n/"></noscript><img src="a.png">`,
			`<noscript><base href="/web/Xmp_/http://ex.com/n/"></noscript><img src="/web/Xim_/http://ex.com/dir/a.png">`},
		{"base applies to CSS and refresh", `<base href="/b/"><style>a{background:url(i.png)}</style><meta http-equiv="refresh" content="0;url=n">`,
			`<base href="/web/Xmp_/http://ex.com/b/"><style>a{background:url(/web/Xim_/http://ex.com/b/i.png)}</style><meta http-equiv="refresh" content="0;url=/web/Xmp_/http://ex.com/b/n">`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewriteHTML(t, tc.in, testPage, HTMLOptions{}); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestHTMLMetaRefresh(t *testing.T) {
	const n = "/web/Xmp_/http://ex.com/dir/next.html"
	tests := []struct{ content, want string }{
		{"0;url=next.html", "0;url=" + n},
		{"5; URL='next.html'", "5; URL='" + n + "'"},
		{`3;URL="next.html"`, `3;URL=&quot;` + n + `&quot;`},
		{"0; url = next.html ", "0; url = " + n + " "},
		{"1, next.html", "1, " + n},
		{"0.5;URL=next.html", "0.5;URL=" + n},
		{"10", "10"},
		{"x; url=next.html", "x; url=next.html"},
		{"0; url=javascript:alert(1)", "0; url=javascript:alert(1)"},
	}
	for _, tc := range tests {
		in := `<meta http-equiv="Refresh" content="` + strings.ReplaceAll(tc.content, `"`, "&quot;") + `">`
		want := `<meta http-equiv="Refresh" content="` + tc.want + `">`
		if got := rewriteHTML(t, in, testPage, HTMLOptions{}); got != want {
			t.Errorf("content %q:\n got %s\nwant %s", tc.content, got, want)
		}
	}
}

func TestRefresh(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0;url=/x", "0;url=/web/Xmp_/http://ex.com/x"},
		{"5; URL='a b'", "5; URL='/web/Xmp_/http://ex.com/dir/a%20b'"},
		{"5", "5"},
		{"", ""},
		{"0; url=#frag", "0; url=#frag"},
	}
	for _, tc := range tests {
		if got := Refresh(tc.in, testPage, testMapper); got != tc.want {
			t.Errorf("Refresh(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A URL quoted with ' must not contain one after mapping.
	m := func(u, mod string) string { return "/it's/" + u }
	if got, want := Refresh("0; url='x'", testPage, m), "0; url='/it%27s/http://ex.com/dir/x'"; got != want {
		t.Errorf("Refresh quoted = %q, want %q", got, want)
	}
}

func TestHTMLStyle(t *testing.T) {
	const d = "http://ex.com/dir/"
	tests := []struct{ name, in, want string }{
		{"style attribute", `<div style="background:url(a.png)">`, `<div style="background:url(/web/Xim_/` + d + `a.png)">`},
		{"style attribute quoted entities", `<div style="background-image: url(&quot;a.png&quot;); color: red">`, `<div style="background-image: url(&quot;/web/Xim_/` + d + `a.png&quot;); color: red">`},
		{"style attribute single-quoted", `<div style='background:url("a.png")'>`, `<div style='background:url("/web/Xim_/` + d + `a.png")'>`},
		{"style attribute no url", `<div style="color: red; content: '&eacute;'">`, `<div style="color: red; content: '&eacute;'">`},
		{"style element", "<style>\n@import \"b.css\";\nbody { background: url('bg.png') }\n</style>", "<style>\n@import \"/web/Xcs_/" + d + "b.css\";\nbody { background: url('/web/Xim_/" + d + "bg.png') }\n</style>"},
		{"style element font", `<style>@font-face{font-family:f;src:url(f.woff2) format("woff2")}</style>`, `<style>@font-face{font-family:f;src:url(/web/Xoe_/` + d + `f.woff2) format("woff2")}</style>`},
		{"style type text/css", `<style type="text/css">a{b:url(x)}</style>`, `<style type="text/css">a{b:url(/web/Xim_/` + d + `x)}</style>`},
		{"style other type untouched", `<style type="text/less">a{b:url(x)}</style>`, `<style type="text/less">a{b:url(x)}</style>`},
		{"style entities are text", `<style>a{b:url(x?a&amp;b)}</style>`, `<style>a{b:url(/web/Xim_/` + d + `x?a&amp;b)}</style>`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewriteHTML(t, tc.in, testPage, HTMLOptions{}); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestHTMLScripts(t *testing.T) {
	const d = "http://ex.com/dir/"
	tests := []struct{ name, in, want string }{
		{"inline script", `<script>if (top.location != self.location) location.href = "/x";</script>`, `<script>if (top.WB_wombat_location != self.WB_wombat_location) WB_wombat_location.href = "/x";</script>`},
		{"type text/javascript", `<script type="text/javascript">location.reload()</script>`, `<script type="text/javascript">WB_wombat_location.reload()</script>`},
		{"type application/javascript with parameters", `<script type="application/javascript; charset=utf-8">location</script>`, `<script type="application/javascript; charset=utf-8">WB_wombat_location</script>`},
		{"module", `<script type=module>export const u = document.location.href</script>`, `<script type=module>export const u = document.WB_wombat_location.href</script>`},
		{"empty type", `<script type="">location</script>`, `<script type="">WB_wombat_location</script>`},
		{"language javascript", `<script language="JavaScript1.2">location</script>`, `<script language="JavaScript1.2">WB_wombat_location</script>`},
		{"language other", `<script language="vbscript">location</script>`, `<script language="vbscript">location</script>`},
		{"template untouched", `<script type="text/template"><a href="http://x/">location</a></script>`, `<script type="text/template"><a href="http://x/">location</a></script>`},
		{"json untouched", `<script type="application/ld+json">{"location": "http://ex.com/"}</script>`, `<script type="application/ld+json">{"location": "http://ex.com/"}</script>`},
		{"script is not HTML", `<script>document.write('<img src="a.png">')</script>`, `<script>document.write('<img src="a.png">')</script>`},
		{"importmap", `<script type="importmap">{"imports": {"vue": "https://cdn.ex.com/vue.js", "lib/": "./lib/", "bare": "other"}, "scopes": {"/s/": {"x": "/x.js"}}, "integrity": {"https://cdn.ex.com/vue.js": "sha384-x"}}</script>`,
			`<script type="importmap">{"imports":{"bare":"other","lib/":"/web/Xjs_/` + d + `lib/","vue":"/web/Xjs_/https://cdn.ex.com/vue.js"},"scopes":{"/web/Xjs_/http://ex.com/s/":{"x":"/web/Xjs_/http://ex.com/x.js"}}}</script>`},
		{"importmap invalid untouched", `<script type="importmap">{"imports": </script>`, `<script type="importmap">{"imports": </script>`},
		{"speculationrules", `<script type="speculationrules">{"prerender": [{"source": "list", "urls": ["/next", "https://other.com/"]}, {"where": {"href_matches": "/*"}}]}</script>`,
			`<script type="speculationrules">{"prerender":[{"source":"list","urls":["/web/Xmp_/http://ex.com/next","/web/Xmp_/https://other.com/"]},{"where":{"href_matches":"/*"}}]}</script>`},
		{"noscript", `<noscript><img src="n.png"><style>a{b:url(s.png)}</style></noscript>`, `<noscript><img src="/web/Xim_/` + d + `n.png"><style>a{b:url(/web/Xim_/` + d + `s.png)}</style></noscript>`},
		{"srcdoc", `<iframe srcdoc="<img src=&quot;s.png&quot;><a href='b'>b</a>"></iframe>`, `<iframe srcdoc="<img src=&quot;/web/Xim_/` + d + `s.png&quot;><a href='/web/Xmp_/` + d + `b'>b</a>"></iframe>`},
		{"srcdoc without URLs untouched", `<iframe srcdoc="<p>hi &amp; bye</p>"></iframe>`, `<iframe srcdoc="<p>hi &amp; bye</p>"></iframe>`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewriteHTML(t, tc.in, testPage, HTMLOptions{}); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestHTMLSrcdocDepth(t *testing.T) {
	// Each level escapes the next; beyond maxSrcdocDepth the attribute goes.
	doc := `<img src="deep.png">`
	for range maxSrcdocDepth + 1 {
		doc = `<iframe srcdoc="` + escAttr(doc, '"') + `"></iframe>`
	}
	got := rewriteHTML(t, doc, testPage, HTMLOptions{})
	if strings.Contains(got, "deep.png") {
		t.Errorf("too deeply nested srcdoc kept: %s", got)
	}
	if strings.Count(got, "srcdoc=") != maxSrcdocDepth-1 {
		t.Errorf("want %d srcdoc levels kept: %s", maxSrcdocDepth-1, got)
	}
}

func TestHTMLHead(t *testing.T) {
	const h = `<script src="/c.js"></script>`
	tests := []struct{ name, in, want string }{
		{"after head", `<!DOCTYPE html><html><head><title>t</title></head><body>`, `<!DOCTYPE html><html><head>` + h + `<title>t</title></head><body>`},
		{"head with attributes", `<html lang=en><HEAD profile="x">`, `<html lang=en><HEAD profile="x">` + h},
		{"self-closing head", `<head/><title>t</title>`, `<head/>` + h + `<title>t</title>`},
		{"no head: before body", "<!DOCTYPE html>\n<html>\n<body>hi", "<!DOCTYPE html>\n<html>\n" + h + "<body>hi"},
		{"no head: before first element", `<title>t</title>`, h + `<title>t</title>`},
		{"no head: before text", "<!-- c -->\nhello <b>x</b>", "<!-- c -->" + h + "\nhello <b>x</b>"},
		{"head in comment ignored", `<!-- <head> --><html><head>`, `<!-- <head> --><html><head>` + h},
		{"byte order mark stays first", "\xef\xbb\xbf<html><body>", "\xef\xbb\xbf<html>" + h + "<body>"},
		{"empty document", ``, h},
		{"doctype only", `<!DOCTYPE html>`, `<!DOCTYPE html>` + h},
		{"text only", `plain text`, h + `plain text`},
		{"only once", `<head></head><head>`, `<head>` + h + `</head><head>`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewriteHTML(t, tc.in, testPage, HTMLOptions{Head: []byte(h)}); got != tc.want {
				t.Errorf("\n got %q\nwant %q", got, tc.want)
			}
		})
	}
	if got := rewriteHTML(t, `<head><title>t</title>`, testPage, HTMLOptions{}); got != `<head><title>t</title>` {
		t.Errorf("no Head: got %q", got)
	}
}

// TestHTMLPassthrough checks that a document with nothing to rewrite comes
// out byte for byte, whatever its encoding and however broken.
func TestHTMLPassthrough(t *testing.T) {
	docs := []string{
		"<!DOCTYPE html PUBLIC \"-//W3C//DTD HTML 4.01//EN\">\r\n<HTML><Head>\r\n<TITLE>Caf\xe9 \x80\x99</TITLE>\r\n</Head><BODY BGCOLOR=white>\n<p class=x id='y' data-n=\"1\">\xff\xfe\xc3\x28 text &amp; &eacute; &#233; &bogus;</p>\n</BODY></HTML>",
		"<meta charset=windows-1252><p title=\"\x93quoted\x94\">na\xefve</p><!-- \xe9 --><![CDATA[ x ]]><?php echo 1 ?>",
		"<p>unclosed <b><i>tags</p></b> <div <span>> </> <a\x00b=c> \x00 nul",
		"<script>var s = '</scr' + 'ipt>'; if (a < b && c > d) {}</script><style>p > a { color: red }</style>",
		"<table><tr><td>1<td>2</table><select><option selected>o</select><textarea><p>raw</textarea>",
		"<svg viewBox=\"0 0 1 1\"><path d=\"M0 0\"/></svg><math><mi>x</mi></math>",
		"<p title=\"unterminated",
		"<a",
		"<",
		"text only \xe9\xe8",
		"<plaintext><a href=http://x/>",
		"<img alt='&lt;&gt;'><input value=\"a&b\" disabled>",
	}
	for _, doc := range docs {
		if got := rewriteHTML(t, doc, testPage, HTMLOptions{}); got != doc {
			t.Errorf("passthrough changed\n  in %q\n got %q", doc, got)
		}
	}
}

// A giant token (a data: URI, an inline script) is rewritten as it is, and
// so are the links after it.
func TestHTMLGiantTokens(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	for _, giant := range []string{`<img src="data:image/png;base64,` + big + `">`, `<script>var x="` + big + `";</script>`} {
		in := giant + `<a href="after.html">`
		want := giant + `<a href="/web/Xmp_/http://ex.com/dir/after.html">`
		if got := rewriteHTML(t, in, testPage, HTMLOptions{}); got != want {
			t.Errorf("after a giant token of %d bytes: %q", len(giant), got[max(0, len(got)-100):])
		}
	}
}

func TestHTMLEncoding(t *testing.T) {
	const want = `/web/Xmp_/http://ex.com/dir/caf%C3%A9.html`
	tests := []struct{ name, page, ct string }{
		{"utf-8", "<meta charset=utf-8><a href=\"caf\xc3\xa9.html\">", ""},
		{"windows-1252 meta", "<meta charset=windows-1252><a href=\"caf\xe9.html\">", ""},
		{"iso-8859-1 header", "<a href=\"caf\xe9.html\">", "text/html; charset=ISO-8859-1"},
		{"entity", "<a href=\"caf&eacute;.html\">", ""},
	}
	for _, tc := range tests {
		got := rewriteHTML(t, tc.page, testPage, HTMLOptions{ContentType: tc.ct})
		if !strings.Contains(got, `"`+want+`"`) {
			t.Errorf("%s: got %q, want href %s", tc.name, got, want)
		}
		// The rest of the page is not transcoded.
		if i := strings.Index(tc.page, "<a"); got[:i] != tc.page[:i] {
			t.Errorf("%s: prefix changed: %q", tc.name, got)
		}
	}
}

func TestHTMLQuotingNewValues(t *testing.T) {
	m := func(u, mod string) string { return `/we b/"q"&'s/` + u }
	tests := []struct{ in, want string }{
		{`<a href=x>`, `<a href="/we b/&quot;q&quot;&amp;'s/http://ex.com/dir/x">`},
		{`<a href="x">`, `<a href="/we b/&quot;q&quot;&amp;'s/http://ex.com/dir/x">`},
		{`<a href='x'>`, `<a href='/we b/"q"&amp;&#39;s/http://ex.com/dir/x'>`},
	}
	for _, tc := range tests {
		var b bytes.Buffer
		if err := HTML(&b, []byte(tc.in), testPage, m, HTMLOptions{}); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("HTML(%s) = %s, want %s", tc.in, b.String(), tc.want)
		}
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestHTMLWriteError(t *testing.T) {
	page := strings.Repeat(`<p><a href="x">x</a></p>`, 10000)
	err := HTML(&failWriter{n: 1000}, []byte(page), testPage, testMapper, HTMLOptions{})
	if err == nil || !strings.Contains(err.Error(), "rewrite: disk full") {
		t.Fatalf("err = %v, want rewrite: disk full", err)
	}
}

func TestParseTagMatchesTokenizer(t *testing.T) {
	tags := []string{
		`<a href=x>`, `<a href = "x" >`, `<a =b c=d>`, `<a b/c=d>`, `<a b / = c>`, `<a b=c/>`, `<a b="c"d=e>`,
		`<a b='c' / d>`, `<a/b=c>`, `<a b=>`, `<a b= >`, "<a\tB=\"x\"\nC='y'\fd>", `<a b="x&amp;y&copy=z&notit;&#x41;&#65">`,
		`<a b="&unknown;&amp">`, `<a b c d>`, `<a b=c=d>`, `<a "b"=c>`, `<a b=">">`,
	}
	for _, tag := range tags {
		if err := compareAttrs([]byte(tag)); err != nil {
			t.Errorf("%s: %v", tag, err)
		}
	}
}

func BenchmarkHTML(b *testing.B) {
	page := benchPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		if err := HTML(&out, page, "https://www.ex.com/news/today.html", testMapper, HTMLOptions{Head: []byte(`<script src="/static/wb.js"></script>`)}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPage is a ~50 KB page with ~300 links (350 references to rewrite,
// 50 left alone) and the usual page requisites.
func benchPage() []byte {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>News today</title>
<link rel="stylesheet" href="/static/site.css" integrity="sha384-abc"><link rel="icon" href="/favicon.ico">
<style>body{background:url(/img/bg.png)} @font-face{font-family:x;src:url(/f/x.woff2) format("woff2")}</style>
<script src="https://cdn.ex.com/lib.js"></script><script>if (top.location !== self.location) { top.location = self.location; }</script>
</head><body><header><nav>`)
	for i := range 300 {
		switch i % 6 {
		case 0:
			fmt.Fprintf(&b, `<p class="teaser">Story number %d about something that happened yesterday in the city, told with enough words to look like the text of a real news page, which is mostly prose. <a href="/news/%d/story-%d.html" class="more">Read more</a></p>`+"\n", i, i/10, i)
		case 1:
			fmt.Fprintf(&b, `<figure><img src="/img/%d.jpg" srcset="/img/%d-2x.jpg 2x, /img/%d-3x.jpg 3x" alt="Picture %d" loading="lazy"><figcaption>Caption %d</figcaption></figure>`+"\n", i, i, i, i, i)
		case 2:
			fmt.Fprintf(&b, `<li><a href="https://other%d.example.org/path/to/page?id=%d&amp;ref=home#c">External %d</a></li>`+"\n", i%7, i, i)
		case 3:
			fmt.Fprintf(&b, `<div class="card" style="background-image:url('/img/card%d.png')"><h3>Card %d</h3><p>Some description of the card, a few words long, then a few more so that it reads like a paragraph.</p></div>`+"\n", i, i)
		case 4:
			fmt.Fprintf(&b, `<a href="tag/%d" rel="tag">tag %d</a> <a href="#section-%d">jump</a> <a href="javascript:void(0)" onclick="share(%d)">share</a>`+"\n", i, i, i, i)
		default:
			fmt.Fprintf(&b, `<form action="/search" method="get"><input type="text" name="q%d" value="query"><button>Go</button></form>`+"\n", i)
		}
	}
	b.WriteString(`</nav></header><footer><p>` + strings.Repeat("Footer text with the usual legal words. ", 75) + `</p></footer><script>var u = window.location.href; analytics.track(u);</script></body></html>`)
	return []byte(b.String())
}
