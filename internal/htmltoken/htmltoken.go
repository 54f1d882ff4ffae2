// Package htmltoken splits an HTML document held in memory into the tokens
// of the HTML standard's tokenizer (§13.2.5): text, start, end and
// self-closing tags with their attributes, comments and doctypes.
//
// It returns exactly the tokens golang.org/x/net/html's Tokenizer returns
// for the same bytes — FuzzMatchesXNetHTML holds it to that — and the
// package keeps that tokenizer's API shape and token types. It exists
// because the crawler tokenizes every page it archives, and that tokenizer
// reads through an io.Reader one byte per call and copies every tag name,
// attribute name and attribute value it returns. This one scans the slice
// in place and copies only what it must change (upper case, entities, CR
// and NUL). It never writes to the document.
package htmltoken

import (
	"bytes"
	"io"
	"strings"

	"golang.org/x/net/html"
)

type span struct{ start, end int }

type attr struct {
	key, val span
	quote    byte // around the value: '"', '\'' or 0
}

// Tokenizer returns the tokens of one document. The zero Tokenizer is not
// ready: use New.
type Tokenizer struct {
	buf []byte
	// The current token is buf[start:end]; end is also the read position.
	start, end int
	// limit is where a read stops being plain: the end of buf, or where the
	// current token reaches its size bound.
	limit int
	max   int // a token's size bound (bytes); 0: none

	tt   html.TokenType
	err  error
	data span // a text token's text, or a tag's name

	attrs         []attr // the current tag's attributes: named, first of a name
	pending       attr   // the attribute being read
	nAttrReturned int
	seenKeys      map[string]struct{} // lower-cased names of attrs, for tags with many

	rawTag     string // the element whose content the next token is ("script" …)
	textIsRaw  bool   // the text's character references are not decoded
	convertNUL bool   // the text's NUL bytes become U+FFFD

	text, name, key, val []byte // scratch for what Text, TagName and TagAttr change
}

// New returns a Tokenizer for doc, which it reads but never modifies.
func New(doc []byte) *Tokenizer {
	return &Tokenizer{buf: doc, limit: len(doc)}
}

// SetMaxBuf bounds a token's size: a longer one ends the document with
// html.ErrBufferExceeded, as x/net/html's SetMaxBuf does. 0 means no bound.
func (z *Tokenizer) SetMaxBuf(n int) { z.max = n }

// Err is the error of the last ErrorToken: io.EOF at the end of the
// document.
func (z *Tokenizer) Err() error {
	if z.tt != html.ErrorToken {
		return nil
	}
	return z.err
}

// readByte returns the next byte of the current token, or sets z.err (and
// returns 0) at the end of the document or of the token's size bound.
func (z *Tokenizer) readByte() byte {
	if z.end < z.limit {
		c := z.buf[z.end]
		z.end++
		return c
	}
	return z.readPastLimit()
}

// readPastLimit is readByte at the limit. A read at the size bound consumes
// its byte, as x/net/html's does.
func (z *Tokenizer) readPastLimit() byte {
	if z.end >= len(z.buf) {
		z.err = io.EOF
		return 0
	}
	z.end++
	z.err = html.ErrBufferExceeded
	return 0
}

