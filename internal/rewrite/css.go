package rewrite

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CSS rewrites the references in a stylesheet (or in a style attribute value
// or <style> contents, already HTML-unescaped) whose URL is baseURL:
//
//   - url(…), quoted or not, and url() written with escapes ("u\72l(");
//   - strings directly inside image-set() and -webkit-image-set();
//   - @import "…" and @import url(…), mapped as "cs_".
//
// url() inside an @font-face block, or naming a .woff, .woff2, .ttf, .otf or
// .eot file, is mapped as "oe_"; any other url() as "im_". url() in the
// prelude of other at-rules (@namespace, @document) names no resource and is
// left alone, as are comments and strings elsewhere. A rewritten URL keeps
// its quoting; an unquoted one is quoted if the new URL needs it. Everything
// else is copied byte for byte; when nothing changes, css itself is returned.
func CSS(css []byte, baseURL string, m Mapper) []byte {
	c := cssRewriter{base: canonicalBase(baseURL), m: m}
	return apply(css, c.edits(css, nil))
}

// cssRewriter finds the references in one piece of CSS.
type cssRewriter struct {
	base string
	m    Mapper
	// text returns the source text of b[s:e] for a URL: HTML attributes
	// and non-UTF-8 pages need it decoded first. Nil means b[s:e] as it is.
	text func(s, e int) string
}

// edits appends to edits the replacements for the references in b.
func (c *cssRewriter) edits(b []byte, edits []edit) []edit {
	var (
		parens     []bool // open parentheses; true for image-set(
		depth      int    // open braces
		fontFace   = -1   // brace depth of the @font-face block we are in
		atRule     string // the at-rule whose prelude we are in, if inPrelude
		inPrelude  bool
		importDone bool // the @import prelude's URL has been seen
	)
	n := len(b)
	for i := 0; i < n; {
		ch := b[i]
		switch {
		case ch == '/' && i+1 < n && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return edits
			}
			i += end + 4
		case ch == '"' || ch == '\'':
			s, e, next, ok := cssString(b, i)
			if ok {
				switch {
				case inPrelude:
					if atRule == "import" && !importDone {
						importDone = true
						edits = c.ref(b, s, e, ch, modCSS, edits)
					}
				case len(parens) > 0 && parens[len(parens)-1]:
					edits = c.ref(b, s, e, ch, c.mod(fontFace >= 0, b, s, e), edits)
				}
			}
			i = next
		case ch == '@':
			j := cssWord(b, i+1)
			atRule = strings.ToLower(cssUnescape(b[i+1 : j]))
			inPrelude, importDone = true, false
			i = j
		case isCSSWord(ch) || ch == '\\':
			j := cssWord(b, i)
			if j == i { // a lone backslash
				i++
				continue
			}
			if j >= n || b[j] != '(' {
				i = j
				continue
			}
			name := b[i:j]
			if len(name) == 3 || bytes.IndexByte(name, '\\') >= 0 {
				if strings.EqualFold(cssUnescape(name), "url") {
					var next int
					edits, next = c.urlToken(b, j+1, inPrelude, &importDone, atRule, fontFace >= 0, edits)
					if next < 0 { // url("…"): a function with a string argument
						parens = append(parens, false)
						i = j + 1
						continue
					}
					i = next
					continue
				}
			}
			set := strings.EqualFold(string(name), "image-set") || strings.EqualFold(string(name), "-webkit-image-set")
			parens = append(parens, set)
			i = j + 1
		case ch == '(':
			parens = append(parens, false)
			i++
		case ch == ')':
			if len(parens) > 0 {
				parens = parens[:len(parens)-1]
			}
			i++
		case ch == '{':
			depth++
			if inPrelude && atRule == "font-face" && fontFace < 0 {
				fontFace = depth
			}
			inPrelude, parens = false, parens[:0]
			i++
		case ch == '}':
			if depth > 0 {
				depth--
			}
			if fontFace >= 0 && depth < fontFace {
				fontFace = -1
			}
			inPrelude, parens = false, parens[:0]
			i++
		case ch == ';':
			inPrelude = false
			i++
		default:
			i++
		}
	}
	return edits
}

