package cdx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// ContentType returns the media type of q's output, as pywb serves it.
func (q Query) ContentType() string {
	switch q.Output {
	case OutputJSON:
		return "text/x-ndjson"
	case OutputLink:
		return "application/link-format"
	case OutputText:
		return "text/plain"
	}
	return "text/x-cdxj"
}

// Write runs q and writes the result to w in q.Output's format, one line per
// capture:
//
//	cdxj  com,example)/ 20240101000000 {"url":"http://example.com/",...}
//	json  {"urlkey":"com,example)/","timestamp":"20240101000000","url":...}
//	text  com,example)/ 20240101000000 http://example.com/ text/html 200 ...
//	link  <LinkPrefix20240101000000/http://example.com/>; rel="memento"; datetime="Mon, 01 Jan 2024 00:00:00 GMT",
//
// With Fields, json has those keys in that order, cdxj those after urlkey and
// timestamp (which it always starts with), text those values ("-" for an
// absent one); link ignores them. The JSON values are index.AppendCDXJ's.
//
// Output is buffered and flushed as it goes: the first line at once, then
// whenever the buffer fills or a second has passed. If w is an
// http.Flusher, each flush reaches the client.
func (q Query) Write(ctx context.Context, src Source, w io.Writer) error {
	if missing(src) {
		return errors.New("cdx: no index")
	}
	return q.write(ctx, src, newFlushWriter(w))
}

const (
	writeBuffer   = 32 << 10
	flushInterval = time.Second
)

func (q Query) write(ctx context.Context, src Source, fw *flushWriter) error {
	enc, err := q.newEncoder()
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(fw, writeBuffer)
	var line []byte
	n := 0
	lastFlush := time.Now()
	err = q.run(ctx, src, func(c index.Capture) (bool, error) {
		line = line[:0]
		if n > 0 && enc.output == OutputLink {
			line = append(line, ",\n"...) // pywb's timemap: entries end with ",\n" but the last
		}
		line = enc.append(line, &c)
		if _, err := bw.Write(line); err != nil {
			return false, err
		}
		n++
		// Looking at the clock every 64 lines is enough for a stream that
		// trickles, and costs nothing for one that pours.
		if n == 1 || (n%64 == 0 && time.Since(lastFlush) >= flushInterval) {
			if err := bw.Flush(); err != nil {
				return false, err
			}
			lastFlush = time.Now()
		}
		return true, nil
	})
	if err == nil && n > 0 && enc.output == OutputLink {
		_, err = bw.WriteString("\n")
	}
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("cdx: %w", ferr)
	}
	return err
}

// flushWriter passes writes on to w, flushing it when it is an http.Flusher,
// and counts what it wrote.
type flushWriter struct {
	w io.Writer
	f http.Flusher
	n int64
}

func newFlushWriter(w io.Writer) *flushWriter {
	f, _ := w.(http.Flusher)
	return &flushWriter{w: w, f: f}
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	fw.n += int64(n)
	if err == nil && fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}

// encoder formats captures as lines of one output format.
type encoder struct {
	output     string
	fields     []int // nil: all, in CDX order
	linkPrefix string
	tmp        []byte
}

func (q Query) newEncoder() (*encoder, error) {
	e := &encoder{output: q.Output, linkPrefix: q.LinkPrefix}
	switch q.Output {
	case "":
		e.output = OutputCDXJ
	case OutputCDXJ, OutputJSON, OutputLink, OutputText:
	default:
		return nil, fmt.Errorf("cdx: output=%q: want cdxj, json, link or text", q.Output)
	}
	for _, name := range q.Fields {
		id, ok := fieldByName(name)
		if !ok {
			return nil, fmt.Errorf("cdx: fl: unknown field %q", name)
		}
		e.fields = append(e.fields, id)
	}
	if e.fields == nil && e.output == OutputText {
		e.fields = []int{fURLKey, fTimestamp, fURL, fMIME, fStatus, fDigest, fLength, fOffset, fFilename}
	}
	return e, nil
}

// append appends c's line, newline included (but for link, whose
// separators Write adds).
func (e *encoder) append(dst []byte, c *index.Capture) []byte {
	switch e.output {
	case OutputJSON:
		if e.fields == nil {
			// index.AppendCDXJ's JSON block, with urlkey and timestamp
			// moved into it.
			e.tmp = index.AppendCDXJ(e.tmp[:0], *c)
			block := e.tmp[len(c.URLKey)+1:]
			block = block[bytes.IndexByte(block, ' ')+1:]
			dst = append(dst, `{"urlkey":`...)
			dst = appendJSONString(dst, c.URLKey)
			dst = append(dst, `,"timestamp":"`...)
			dst = c.Time.UTC().AppendFormat(dst, "20060102150405")
			dst = append(dst, `",`...)
			return append(dst, block[1:]...)
		}
		return append(e.appendObject(dst, c, false), '\n')
	case OutputText:
		for i, id := range e.fields {
			if i > 0 {
				dst = append(dst, ' ')
			}
			var ok bool
			start := len(dst)
			if dst, ok = appendField(dst, c, id); !ok || len(dst) == start {
				dst = append(dst[:start], '-')
			} else {
				dst = escapeSpace(dst, start)
			}
		}
		return append(dst, '\n')
	case OutputLink:
		dst = append(dst, '<')
		start := len(dst)
		if e.linkPrefix != "" {
			dst = append(dst, e.linkPrefix...)
			dst = c.Time.UTC().AppendFormat(dst, "20060102150405")
			dst = append(dst, '/')
		}
		dst = append(dst, c.URL...)
		dst = escapeLinkURL(dst, start)
		dst = append(dst, `>; rel="memento"; datetime="`...)
		dst = c.Time.UTC().AppendFormat(dst, http.TimeFormat)
		return append(dst, '"')
	}
	if e.fields == nil {
		return index.AppendCDXJ(dst, *c)
	}
	dst = append(dst, c.URLKey...)
	dst = append(dst, ' ')
	dst = c.Time.UTC().AppendFormat(dst, "20060102150405")
	dst = append(dst, ' ')
	return append(e.appendObject(dst, c, true), '\n')
}

