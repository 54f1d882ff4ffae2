package websim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// dirOf returns the directory part of a path (with optional query), ending
// in '/': the base that relative references resolve against.
func dirOf(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return path[:strings.LastIndexByte(path, '/')+1]
}

// relative returns a relative reference from directory dir to target path,
// both absolute paths on the same host.
func relative(dir, target string) string {
	common := 0
	for j := 0; j < len(dir) && j < len(target) && dir[j] == target[j]; j++ {
		if dir[j] == '/' {
			common = j + 1
		}
	}
	s := strings.Repeat("../", strings.Count(dir[common:], "/")) + target[common:]
	if s == "" {
		return "./"
	}
	return s
}

// linker writes references from one page in the varied forms real pages
// use: absolute, scheme-relative, root-relative and relative.
type linker struct {
	rng     *rand.Rand
	host    string // host of the page
	baseDir string // directory relative references resolve against
}

func (l *linker) ref(host, path string) string {
	if host != l.host {
		if l.rng.IntN(10) == 0 {
			return "//" + host + path
		}
		return "http://" + host + path
	}
	switch x := l.rng.IntN(100); {
	case x < 15:
		return "http://" + host + path
	case x < 60:
		return path
	default:
		return relative(l.baseDir, path)
	}
}

// renderPage writes the HTML of p as of change step step. Layout and links
// come from a random stream fixed per page; only the text stream depends on
// step, so a new version changes the words and nothing else.
func (w *Web) renderPage(p *page, step int) []byte {
	h := p.host
	L := w.rng(tagLayout, p.id, 0)
	T := w.rng(tagText, p.id, uint64(step))
	base := dirOf(p.path)
	if p.base != "" {
		base = dirOf(strings.TrimPrefix(p.base, "http://"+h.name))
	}
	l := &linker{rng: L, host: h.name, baseDir: base}
	ah, ap := h.assetBase()
	asset := func(path string) string { return l.ref(ah, ap+path) }
	site := h.dom.title
	if len(h.pages) > 0 {
		site = h.pages[0].title
	}

	b := make([]byte, 0, 6144)
	b = append(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"...)
	b = append(b, p.title...)
	if p.title != site {
		b = append(b, " | "...)
		b = append(b, site...)
	}
	b = append(b, "</title>\n"...)
	if p.base != "" {
		b = attrTag(b, "base", "href", p.base)
	}
	b = append(b, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"description\" content=\""...)
	b = sentence(b, T)
	b = append(b, "\">\n"...)
	b = append(b, "<link rel=\"canonical\" href=\""...)
	b = append(b, p.url()...)
	b = append(b, "\">\n<link rel=\"stylesheet\" href=\""...)
	b = append(b, asset("/css/site.css")...)
	b = append(b, "\">\n<link rel=\"icon\" href=\""...)
	b = append(b, l.ref(h.name, "/favicon.ico")...)
	b = append(b, "\">\n"...)
	if L.IntN(5) == 0 {
		b = append(b, "<style>\n.hero { background-image: url(\""...)
		b = append(b, asset(fmt.Sprintf("/img/bg-%d.jpg", L.IntN(backgroundCount)))...)
		b = append(b, "\"); }\n</style>\n"...)
	}
	b = append(b, "<script src=\""...)
	b = append(b, asset("/js/app.js")...)
	b = append(b, "\" defer></script>\n"...)
	if L.IntN(3) == 0 {
		b = append(b, "<script src=\""...)
		b = append(b, asset("/js/vendor.min.js")...)
		b = append(b, "\"></script>\n"...)
	}
	b = append(b, "</head>\n<body id=\"top\">\n<header>\n"...)
	if len(h.pages) > 0 {
		home := h.pages[0]
		b = anchor(b, l.ref(h.name, home.path), "")
		b = append(b, "<img src=\""...)
		b = append(b, asset("/img/logo.png")...)
		b = append(b, "\" alt=\""...)
		b = append(b, site...)
		b = append(b, "\" width=\"120\" height=\"40\"></a>\n<nav>"...)
		for i, s := range home.children {
			if i > 0 {
				b = append(b, " | "...)
			}
			b = anchor(b, l.ref(h.name, s.path), s.title)
		}
		b = append(b, "</nav>\n"...)
	}
	b = append(b, "</header>\n<main class=\"hero\">\n<h1>"...)
	b = append(b, p.title...)
	b = append(b, "</h1>\n<p>"...)
	b = sentences(b, T, 2+T.IntN(3))
	if len(p.related) > 0 {
		b = append(b, ' ')
		b = anchor(b, l.ref(h.name, p.related[0].path), p.related[0].title)
		b = append(b, ' ')
		b = sentences(b, T, 1)
	}
	b = append(b, "</p>\n"...)
	if photos := h.dom.photos; len(photos) > 0 {
		name := photos[L.IntN(len(photos))]
		b = append(b, "<figure><img src=\""...)
		b = append(b, asset("/img/"+name+".jpg")...)
		if L.IntN(2) == 0 {
			b = append(b, "\" srcset=\""...)
			b = append(b, asset("/img/"+name+".jpg")...)
			b = append(b, " 1x, "...)
			b = append(b, asset("/img/"+name+"@2x.jpg")...)
			b = append(b, " 2x"...)
		}
		b = append(b, "\" alt=\""...)
		b = append(b, strings.ReplaceAll(name, "-", " ")...)
		b = append(b, "\" width=\"64\" height=\"48\" loading=\"lazy\"><figcaption>"...)
		b = sentence(b, T)
		b = append(b, "</figcaption></figure>\n"...)
	}
	for range 1 + T.IntN(4) {
		b = append(b, "<h2>"...)
		b = append(b, titleCase(slugWords(T, 2+T.IntN(4)))...)
		b = append(b, "</h2>\n<p>"...)
		b = sentences(b, T, 2+T.IntN(4))
		b = append(b, "</p>\n"...)
	}
	if L.IntN(4) == 0 {
		b = append(b, "<div class=\"banner\" style=\"background: url('"...)
		b = append(b, asset(fmt.Sprintf("/img/bg-%d.jpg", L.IntN(backgroundCount)))...)
		b = append(b, "') no-repeat\">"...)
		b = sentence(b, T)
		b = append(b, "</div>\n"...)
	}
	if p.iframe {
		b = append(b, "<iframe src=\""...)
		b = append(b, l.ref(h.name, p.related[0].path)...)
		b = append(b, "\" title=\""...)
		b = append(b, p.related[0].title...)
		b = append(b, "\" width=\"600\" height=\"300\"></iframe>\n"...)
	}
	if len(p.children) > 0 {
		b = append(b, "<h2>In this section</h2>\n<ul class=\"index\">\n"...)
		for _, c := range p.children {
			b = listItem(b, l.ref(h.name, c.path), c.title)
		}
		b = append(b, "</ul>\n"...)
	}
	if len(p.related)+len(p.extra) > 0 {
		b = append(b, "<h2>See also</h2>\n<ul class=\"related\">\n"...)
		for _, r := range p.related {
			ref := l.ref(h.name, r.path)
			if L.IntN(10) == 0 {
				ref += "#comments"
			}
			b = listItem(b, ref, r.title)
		}
		for _, x := range p.extra {
			b = listItem(b, l.ref(h.name, x.path), x.text)
		}
		b = append(b, "</ul>\n"...)
	}
	if w.cfg.TextKB > 0 {
		// The body of an article, for webs of realistic page weight.
		b = append(b, "<article>\n"...)
		for target := len(b) + w.cfg.TextKB<<10; len(b) < target; {
			b = append(b, "<p>"...)
			b = sentences(b, T, 4+T.IntN(5))
			b = append(b, "</p>\n"...)
		}
		b = append(b, "</article>\n"...)
	}
	b = append(b, "</main>\n<footer>\n"...)
	if len(p.external) > 0 {
		b = append(b, "<ul class=\"elsewhere\">\n"...)
		for _, x := range p.external {
			path := x.to.path
			if x.utm {
				sep := "?"
				if strings.Contains(path, "?") {
					sep = "&amp;"
				}
				path += sep + "utm_source=" + h.dom.name + "&amp;utm_medium=referral"
			}
			text := x.text
			if text == "" {
				text = x.to.title
			}
			b = listItem(b, l.ref(x.via, path), text)
		}
		b = append(b, "</ul>\n"...)
	}
	b = append(b, "<p><img src=\""...)
	b = append(b, asset(fmt.Sprintf("/img/icon-%d.gif", L.IntN(iconCount)))...)
	b = append(b, "\" alt=\"\" width=\"16\" height=\"16\"> &copy; "...)
	b = strconv.AppendInt(b, int64(h.dom.year), 10)
	b = append(b, ' ')
	b = append(b, h.dom.title...)
	b = append(b, ". <a href=\"#top\">Back to top</a></p>\n</footer>\n</body>\n</html>\n"...)
	return b
}

func attrTag(b []byte, tag, attr, val string) []byte {
	b = append(b, '<')
	b = append(b, tag...)
	b = append(b, ' ')
	b = append(b, attr...)
	b = append(b, "=\""...)
	b = append(b, val...)
	return append(b, "\">\n"...)
}

// anchor writes <a href="ref">text</a>, leaving the element open if text is
// empty, for content such as an image.
func anchor(b []byte, ref, text string) []byte {
	b = append(b, "<a href=\""...)
	b = append(b, ref...)
	b = append(b, "\">"...)
	if text == "" {
		return b
	}
	b = append(b, text...)
	return append(b, "</a>"...)
}

func listItem(b []byte, ref, text string) []byte {
	b = append(b, "<li>"...)
	b = anchor(b, ref, text)
	return append(b, "</li>\n"...)
}

// sentence writes one sentence of English-looking words.
func sentence(b []byte, rng *rand.Rand) []byte {
	n := 6 + rng.IntN(11)
	for i := range n {
		word := words[rng.IntN(len(words))]
		if i == 0 {
			b = append(b, word[0]-'a'+'A')
			b = append(b, word[1:]...)
			continue
		}
		b = append(b, ' ')
		b = append(b, word...)
		if i > 2 && i < n-2 && rng.IntN(10) == 0 {
			b = append(b, ',')
		}
	}
	return append(b, '.')
}

func sentences(b []byte, rng *rand.Rand, n int) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = sentence(b, rng)
	}
	return b
}

