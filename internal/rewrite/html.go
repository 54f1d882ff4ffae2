package rewrite

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"
)

// HTMLOptions adjust HTML.
type HTMLOptions struct {
	// Head is inserted right after the <head> start tag or, when the
	// document has none, before the first start tag other than <html> or
	// the first text that is not whitespace, whichever comes first (so a
	// leading doctype, comment or byte order mark stays first), or at the
	// end of a document with neither. Keep it short, or serve the page with
	// a charset: a <meta charset> must stay within the first 1024 bytes.
	Head []byte
	// ContentType is the archived response's Content-Type header, if any.
	// With the page's byte order mark and <meta charset> it decides the
	// encoding in which non-ASCII bytes of URLs are read before they are
	// resolved, as browsers (and internal/extract) do. The page itself is
	// never transcoded.
	ContentType string
}

// HTML rewrites page, the content-decoded payload of pageURL, to w.
//
// Every URL-bearing attribute is resolved against the document's base URL
// (pageURL, or the first <base href>, itself resolved against pageURL) and
// passed to m: href (a, area, link by its rel and as, base, SVG image and
// use, xlink:href), src (by element), srcset and imagesrcset candidates,
// action, formaction, background, poster, object data, codebase, cite,
// longdesc, icon, html manifest, flash param values, data-src and
// data-srcset, any other data-* attribute holding an absolute http(s) URL,
// and the URL of a meta refresh. Inline style attributes and <style>
// contents are rewritten by CSS, event handler attributes (on…) and
// JavaScript <script> contents by JS, import maps and speculation rules
// have their URLs mapped, <noscript> contents and iframe srcdoc documents
// are rewritten as HTML. Integrity and ping attributes are removed (SRI
// fails once URLs change; pings would go to the live web), and a meta
// Content-Security-Policy is disabled by renaming its http-equiv to
// _http-equiv, as it would block the archive's own scripts and URLs.
// Empty references, pure fragments and other schemes (javascript:, data:,
// mailto:, tel:, about:, blob: …) are left as they are.
//
// Only start tags with a changed attribute are written anew, and then only
// the changed attribute values (quoting kept, escaped as needed) and the
// removed attributes differ; every other byte is copied as it is. Malformed
// and non-UTF-8 input is rewritten as a browser would parse it, with memory
// proportional to the largest token beyond the input and output.
func HTML(w io.Writer, page []byte, pageURL string, m Mapper, opts HTMLOptions) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	ew := &errWriter{w: bw}
	r := &htmlRewriter{
		w:      ew,
		m:      m,
		base:   canonicalBase(pageURL),
		head:   opts.Head,
		decode: urlDecoder(page, opts.ContentType),
	}
	r.document(page)
	if ew.err == nil {
		ew.err = bw.Flush()
	}
	if ew.err != nil {
		return fmt.Errorf("rewrite: %w", ew.err)
	}
	return nil
}

// errWriter remembers the first write error and then writes nothing.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// Raw-text contexts: what the text token after a start tag is.
const (
	ctxNone = iota
	ctxRaw  // title, textarea, xmp, iframe …: copied
	ctxScript
	ctxImportMap
	ctxSpecRules
	ctxStyle
	ctxNoscript
)

// maxSrcdocDepth bounds iframe srcdoc documents nested in each other; deeper
// ones are removed rather than copied with live URLs.
const maxSrcdocDepth = 3

type htmlRewriter struct {
	w        *errWriter
	m        Mapper
	base     string // the document base URL, canonical, or ""
	baseSet  bool   // a <base href> was seen
	head     []byte
	headDone bool
	decode   func([]byte) string // reads URL bytes in the page's encoding; nil for UTF-8
	srcdoc   int                 // depth of srcdoc nesting
	picture  int                 // open <picture> elements
	attrs    []tagAttr           // scratch
	name     []byte              // scratch: a lowercased name
}

func (r *htmlRewriter) write(b []byte) {
	if len(b) > 0 {
		r.w.Write(b) // errWriter keeps the error
	}
}

func (r *htmlRewriter) insertHead() {
	r.headDone = true
	r.write(r.head)
}

