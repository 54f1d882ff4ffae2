package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// maxCapturesListed bounds the captures of one URL read for a lookup; a URL
// captured more often than this is replayed from its most recent ones.
const maxCapturesListed = 200_000

// capturesOf returns the captures that can stand for URL u, in time order.
// One SURT key covers several URLs (http and https, with and without www.,
// with and without a trailing slash), and sites redirect between them: the
// captures of u itself come first, and when there are none, any capture of
// the key but those redirecting to u — replaying one of those for u would
// send the browser round in a loop.
func (s *Server) capturesOf(ctx context.Context, key, u string) ([]index.Capture, error) {
	caps, err := s.capturesOfKey(ctx, key)
	if err != nil {
		return nil, err
	}
	var exact, others []index.Capture
	for _, c := range caps {
		switch {
		case c.URL == u:
			exact = append(exact, c)
		case !redirectsTo(c, u):
			others = append(others, c)
		}
	}
	if len(exact) > 0 {
		return exact, nil
	}
	return others, nil
}

// redirectsTo reports whether capture c is a redirect to URL u (canonical).
func redirectsTo(c index.Capture, u string) bool {
	if c.Redirect == "" {
		return false
	}
	r, err := urlkey.Canonical("", c.Redirect) // the crawler records Location resolved, not canonical
	return err == nil && r == u || c.Redirect == u
}

// capturesOfKey returns all captures of the URL key in time order.
func (s *Server) capturesOfKey(ctx context.Context, key string) ([]index.Capture, error) {
	var caps []index.Capture
	err := s.arc.Captures(ctx, key, true, func(c index.Capture) (bool, error) {
		caps = append(caps, c)
		return len(caps) < maxCapturesListed, nil
	})
	// Read newest first so that the bound keeps the recent ones; then put
	// them in time order.
	for i, j := 0, len(caps)-1; i < j; i, j = i+1, j-1 {
		caps[i], caps[j] = caps[j], caps[i]
	}
	return caps, err
}