// renderCSS writes style sheet n of h's domain. References are relative to
// the sheet, as in most real style sheets, with one root-relative.
func (w *Web) renderCSS(h *host, n int) []byte {
	rng := w.rng(tagMedia, uint64(h.idx), uint64(n)+100)
	_, prefix := h.assetBase()
	if h.kind == hostAssets {
		prefix = ""
	}
	var b strings.Builder
	if n == 0 {
		b.WriteString("@import url(\"theme.css\");\n\n")
		b.WriteString("@font-face {\n  font-family: \"Body\";\n  src: url(\"../fonts/body.woff2\") format(\"woff2\");\n  font-display: swap;\n}\n\n")
		fmt.Fprintf(&b, "body {\n  font-family: \"Body\", Georgia, serif;\n  margin: 0 auto;\n  max-width: 48em;\n  color: #%06x;\n}\n\n", rng.IntN(0x404040))
		b.WriteString(".hero { background-image: url(../img/bg-0.jpg); }\n")
		fmt.Fprintf(&b, "header { background: #fff url('%s/img/bg-1.jpg') repeat-x; }\n", prefix)
		for i := range iconCount {
			fmt.Fprintf(&b, ".icon-%d { background: url(../img/icon-%d.gif) no-repeat; }\n", i, i)
		}
	} else {
		fmt.Fprintf(&b, "a { color: #%06x; }\na:hover { text-decoration: underline; }\n", rng.IntN(0x1000000))
		b.WriteString(".banner { background: url(\"../img/bg-1.jpg\") no-repeat; min-height: 4em; }\n")
		b.WriteString("figure img { border: 1px solid #ccc; }\nfooter { font-size: small; }\n")
	}
	return []byte(b.String())
}

