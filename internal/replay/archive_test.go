package replay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// remote stands for an archive spanning nodes: it serves a local archive's
// captures as if read from node "x", and remembers what replay hands back.
type remote struct {
	*archive.Local
	node string

	mu       sync.Mutex
	given    map[string]index.Capture // by segment and offset, as handed out
	records  []index.Capture          // the captures Record was asked for
	byDigest []index.Capture          // the captures ByDigest was asked to resolve

	recordErr   error // when set, Record fails with it
	capturesErr error // when set, Captures fails with it
}

// fail sets the errors Record and Captures fail with (nil: they work).
func (r *remote) fail(record, captures error) {
	r.mu.Lock()
	r.recordErr, r.capturesErr = record, captures
	r.mu.Unlock()
}

func newRemote(l *archive.Local) *remote {
	return &remote{Local: l, node: "x", given: map[string]index.Capture{}}
}

func locKey(c index.Capture) string { return fmt.Sprintf("%s@%d", c.Segment, c.Offset) }

// hand marks c as read from the remote node and remembers it.
func (r *remote) hand(fn func(index.Capture) (bool, error)) func(index.Capture) (bool, error) {
	return func(c index.Capture) (bool, error) {
		c.Node = r.node
		r.mu.Lock()
		r.given[locKey(c)] = c
		r.mu.Unlock()
		return fn(c)
	}
}

func (r *remote) Captures(ctx context.Context, key string, reverse bool, fn func(index.Capture) (bool, error)) error {
	r.mu.Lock()
	err := r.capturesErr
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.Local.Captures(ctx, key, reverse, r.hand(fn))
}

func (r *remote) CapturesBetween(ctx context.Context, key string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	r.mu.Lock()
	err := r.capturesErr
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.Local.CapturesBetween(ctx, key, from, to, reverse, r.hand(fn))
}

func (r *remote) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return r.Local.Range(ctx, lo, hi, reverse, r.hand(fn))
}

func (r *remote) ByDigest(ctx context.Context, c index.Capture, digest string) (index.Capture, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byDigest = append(r.byDigest, c)
	o, ok, err := r.Local.ByDigest(ctx, c, digest)
	if ok {
		o.Node = r.node
		r.given[locKey(o)] = o
	}
	return o, ok, err
}

func (r *remote) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	r.mu.Lock()
	r.records = append(r.records, c)
	err := r.recordErr
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r.Local.Record(ctx, c)
}

// checkHandedBack fails unless every capture in got is one the archive
// handed out, unchanged, Node and all.
func (r *remote) checkHandedBack(t *testing.T, what string, got []index.Capture) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range got {
		if c.Node != r.node {
			t.Errorf("%s called with a capture of node %q, want %q: %+v", what, c.Node, r.node, c)
		}
		if g, ok := r.given[locKey(c)]; !ok || g != c {
			t.Errorf("%s called with a capture the archive did not hand out as is:\n got  %+v\n gave %+v", what, c, g)
		}
	}
}

// Captures read from another node go back to the archive as they came, so
// that it asks that node for their records and for a revisit's original.
func TestCapturesGoBackToTheirNode(t *testing.T) {
	html := "Content-Type: text/html\r\n"
	var r *remote
	a := newTestArchiveVia(t, []fixture{
		{url: "http://example.com/", at: "20240101000000", header: html, body: "<p>first</p>"},
		{url: "http://example.com/", at: "20240201000000", header: html, body: "<p>first</p>", revisit: true},
		{url: "http://example.com/", at: "20240301000000", header: html, body: "<p>first</p>", revisit: true, byDigest: true},
	}, func(l *archive.Local) archive.Archive { r = newRemote(l); return r })

	for _, at := range []string{"20240101000000", "20240201000000", "20240301000000"} {
		resp, body := get(t, a.content.URL+"/web/"+at+"id_/http://example.com/")
		if resp.StatusCode != 200 || body != "<p>first</p>" {
			t.Errorf("%s: %d %q", at, resp.StatusCode, body)
		}
	}
	r.mu.Lock()
	records, byDigest := slices.Clone(r.records), slices.Clone(r.byDigest)
	r.mu.Unlock()
	// Each revisit reads its own record and its original's.
	if len(records) != 5 {
		t.Errorf("Record called %d times, want 5: %+v", len(records), records)
	}
	r.checkHandedBack(t, "Record", records)
	// Only the revisit without a target URI is resolved by digest, on the
	// node that holds it.
	if len(byDigest) != 1 || byDigest[0].Timestamp14() != "20240301000000" {
		t.Errorf("ByDigest called for %+v, want the 20240301000000 revisit", byDigest)
	}
	r.checkHandedBack(t, "ByDigest", byDigest)

	// The interface's pages and the CDX API read the same archive.
	if resp, body := get(t, a.ui.URL+"/cdx?url=example.com/&output=json"); resp.StatusCode != 200 || strings.Count(body, "\n") != 3 {
		t.Errorf("cdx: %d %q", resp.StatusCode, body)
	}
	if resp, body := get(t, a.ui.URL+"/"); resp.StatusCode != 200 || !strings.Contains(body, "example.com") {
		t.Errorf("home: %d %.300q", resp.StatusCode, body)
	}
}

