// Package warc reads and writes WARC files as specified by WARC 1.1
// (ISO 28500:2017).
//
// A record is written as
//
//	WARC/1.1\r\n
//	Name: value\r\n   (one line per named field)
//	\r\n
//	<content block, exactly Content-Length bytes>
//	\r\n\r\n
//
// and a Writer compresses each record into a gzip member of its own, the
// convention replay tools rely on to seek straight to one record. The Reader
// also accepts what other tools write: WARC/1.0, uncompressed files, a whole
// file compressed as one gzip stream, and LF where CRLF is due.
package warc

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Record types (WARC 1.1 section 6).
const (
	TypeWarcinfo     = "warcinfo"
	TypeResponse     = "response"
	TypeResource     = "resource"
	TypeRequest      = "request"
	TypeMetadata     = "metadata"
	TypeRevisit      = "revisit"
	TypeConversion   = "conversion"
	TypeContinuation = "continuation"
)

// Revisit profiles (WARC 1.1 sections 6.7.2 and 6.7.3).
const (
	// ProfileIdenticalPayload marks a revisit whose payload is identical, by
	// WARC-Payload-Digest, to that of an earlier record.
	ProfileIdenticalPayload = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
	// ProfileServerNotModified marks a revisit the server answered with
	// "not modified" (HTTP 304) to a conditional request.
	ProfileServerNotModified = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
)

// ErrDigestMismatch reports stored bytes that do not match their digest:
// the record's WARC-Block-Digest, or the CRC-32 of its gzip member.
var ErrDigestMismatch = errors.New("warc: block digest mismatch")

// Field is one named field of a record header.
type Field struct {
	Name, Value string
}

// Header is a record's named fields, in order. Names compare without regard
// to case but keep the case they were written or read with.
//
// Values set through Set and Add cannot break the record's framing: control
// characters (CR and LF among them) are replaced by spaces.
type Header struct {
	fields []Field
}

// Get returns the value of the first field called name, or "" if there is
// none.
func (h *Header) Get(name string) string {
	for _, f := range h.fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Has reports whether a field called name has exactly value (fields such
// as WARC-Concurrent-To may repeat).
func (h *Header) Has(name, value string) bool {
	for _, f := range h.fields {
		if strings.EqualFold(f.Name, name) && f.Value == value {
			return true
		}
	}
	return false
}

// IsCompanion reports whether a record with header h belongs to the
// capture whose record ID is id, as the crawler and Heritrix write one: a
// request or metadata record concurrent to it (WARC-Concurrent-To). A
// record without an ID has no companions.
func IsCompanion(h *Header, id string) bool {
	typ := h.Get("WARC-Type")
	return id != "" && (typ == TypeRequest || typ == TypeMetadata) && h.Has("WARC-Concurrent-To", id)
}

// Set replaces the value of the field called name, removing any repetitions
// of it, or appends the field if the header has none.
func (h *Header) Set(name, value string) {
	value = cleanValue(value)
	for i := range h.fields {
		if !strings.EqualFold(h.fields[i].Name, name) {
			continue
		}
		h.fields[i].Value = value
		kept := h.fields[:i+1]
		for _, f := range h.fields[i+1:] {
			if !strings.EqualFold(f.Name, name) {
				kept = append(kept, f)
			}
		}
		h.fields = kept
		return
	}
	h.fields = append(h.fields, Field{Name: name, Value: value})
}

// Add appends a field, keeping any others of the same name (WARC allows
// repeated WARC-Concurrent-To and WARC-Protocol fields).
func (h *Header) Add(name, value string) {
	h.fields = append(h.fields, Field{Name: name, Value: cleanValue(value)})
}

// Size is the length of the header's fields as written: each name, ": ",
// value and CRLF.
func (h *Header) Size() int {
	n := 0
	for _, f := range h.fields {
		n += len(f.Name) + len(f.Value) + 4
	}
	return n
}

// Fields returns a copy of the fields in order.
func (h *Header) Fields() []Field {
	return append([]Field(nil), h.fields...)
}

// Record is one WARC record: its named fields and its content block.
type Record struct {
	Header Header
	Block  []byte // the content block, exactly Content-Length bytes
}

// Type returns the record's WARC-Type.
func (r *Record) Type() string { return r.Header.Get("WARC-Type") }

// ID returns the record's WARC-Record-ID as written, angle brackets included
// ("<urn:uuid:...>"), ready to be used in WARC-Concurrent-To or
// WARC-Refers-To.
func (r *Record) ID() string { return r.Header.Get("WARC-Record-ID") }

// TargetURI returns the record's WARC-Target-URI. Angle brackets, which
// the WARC 1.0 grammar showed and some tools write, are removed.
func (r *Record) TargetURI() string {
	u := r.Header.Get("WARC-Target-URI")
	if len(u) >= 2 && u[0] == '<' && u[len(u)-1] == '>' {
		u = u[1 : len(u)-1]
	}
	return u
}

// Date returns the record's WARC-Date.
func (r *Record) Date() (time.Time, error) {
	return ParseDate(r.Header.Get("WARC-Date"))
}

// dateLayouts are the W3C date-time profile's granularities (WARC 1.1
// section 5.4 allows all of them); RFC 3339 with or without a fraction of
// a second comes first, being what nearly every record holds.
var dateLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
	"2006-01",
	"2006",
}

// ParseDate parses a WARC-Date or WARC-Refers-To-Date value.
func ParseDate(s string) (time.Time, error) {
	for _, layout := range dateLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("warc: malformed date " + quote(s))
}

// FormatDate formats t as a WARC 1.1 date in UTC with microseconds, the
// precision WARC 1.1 allows and the capture clock honestly has.
func FormatDate(t time.Time) string {
	t = t.UTC()
	year := t.Year()
	if year < 0 || year > 9999 {
		return t.Format(dateLayout)
	}
	// By hand: time.Format interprets its layout for each of the three
	// records of every capture.
	month, day := t.Month(), t.Day()
	hour, minute, sec := t.Clock()
	b := make([]byte, 0, len(dateLayout))
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1000, 6)
	return string(append(b, 'Z'))
}

const dateLayout = "2006-01-02T15:04:05.000000Z"

// appendDigits appends v (0 ≤ v < 10^width, width ≤ 6) in width decimal
// digits.
func appendDigits(b []byte, v, width int) []byte {
	start := len(b)
	b = append(b, "000000"[:width]...)
	for i := len(b) - 1; i >= start; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// cleanValue replaces control characters other than tab with spaces: a CR
// or LF in a value (a hostile URL, say) would otherwise start a new field.
func cleanValue(s string) string {
	clean := true
	for i := 0; i < len(s); i++ { // bytes suffice: UTF-8 puts no control byte in a longer rune
		if isCtl(rune(s[i])) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isCtl(r) {
			return ' '
		}
		return r
	}, s)
}

func isCtl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }

// validName reports whether s is a field name: a token as RFC 2616 defines
// it, which WARC's grammar borrows.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// quote shortens s for an error message.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}