// skipTo moves the read position to the first c in the rest of the token
// and consumes it, reporting false (with z.err set) when there is none.
func (z *Tokenizer) skipTo(c byte) bool {
	if z.end < z.limit {
		if i := bytes.IndexByte(z.buf[z.end:z.limit], c); i >= 0 {
			z.end += i + 1
			return true
		}
		z.end = z.limit
	}
	z.readPastLimit()
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' }

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func (z *Tokenizer) skipWhiteSpace() {
	if z.err != nil {
		return
	}
	for {
		c := z.readByte()
		if z.err != nil {
			return
		}
		if !isSpace(c) {
			z.end--
			return
		}
	}
}

// Next reads the next token and returns its type; html.ErrorToken ends
// the document (see Err).
func (z *Tokenizer) Next() html.TokenType {
	z.start = z.end
	z.data = span{z.end, z.end}
	z.limit = len(z.buf)
	if z.max > 0 && z.start+z.max-1 < z.limit {
		z.limit = z.start + z.max - 1
	}
	if z.err != nil {
		z.tt = html.ErrorToken
		return z.tt
	}
	if z.rawTag != "" {
		if z.rawTag == "plaintext" {
			z.end = z.limit // everything to the end is text
			z.readPastLimit()
			z.data.end = z.end
			z.textIsRaw = true
		} else {
			z.readRawOrRCDATA()
		}
		if z.data.end > z.data.start {
			z.tt = html.TextToken
			z.convertNUL = true
			return z.tt
		}
	}
	z.textIsRaw, z.convertNUL = false, false
loop:
	for {
		if !z.skipTo('<') {
			break
		}
		c := z.readByte()
		if z.err != nil {
			break
		}
		var tt html.TokenType
		switch {
		case isLetter(c):
			tt = html.StartTagToken
		case c == '/':
			tt = html.EndTagToken
		case c == '!' || c == '?':
			tt = html.CommentToken
		default:
			z.end-- // "<" followed by anything else is text; reread c
			continue
		}
		// Text before the tag is a token of its own, returned first.
		if x := z.end - len("<a"); z.start < x {
			z.end, z.data.end = x, x
			z.tt = html.TextToken
			return z.tt
		}
		switch tt {
		case html.StartTagToken:
			z.tt = z.readStartTag()
			return z.tt
		case html.EndTagToken:
			c = z.readByte()
			if z.err != nil {
				break loop // "</" at the end of the document is text
			}
			switch {
			case c == '>':
				z.tt = html.CommentToken // "</>" is nothing; x/net/html returns an empty comment
			case isLetter(c):
				z.readTag(false)
				z.tt = html.EndTagToken
				if z.err != nil {
					z.tt = html.ErrorToken
				}
			default:
				z.end--
				z.readUntilCloseAngle()
				z.tt = html.CommentToken
			}
			return z.tt
		default:
			if c == '!' {
				z.tt = z.readMarkupDeclaration()
				return z.tt
			}
			z.end--
			z.readUntilCloseAngle()
			z.tt = html.CommentToken
			return z.tt
		}
	}
	if z.start < z.end {
		z.data.end = z.end
		z.tt = html.TextToken
		return z.tt
	}
	z.tt = html.ErrorToken
	return z.tt
}

// readRawOrRCDATA reads the content of the element named by z.rawTag, up
// to its end tag.
func (z *Tokenizer) readRawOrRCDATA() {
	if z.rawTag == "script" {
		z.readScript()
		z.textIsRaw = true
		z.rawTag = ""
		return
	}
	for z.skipTo('<') {
		c := z.readByte()
		if z.err != nil {
			break
		}
		if c != '/' {
			z.end--
			continue
		}
		if z.readRawEndTag() || z.err != nil {
			break
		}
	}
	z.data.end = z.end
	// Only textarea and title content (RCDATA) has character references.
	z.textIsRaw = z.rawTag != "textarea" && z.rawTag != "title"
	z.rawTag = ""
}

// readRawEndTag reads the rest of "</" + z.rawTag and what ends the tag
// name; when they are there it moves back to the "<" and reports true.
func (z *Tokenizer) readRawEndTag() bool {
	if z.readTagNameOf(z.rawTag) {
		z.end -= len("</") + len(z.rawTag) + 1
		return true
	}
	return false
}

// readTagNameOf reads name (lower-case letters, matched in any case) and a
// character that ends a tag name, or unreads the character that does not
// match.
func (z *Tokenizer) readTagNameOf(name string) bool {
	for i := 0; i < len(name); i++ {
		c := z.readByte()
		if z.err != nil {
			return false
		}
		if c != name[i] && c != name[i]-('a'-'A') {
			z.end--
			return false
		}
	}
	c := z.readByte()
	if z.err != nil {
		return false
	}
	switch c {
	case ' ', '\n', '\r', '\t', '\f', '/', '>':
		return true
	}
	z.end--
	return false
}

// readScript reads a script element's content up to its end tag, with the
// standard's rules for "<!--" and "<script" inside it (§13.2.5.4–.21), as
// x/net/html follows them. The states that decide where the script ends
// are script data, escaped (after "<!--") and double escaped (after a
// "<script" inside the escape), each with the dashes just read.
func (z *Tokenizer) readScript() {
	defer func() { z.data.end = z.end }()
	const (
		plain = iota
		escaped
		double
	)
	state, dashes := plain, 0
	for {
		if state == plain {
			if !z.skipTo('<') {
				return
			}
			c := z.readByte()
			if z.err != nil {
				return
			}
			switch c {
			case '/':
				if z.readRawEndTag() || z.err != nil {
					return
				}
			case '!': // "<!--" starts an escape
				if !z.readDashes() {
					if z.err != nil {
						return
					}
					continue
				}
				state, dashes = escaped, 2
			default:
				z.end--
			}
			continue
		}
		c := z.readByte()
		if z.err != nil {
			return
		}
		switch c {
		case '-':
			dashes = min(dashes+1, 2)
			continue
		case '>':
			if dashes == 2 {
				state, dashes = plain, 0
				continue
			}
		case '<':
			dashes = 0
			c = z.readByte()
			if z.err != nil {
				return
			}
			switch {
			case c == '/' && state == escaped:
				if z.readRawEndTag() || z.err != nil {
					return
				}
			case c == '/': // double escaped: "</script" ends only the inner escape
				if z.readRawEndTag() {
					z.end += len("</script>")
					state = escaped
				} else if z.err != nil {
					return
				}
			case state == escaped && isLetter(c):
				z.end--
				if z.readTagNameOf("script") {
					state = double
				} else if z.err != nil {
					return
				}
			case state == escaped:
				z.end--
				state = plain // as x/net/html does
			default:
				z.end--
			}
			continue
		}
		dashes = 0
	}
}

// readDashes reads the "--" of "<!--", or unreads what is not a dash.
func (z *Tokenizer) readDashes() bool {
	for range 2 {
		if c := z.readByte(); z.err != nil || c != '-' {
			if z.err == nil {
				z.end--
			}
			return false
		}
	}
	return true
}

// readComment reads a comment after its "<!--", to "-->", "--!>" or the
// abrupt ends "<!-->" and "<!--->".
func (z *Tokenizer) readComment() {
	dashes, beginning := 0, true
	for {
		c := z.readByte()
		if z.err != nil {
			return
		}
		switch c {
		case '-':
			dashes++
			continue
		case '>':
			if dashes >= 2 || beginning {
				return
			}
		case '!':
			if dashes >= 2 {
				c = z.readByte()
				if z.err != nil || c == '>' {
					return
				}
				if c == '-' {
					dashes, beginning = 1, false
					continue
				}
			}
		}
		dashes, beginning = 0, false
	}
}

func (z *Tokenizer) readUntilCloseAngle() { z.skipTo('>') }

// readMarkupDeclaration reads what follows "<!": a comment, a doctype, or
// anything else up to ">" (a bogus comment; CDATA is one outside foreign
// content, as x/net/html treats it by default).
func (z *Tokenizer) readMarkupDeclaration() html.TokenType {
	from := z.end
	var c [2]byte
	for i := range c {
		if c[i] = z.readByte(); z.err != nil {
			return html.CommentToken
		}
	}
	if c[0] == '-' && c[1] == '-' {
		z.readComment()
		return html.CommentToken
	}
	z.end = from
	if z.readDoctype(from) {
		return html.DoctypeToken
	}
	z.readUntilCloseAngle()
	return html.CommentToken
}

func (z *Tokenizer) readDoctype(from int) bool {
	const s = "DOCTYPE"
	for i := 0; i < len(s); i++ {
		c := z.readByte()
		if z.err != nil {
			if z.err == io.EOF {
				// Read what there is again as a bogus comment.
				z.end, z.err = from, nil
			}
			return false
		}
		if c != s[i] && c != s[i]+('a'-'A') {
			z.end = from
			return false
		}
	}
	if z.skipWhiteSpace(); z.err != nil {
		return true
	}
	z.readUntilCloseAngle()
	return true
}

// rawTextElement is the name, lower-cased, of a start tag whose element's
// content is one text token, or "".
func rawTextElement(name []byte) string {
	if len(name) < 3 || len(name) > 9 {
		return ""
	}
	for _, s := range [...]string{"iframe", "noembed", "noframes", "noscript", "plaintext", "script", "style", "textarea", "title", "xmp"} {
		if asciiEqualFold(name, s) {
			return s
		}
	}
	return ""
}

func asciiEqualFold[S ~string | ~[]byte](a []byte, b S) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// readStartTag reads a start tag after its "<" and first letter.
func (z *Tokenizer) readStartTag() html.TokenType {
	z.readTag(true)
	if z.err != nil {
		return html.ErrorToken
	}
	z.rawTag = rawTextElement(z.buf[z.data.start:z.data.end])
	// "<br/>" closes itself, but "<p a=/>" is a p whose a is "/".
	n := len(z.attrs)
	if z.buf[z.end-2] == '/' && (n == 0 || z.end-2 != z.attrs[n-1].val.end-1) {
		return html.SelfClosingTagToken
	}
	return html.StartTagToken
}

// readTag reads a tag's name and attributes, keeping the attributes when
// save is set.
func (z *Tokenizer) readTag(save bool) {
	z.attrs = z.attrs[:0]
	z.nAttrReturned = 0
	clear(z.seenKeys)
	z.readTagName()
	if z.skipWhiteSpace(); z.err != nil {
		return
	}
	for {
		c := z.readByte()
		if z.err != nil || c == '>' {
			break
		}
		z.end--
		z.readTagAttrKey()
		z.readTagAttrVal()
		if save && z.pending.key.start != z.pending.key.end && z.firstOfName(z.pending.key) {
			z.attrs = append(z.attrs, z.pending)
		}
		if z.skipWhiteSpace(); z.err != nil {
			break
		}
	}
}

// firstOfName reports whether no kept attribute has key's name (compared
// without case, as x/net/html does on the bytes as written).
func (z *Tokenizer) firstOfName(key span) bool {
	k := z.buf[key.start:key.end]
	const linear = 8 // tags with more attributes than this use a map
	if len(z.attrs) < linear {
		for _, a := range z.attrs {
			if asciiEqualFold(k, z.buf[a.key.start:a.key.end]) {
				return false
			}
		}
		return true
	}
	if z.seenKeys == nil {
		z.seenKeys = map[string]struct{}{}
	}
	if len(z.seenKeys) == 0 {
		for _, a := range z.attrs {
			z.seenKeys[lowerASCII(z.buf[a.key.start:a.key.end])] = struct{}{}
		}
	}
	lk := lowerASCII(k)
	if _, ok := z.seenKeys[lk]; ok {
		return false
	}
	z.seenKeys[lk] = struct{}{}
	return true
}

func lowerASCII(b []byte) string {
	s := []byte(string(b))
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			s[i] = c + 'a' - 'A'
		}
	}
	return string(s)
}

