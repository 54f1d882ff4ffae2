// Package extract finds the outlinks of archived documents: links and page
// requisites in HTML, and url() and @import references in CSS.
package extract

import (
	"bytes"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"github.com/waggle-archive/waggle/internal/htmltoken"
	"github.com/waggle-archive/waggle/internal/simhash"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Kind says why a document refers to a URL: a crawler follows Links within
// its scope, but fetches Embeds (page requisites: images, CSS, scripts,
// fonts, frames, media) even off-scope, as wget --page-requisites does.
type Kind uint8

// The kinds of outlink.
const (
	Link     Kind = iota + 1 // navigation: a, area, link rel=alternate …
	Embed                    // page requisite
	Redirect                 // meta refresh or HTTP Location
)

// Outlink is one reference found in a document.
type Outlink struct {
	URL  string // canonical absolute URL
	Kind Kind
	Path string // where it came from, Heritrix style: "a/@href", "img/@srcset", "css/url" …
}

// Result is what HTML extraction found.
type Result struct {
	Links     []Outlink // deduplicated, in document order
	Title     string
	Base      string // effective base URL after <base href>
	Truncated bool   // a limit was hit; Links holds what was found before it
	// SimHash is the SimHash of the page's visible text (package
	// simhash), read in the same pass as the links.
	SimHash uint64
}

// Limits bound the work done on one document.
type Limits struct {
	MaxLinks  int // default 10,000
	MaxTokens int // default 1,000,000
}

func (l Limits) withDefaults() Limits {
	if l.MaxLinks <= 0 {
		l.MaxLinks = 10_000
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = 1_000_000
	}
	return l
}

// maxTitleBytes bounds the title kept of a page.
const maxTitleBytes = 1024

// appendCollapsed appends text to title with each run of white space made
// one space (none at the start), until title holds maxTitleBytes: only
// what is kept is copied, for a title never closed runs to the end of the
// page, and white space, however long, counts once. Invalid UTF-8 is
// dropped.
func appendCollapsed(title *strings.Builder, text []byte) {
	space := title.Len() > 0 && strings.HasSuffix(title.String(), " ")
	for len(text) > 0 && title.Len() < maxTitleBytes {
		r, n := utf8.DecodeRune(text)
		text = text[n:]
		switch {
		case r == utf8.RuneError && n <= 1:
		case unicode.IsSpace(r):
			if title.Len() > 0 && !space {
				title.WriteByte(' ')
				space = true
			}
		case title.Len()+utf8.RuneLen(r) <= maxTitleBytes:
			title.WriteRune(r)
			space = false
		default:
			return
		}
	}
}

// collector deduplicates outlinks and enforces the link limit.
type collector struct {
	base  string
	seen  map[Outlink]bool // by URL and kind: Path left empty
	links []Outlink
	max   int
	full  bool
}

func (c *collector) add(ref string, kind Kind, path string) {
	ref = strings.TrimSpace(ref)
	if ref == "" || c.full || skipScheme(ref) {
		return
	}
	u, err := urlkey.Canonical(c.base, ref)
	if err != nil {
		return
	}
	k := Outlink{URL: u, Kind: kind}
	if c.seen[k] {
		return
	}
	if len(c.links) >= c.max {
		c.full = true
		return
	}
	c.seen[k] = true
	c.links = append(c.links, Outlink{URL: u, Kind: kind, Path: path})
}

// skipScheme reports references that are never fetched.
func skipScheme(ref string) bool {
	i := strings.IndexByte(ref, ':')
	if i <= 0 || i > 12 {
		return false
	}
	switch strings.ToLower(ref[:i]) {
	case "javascript", "data", "mailto", "tel", "about", "blob", "sms", "file", "ftp", "vbscript":
		return true
	}
	return false
}

// HTML extracts outlinks from an HTML document. contentType (the HTTP header)
// and any BOM or <meta charset> decide the encoding, as browsers do. It uses
// the streaming tokenizer, not a tree, so deep nesting costs nothing extra.
func HTML(body []byte, contentType, pageURL string, lim Limits) (Result, error) {
	return readHTML(body, contentType, pageURL, lim, true)
}

// SimHash returns the SimHash of an HTML page's visible text exactly as HTML
// reads it (Result.SimHash), without collecting links: for a node that
// indexes a page it did not fetch.
func SimHash(body []byte, contentType string) uint64 {
	res, _ := readHTML(body, contentType, "", Limits{}, false)
	return res.SimHash
}

func readHTML(body []byte, contentType, pageURL string, lim Limits, links bool) (Result, error) {
	lim = lim.withDefaults()
	c := &collector{base: pageURL, seen: map[Outlink]bool{}, max: lim.MaxLinks}
	res := Result{Base: pageURL}
	text, err := htmlBytes(body, contentType)
	res.Truncated = err != nil // the page up to a decoding error is read
	// No bound on a token's size: the tokenizer reads the page in place,
	// so a giant one (a data: URI, an inline script or JSON, an SVG path)
	// costs its length and nothing is buffered; cut there, the page's
	// later links would be lost.
	z := htmltoken.New(text)
	inTitle, inStyle, baseSet := false, false, false
	var attrs tagAttrs
	var title strings.Builder
	var visible simhash.Visible // the SimHash comes from the same pass
	for n := 0; ; n++ {
		if n >= lim.MaxTokens {
			res.Truncated = true
			break
		}
		tt := z.Next()
		if tt == html.ErrorToken {
			break // the end of the page: without SetMaxBuf, the only error
		}
		switch tt {
		case html.TextToken:
			text := z.Text()
			visible.Text(text)
			if inTitle && title.Len() < maxTitleBytes {
				appendCollapsed(&title, text)
			} else if inStyle && links {
				cssLinks(c, text, "style")
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			tag := atom.Lookup(name)
			visible.Tag(tt, tag)
			switch tag {
			case atom.Title:
				inTitle = false
			case atom.Style:
				inStyle = false
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			tag := atom.Lookup(name)
			visible.Tag(tt, tag)
			switch tag {
			case atom.Title:
				inTitle = tt == html.StartTagToken
			case atom.Style:
				inStyle = tt == html.StartTagToken
			}
			if !hasAttr || !links {
				continue
			}
			attrs.read(z)
			if tag == atom.Base && !baseSet {
				if h, ok := attrs.get(attrHref); ok {
					if u, err := urlkey.Canonical(pageURL, strings.TrimSpace(h)); err == nil {
						c.base, res.Base, baseSet = u, u, true
					}
				}
			}
			tagName := tag.String() // static for known tags: no allocation
			if tag == 0 {
				tagName = string(name)
			}
			elementLinks(c, tag, tagName, &attrs)
		}
	}
	res.Links = c.links
	res.Title = strings.TrimSpace(title.String())
	res.SimHash = visible.Sum()
	if c.full {
		res.Truncated = true
	}
	return res, nil
}

// htmlBytes is body as UTF-8, decoded from the charset the Content-Type, a
// BOM or a <meta charset> names, as browsers do. A body that is valid
// UTF-8, or ASCII when windows-1252 (the guess for a page that names no
// charset) applies, is body itself: decoding would copy it unchanged. On a
// decoding error it returns the text decoded before it.
func htmlBytes(body []byte, contentType string) ([]byte, error) {
	_, name, _ := charset.DetermineEncoding(body[:min(len(body), 1024)], contentType)
	if name == "utf-8" && utf8.Valid(body) || name == "windows-1252" && isASCII(body) {
		return body, nil
	}
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err != nil {
		return body, nil // unknown charset: read as UTF-8, tolerating bad bytes
	}
	return io.ReadAll(r)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// The attributes links are read from; each tag's are read into a tagAttrs
// reused for the whole document (a map per tag cost more than the links).
const (
	attrHref = iota
	attrSrc
	attrSrcset
	attrData
	attrPoster
	attrBackground
	attrRel
	attrContent
	attrHTTPEquiv
	attrStyle
	attrType
	attrDataSrc
	numAttrs
)

var attrNames = [numAttrs]string{"href", "src", "srcset", "data", "poster", "background", "rel", "content", "http-equiv", "style", "type", "data-src"}

// tagAttrs holds the current tag's attributes of interest: lowercase names,
// the first of a name wins.
type tagAttrs struct {
	val [numAttrs]string
	has [numAttrs]bool
}

func (a *tagAttrs) read(z *htmltoken.Tokenizer) {
	a.has = [numAttrs]bool{}
	for {
		k, v, more := z.TagAttr()
		for i, name := range attrNames {
			if string(k) == name {
				if !a.has[i] {
					a.val[i], a.has[i] = string(v), true
				}
				break
			}
		}
		if !more {
			return
		}
	}
}

func (a *tagAttrs) get(i int) (string, bool) { return a.val[i], a.has[i] }

// value is the attribute's value, "" when absent.
func (a *tagAttrs) value(i int) string {
	if !a.has[i] {
		return ""
	}
	return a.val[i]
}

func elementLinks(c *collector, tag atom.Atom, name string, a *tagAttrs) {
	at := func(attr int, kind Kind) {
		if v, ok := a.get(attr); ok {
			c.add(v, kind, name+"/@"+attrNames[attr])
		}
	}
	switch tag {
	case atom.A, atom.Area:
		at(attrHref, Link)
	case atom.Link:
		rel := " " + strings.ToLower(a.value(attrRel)) + " "
		kind := Link
		for _, r := range []string{" stylesheet ", " icon ", " preload ", " prefetch ", " modulepreload ", " apple-touch-icon ", " manifest "} {
			if strings.Contains(rel, r) {
				kind = Embed
			}
		}
		at(attrHref, kind)
	case atom.Img:
		at(attrSrc, Embed)
		at(attrDataSrc, Embed)
		srcset(c, a, name)
	case atom.Source:
		at(attrSrc, Embed)
		srcset(c, a, name)
	case atom.Script, atom.Iframe, atom.Frame, atom.Embed, atom.Track:
		at(attrSrc, Embed)
	case atom.Video, atom.Audio:
		at(attrSrc, Embed)
		at(attrPoster, Embed)
	case atom.Object:
		at(attrData, Embed)
	case atom.Input:
		if strings.EqualFold(a.value(attrType), "image") {
			at(attrSrc, Embed)
		}
	case atom.Body, atom.Table, atom.Td, atom.Th:
		at(attrBackground, Embed)
	case atom.Meta:
		if strings.EqualFold(strings.TrimSpace(a.value(attrHTTPEquiv)), "refresh") {
			if u := refreshURL(a.value(attrContent)); u != "" {
				c.add(u, Redirect, name+"/@content")
			}
		}
	}
	if s, ok := a.get(attrStyle); ok {
		cssLinks(c, []byte(s), name+"/@style")
	}
}

func srcset(c *collector, a *tagAttrs, name string) {
	if v, ok := a.get(attrSrcset); ok {
		for _, u := range Srcset(v) {
			c.add(u, Embed, name+"/@srcset")
		}
	}
}

// refreshURL returns the URL of a meta refresh content value ("5; url=/next").
func refreshURL(content string) string {
	i := strings.IndexAny(content, ";,")
	if i < 0 {
		return ""
	}
	rest := strings.TrimSpace(content[i+1:])
	if len(rest) >= 3 && strings.EqualFold(rest[:3], "url") {
		rest = strings.TrimSpace(rest[3:])
		if !strings.HasPrefix(rest, "=") {
			return ""
		}
		rest = strings.TrimSpace(rest[1:])
	}
	return strings.Trim(rest, `'"`)
}

// Srcset returns the URLs of a srcset attribute value (HTML §4.8.4.3.10):
// comma-separated candidates, each a URL and an optional descriptor; a URL
// may itself contain commas, so a candidate's URL ends at whitespace.
func Srcset(v string) []string {
	var out []string
	s := v
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t\n\r\f,")
		if s == "" {
			break
		}
		end := strings.IndexAny(s, " \t\n\r\f")
		var u string
		if end < 0 {
			u, s = s, ""
		} else {
			u, s = s[:end], s[end:]
		}
		if strings.HasSuffix(u, ",") {
			u = strings.TrimRight(u, ",")
		} else if i := strings.IndexByte(s, ','); i >= 0 {
			s = s[i+1:] // skip the descriptor
		} else {
			s = ""
		}
		if u != "" {
			out = append(out, u)
		}
	}
	return out
}

// CSS extracts url(...) and @import references from a stylesheet; all are Embeds.
func CSS(body []byte, cssURL string, lim Limits) []Outlink {
	lim = lim.withDefaults()
	c := &collector{base: cssURL, seen: map[Outlink]bool{}, max: lim.MaxLinks}
	cssLinks(c, body, "css")
	return c.links
}

// cssLinks scans CSS text for url() and @import "…" references, skipping comments.
func cssLinks(c *collector, b []byte, path string) {
	urlPath, importPath := path+"/url", path+"/@import"
	if path == "css" {
		urlPath, importPath = "css/url", "css/@import"
	}
	for i := 0; i < len(b) && !c.full; {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return
			}
			i += end + 4
		case (b[i] == 'u' || b[i] == 'U') && hasFoldPrefix(b[i:], "url("):
			ref, n := cssURLToken(b[i+4:])
			c.add(cssUnescape(ref), Embed, urlPath)
			i += 4 + n
		case b[i] == '@' && hasFoldPrefix(b[i:], "@import"):
			j := i + len("@import")
			for j < len(b) && isCSSSpace(b[j]) {
				j++
			}
			if j < len(b) && (b[j] == '"' || b[j] == '\'') {
				ref, n := cssString(b[j:])
				c.add(cssUnescape(ref), Embed, importPath)
				i = j + n
			} else {
				i = j // url(...) form is found by the url( case
			}
		default:
			i++
		}
	}
}

func hasFoldPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && strings.EqualFold(string(b[:len(p)]), p)
}

func isCSSSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// cssURLToken reads the inside of url( ... ) and returns it and the bytes consumed, ")" included.
func cssURLToken(b []byte) (string, int) {
	i := 0
	for i < len(b) && isCSSSpace(b[i]) {
		i++
	}
	if i < len(b) && (b[i] == '"' || b[i] == '\'') {
		s, n := cssString(b[i:])
		i += n
		for i < len(b) && b[i] != ')' {
			i++
		}
		return s, min(i+1, len(b))
	}
	start := i
	for i < len(b) && b[i] != ')' {
		if b[i] == '\\' {
			i++
		}
		i++
	}
	end := min(i, len(b))
	return strings.TrimSpace(string(b[start:end])), min(i+1, len(b))
}

// cssString reads a quoted CSS string starting at b[0] and returns its content and length.
func cssString(b []byte) (string, int) {
	q := b[0]
	i := 1
	for i < len(b) && b[i] != q && b[i] != '\n' {
		if b[i] == '\\' {
			i++
		}
		i++
	}
	end := min(i, len(b))
	return string(b[1:end]), min(i+1, len(b))
}

// cssUnescape resolves CSS backslash escapes (hex code points and literal characters).
func cssUnescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			out.WriteByte(s[i])
			continue
		}
		i++
		j := i
		var r rune
		for j < len(s) && j-i < 6 && isHex(s[j]) {
			r = r*16 + rune(hexVal(s[j]))
			j++
		}
		if j == i {
			if s[i] != '\n' {
				out.WriteByte(s[i])
			}
			continue
		}
		if r == 0 || r > 0x10FFFF || (r >= 0xD800 && r <= 0xDFFF) {
			r = 0xFFFD
		}
		out.WriteRune(r)
		if j < len(s) && isCSSSpace(s[j]) {
			j++
		}
		i = j - 1
	}
	return out.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