// document rewrites a whole document.
func (r *htmlRewriter) document(page []byte) {
	r.headDone = len(r.head) == 0
	tail := r.tokens(page, false)
	if !r.headDone {
		// Before the tail, an unfinished tag the browser drops, which
		// would otherwise swallow the head's first tag.
		r.insertHead()
	}
	r.write(tail)
}

// tokens rewrites page token by token. nested is for the contents of
// <noscript>, which are parsed as HTML only when scripting is off: they
// are rewritten, but get no head insertion, no base and no further nesting.
// It returns the tail of page the tokenizer read but returned no token for:
// a tag cut short by the end of the input.
func (r *htmlRewriter) tokens(page []byte, nested bool) []byte {
	z := html.NewTokenizer(bytes.NewReader(page))
	off, ctx := 0, ctxNone
	for r.w.err == nil {
		tt := z.Next()
		if tt == html.ErrorToken {
			// io.EOF: the reader cannot fail otherwise, and no buffer
			// limit is set.
			break
		}
		raw := z.Raw()
		start := off
		off += len(raw)
		next := ctxNone
		switch tt {
		case html.TextToken:
			r.text(raw, ctx, nested, start == 0)
		case html.StartTagToken, html.SelfClosingTagToken:
			next = r.startTag(raw, nested)
		case html.EndTagToken:
			if tagAtom(r.lowerName(raw[2:])) == atom.Picture && r.picture > 0 {
				r.picture--
			}
			r.write(raw)
		default:
			r.write(raw)
		}
		ctx = next
	}
	return page[min(off, len(page)):]
}

func (r *htmlRewriter) text(raw []byte, ctx int, nested, atStart bool) {
	switch ctx {
	case ctxScript:
		r.write(JS(raw))
	case ctxStyle:
		c := cssRewriter{base: r.base, m: r.m}
		if r.decode != nil {
			// Raw text: character references are not resolved here.
			c.text = func(s, e int) string { return r.decoded(raw[s:e]) }
		}
		r.write(apply(raw, c.edits(raw, nil)))
	case ctxImportMap:
		r.write(r.importMap(raw))
	case ctxSpecRules:
		r.write(r.speculationRules(raw))
	case ctxNoscript:
		if nested {
			r.write(raw)
		} else {
			r.write(r.tokens(raw, true))
		}
	case ctxRaw:
		r.write(raw)
	default:
		if !r.headDone && !nested && !blank(raw, atStart) {
			r.insertHead()
		}
		r.write(raw)
	}
}

// blank reports text that does not start a document body: whitespace, and
// a byte order mark at the start of the input.
func blank(b []byte, atStart bool) bool {
	if atStart {
		b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	}
	for _, c := range b {
		if !isHTMLSpace(c) {
			return false
		}
	}
	return true
}