// urlToken handles what follows "url(" at b[i]. For url("…") it rewrites
// the string and returns next < 0: the caller goes on scanning after the
// "(" as for any function. Otherwise it returns the index after the token.
func (c *cssRewriter) urlToken(b []byte, i int, inPrelude bool, importDone *bool, atRule string, fontFace bool, edits []edit) ([]edit, int) {
	n := len(b)
	k := i
	for k < n && isCSSSpace(b[k]) {
		k++
	}
	mod, ok := modImage, true
	if inPrelude {
		ok = atRule == "import" && !*importDone
		*importDone = true
		mod = modCSS
	}
	if k < n && (b[k] == '"' || b[k] == '\'') {
		s, e, _, good := cssString(b, k)
		if good && ok {
			if !inPrelude {
				mod = c.mod(fontFace, b, s, e)
			}
			edits = c.ref(b, s, e, b[k], mod, edits)
		}
		return edits, -1
	}
	// An unquoted url token (CSS Syntax §4.3.6).
	start, end := k, -1
	for k < n && end < 0 {
		ch := b[k]
		switch {
		case ch == ')':
			end = k
			k++
		case isCSSSpace(ch):
			ws := k
			for k < n && isCSSSpace(b[k]) {
				k++
			}
			if k >= n || b[k] == ')' {
				end = ws
				k++
			} else {
				return edits, badURL(b, k)
			}
		case ch == '"' || ch == '\'' || ch == '(' || ch < 0x20 && ch != '\t' || ch == 0x7f:
			return edits, badURL(b, k)
		case ch == '\\':
			if k+1 >= n || isNewline(b[k+1]) {
				return edits, badURL(b, k)
			}
			k += cssEscapeLen(b, k)
		default:
			k++
		}
	}
	if end < 0 {
		end = n // EOF ends a url token without error
	}
	k = min(k, n)
	if ok && end > start {
		if !inPrelude {
			mod = c.mod(fontFace, b, start, end)
		}
		edits = c.ref(b, start, end, 0, mod, edits)
	}
	return edits, k
}

// badURL skips the remnants of a bad url token from b[k] and returns the
// index after its ")".
func badURL(b []byte, k int) int {
	for k < len(b) {
		switch b[k] {
		case ')':
			return k + 1
		case '\\':
			k += cssEscapeLen(b, k)
		default:
			k++
		}
	}
	return k
}

