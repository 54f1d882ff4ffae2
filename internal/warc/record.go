package warc

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Digest returns the WARC digest of b as wget, warcio and Heritrix write it:
// "sha1:" and the base-32 SHA-1.
func Digest(b []byte) string {
	sum := sha1.Sum(b)
	return "sha1:" + base32.StdEncoding.EncodeToString(sum[:])
}

// newID returns a fresh record ID, a random (version 4) UUID URN.
func newID() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic("warc: no randomness: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const prefix = "<urn:uuid:"
	b := make([]byte, 0, len(prefix)+36+1)
	b = append(b, prefix...)
	for i, part := range [][]byte{u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]} {
		if i > 0 {
			b = append(b, '-')
		}
		b = hex.AppendEncode(b, part)
	}
	return string(append(b, '>'))
}

// newRecord fills the fields every record has.
func newRecord(typ, uri string, date time.Time, contentType string, block []byte) *Record {
	r := &Record{Block: block}
	r.Header.fields = make([]Field, 0, 12) // a crawled record's fields, without growing
	// The names are all different: Add, not Set, which looks for each.
	r.Header.Add("WARC-Type", typ)
	r.Header.Add("WARC-Record-ID", newID())
	r.Header.Add("WARC-Date", FormatDate(date))
	if uri != "" {
		r.Header.Add("WARC-Target-URI", uri)
	}
	if contentType != "" {
		r.Header.Add("Content-Type", contentType)
	}
	r.Header.Add("WARC-Block-Digest", Digest(block))
	r.Header.Add("Content-Length", strconv.Itoa(len(block)))
	return r
}

// NewWarcinfo returns a warcinfo record describing a file.
func NewWarcinfo(filename string, fields []Field) *Record {
	r := newRecord(TypeWarcinfo, "", time.Now(), "application/warc-fields", warcFields(fields))
	r.Header.Set("WARC-Filename", filename)
	return r
}

// NewRequest returns a request record holding a raw HTTP request.
func NewRequest(uri string, date time.Time, raw []byte) *Record {
	return newRecord(TypeRequest, uri, date, "application/http;msgtype=request", raw)
}

// NewResponse returns a response record holding a raw HTTP response, with
// its payload digest (the entity body, chunked framing removed). raw must
// begin as an HTTP response does ("HTTP/").
func NewResponse(uri string, date time.Time, raw []byte) (*Record, error) {
	if !bytes.HasPrefix(raw, []byte("HTTP/")) {
		return nil, fmt.Errorf("warc: response for %s: %.40q is no HTTP response", uri, raw)
	}
	payload, _ := HTTPPayload(raw)
	return newResponse(uri, date, raw, payload), nil
}

func newResponse(uri string, date time.Time, raw, payload []byte) *Record {
	r := newRecord(TypeResponse, uri, date, "application/http;msgtype=response", raw)
	r.Header.Add("WARC-Payload-Digest", Digest(payload))
	return r
}

// NewFetchedResponse is NewResponse for a response an HTTP client has
// parsed already, so that its header section needs no second reading: when
// it names no chunked coding, the payload is simply what follows it. (A
// section with any non-ASCII byte is read as NewResponse reads it, whose
// case folding is Unicode's: "chun\u212aed" is chunked to it.)
func NewFetchedResponse(uri string, date time.Time, raw []byte) (*Record, error) {
	end := HTTPHeaderEnd(raw)
	if end < 0 || containsFold(raw[:end], "chunked") || !isASCII(raw[:end]) || !bytes.HasPrefix(raw, []byte("HTTP/")) {
		return NewResponse(uri, date, raw)
	}
	return newResponse(uri, date, raw, raw[end:]), nil
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// containsFold reports whether b contains s (lower case ASCII), in any case.
func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if b[i]|0x20 == s[0] && strings.EqualFold(string(b[i:i+len(s)]), s) {
			return true
		}
	}
	return false
}

// RefersTo names the record a revisit refers to.
type RefersTo struct {
	ID, URI string
	Date    time.Time
}