// readTagName reads a tag name; its first letter is already read.
func (z *Tokenizer) readTagName() {
	z.data.start = z.end - 1
	for {
		c := z.readByte()
		if z.err != nil {
			z.data.end = z.end
			return
		}
		switch c {
		case ' ', '\n', '\r', '\t', '\f':
			z.data.end = z.end - 1
			return
		case '/', '>':
			z.end--
			z.data.end = z.end
			return
		}
	}
}

// readTagAttrKey reads an attribute name (§13.2.5.33): "=" ends it except
// as its first character.
func (z *Tokenizer) readTagAttrKey() {
	z.pending.key.start = z.end
	for {
		c := z.readByte()
		if z.err != nil {
			z.pending.key.end = z.end
			return
		}
		switch c {
		case '=':
			if z.pending.key.start+1 == z.end {
				continue
			}
			fallthrough
		case ' ', '\n', '\r', '\t', '\f', '/', '>':
			z.end--
			z.pending.key.end = z.end
			return
		}
	}
}

// readTagAttrVal reads an attribute's "= value", if there is one.
func (z *Tokenizer) readTagAttrVal() {
	z.pending.val, z.pending.quote = span{z.end, z.end}, 0
	if z.skipWhiteSpace(); z.err != nil {
		return
	}
	c := z.readByte()
	if z.err != nil || c == '/' {
		return // "/" goes on to the self-closing check
	}
	if c != '=' {
		z.end--
		return
	}
	if z.skipWhiteSpace(); z.err != nil {
		return
	}
	quote := z.readByte()
	if z.err != nil {
		return
	}
	switch quote {
	case '>':
		z.end--
	case '\'', '"':
		z.pending.val.start, z.pending.quote = z.end, quote
		if z.skipTo(quote) {
			z.pending.val.end = z.end - 1
		} else {
			z.pending.val.end = z.end
		}
	default:
		z.pending.val.start = z.end - 1
		for {
			c := z.readByte()
			if z.err != nil {
				z.pending.val.end = z.end
				return
			}
			switch c {
			case ' ', '\n', '\r', '\t', '\f':
				z.pending.val.end = z.end - 1
				return
			case '>':
				z.end--
				z.pending.val.end = z.end
				return
			}
		}
	}
}