// lowerName returns the lowercased element name at the start of b (after
// "<" or "</"), in r.name.
func (r *htmlRewriter) lowerName(b []byte) []byte {
	r.name = r.name[:0]
	for _, c := range b {
		if isHTMLSpace(c) || c == '/' || c == '>' {
			break
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		r.name = append(r.name, c)
	}
	return r.name
}

func tagAtom(name []byte) atom.Atom { return atom.Lookup(name) }

// startTag rewrites a start tag and returns the context of the text after it.
func (r *htmlRewriter) startTag(raw []byte, nested bool) int {
	tag := tagAtom(r.lowerName(raw[1:]))
	tname := string(r.name)
	r.attrs = parseTag(raw, r.attrs[:0])
	info := r.tagInfo(raw, r.attrs)
	if !r.headDone && !nested && tag != atom.Html && tag != atom.Head {
		r.insertHead()
	}
	var edits []edit
	for _, a := range r.attrs {
		edits = r.attr(raw, tag, tname, a, &info, nested, edits)
	}
	r.write(apply(raw, edits))
	if tag == atom.Head && !r.headDone && !nested {
		r.insertHead()
	}
	switch tag {
	case atom.Picture:
		r.picture++
	case atom.Script:
		return scriptContext(info)
	case atom.Style:
		t := strings.ToLower(trimHTMLSpace(info.typ))
		if i := strings.IndexByte(t, ';'); i >= 0 {
			t = trimHTMLSpace(t[:i])
		}
		if t == "" || t == "text/css" {
			return ctxStyle
		}
		return ctxRaw
	case atom.Noscript:
		return ctxNoscript
	case atom.Iframe, atom.Noembed, atom.Noframes, atom.Plaintext, atom.Textarea, atom.Title, atom.Xmp:
		return ctxRaw
	}
	return ctxNone
}

// tagInfo holds the (first, unescaped) values of the attributes that decide
// how the others are read.
type tagInfo struct {
	rel, as, typ, lang, httpEquiv, name string
	hasType, hasLang                    bool
}

func (r *htmlRewriter) tagInfo(raw []byte, attrs []tagAttr) tagInfo {
	var t tagInfo
	seen := 0
	for _, a := range attrs {
		var p *string
		var bit int
		switch string(r.lowerName(raw[a.nameStart:a.nameEnd])) {
		case "rel":
			p, bit = &t.rel, 1
		case "as":
			p, bit = &t.as, 2
		case "type":
			p, bit = &t.typ, 4
			t.hasType = true
		case "language":
			p, bit = &t.lang, 8
			t.hasLang = true
		case "http-equiv":
			p, bit = &t.httpEquiv, 16
		case "name":
			p, bit = &t.name, 32
		default:
			continue
		}
		if seen&bit == 0 {
			seen |= bit
			v, _ := unescapeAttr(raw[a.valStart:a.valEnd])
			*p = string(v)
		}
	}
	return t
}

// scriptContext tells JavaScript, import maps and speculation rules from
// data blocks by the script's type (HTML §4.12.1.1), leniently: a type with
// parameters still counts.
func scriptContext(info tagInfo) int {
	t := info.typ
	if !info.hasType || trimHTMLSpace(t) == "" {
		if !info.hasType && info.hasLang && info.lang != "" {
			t = "text/" + info.lang
		} else {
			return ctxScript
		}
	}
	t = strings.ToLower(trimHTMLSpace(t))
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = trimHTMLSpace(t[:i])
	}
	switch t {
	case "module", "application/ecmascript", "application/javascript", "application/x-ecmascript",
		"application/x-javascript", "text/ecmascript", "text/javascript", "text/javascript1.0",
		"text/javascript1.1", "text/javascript1.2", "text/javascript1.3", "text/javascript1.4",
		"text/javascript1.5", "text/jscript", "text/livescript", "text/x-ecmascript", "text/x-javascript":
		return ctxScript
	case "importmap":
		return ctxImportMap
	case "speculationrules":
		return ctxSpecRules
	}
	return ctxRaw
}

// attr appends the edits for one attribute of a start tag.
func (r *htmlRewriter) attr(raw []byte, tag atom.Atom, tname string, a tagAttr, info *tagInfo, nested bool, edits []edit) []edit {
	name := string(r.lowerName(raw[a.nameStart:a.nameEnd]))
	switch {
	case name == "integrity" || name == "ping":
		return append(edits, edit{a.start, a.end, ""})
	case !a.hasVal:
		return edits
	case name == "style":
		return r.value(raw, a, edits, func(val []byte, text func(s, e int) string) []edit {
			c := cssRewriter{base: r.base, m: r.m, text: text}
			return c.edits(val, nil)
		})
	case len(name) > 2 && name[:2] == "on":
		return r.value(raw, a, edits, func(val []byte, _ func(s, e int) string) []edit {
			return jsEdits(val, nil)
		})
	case name == "srcset" || name == "imagesrcset" || name == "data-srcset":
		return r.value(raw, a, edits, func(val []byte, text func(s, e int) string) []edit {
			return r.srcset(val, text)
		})
	case tag == atom.Meta && name == "http-equiv":
		if strings.EqualFold(trimHTMLSpace(info.httpEquiv), "content-security-policy") {
			return append(edits, edit{a.nameStart, a.nameEnd, "_http-equiv"})
		}
		return edits
	case tag == atom.Meta && name == "content":
		if !strings.EqualFold(trimHTMLSpace(info.httpEquiv), "refresh") {
			return edits
		}
		return r.value(raw, a, edits, func(val []byte, text func(s, e int) string) []edit {
			s, e, quote, ok := refreshURL(val)
			if !ok {
				return nil
			}
			u, ok := mapRef(r.base, text(s, e), modPage, r.m)
			if !ok {
				return nil
			}
			return []edit{{s, e, quoteSafe(u, quote)}}
		})
	case tag == atom.Iframe && name == "srcdoc":
		return r.srcdocAttr(raw, a, edits)
	case tag == atom.Base && name == "href":
		if !nested && !r.baseSet {
			r.baseSet = true
			if abs, _, ok := resolve(r.base, r.urlText(raw[a.valStart:a.valEnd])); ok {
				edits = r.urlAttr(raw, a, modPage, edits)
				r.base = abs
				return edits
			}
		}
		return r.urlAttr(raw, a, modPage, edits)
	}
	if mod, ok := r.urlMod(tag, tname, name, info); ok {
		return r.urlAttr(raw, a, mod, edits)
	}
	if strings.HasPrefix(name, "data-") {
		val, _ := unescapeAttr(raw[a.valStart:a.valEnd])
		v := strings.ToLower(trimHTMLSpace(string(val)))
		if strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "//") {
			return r.urlAttr(raw, a, modEmbed, edits)
		}
	}
	return edits
}