// NewRevisit returns a revisit record: the HTTP response headers of a
// capture whose payload is stored in an earlier record. Those of an
// identical payload are the response cut before its payload, which WARC
// 1.1 §6.7.2 has marked "WARC-Truncated: length"; a 304's are all of it.
func NewRevisit(uri string, date time.Time, profile string, rawHeaders []byte, payloadDigest string, refersTo RefersTo) *Record {
	r := newRecord(TypeRevisit, uri, date, "application/http;msgtype=response", rawHeaders)
	r.Header.Set("WARC-Profile", profile)
	if profile == ProfileIdenticalPayload && len(rawHeaders) > 0 {
		r.Header.Set("WARC-Truncated", "length")
	}
	if payloadDigest != "" {
		r.Header.Set("WARC-Payload-Digest", payloadDigest)
	}
	if refersTo.ID != "" {
		r.Header.Set("WARC-Refers-To", refersTo.ID)
	}
	if refersTo.URI != "" {
		r.Header.Set("WARC-Refers-To-Target-URI", refersTo.URI)
	}
	if !refersTo.Date.IsZero() {
		r.Header.Set("WARC-Refers-To-Date", FormatDate(refersTo.Date))
	}
	return r
}

// NewMetadata returns a metadata record of named fields about uri.
func NewMetadata(uri string, date time.Time, fields []Field) *Record {
	return newRecord(TypeMetadata, uri, date, "application/warc-fields", warcFields(fields))
}

func warcFields(fields []Field) []byte {
	n := 0
	for _, f := range fields {
		n += len(f.Name) + len(": ") + len(f.Value) + len("\r\n")
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, cleanValue(f.Value)...)
		b = append(b, "\r\n"...)
	}
	return b
}

// HTTPHeaderEnd returns the index just after the blank line that ends the
// header section of a raw HTTP message, or -1 while there is none. It reads
// line by line, as net/http and ReadHTTPHead do: the first empty line
// (CRLF or bare LF) after the start line ends the section, though a CRLF
// CRLF may come later, in the body.
func HTTPHeaderEnd(raw []byte) int {
	start := true
	for i := 0; i < len(raw); {
		nl := bytes.IndexByte(raw[i:], '\n')
		if nl < 0 {
			return -1
		}
		blank := nl == 0 || nl == 1 && raw[i] == '\r'
		i += nl + 1
		if blank && !start {
			return i
		}
		start = false
	}
	return -1
}

// HTTPPayload returns the entity body of a raw HTTP/1.x response: the bytes
// after the header section with chunked transfer-coding removed (a content
// coding such as gzip is kept; that is the payload). A message cut short
// gives what is there and truncated=true. The header section is read as
// ReadHTTPHead reads it, whatever its status line (net/http, which
// fetched it, takes codes outside 100..999 too).
func HTTPPayload(raw []byte) (payload []byte, truncated bool) {
	end := HTTPHeaderEnd(raw)
	if end < 0 {
		return nil, true // headers cut off: no payload
	}
	return HTTPBody(raw, ReadHTTPHead(raw[:end]).Header)
}

// HTTPBody is HTTPPayload for a response whose header h the caller has
// read already (ReadHTTPHead), so that it is not read twice.
func HTTPBody(raw []byte, h http.Header) (payload []byte, truncated bool) {
	end := HTTPHeaderEnd(raw)
	if end < 0 {
		return nil, true
	}
	if !Chunked(h) {
		return raw[end:], false
	}
	return dechunk(raw[end:])
}

// Chunked reports whether an HTTP response's header h frames its payload
// in chunks: a Transfer-Encoding field, any of them, names chunked.
func Chunked(h http.Header) bool {
	return strings.Contains(strings.ToLower(strings.Join(h.Values("Transfer-Encoding"), ",")), "chunked")
}

// dechunk removes chunked framing from b, an HTTP/1.1 message body,
// tolerating a cut-off tail or bytes that are not chunks after all: it
// gives what it could read and truncated=true.
func dechunk(b []byte) (payload []byte, truncated bool) {
	var out []byte
	for {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return out, true
		}
		n, ok := chunkSize(b[:nl])
		if !ok {
			return out, true // not chunked after all, or garbage: keep what we have
		}
		b = b[nl+1:]
		if n == 0 {
			return out, false
		}
		if int64(len(b)) < n {
			return append(out, b...), true
		}
		out = append(out, b[:n]...)
		b = b[n:]
		b = bytes.TrimPrefix(b, []byte("\r"))
		b = bytes.TrimPrefix(b, []byte("\n"))
	}
}

// appendTo appends r in WARC 1.1 wire form to dst.
func (r *Record) appendTo(dst []byte) []byte {
	dst = append(dst, "WARC/1.1\r\n"...)
	for _, f := range r.Header.fields {
		if strings.EqualFold(f.Name, "Content-Length") {
			continue
		}
		dst = append(dst, f.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, cleanValue(f.Value)...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(r.Block)), 10)
	dst = append(dst, "\r\n\r\n"...)
	dst = append(dst, r.Block...)
	return append(dst, "\r\n\r\n"...)
}
