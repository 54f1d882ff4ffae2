package simhash

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/waggle-archive/waggle/internal/htmltoken"
)

// Bounds on the work done for one page. A page's text is what a reader
// sees: a megabyte of it is some 150,000 words, more than enough to tell
// near duplicates apart, and the input bound keeps the time spent on an
// enormous page (an inline script of many megabytes, say) in proportion.
const (
	maxInput = 16 << 20 // bytes of HTML read
	maxText  = 1 << 20  // bytes of text kept
)

// Text returns the visible text of an HTML page, with entities decoded and
// every run of white space collapsed to one space. It leaves out what a
// browser does not show: the contents of script, style, noscript, template,
// iframe, noembed and noframes elements, comments, and the attributes and
// metadata of the head; the title counts. Tags that break the flow of text
// (p, div, br, li, td …) separate words, inline ones (b, a, span …) do not,
// so a change of markup alone does not change the text. Text reads at most
// the first 16 MiB of page and returns at most the first 1 MiB of text;
// malformed HTML is read the way the tokenizer recovers from it.
func Text(page []byte) string {
	return string(appendText(nil, page))
}

// appendText appends the visible text of page to b.
func appendText(b []byte, page []byte) []byte {
	v := Visible{w: textWriter{keep: true, b: b}}
	v.read(page)
	return v.w.b
}

// read tokenizes page (its first maxInput bytes) into v.
func (v *Visible) read(page []byte) {
	if len(page) > maxInput {
		page = page[:maxInput]
	}
	z := htmltoken.New(page)
	for !v.Full() {
		switch tt := z.Next(); tt {
		case html.ErrorToken:
			return
		case html.TextToken:
			v.Text(z.Text())
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, _ := z.TagName()
			v.Tag(tt, atom.Lookup(name))
		}
	}
}

// Visible collects the visible text of an HTML page (as Text defines it)
// from its tokens, for a caller that tokenizes the page anyway: call Tag
// for every start, self-closing and end tag and Text for every text token,
// in order; other tokens do not matter. The zero Visible is ready.
type Visible struct {
	w        textWriter
	skipRaw  bool // the next text token is the content of a hidden raw-text element
	template int  // depth of template elements, whose contents are inert
}

// Tag notes a start, self-closing or end tag of element a.
func (v *Visible) Tag(tt html.TokenType, a atom.Atom) {
	v.skipRaw = false
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Iframe, atom.Noembed, atom.Noframes:
		// The tokenizer returns the whole content of these as the next
		// text token, even after a self-closing start tag.
		if tt != html.EndTagToken {
			v.skipRaw = true
			return
		}
	case atom.Template:
		switch {
		case tt == html.StartTagToken:
			v.template++
		case tt == html.EndTagToken && v.template > 0:
			v.template--
		}
	}
	if !inline(a) {
		v.w.pending = true
	}
}

// Text notes the (unescaped) text of a text token.
func (v *Visible) Text(s []byte) {
	if !v.skipRaw && v.template == 0 && !v.Full() {
		v.w.text(s)
	}
	v.skipRaw = false
}

// Full reports whether the text reached its bound (1 MiB): more tokens
// change nothing.
func (v *Visible) Full() bool { return v.w.full || v.w.n >= maxText }

// Sum returns the SimHash of the text collected: Of(the text).
func (v *Visible) Sum() uint64 {
	if v.w.keep {
		return Of(string(v.w.b[len(v.w.b)-v.w.n:]))
	}
	s := v.w.s // a copy: Sum may be called again
	s.endWord()
	return s.sum()
}

// inline reports whether element a does not break the flow of text.
// Unknown elements (custom elements) are inline, as in CSS: their atom is 0.
func inline(a atom.Atom) bool {
	switch a {
	case 0, atom.A, atom.Abbr, atom.B, atom.Bdi, atom.Bdo, atom.Big,
		atom.Blink, atom.Cite, atom.Code, atom.Data, atom.Del, atom.Dfn,
		atom.Em, atom.Font, atom.I, atom.Ins, atom.Kbd, atom.Label,
		atom.Mark, atom.Nobr, atom.Q, atom.Rb, atom.Rp, atom.Rt, atom.Rtc,
		atom.Ruby, atom.S, atom.Samp, atom.Small, atom.Span, atom.Strike,
		atom.Strong, atom.Sub, atom.Sup, atom.Time, atom.Tt, atom.U,
		atom.Var, atom.Wbr:
		return true
	}
	return false
}

// textWriter takes a page's visible text with white space collapsed, up to
// maxText bytes, cut after a whole character. It appends the text to b
// (keep), or reads it straight into a SimHash state as Of would read the
// text: the same characters, a space a word break.
type textWriter struct {
	keep    bool
	b       []byte // the text is appended here, when kept
	s       state  // or read here
	n       int    // bytes of text so far
	pending bool   // a space is due before the next character
	full    bool   // a character did not fit in maxText
}

// text takes s, whose entities are decoded.
func (w *textWriter) text(s []byte) {
	for i := 0; i < len(s) && !w.full; {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(s[i:])
		}
		i += size
		switch {
		case r == 0:
			// Browsers drop NUL from text; the tokenizer leaves it only
			// outside raw text.
		case r < utf8.RuneSelf && isASCIISpace(byte(r)), r >= utf8.RuneSelf && isWideSpace(r):
			w.pending = true
		default:
			n := size
			invalid := r == utf8.RuneError && size == 1 // written as U+FFFD
			if invalid {
				n = len(replacementChar)
			}
			// A space comes only with the character after it, so that
			// the text never ends with one.
			space := w.pending && w.n > 0
			if space {
				n++
			}
			if w.n+n > maxText {
				w.full = true
				return
			}
			w.n += n
			w.pending = false
			if !w.keep {
				if space {
					w.s.endWord()
				}
				w.s.rune(r)
				continue
			}
			if space {
				w.b = append(w.b, ' ')
			}
			if invalid {
				w.b = append(w.b, replacementChar...)
			} else {
				w.b = append(w.b, s[i-size:i]...)
			}
		}
	}
}

const replacementChar = "\uFFFD"

// isASCIISpace and isWideSpace are what separates words: ASCII white
// space, Unicode's and the zero-width space. Apart, the first is inlined in
// the loop over every character of every page.
func isASCIISpace(c byte) bool { return c == ' ' || '\t' <= c && c <= '\r' }

func isWideSpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\u200b' // zero-width space separates words too
}