// urlMod returns the modifier of a URL attribute, or false if name is none
// on this element.
func (r *htmlRewriter) urlMod(tag atom.Atom, tname, name string, info *tagInfo) (string, bool) {
	switch name {
	case "href", "xlink:href":
		switch tag {
		case atom.A, atom.Area:
			return modPage, true
		case atom.Link:
			return linkMod(info.rel, info.as), true
		case atom.Image, atom.Img:
			return modImage, true
		case atom.Script:
			return modJS, true
		}
		if tname == "use" || tname == "feimage" {
			return modImage, true
		}
		return modOther, true
	case "src":
		return r.srcMod(tag), true
	case "data-src":
		switch tag {
		case atom.Img, atom.Source, atom.Iframe, atom.Frame, atom.Video, atom.Audio, atom.Embed, atom.Script, atom.Input:
			return r.srcMod(tag), true
		}
	case "action", "formaction", "cite", "longdesc":
		return modPage, true
	case "background", "poster", "icon":
		return modImage, true
	case "data":
		if tag == atom.Object {
			return modEmbed, true
		}
	case "codebase":
		if tag == atom.Object || tag == atom.Applet {
			return modEmbed, true
		}
	case "manifest":
		if tag == atom.Html {
			return modEmbed, true
		}
	case "value":
		if tag == atom.Param {
			switch strings.ToLower(trimHTMLSpace(info.name)) {
			case "movie", "src", "url", "filename":
				return modEmbed, true
			}
		}
	}
	return "", false
}

func (r *htmlRewriter) srcMod(tag atom.Atom) string {
	switch tag {
	case atom.Img, atom.Image, atom.Input:
		return modImage
	case atom.Script:
		return modJS
	case atom.Iframe, atom.Frame:
		return modFrame
	case atom.Source:
		if r.picture > 0 {
			return modImage
		}
	}
	return modEmbed
}