// appendObject appends the JSON object of e.fields present in c, without
// urlkey and timestamp for cdxj (they start its line).
func (e *encoder) appendObject(dst []byte, c *index.Capture, cdxj bool) []byte {
	dst = append(dst, '{')
	first := true
	for _, id := range e.fields {
		if cdxj && (id == fURLKey || id == fTimestamp) {
			continue
		}
		var ok bool
		if e.tmp, ok = appendField(e.tmp[:0], c, id); !ok {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, fieldNames[id]...)
		dst = append(dst, `":`...)
		dst = appendJSONString(dst, string(e.tmp))
	}
	return append(dst, '}')
}

// appendJSONString appends s as encoding/json writes it, which is how
// index.AppendCDXJ writes values (HTML characters escaped included).
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			js, _ := json.Marshal(s) // cannot fail for a string
			return append(dst, js...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// escapeSpace percent-encodes the whitespace and control bytes of
// dst[start:], which would break a space-separated text line.
func escapeSpace(dst []byte, start int) []byte {
	return escapeFrom(dst, start, func(b byte) bool { return b <= ' ' || b == 0x7f })
}

// escapeLinkURL percent-encodes in dst[start:] what would keep a link
// target from being the URI-Reference that RFC 8288 §3 puts between <...>
// (in a Link header or a link-format document): '<' and '>', which would
// end or confuse the target, whitespace and control bytes, which would
// break its line, and non-ASCII bytes (UTF-8 becomes %XX, as RFC 3987 maps
// an IRI to a URI). '%' is left alone: an escaped URL stays as it is.
func escapeLinkURL(dst []byte, start int) []byte {
	return escapeFrom(dst, start, linkUnsafe)
}

func linkUnsafe(b byte) bool { return b <= ' ' || b >= 0x7f || b == '<' || b == '>' }

// LinkURL returns u as a link target, escaped as escapeLinkURL does: what
// Memento's Link headers and TimeMaps put between <...>, as output=link does.
func LinkURL(u string) string {
	for i := 0; i < len(u); i++ {
		if linkUnsafe(u[i]) {
			return string(escapeLinkURL([]byte(u), i))
		}
	}
	return u
}

func escapeFrom(dst []byte, start int, bad func(byte) bool) []byte {
	i := start
	for i < len(dst) && !bad(dst[i]) {
		i++
	}
	if i == len(dst) {
		return dst
	}
	out := append([]byte(nil), dst[i:]...)
	dst = dst[:i]
	for _, b := range out {
		if bad(b) {
			dst = append(dst, '%', "0123456789ABCDEF"[b>>4], "0123456789ABCDEF"[b&15])
		} else {
			dst = append(dst, b)
		}
	}
	return dst
}

// DefaultLinkPrefix is where Handler's link output points: the replay of a
// capture at /web/<timestamp>/<url>.
const DefaultLinkPrefix = "/web/"

// Handler returns a Server over src with link output pointing at
// DefaultLinkPrefix. Mount it at /cdx.
func Handler(src Source) http.Handler {
	return &Server{Source: src, LinkPrefix: DefaultLinkPrefix}
}

// Server serves GET /cdx?url=...: a bad query is answered 400 with a
// plain-text explanation, a good one with its captures, streamed.
type Server struct {
	Source     Source // the captures queried
	LinkPrefix string // Query.LinkPrefix of every query
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "cdx: method not allowed: use GET", http.StatusMethodNotAllowed)
		return
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, "cdx: malformed query string: "+err.Error(), http.StatusBadRequest)
		return
	}
	q, err := ParseQuery(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if missing(s.Source) {
		http.Error(w, "cdx: no index", http.StatusInternalServerError)
		return
	}
	q.LinkPrefix = s.LinkPrefix
	h := w.Header()
	h.Set("Content-Type", q.ContentType())
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	fw := newFlushWriter(w)
	err = q.write(r.Context(), s.Source, fw)
	switch {
	case err == nil, r.Context().Err() != nil:
	case fw.n == 0:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		// The status is sent: cutting the response short is the only way
		// left to tell the client that it is incomplete.
		panic(http.ErrAbortHandler)
	}
}
