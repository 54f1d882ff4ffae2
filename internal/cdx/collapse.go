package cdx

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/simhash"
)

// maxCollapseWidth bounds N in collapse=field:N. No field is anywhere near
// as long; a larger N is a mistake, not a query.
const maxCollapseWidth = 1 << 16

// maxCollapses bounds the collapse parameters of one query, each of which
// is evaluated on every row.
const maxCollapses = 16

// Collapse is one collapse= parameter: it drops a row whose field (or the
// first N characters of it) equals that of the last row kept, as the Wayback
// CDX server does. Only adjacent rows, in output order, are compared:
// collapse=urlkey keeps the first capture of each URL, and with sort=reverse
// the last.
//
// collapse=simhash is the near-duplicate collapse: it drops a row whose
// SimHash is simhash.Near that of the last row kept, when both rows have the
// same URL key and a SimHash (pages that are not HTML have none and are
// never dropped). As rows are compared with the last row kept, not the
// last row seen, a page drifting a bit at a time is kept again once it has
// drifted away from the kept version.
type Collapse struct {
	src   string
	field int
	width int // 0: the whole field
}

// ParseCollapse parses a collapse parameter: a field name of fl (or one of
// pywb's aliases), optionally followed by ":N" to compare only the first N
// characters of the field: "urlkey", "digest", "timestamp:8" (one capture a
// day), "simhash" (no ":N").
func ParseCollapse(s string) (Collapse, error) {
	name, n, hasN := strings.Cut(s, ":")
	id, ok := fieldByName(name)
	if !ok {
		return Collapse{}, fmt.Errorf("cdx: collapse=%q: unknown field %q (fields: %s)", s, name, strings.Join(fieldNames[:], ", "))
	}
	c := Collapse{src: s, field: id}
	if !hasN {
		return c, nil
	}
	if id == fSimHash {
		return Collapse{}, fmt.Errorf("cdx: collapse=%q: simhash takes no :N (near-duplicates are those within %d bits)", s, simhash.Threshold)
	}
	w, err := strconv.Atoi(n)
	if err != nil || w <= 0 || w > maxCollapseWidth {
		return Collapse{}, fmt.Errorf("cdx: collapse=%q: N in %s:N must be an integer from 1 to %d", s, name, maxCollapseWidth)
	}
	c.width = w
	return c, nil
}

// String returns the collapse parameter as it was given to ParseCollapse.
func (c Collapse) String() string { return c.src }

// collapser applies a query's Collapse parameters to its rows, in output
// order. As in the Wayback CDX server they are chained: each compares a row
// with the last row it let through, and sees only the rows the ones before
// it let through. It holds one value per Collapse, nothing more: collapsing
// streams.
type collapser struct {
	cs    []Collapse
	state []collapseState
}

type collapseState struct {
	seen bool   // a row has been let through
	last []byte // its value (its URL key for simhash)
	hash uint64 // its SimHash (simhash)
	cur  []byte
}

func newCollapser(cs []Collapse) *collapser {
	if len(cs) == 0 {
		return nil
	}
	return &collapser{cs: cs, state: make([]collapseState, len(cs))}
}

// keep reports whether c is to be output.
func (k *collapser) keep(c *index.Capture) bool {
	for i := range k.cs {
		if !k.state[i].pass(&k.cs[i], c) {
			return false
		}
	}
	return true
}

// pass reports whether c differs from the last row let through, and if so
// makes it the last.
func (s *collapseState) pass(col *Collapse, c *index.Capture) bool {
	if col.field == fSimHash {
		if s.seen && c.SimHash != 0 && s.hash != 0 && string(s.last) == c.URLKey && simhash.Near(s.hash, c.SimHash) {
			return false
		}
		s.seen, s.hash, s.last = true, c.SimHash, append(s.last[:0], c.URLKey...)
		return true
	}
	s.cur, _ = appendField(s.cur[:0], c, col.field) // absent: "", as for filters
	if col.width > 0 {
		s.cur = prefixChars(s.cur, col.width)
	}
	if s.seen && bytes.Equal(s.cur, s.last) {
		return false
	}
	s.seen, s.last, s.cur = true, s.cur, s.last
	return true
}

// prefixChars returns the first n UTF-8 characters of b (an invalid byte
// counts as one).
func prefixChars(b []byte, n int) []byte {
	i := 0
	for ; n > 0 && i < len(b); n-- {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return b[:i]
}
