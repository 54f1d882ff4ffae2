package rewrite

import "bytes"

// JS rewrites the uses of the page's location in a script so that reading
// it gives the archived page's original URL and setting it navigates within
// the archive; ClientJS (run before the page's scripts) provides the
// WB_wombat_location objects the rewritten code uses. A small lexer skips
// strings, template literal text, comments and regular expression literals
// (told from division by the token before the slash), and tracks brackets.
// Only identifiers spelled exactly "location" are considered:
//
//  1. X.location and X?.location, where X is the identifier window,
//     document, self, top or parent and is not itself a property (no "."
//     before it), become X.WB_wombat_location.
//  2. Any other property named location (a.location, a.b.location) is
//     left alone.
//  3. location followed by ":" is an object key or a label and is left
//     alone, unless it follows "?" or "case" (a conditional branch or a case
//     expression), where it is rewritten by rule 6.
//  4. A shorthand property, location directly after "{" or "," inside
//     braces and directly before "," or "}" ({location}, {a, location} in
//     object literals and destructuring patterns alike), becomes
//     location: WB_wombat_location, which keeps the property name.
//  5. Method names (location directly followed by "(" inside braces, or
//     after get, set, static or async) and names inside import and export
//     braces are left alone.
//  6. Every other location — reads, assignments, typeof, declarations and
//     parameters — becomes WB_wombat_location. Renaming declarations along
//     with their uses keeps local variables called location working.
//
// Identifiers such as $location, location2 or #location are different
// names. The result shares js's memory when nothing changed.
func JS(js []byte) []byte {
	return apply(js, jsEdits(js, nil))
}

// Token kinds of the JS lexer.
const (
	tkNone = iota
	tkIdent
	tkNum
	tkStr // string or template literal
	tkRegex
	tkPunct
)

// Multi-character punctuators are given one byte each.
const (
	pOptDot = 'o' // ?.
	pSpread = 's' // ...
	pIncDec = 'P' // ++ or --
	pArrow  = 'A' // =>
)

type jsTok struct {
	kind  uint8
	punct byte // for tkPunct
	s, e  int  // source span
}

// jsEdits appends the edits of JS to edits.
func jsEdits(b []byte, edits []edit) []edit {
	if !bytes.Contains(b, []byte("location")) {
		return edits
	}
	var (
		stack      []byte // open brackets: ( [ { , 'i' import/export brace, 't' template ${
		p1, p2, p3 jsTok  // the last three significant tokens, p1 the latest
	)
	push := func(t jsTok) { p3, p2, p1 = p2, p1, t }
	punct := func(c byte, s, e int) { push(jsTok{kind: tkPunct, punct: c, s: s, e: e}) }
	n := len(b)
	i := 0
	if bytes.HasPrefix(b, []byte("#!")) {
		i = lineEnd(b, 0)
	}
	for i < n {
		c := b[i]
		if w := jsSpace(b, i); w > 0 {
			i += w
			continue
		}
		switch {
		case c == '/' && i+1 < n && b[i+1] == '/':
			i = lineEnd(b, i)
		case c == '/' && i+1 < n && b[i+1] == '*':
			if end := bytes.Index(b[i+2:], []byte("*/")); end >= 0 {
				i += end + 4
			} else {
				i = n
			}
		case c == '\'' || c == '"':
			s := i
			i = jsString(b, i)
			push(jsTok{kind: tkStr, s: s, e: i})
		case c == '`':
			s := i
			i = jsTemplate(b, i+1, &stack)
			push(jsTok{kind: tkStr, s: s, e: i})
		case c == '/':
			if regexAllowed(b, p1) {
				if end := jsRegex(b, i); end > 0 {
					push(jsTok{kind: tkRegex, s: i, e: end})
					i = end
					continue
				}
			}
			punct('/', i, i+1)
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < n && b[i+1] >= '0' && b[i+1] <= '9':
			s := i
			i = jsNumber(b, i)
			push(jsTok{kind: tkNum, s: s, e: i})
		case isJSIdent(c) || c == '#':
			s := i
			i = jsIdent(b, i+1)
			if i-s == len("location") && string(b[s:i]) == "location" {
				edits = locationEdit(b, s, i, p1, p2, p3, stack, edits)
			}
			push(jsTok{kind: tkIdent, s: s, e: i})
		case c == '.' && i+2 < n && b[i+1] == '.' && b[i+2] == '.':
			punct(pSpread, i, i+3)
			i += 3
		case c == '?' && i+1 < n && b[i+1] == '.' && !(i+2 < n && b[i+2] >= '0' && b[i+2] <= '9'):
			punct(pOptDot, i, i+2)
			i += 2
		case (c == '+' || c == '-') && i+1 < n && b[i+1] == c:
			punct(pIncDec, i, i+2)
			i += 2
		case c == '=' && i+1 < n && b[i+1] == '>':
			punct(pArrow, i, i+2)
			i += 2
		case c == '(' || c == '[':
			stack = append(stack, c)
			punct(c, i, i+1)
			i++
		case c == '{':
			kind := byte('{')
			if p1.kind == tkIdent && (string(b[p1.s:p1.e]) == "import" || string(b[p1.s:p1.e]) == "export") {
				kind = 'i'
			}
			stack = append(stack, kind)
			punct('{', i, i+1)
			i++
		case c == '}' && len(stack) > 0 && stack[len(stack)-1] == 't':
			// The end of a template substitution: back to template text.
			stack = stack[:len(stack)-1]
			s := i
			i = jsTemplate(b, i+1, &stack)
			push(jsTok{kind: tkStr, s: s, e: i})
		case c == ')' || c == ']' || c == '}':
			if len(stack) > 0 && stack[len(stack)-1] != 't' {
				stack = stack[:len(stack)-1]
			}
			punct(c, i, i+1)
			i++
		default:
			punct(c, i, i+1)
			i++
		}
	}
	return edits
}