// closest returns the index of the capture nearest to t (the earlier one on
// a tie), or -1 when caps is empty. Captures are placed at the second their
// 14-digit timestamp names, as t is: a capture at 12:00:01.9 is the one
// asked for by 120001, though one at 12:00:00.6 is nearer in nanoseconds.
func closest(caps []index.Capture, t time.Time) int {
	best := -1
	var bestD time.Duration
	for i, c := range caps {
		d := c.Time.Truncate(time.Second).Sub(t)
		if d < 0 {
			d = -d
		}
		if best < 0 || d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// atOrBefore is how embedded resources are chosen: the newest capture not
// newer than the page (second precision, as the page's timestamp has), so a
// page is shown with what the web held when it was captured; when there is
// none, the nearest after it.
func atOrBefore(caps []index.Capture, t time.Time) int {
	limit := t.Truncate(time.Second).Add(time.Second)
	best := -1
	for i, c := range caps {
		if c.Time.Before(limit) {
			best = i
		}
	}
	if best < 0 && len(caps) > 0 {
		return 0
	}
	return best
}

// response is an archived HTTP response ready to be replayed.
type response struct {
	status  int
	header  http.Header
	payload []byte      // the entity body as archived: content codings kept
	body    *storedBody // in place of payload, for a record too large to read whole
}

// errCorrupt marks a capture whose record cannot be read back: its bytes
// are damaged, or it is not a record that can be replayed.
var errCorrupt = errors.New("the archived record is damaged")

// load reads the response a capture holds. A revisit gives its own headers
// and the payload of the capture it refers to; a server-not-modified revisit
// the original's headers too.
func (s *Server) load(ctx context.Context, c index.Capture) (*response, error) {
	return s.loadDepth(ctx, c, 0)
}

func (s *Server) loadDepth(ctx context.Context, c index.Capture, depth int) (*response, error) {
	resp, rec, err := s.openLarge(ctx, c)
	if resp != nil || err != nil {
		return resp, err
	}
	if rec == nil {
		if rec, err = s.arc.Record(ctx, c); err != nil {
			if unreachable(err) {
				return nil, err // the record may well be intact on a node out of reach
			}
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
	}
	switch rec.Type() {
	case warc.TypeResponse:
		return parseResponse(rec.Block)
	case warc.TypeResource:
		h := http.Header{}
		if ct := rec.Header.Get("Content-Type"); ct != "" {
			h.Set("Content-Type", ct)
		}
		return &response{status: http.StatusOK, header: h, payload: rec.Block}, nil
	case warc.TypeRevisit:
		if depth > 0 {
			return nil, fmt.Errorf("%w: revisit refers to another revisit", errCorrupt)
		}
		return s.loadRevisit(ctx, c, rec)
	}
	return nil, fmt.Errorf("%w: a %s record cannot be replayed", errCorrupt, rec.Type())
}

func (s *Server) loadRevisit(ctx context.Context, c index.Capture, rec *warc.Record) (*response, error) {
	// A missing original (archive.ErrNoOriginal) is not damage: on a
	// network its only copy may be on a node that is away.
	orig, via, err := archive.Original(ctx, s.arc, c, rec.Header)
	if err != nil {
		if errors.Is(err, archive.ErrChainRecord) && !unreachable(err) {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		return nil, err
	}
	base, err := s.loadDepth(ctx, orig, 1)
	if errors.Is(err, errCorrupt) {
		// The revisit's own record is whole: say which capture is not.
		return nil, fmt.Errorf("it repeats the content of the earlier capture %s at %s, which cannot be read: %w", orig.URL, orig.Timestamp14(), err)
	}
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(rec.Block)) == 0 {
		return base, nil // no head of its own: the original's describes the payload
	}
	own, err := parseResponse(rec.Block)
	if err != nil {
		// A head is there but cannot be read: the original's in its place
		// would show a response this capture never had (a 200 for its
		// 404), which the CDX API, listing its own status, contradicts.
		return nil, fmt.Errorf("the revisit's own HTTP head: %w", err)
	}
	if own.status == http.StatusNotModified {
		// The server said the stored response still stands, with the
		// headers it sent now (RFC 9111 §4.3.4): a new Date, Expires,
		// Cache-Control, ETag. The original's status and the headers that
		// describe its bytes stay, Content-Type among them: some servers
		// send a wrong one with a 304, and the bytes are the original's
		// (RFC 9111 §3.2 lets a cache keep such fields).
		stored := base
		if st, ok := s.standing(ctx, c, via); ok {
			stored = st
		}
		h := stored.header.Clone()
		if h == nil {
			h = http.Header{}
		}
		for k, vs := range own.header {
			if k := http.CanonicalHeaderKey(k); !payloadHeaders[k] && k != "Content-Type" {
				h[k] = vs
			}
		}
		return &response{status: stored.status, header: h, payload: base.payload, body: base.body}, nil
	}
	// Headers that describe the bytes come from the record that holds them.
	for k := range payloadHeaders {
		own.header.Del(k)
		if v, ok := base.header[k]; ok {
			own.header[k] = v
		}
	}
	own.payload, own.body = base.payload, base.body
	return own, nil
}

// payloadHeaders frame the archived bytes: a revisit replays those of the
// record the bytes come from.
var payloadHeaders = map[string]bool{"Content-Encoding": true, "Transfer-Encoding": true, "Content-Length": true}

// standing returns the status and headers of the response a 304 revisit
// c says still stands (archive.Standing).
func (s *Server) standing(ctx context.Context, c index.Capture, via []index.Capture) (*response, bool) {
	st, ok, err := archive.Standing(ctx, s.arc, c, via)
	if err != nil || !ok {
		return nil, false
	}
	return s.head(ctx, st)
}

// head returns the status and headers of capture c's record.
func (s *Server) head(ctx context.Context, c index.Capture) (*response, bool) {
	r, rec, err := s.openLarge(ctx, c)
	if r != nil && err == nil {
		return r, true
	}
	if rec == nil {
		if rec, err = s.arc.Record(ctx, c); err != nil {
			return nil, false
		}
	}
	if r, err = parseResponse(rec.Block); err != nil || r.status == 0 {
		return nil, false
	}
	return r, true
}

// parseResponse splits a raw HTTP/1.x response into status, headers and
// payload, the head read once (by parseHead, for warc.HTTPBody too).
func parseResponse(raw []byte) (*response, error) {
	end := warc.HTTPHeaderEnd(raw)
	if end < 0 {
		end = len(raw) // a revisit may hold headers without the blank line
	}
	resp, err := parseHead(raw[:end])
	if err != nil {
		return nil, err
	}
	resp.payload, _ = warc.HTTPBody(raw, resp.header)
	return resp, nil
}

// parseHead reads the status and headers of an HTTP/1.x response's header
// section as warc.ReadHTTPHead does, passing over lines that are not
// fields, as browsers do; a section without an HTTP status line is
// damage.
func parseHead(section []byte) (*response, error) {
	hd := warc.ReadHTTPHead(section)
	switch {
	case hd.Status == 0 && hd.StatusLine == "":
		return nil, fmt.Errorf("%w: no HTTP status line", errCorrupt)
	case hd.Status == 0:
		return nil, fmt.Errorf("%w: bad HTTP status line %q", errCorrupt, truncate(hd.StatusLine, 80))
	}
	return &response{status: hd.Status, header: hd.Header}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