// Text returns a text token's text: "\r\n" and "\r" read as "\n", and,
// outside script, style and the like, character references decoded; NUL
// bytes in element content become U+FFFD. The slice is valid until the
// next call, and may be the document's own bytes: it must not be changed.
func (z *Tokenizer) Text() []byte {
	if z.tt != html.TextToken {
		return nil
	}
	s := z.buf[z.data.start:z.data.end]
	cr := bytes.IndexByte(s, '\r') >= 0
	nul := z.convertNUL && bytes.IndexByte(s, 0) >= 0
	if cr || nul {
		z.name = convert(z.name[:0], s, nul) // the name is not needed for text
		s = z.name
	}
	if !z.textIsRaw && bytes.IndexByte(s, '&') >= 0 {
		z.text, _ = unescape(z.text[:0], s, false)
		s = z.text
	}
	return s
}

// convert appends s to dst with "\r\n" and "\r" as "\n" and, when nul is
// set, NUL as U+FFFD.
func convert(dst, s []byte, nul bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\r':
			if i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
			dst = append(dst, '\n')
		case c == 0 && nul:
			dst = append(dst, "\uFFFD"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// unescape appends s to dst with its character references decoded, by the
// standard's rules for text or for attribute values (§13.2.5.72). The
// names are decoded by x/net/html, one reference at a time. ok is false
// for an attribute value that needs x/net/html's own reading (see
// decodeAttr).
func unescape(dst, s []byte, attribute bool) (_ []byte, ok bool) {
	for {
		i := bytes.IndexByte(s, '&')
		if i < 0 {
			return append(dst, s...), true
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		n := refLen(s, attribute)
		if n == 0 {
			dst = append(dst, '&')
			s = s[1:]
			continue
		}
		ref := s[:n]
		dec := html.UnescapeString(string(ref))
		// Outside attributes a name that is no entity may begin with
		// one ("&copyx" is "©x"); in attributes it may not. Such a
		// reading keeps the name's last character. (Numeric references
		// read the same in both.)
		if attribute && ref[1] != '#' && dec != string(ref) && dec[len(dec)-1] == ref[n-1] {
			return dst, false
		}
		dst = append(dst, dec...)
		s = s[n:]
	}
}

// refLen is the length of the character reference s starts with ("&…"),
// as far as the standard reads it, or 0 when s has none.
func refLen(s []byte, attribute bool) int {
	if len(s) < 2 {
		return 0
	}
	i := 1
	if s[1] == '#' {
		if len(s) < 3 {
			return 0
		}
		i = 2
		hex := s[2] == 'x' || s[2] == 'X'
		if hex {
			i++
		}
		digits := i
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || hex && (s[i]|0x20 >= 'a' && s[i]|0x20 <= 'f')) {
			i++
		}
		if i == digits {
			return 0
		}
		if i < len(s) && s[i] == ';' {
			i++
		}
		return i
	}
	for i < len(s) && (isLetter(s[i]) || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i < len(s) && s[i] == ';' {
		i++
	}
	switch {
	case i == 1:
		return 0
	case attribute && s[i-1] != ';' && i < len(s) && s[i] == '=':
		return 0 // "&x=" in an attribute is text: a URL's query
	}
	return i
}

// TagName returns a tag's lower-cased name, and whether it has attributes
// left for TagAttr. The slice is valid until the next call, and may be the
// document's own bytes: it must not be changed.
func (z *Tokenizer) TagName() (name []byte, hasAttr bool) {
	switch z.tt {
	case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
	default:
		return nil, false
	}
	name = z.buf[z.data.start:z.data.end]
	if !plainName(name) {
		z.name = lowerNUL(z.name[:0], name)
		name = z.name
	}
	return name, z.nAttrReturned < len(z.attrs)
}

// plainName reports whether a name has no upper case and no NUL.
func plainName(b []byte) bool {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' || c == 0 {
			return false
		}
	}
	return true
}

// lowerNUL appends b to dst with ASCII upper case lowered and NUL as
// U+FFFD.
func lowerNUL(dst, b []byte) []byte {
	for _, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			dst = append(dst, c+'a'-'A')
		case c == 0:
			dst = append(dst, "\uFFFD"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// TagAttr returns the next attribute of a start tag: its lower-cased name,
// its decoded value, and whether more follow. The slices are valid until
// the next call, and may be the document's own bytes: they must not be
// changed.
func (z *Tokenizer) TagAttr() (key, val []byte, more bool) {
	if z.nAttrReturned >= len(z.attrs) || z.tt != html.StartTagToken && z.tt != html.SelfClosingTagToken {
		return nil, nil, false
	}
	a := z.attrs[z.nAttrReturned]
	z.nAttrReturned++
	key = z.buf[a.key.start:a.key.end]
	if !plainName(key) {
		z.key = lowerNUL(z.key[:0], key)
		key = z.key
	}
	val = z.buf[a.val.start:a.val.end]
	if bytes.IndexByte(val, '&') >= 0 || bytes.IndexByte(val, '\r') >= 0 || bytes.IndexByte(val, 0) >= 0 {
		z.val = z.decodeAttr(z.val[:0], val, a.quote)
		val = z.val
	}
	return key, val, z.nAttrReturned < len(z.attrs)
}

// decodeAttr appends an attribute value, as written between its quotes (q,
// or 0), to dst as x/net/html reads it: NUL as U+FFFD, newlines converted,
// character references decoded.
func (z *Tokenizer) decodeAttr(dst, raw []byte, q byte) []byte {
	z.text = convert(z.text[:0], raw, true)
	if out, ok := unescape(dst, z.text, true); ok {
		return out
	}
	return append(dst[:0], xnetAttr(raw, q)...)
}

// xnetAttr decodes an attribute value, as written between its quotes (q,
// or 0), with x/net/html itself: for the rare value whose references only
// its entity table can settle.
func xnetAttr(raw []byte, q byte) []byte {
	var doc strings.Builder
	doc.WriteString("<a v=")
	if q != 0 {
		doc.WriteByte(q)
	}
	doc.Write(raw)
	if q != 0 {
		doc.WriteByte(q)
	}
	doc.WriteString(">")
	x := html.NewTokenizer(strings.NewReader(doc.String()))
	x.Next()
	_, v, _ := x.TagAttr()
	return v
}