// locationEdit decides what becomes of the identifier location at b[s:e].
func locationEdit(b []byte, s, e int, p1, p2, p3 jsTok, stack []byte, edits []edit) []edit {
	isDot := func(t jsTok) bool { return t.kind == tkPunct && (t.punct == '.' || t.punct == pOptDot) }
	ident := func(t jsTok, names ...string) bool {
		if t.kind != tkIdent {
			return false
		}
		for _, name := range names {
			if string(b[t.s:t.e]) == name {
				return true
			}
		}
		return false
	}
	if isDot(p1) {
		if ident(p2, "window", "document", "self", "top", "parent") && !isDot(p3) {
			return append(edits, edit{s, s, "WB_wombat_"})
		}
		return edits
	}
	var top byte
	if len(stack) > 0 {
		top = stack[len(stack)-1]
	}
	next := byte(0)
	if k := skipJSSpace(b, e); k < len(b) {
		next = b[k]
	}
	switch {
	case top == 'i':
		return edits
	case next == ':':
		if p1.kind == tkPunct && p1.punct == '?' || ident(p1, "case") {
			break
		}
		return edits
	case top == '{' && p1.kind == tkPunct && (p1.punct == '{' || p1.punct == ',') && (next == ',' || next == '}'):
		return append(edits, edit{s, s, "location: WB_wombat_"})
	case next == '(' && (top == '{' || ident(p1, "get", "set", "static", "async")):
		return edits
	}
	return append(edits, edit{s, s, "WB_wombat_"})
}

// regexAllowed reports whether a "/" after token t starts a regular
// expression rather than being a division.
func regexAllowed(b []byte, t jsTok) bool {
	switch t.kind {
	case tkNone:
		return true
	case tkNum, tkStr, tkRegex:
		return false
	case tkIdent:
		switch string(b[t.s:t.e]) {
		case "return", "typeof", "instanceof", "in", "of", "new", "delete", "void",
			"throw", "case", "do", "else", "yield", "await":
			return true
		}
		return false
	}
	// After ")" or "]" a slash divides (if (x) /re/ is misread, rarely
	// matters); after "}" a block usually ended, so a regex may follow.
	return t.punct != ')' && t.punct != ']' && t.punct != pIncDec
}

// jsSpace returns the length of the whitespace or line terminator at b[i]
// (ASCII, and U+00A0, U+FEFF, U+2028, U+2029 in UTF-8), or 0.
func jsSpace(b []byte, i int) int {
	switch c := b[i]; {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
		return 1
	case c == 0xC2 && i+1 < len(b) && b[i+1] == 0xA0:
		return 2
	case c == 0xEF && i+2 < len(b) && b[i+1] == 0xBB && b[i+2] == 0xBF,
		c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9):
		return 3
	}
	return 0
}

// skipJSSpace returns the index of the next significant byte from b[i].
func skipJSSpace(b []byte, i int) int {
	for i < len(b) {
		if w := jsSpace(b, i); w > 0 {
			i += w
			continue
		}
		if b[i] == '/' && i+1 < len(b) {
			if b[i+1] == '/' {
				i = lineEnd(b, i)
				continue
			}
			if b[i+1] == '*' {
				end := bytes.Index(b[i+2:], []byte("*/"))
				if end < 0 {
					return len(b)
				}
				i += end + 4
				continue
			}
		}
		return i
	}
	return i
}

// lineEnd returns the index of the line terminator ending the line at b[i].
func lineEnd(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case '\n', '\r':
			return i
		case 0xE2:
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				return i
			}
		}
		i++
	}
	return i
}

func isJSIdent(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '$' || c == '\\' || c >= 0x80
}

// jsIdent returns the end of the identifier continuing at b[i].
func jsIdent(b []byte, i int) int {
	for i < len(b) && isJSIdent(b[i]) && jsSpace(b, i) == 0 {
		i++
	}
	return i
}

// jsNumber returns the end of the numeric literal at b[i].
func jsNumber(b []byte, i int) int {
	s := i
	for i < len(b) {
		c := b[i]
		switch {
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '.':
			i++
		case (c == '+' || c == '-') && (b[i-1] == 'e' || b[i-1] == 'E') &&
			!(i-s >= 2 && b[s] == '0' && (b[s+1] == 'x' || b[s+1] == 'X')):
			i++
		default:
			return i
		}
	}
	return i
}

// jsString returns the index after the string literal starting at b[i]; an
// unterminated string ends at the line's end.
func jsString(b []byte, i int) int {
	q := b[i]
	for i++; i < len(b); i++ {
		switch b[i] {
		case q:
			return i + 1
		case '\\':
			i++
			if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
				i++
			}
		case '\n', '\r':
			return i
		}
	}
	return len(b)
}

// jsTemplate scans template literal text from b[i] and returns the index
// after its closing backquote, or after a "${", which it records on stack.
func jsTemplate(b []byte, i int, stack *[]byte) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case '`':
			return i + 1
		case '\\':
			i++
		case '$':
			if i+1 < len(b) && b[i+1] == '{' {
				*stack = append(*stack, 't')
				return i + 2
			}
		}
	}
	return len(b)
}

// jsRegex returns the index after the regular expression literal starting
// at b[i], or -1 if the line ends first (then it was no regex).
func jsRegex(b []byte, i int) int {
	class := false
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
			if i < len(b) && (b[i] == '\n' || b[i] == '\r') {
				return -1
			}
		case '\n', '\r':
			return -1
		case '[':
			class = true
		case ']':
			class = false
		case '/':
			if !class {
				return jsIdent(b, i+1)
			}
		}
	}
	return -1
}