// renderJS writes script n: plausible code with no URLs in it.
func (w *Web) renderJS(h *host, n int) []byte {
	if n == 0 {
		return []byte(`"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var nav = document.querySelector("nav");
  if (!nav) { return; }
  nav.addEventListener("click", function (e) {
    if (e.target.tagName === "A") { e.target.classList.add("visited"); }
  });
  var year = new Date().getFullYear();
  document.querySelectorAll(".year").forEach(function (el) { el.textContent = year; });
});
`)
	}
	// The same library release on every site, as sites share jQuery: the
	// web's cross-site duplicate payloads.
	rng := w.rng(tagMedia, 0, 200)
	var b strings.Builder
	b.WriteString("/*! vendor.min.js */\n")
	for i := range 40 {
		fmt.Fprintf(&b, "var _%x=function(a,b){return a%s%d+b*%d};", i, [...]string{"+", "-", "*", "^"}[rng.IntN(4)], rng.IntN(1000), rng.IntN(100))
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// renderRobots writes h's robots.txt as its features ask.
func (w *Web) renderRobots(h *host) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# robots.txt for %s\n\nUser-agent: *\n", h.name)
	if h.feat&featDisallowPrivate != 0 {
		b.WriteString("Disallow: /private/\n")
	} else {
		b.WriteString("Disallow:\n")
	}
	if h.feat&featCrawlDelay != 0 {
		b.WriteString("Crawl-delay: 1\n")
	}
	if h.rank%5 == 0 {
		// A group for another crawler, which must not apply to ours.
		b.WriteString("\nUser-agent: BadBot\nDisallow: /\n")
	}
	if h.feat&featSitemap != 0 {
		fmt.Fprintf(&b, "\nSitemap: http://%s/sitemap.xml\n", h.name)
	}
	return []byte(b.String())
}

// renderSitemap lists h's ordinary pages.
func renderSitemap(h *host) []byte {
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n")
	for _, p := range h.pages {
		fmt.Fprintf(&b, "  <url><loc>%s</loc></url>\n", strings.ReplaceAll(p.url(), "&", "&amp;"))
	}
	b.WriteString("</urlset>\n")
	return []byte(b.String())
}

// renderSimple writes a small HTML page with a heading, some text and a
// link home, for the pages that are not part of the site tree. Head and
// tail are extra markup for the end of <head> and of <body>.
func (w *Web) renderSimple(h *host, title string, seed uint64, head, tail string) []byte {
	rng := w.rng(tagText, uint64(h.idx), seed)
	b := make([]byte, 0, 1024)
	b = append(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"...)
	b = append(b, head...)
	b = append(b, "<title>"...)
	b = append(b, title...)
	b = append(b, "</title>\n</head>\n<body>\n<h1>"...)
	b = append(b, title...)
	b = append(b, "</h1>\n<p>"...)
	b = sentences(b, rng, 3+rng.IntN(4))
	b = append(b, "</p>\n"...)
	b = append(b, tail...)
	return append(b, "<p><a href=\"/\">Home</a></p>\n</body>\n</html>\n"...)
}
