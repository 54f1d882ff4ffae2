package cdx

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/waggle-archive/waggle/internal/index"
)

// The fields of a capture, in the order of a CDX line.
const (
	fURLKey = iota
	fTimestamp
	fURL
	fMIME
	fStatus
	fDigest
	fLength
	fOffset
	fFilename
	fSimHash // not a CDX field: the capture's SimHash (package simhash)
	numFields
)

var fieldNames = [numFields]string{"urlkey", "timestamp", "url", "mime", "status", "digest", "length", "offset", "filename", "simhash"}

// fieldAliases are pywb's other names for fields (CDXObject.CDX_ALT_FIELDS),
// less "s", which pywb maps to length but the CDX legend to the status.
var fieldAliases = map[string]int{
	"original": fURL, "u": fURL,
	"statuscode": fStatus,
	"mimetype":   fMIME, "m": fMIME,
	"l": fLength, "o": fOffset, "d": fDigest, "t": fTimestamp, "k": fURLKey, "f": fFilename,
}

func fieldByName(name string) (int, bool) {
	for i, n := range fieldNames {
		if n == name {
			return i, true
		}
	}
	id, ok := fieldAliases[name]
	return id, ok
}

// appendField appends the value of field id of c to dst and reports whether
// the field is present. Presence and values are those of index.AppendCDXJ:
// mime, status and digest are absent when unknown, a revisit's mime is
// "warc/revisit". The simhash is 16 lower-case hexadecimal digits, absent
// when the capture has none (it is not an HTML page).
func appendField(dst []byte, c *index.Capture, id int) ([]byte, bool) {
	switch id {
	case fURLKey:
		return append(dst, c.URLKey...), true
	case fTimestamp:
		return c.Time.UTC().AppendFormat(dst, "20060102150405"), true
	case fURL:
		return append(dst, c.URL...), true
	case fMIME:
		if c.Type == "revisit" {
			return append(dst, "warc/revisit"...), true
		}
		return append(dst, c.MIME...), c.MIME != ""
	case fStatus:
		if c.Status == 0 {
			return dst, false
		}
		return strconv.AppendInt(dst, int64(c.Status), 10), true
	case fDigest:
		return append(dst, c.Digest...), c.Digest != ""
	case fLength:
		return strconv.AppendInt(dst, c.Length, 10), true
	case fOffset:
		return strconv.AppendInt(dst, c.Offset, 10), true
	case fFilename:
		return append(dst, c.Segment...), true
	case fSimHash:
		if c.SimHash == 0 {
			return dst, false
		}
		return appendHex16(dst, c.SimHash), true
	}
	return dst, false
}

// appendHex16 appends v as 16 lower-case hexadecimal digits.
func appendHex16(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, "0123456789abcdef"[v>>uint(shift)&15])
	}
	return dst
}

// Filter is one filter= parameter. The zero Filter matches every capture
// (its urlkey contains the empty string).
type Filter struct {
	src    string
	field  int // -1: the whole CDXJ line
	op     byte
	negate bool
	value  []byte
	re     *regexp.Regexp
}

// Filter operators.
const (
	opContains = 0
	opExact    = '='
	opRegexp   = '~'
)

// ParseFilter parses a filter in pywb's syntax, [!][=|~]field:expression:
//
//	mime:html        field contains "html"
//	=mime:text/html  field is "text/html"
//	~mime:.*/html$   the regular expression matches at the start of the field
//	!mime:html, !=status:200, !~url:.*\.php$   the same, negated
//
// Without "field:", the expression applies to the capture's whole CDXJ line.
// Field names are those of fl, or pywb's aliases (original, statuscode,
// mimetype, ...); simhash is the capture's SimHash in hexadecimal, empty
// when it has none. Regular expressions use Go's RE2 syntax, which covers
// Python's except backreferences and lookaround.
func ParseFilter(s string) (Filter, error) {
	f := Filter{src: s, field: -1}
	rest := s
	if strings.HasPrefix(rest, "!") {
		f.negate, rest = true, rest[1:]
	}
	if rest != "" && (rest[0] == opExact || rest[0] == opRegexp) {
		f.op, rest = rest[0], rest[1:]
	}
	expr := rest
	if name, e, ok := strings.Cut(rest, ":"); ok {
		id, known := fieldByName(name)
		if !known {
			return Filter{}, fmt.Errorf("cdx: filter=%q: unknown field %q (fields: %s)", s, name, strings.Join(fieldNames[:], ", "))
		}
		f.field, expr = id, e
	}
	if f.op == opRegexp {
		// Compiled alone first, so that the anchoring cannot change what an
		// unbalanced expression means.
		if _, err := regexp.Compile(expr); err != nil {
			return Filter{}, fmt.Errorf("cdx: filter=%q: bad regular expression: %v", s, err)
		}
		// pywb uses re.match: the expression is anchored at the start only.
		f.re = regexp.MustCompile(`^(?:` + expr + `)`)
	} else {
		f.value = []byte(expr)
	}
	return f, nil
}

// String returns the filter as it was given to ParseFilter.
func (f Filter) String() string { return f.src }

// Match reports whether c passes the filter.
func (f Filter) Match(c index.Capture) bool {
	var m matcher
	return m.match(&f, &c)
}

// matcher evaluates filters on one capture at a time, reusing its buffers.
type matcher struct {
	val  []byte
	line []byte // the CDXJ line of the capture in lineOf, without newline
	of   *index.Capture
}

func (m *matcher) all(filters []Filter, c *index.Capture) bool {
	m.of = nil
	for i := range filters {
		if !m.match(&filters[i], c) {
			return false
		}
	}
	return true
}

func (m *matcher) match(f *Filter, c *index.Capture) bool {
	var v []byte
	if f.field < 0 {
		if m.of != c {
			m.line = index.AppendCDXJ(m.line[:0], *c)
			m.line = m.line[:len(m.line)-1]
			m.of = c
		}
		v = m.line
	} else {
		m.val, _ = appendField(m.val[:0], c, f.field) // absent: "", as pywb
		v = m.val
	}
	var ok bool
	switch f.op {
	case opExact:
		ok = bytes.Equal(v, f.value)
	case opRegexp:
		ok = f.re.Match(v)
	default:
		ok = bytes.Contains(v, f.value)
	}
	return ok != f.negate
}