// linkMod chooses a link's modifier by its rel and as.
func linkMod(rel, as string) string {
	rels := strings.Fields(strings.ToLower(rel))
	has := func(names ...string) bool {
		for _, r := range rels {
			for _, n := range names {
				if r == n {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("stylesheet"):
		return modCSS
	case has("icon", "apple-touch-icon", "apple-touch-icon-precomposed", "mask-icon", "fluid-icon", "apple-touch-startup-image"):
		return modImage
	case has("modulepreload"):
		return modJS
	case has("preload", "prefetch"):
		switch strings.ToLower(trimHTMLSpace(as)) {
		case "script", "worker", "sharedworker", "serviceworker", "audioworklet", "paintworklet":
			return modJS
		case "style":
			return modCSS
		case "image":
			return modImage
		case "document":
			return modPage
		}
		return modEmbed
	case has("manifest"):
		return modEmbed
	}
	return modOther
}

// urlAttr rewrites an attribute whose whole value is one URL.
func (r *htmlRewriter) urlAttr(raw []byte, a tagAttr, mod string, edits []edit) []edit {
	return r.value(raw, a, edits, func(val []byte, text func(s, e int) string) []edit {
		s, e := 0, len(val)
		for s < e && isHTMLSpace(val[s]) {
			s++
		}
		for e > s && isHTMLSpace(val[e-1]) {
			e--
		}
		if s == e {
			return nil
		}
		u, ok := mapRef(r.base, text(s, e), mod, r.m)
		if !ok {
			return nil
		}
		return []edit{{s, e, u}}
	})
}

// srcset returns the edits of the URLs of a srcset value (HTML
// §4.8.4.3.10): candidates separated by commas, each a URL that ends at
// whitespace (and may contain commas, but not end with one) and optional
// descriptors, which may contain commas inside parentheses.
func (r *htmlRewriter) srcset(val []byte, text func(s, e int) string) []edit {
	var edits []edit
	n := len(val)
	for i := 0; i < n; {
		for i < n && (isHTMLSpace(val[i]) || val[i] == ',') {
			i++
		}
		if i >= n {
			break
		}
		s := i
		for i < n && !isHTMLSpace(val[i]) {
			i++
		}
		e := i
		if val[e-1] == ',' {
			for e > s && val[e-1] == ',' {
				e--
			}
		} else {
			paren := false
		desc:
			for ; i < n; i++ {
				switch val[i] {
				case '(':
					paren = true
				case ')':
					paren = false
				case ',':
					if !paren {
						i++
						break desc
					}
				}
			}
		}
		if e > s {
			if u, ok := mapRef(r.base, text(s, e), modImage, r.m); ok {
				edits = append(edits, edit{s, e, u})
			}
		}
	}
	return edits
}

// srcdocAttr rewrites an iframe srcdoc document.
func (r *htmlRewriter) srcdocAttr(raw []byte, a tagAttr, edits []edit) []edit {
	if r.srcdoc+1 >= maxSrcdocDepth {
		return append(edits, edit{a.start, a.end, ""})
	}
	val, _ := unescapeAttr(raw[a.valStart:a.valEnd])
	var buf bytes.Buffer
	inner := &htmlRewriter{
		w:      &errWriter{w: &buf},
		m:      r.m,
		base:   r.base, // an about:srcdoc document's base is its parent's
		head:   r.head,
		decode: r.decode,
		srcdoc: r.srcdoc + 1,
	}
	inner.document(val)
	if bytes.Equal(buf.Bytes(), val) {
		return edits
	}
	return append(edits, edit{a.valStart, a.valEnd, quoteAttr(escAttr(buf.String(), a.quote), a.quote)})
}

// value rewrites part of an attribute value. f gets the unescaped value
// and a function giving the source text of a span of it (read in the page's
// encoding); its edits (on the unescaped value, replacements unescaped) are
// mapped back onto the raw value, so that the rest of it stays as it was.
func (r *htmlRewriter) value(raw []byte, a tagAttr, edits []edit, f func(val []byte, text func(s, e int) string) []edit) []edit {
	rv := raw[a.valStart:a.valEnd]
	val, pos := unescapeAttr(rv)
	text := func(s, e int) string { return r.urlText(rv[at(pos, s):at(pos, e)]) }
	es := f(val, text)
	if len(es) == 0 {
		return edits
	}
	var nv []byte
	prev := 0
	for _, e := range es {
		s, t := at(pos, e.start), at(pos, e.end)
		nv = append(nv, rv[prev:s]...)
		nv = append(nv, escAttr(e.repl, a.quote)...)
		prev = t
	}
	nv = append(nv, rv[prev:]...)
	return append(edits, edit{a.valStart, a.valEnd, quoteAttr(string(nv), a.quote)})
}

// urlText reads the raw (escaped) bytes of a URL in an attribute value: in
// the page's encoding, then with character references resolved.
func (r *htmlRewriter) urlText(b []byte) string {
	s := r.decoded(b)
	if strings.IndexByte(s, '&') >= 0 {
		v, _ := unescapeAttr([]byte(s))
		s = string(v)
	}
	return s
}

// decoded reads b in the page's encoding.
func (r *htmlRewriter) decoded(b []byte) string {
	if r.decode != nil && hasHigh(b) {
		return r.decode(b)
	}
	return string(b)
}

func hasHigh(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// urlDecoder returns how to read URL bytes of page: nil for UTF-8 (and for
// UTF-16, which the byte tokenizer cannot read anyway).
func urlDecoder(page []byte, contentType string) func([]byte) string {
	enc, name, _ := charset.DetermineEncoding(page, contentType)
	if enc == nil || name == "utf-8" || strings.HasPrefix(name, "utf-16") {
		return nil
	}
	return func(b []byte) string {
		out, err := enc.NewDecoder().Bytes(b)
		if err != nil {
			return string(b)
		}
		return string(out)
	}
}

// escAttr escapes s for an attribute value quoted by quote (0: unquoted, in
// which case it may be quoted with '"' by quoteAttr).
func escAttr(s string, quote byte) string {
	if strings.IndexByte(s, '&') < 0 && strings.IndexByte(s, '"') < 0 && strings.IndexByte(s, '\'') < 0 {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '&':
			sb.WriteString("&amp;")
		case c == '"' && quote != '\'':
			sb.WriteString("&quot;")
		case c == '\'' && quote == '\'':
			sb.WriteString("&#39;")
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// quoteAttr quotes a new unquoted value if it could not stand unquoted.
func quoteAttr(v string, quote byte) string {
	if quote != 0 {
		return v
	}
	if v != "" && strings.IndexFunc(v, func(c rune) bool {
		return c < 0x80 && (isHTMLSpace(byte(c)) || strings.ContainsRune("\"'=<>`", c))
	}) < 0 {
		return v
	}
	return `"` + strings.ReplaceAll(v, `"`, "&quot;") + `"`
}

// quoteSafe percent-encodes quote in u, so that a refresh URL quoted with it
// is not cut short.
func quoteSafe(u string, quote byte) string {
	switch quote {
	case '\'':
		return strings.ReplaceAll(u, "'", "%27")
	case '"':
		return strings.ReplaceAll(u, `"`, "%22")
	}
	return u
}

// Refresh rewrites the URL in the content of a meta refresh or a Refresh
// header ("5; url=/next", "0;URL='x'"), resolved against baseURL, as a
// page ("mp_"). Content without a URL is returned as it is.
func Refresh(content, baseURL string, m Mapper) string {
	s, e, quote, ok := refreshURL([]byte(content))
	if !ok {
		return content
	}
	u, ok := mapRef(canonicalBase(baseURL), content[s:e], modPage, m)
	if !ok {
		return content
	}
	return content[:s] + quoteSafe(u, quote) + content[e:]
}

// refreshURL finds the URL in a refresh value as the HTML standard's shared
// declarative refresh steps do, and the quote it is in, if any.
func refreshURL(b []byte) (s, e int, quote byte, ok bool) {
	n := len(b)
	i := 0
	for i < n && isHTMLSpace(b[i]) {
		i++
	}
	t := i
	for i < n && (b[i] >= '0' && b[i] <= '9' || b[i] == '.') {
		i++
	}
	if i == t || i >= n {
		return 0, 0, 0, false
	}
	if c := b[i]; c != ';' && c != ',' && !isHTMLSpace(c) {
		return 0, 0, 0, false
	}
	for i < n && isHTMLSpace(b[i]) {
		i++
	}
	if i < n && (b[i] == ';' || b[i] == ',') {
		i++
	}
	for i < n && isHTMLSpace(b[i]) {
		i++
	}
	if n-i >= 3 && strings.EqualFold(string(b[i:i+3]), "url") {
		j := i + 3
		for j < n && isHTMLSpace(b[j]) {
			j++
		}
		if j < n && b[j] == '=' {
			j++
			for j < n && isHTMLSpace(b[j]) {
				j++
			}
			i = j
		}
	}
	if i < n && (b[i] == '\'' || b[i] == '"') {
		quote = b[i]
		i++
	}
	e = n
	if quote != 0 {
		if k := bytes.IndexByte(b[i:], quote); k >= 0 {
			e = i + k
		}
	}
	for e > i && isHTMLSpace(b[e-1]) {
		e--
	}
	return i, e, quote, e > i
}

// tagAttr locates one attribute in a raw start tag.
type tagAttr struct {
	start              int // end of what precedes it: [start, end) removes it
	nameStart, nameEnd int
	valStart, valEnd   int // the value without quotes
	end                int
	quote              byte // '"', '\'' or 0
	hasVal             bool
}

// parseTag finds the attributes of the raw start tag "<name …>" exactly as
// golang.org/x/net/html's tokenizer reads them (WHATWG §13.2.5.32-40), so
// that the rewriter sees what the browser sees.
func parseTag(raw []byte, attrs []tagAttr) []tagAttr {
	n := len(raw)
	if n > 0 && raw[n-1] == '>' {
		n--
	}
	i := 1
	for i < n && !isHTMLSpace(raw[i]) && raw[i] != '/' && raw[i] != '>' {
		i++
	}
	last := i
	for i < n && isHTMLSpace(raw[i]) {
		i++
	}
	for i < n && raw[i] != '>' {
		ks := i
		for i < n {
			c := raw[i]
			if c == '=' && i == ks {
				i++
				continue
			}
			if c == '=' || isHTMLSpace(c) || c == '/' || c == '>' {
				break
			}
			i++
		}
		a := tagAttr{start: last, nameStart: ks, nameEnd: i, valStart: i, valEnd: i, end: i}
		for i < n && isHTMLSpace(raw[i]) {
			i++
		}
		switch {
		case i < n && raw[i] == '/':
			i++
		case i < n && raw[i] == '=':
			i++
			for i < n && isHTMLSpace(raw[i]) {
				i++
			}
			a.hasVal = true
			a.valStart, a.valEnd, a.end = i, i, i
			if i < n {
				switch q := raw[i]; q {
				case '>':
				case '"', '\'':
					i++
					a.valStart = i
					for i < n && raw[i] != q {
						i++
					}
					a.quote, a.valEnd = q, i
					if i < n {
						i++
					}
					a.end = i
				default:
					for i < n && !isHTMLSpace(raw[i]) && raw[i] != '>' {
						i++
					}
					a.valEnd, a.end = i, i
				}
			}
		}
		if a.nameEnd > a.nameStart {
			attrs = append(attrs, a)
			last = a.end
		}
		if i == ks { // cannot happen; never loop without progress
			i++
		}
		for i < n && isHTMLSpace(raw[i]) {
			i++
		}
	}
	return attrs
}

// unescapeAttr resolves the character references of an attribute value as
// the tokenizer does (in attribute mode: "&copy=" stays as it is). pos maps
// it back: val[i] came from the reference or byte at raw[pos[i]], and
// pos[len(val)] == len(raw); pos is nil when val is raw itself.
func unescapeAttr(raw []byte) (val []byte, pos []int) {
	if bytes.IndexByte(raw, '&') < 0 {
		return raw, nil
	}
	val = make([]byte, 0, len(raw))
	pos = make([]int, 0, len(raw)+1)
	for i := 0; i < len(raw); {
		if raw[i] == '&' {
			if n, dec := charRef(raw[i:]); n > 0 {
				for range len(dec) {
					pos = append(pos, i)
				}
				val = append(val, dec...)
				i += n
				continue
			}
		}
		val = append(val, raw[i])
		pos = append(pos, i)
		i++
	}
	return val, append(pos, len(raw))
}

func at(pos []int, i int) int {
	if pos == nil {
		return i
	}
	return pos[i]
}

// charRef decodes the character reference at s[0] == '&' and returns its
// length, or 0 if it is none. The decoding itself is html.UnescapeString's;
// this finds where a reference ends and applies the attribute rules.
func charRef(s []byte) (int, string) {
	if len(s) < 2 {
		return 0, ""
	}
	if s[1] == '#' {
		j := 2
		digit := func(c byte) bool { return c >= '0' && c <= '9' }
		if j < len(s) && (s[j] == 'x' || s[j] == 'X') {
			digit = isHex
			j++
		}
		k := j
		for k < len(s) && digit(s[k]) {
			k++
		}
		if k == j {
			return 0, ""
		}
		if k < len(s) && s[k] == ';' {
			k++
		}
		return k, html.UnescapeString(string(s[:k]))
	}
	j := 1
	for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
		j++
	}
	if j == 1 {
		return 0, ""
	}
	if j < len(s) && s[j] == ';' {
		j++
	} else if j < len(s) && s[j] == '=' {
		return 0, ""
	}
	piece := string(s[:j])
	dec := html.UnescapeString(piece)
	// UnescapeString also decodes a prefix ("&notit;" → "¬it;"), which
	// attribute values do not: only a whole reference counts, and no
	// reference decodes to an ASCII letter or digit.
	if dec == piece || strings.IndexFunc(dec, func(c rune) bool {
		return c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}) >= 0 {
		return 0, ""
	}
	return j, dec
}