// mod chooses "oe_" for fonts and "im_" for everything else.
func (c *cssRewriter) mod(fontFace bool, b []byte, s, e int) string {
	if fontFace {
		return modEmbed
	}
	// Judged by the URL as it resolves, which the rewritten reference
	// names, not as written: resolving drops characters (controls, a
	// trailing escape) that would hide the extension.
	p, _, ok := resolve(c.base, c.source(b, s, e))
	if !ok {
		return modImage
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.ToLower(p)
	for _, ext := range [...]string{".woff", ".woff2", ".ttf", ".otf", ".eot"} {
		if strings.HasSuffix(p, ext) {
			return modEmbed
		}
	}
	return modImage
}

func (c *cssRewriter) source(b []byte, s, e int) string {
	if c.text != nil {
		return cssUnescape([]byte(c.text(s, e)))
	}
	return cssUnescape(b[s:e])
}

// ref appends the edit that replaces the URL in b[s:e], written in a string
// quoted by quote (0: an unquoted url token).
func (c *cssRewriter) ref(b []byte, s, e int, quote byte, mod string, edits []edit) []edit {
	u, ok := mapRef(c.base, c.source(b, s, e), mod, c.m)
	if !ok {
		return edits
	}
	return append(edits, edit{s, e, cssQuote(u, quote)})
}

// cssQuote writes u for a string quoted by quote, or for an unquoted url
// token (quote 0), which becomes a double-quoted string if u needs it.
func cssQuote(u string, quote byte) string {
	if quote == 0 {
		plain := true
		for i := 0; i < len(u) && plain; i++ {
			ch := u[i]
			plain = ch > ' ' && ch != 0x7f && ch != '"' && ch != '\'' && ch != '(' && ch != ')' && ch != '\\'
		}
		if plain {
			return u
		}
		return `"` + cssQuote(u, '"') + `"`
	}
	var sb strings.Builder
	for i := 0; i < len(u); i++ {
		switch ch := u[i]; {
		case ch == quote || ch == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(ch)
		case ch < ' ' || ch == 0x7f:
			// A hex escape; the space ends it.
			sb.WriteString(`\` + strconv.FormatUint(uint64(ch), 16) + " ")
		default:
			sb.WriteByte(ch)
		}
	}
	return sb.String()
}

// cssString scans the string starting with the quote at b[i] and returns its
// content b[s:e], the index after it, and false for a bad string (one cut by
// a newline), which is not a URL.
func cssString(b []byte, i int) (s, e, next int, ok bool) {
	q := b[i]
	k := i + 1
	for k < len(b) {
		switch ch := b[k]; {
		case ch == q:
			return i + 1, k, k + 1, true
		case ch == '\\':
			switch {
			case k+1 >= len(b):
				k++
			case b[k+1] == '\r' && k+2 < len(b) && b[k+2] == '\n':
				k += 3
			case isNewline(b[k+1]):
				k += 2
			default:
				k += cssEscapeLen(b, k)
			}
		case isNewline(ch):
			return i + 1, k, k, false
		default:
			k++
		}
	}
	return i + 1, len(b), len(b), true
}

// cssWord returns the end of the run of name characters and escapes at b[i].
func cssWord(b []byte, i int) int {
	for i < len(b) {
		switch ch := b[i]; {
		case isCSSWord(ch):
			i++
		case ch == '\\' && i+1 < len(b) && !isNewline(b[i+1]):
			i += cssEscapeLen(b, i)
		default:
			return i
		}
	}
	return i
}

// isCSSWord reports name code points (CSS Syntax §4.2), non-ASCII included.
func isCSSWord(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
		ch == '-' || ch == '_' || ch >= 0x80
}

// cssEscapeLen returns the length of the escape at b[i] == '\\'.
func cssEscapeLen(b []byte, i int) int {
	j := i + 1
	if j >= len(b) {
		return 1
	}
	if !isHex(b[j]) {
		return 2
	}
	for j < len(b) && j-i <= 6 && isHex(b[j]) {
		j++
	}
	if j < len(b) && isCSSSpace(b[j]) {
		if b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n' {
			j++
		}
		j++
	}
	return j - i
}

// cssUnescape resolves CSS escapes: hex code points, escaped characters,
// and escaped newlines (line continuations in strings), which vanish.
func cssUnescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		if b[i] != '\\' {
			sb.WriteByte(b[i])
			i++
			continue
		}
		n := cssEscapeLen(b, i)
		switch {
		case n == 1: // backslash at the end
			sb.WriteRune(utf8.RuneError)
		case isHex(b[i+1]):
			var r rune
			for j := i + 1; j < i+n && isHex(b[j]); j++ {
				r = r*16 + rune(hexVal(b[j]))
			}
			if r == 0 || r > utf8.MaxRune || r >= 0xD800 && r <= 0xDFFF {
				r = utf8.RuneError
			}
			sb.WriteRune(r)
		case b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n':
			n = 3
		case isNewline(b[i+1]):
		default:
			sb.WriteByte(b[i+1])
		}
		i += n
	}
	return sb.String()
}

func isCSSSpace(ch byte) bool {
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f'
}

func isNewline(ch byte) bool { return ch == '\n' || ch == '\r' || ch == '\f' }

func isHex(ch byte) bool {
	return ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F'
}

func hexVal(ch byte) byte {
	switch {
	case ch >= 'a':
		return ch - 'a' + 10
	case ch >= 'A':
		return ch - 'A' + 10
	}
	return ch - '0'
}