// A capture on a node that cannot be reached is a 502 that says so, not a
// damaged record; and the rest of the archive still answers.
func TestUnreachableNodeIsNotDamage(t *testing.T) {
	html := "Content-Type: text/html\r\n"
	var r *remote
	a := newTestArchiveVia(t, []fixture{
		{url: "http://example.com/", at: "20240101000000", header: html, body: "<p>home</p>"},
	}, func(l *archive.Local) archive.Archive { r = newRemote(l); return r })

	for _, tc := range []struct {
		name  string
		err   error
		cause string // what the answer must tell of the error
	}{
		{"unavailable", fmt.Errorf("archive: asking node x: %w: dial tcp 10.0.0.2:7000: connection refused", archive.ErrUnavailable), "node unavailable: dial tcp 10.0.0.2:7000: connection refused"},
		// The node's own deadline ran out; the client is still waiting.
		{"deadline", fmt.Errorf("archive: asking node x: %w", context.DeadlineExceeded), "deadline exceeded"},
	} {
		r.fail(tc.err, nil)
		for _, mod := range []string{"mp_", "id_", "im_"} {
			resp, body := get(t, a.content.URL+"/web/20240101000000"+mod+"/http://example.com/")
			if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(body, "a node holding this capture, or the earlier capture whose content it repeats, could not be reached: ") ||
				!strings.Contains(body, tc.cause) || strings.Contains(body, "damaged") {
				t.Errorf("%s %s: %d %q", tc.name, mod, resp.StatusCode, body)
			}
		}
	}

	// A record that is read but does not decode is damage, wherever it is.
	r.fail(fmt.Errorf("archive: %w", errors.New("warc: block digest mismatch")), nil)
	if resp, body := get(t, a.content.URL+"/web/20240101000000mp_/http://example.com/"); resp.StatusCode != 500 || !strings.Contains(body, "damaged") {
		t.Errorf("damaged remote record: %d %q", resp.StatusCode, body)
	}

	// An index that cannot be asked: the interface says so too.
	r.fail(nil, fmt.Errorf("archive: asking node x: %w", archive.ErrUnavailable))
	if resp, body := get(t, a.ui.URL+"/web/20240101000000/http://example.com/"); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "could not be reached") {
		t.Errorf("frame, index unreachable: %d %.300q", resp.StatusCode, body)
	}
	if resp, body := get(t, a.content.URL+"/web/20240101000000mp_/http://example.com/"); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "could not be reached") {
		t.Errorf("content, index unreachable: %d %q", resp.StatusCode, body)
	}

	r.fail(nil, nil)
	if resp, body := get(t, a.content.URL+"/web/20240101000000mp_/http://example.com/"); resp.StatusCode != 200 || !strings.Contains(body, "<p>home</p>") {
		t.Errorf("node back: %d %q", resp.StatusCode, body)
	}
}

func TestNewNeedsAnArchive(t *testing.T) {
	defer func() {
		if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "Archive") {
			t.Errorf("New without an archive: recovered %v", v)
		}
	}()
	New(Config{})
}
