package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"testing"
	"time"
)

// A large capture with chunked framing, damaged on disk after it was
// checked, is never sent as if whole: after the last chunk the rest of the
// block (a trailer, the last line end) is read too, so that its digest is
// checked, whatever the trailer's length.
func TestDamagedLargeChunkedCaptureIsCutShort(t *testing.T) {
	for _, trailer := range []string{"", "Server-Timing: total;dur=12\r\n", "X-Checksum: " + string(bytes.Repeat([]byte("a"), 5000)) + "\r\n"} {
		t.Run(fmt.Sprintf("trailer%d", len(trailer)), func(t *testing.T) { damagedChunked(t, trailer) })
	}
}

func damagedChunked(t *testing.T, trailer string) {
	video, chunked := chunkedVideo(trailer)
	a := newTestArchive(t, []fixture{{url: "http://example.com/big.mp4", at: "20240101120000",
		header: "Content-Type: video/mp4\r\nTransfer-Encoding: chunked\r\n", body: chunked.String()}})
	c := a.caps["http://example.com/big.mp4 20240101120000"]
	// Replayed once whole, the block is known to match its digest: the
	// next replay streams it without a check first, and must check it at
	// its end.
	u := a.content.URL + "/web/20240101120000id_/http://example.com/big.mp4"
	if resp, sum, n, err := fetchSum(t, u); err != nil || resp.StatusCode != 200 || sum != sha256.Sum256(video) {
		t.Fatalf("intact: %d, %d bytes (%v)", resp.StatusCode, n, err)
	}
	flipMiddleByte(t, a, c)
	resp, sum, n, err := fetchSum(t, u)
	if err == nil && resp.StatusCode < 300 {
		t.Errorf("%d, %d bytes (same as archived: %v), read without an error: a damaged block was passed on whole",
			resp.StatusCode, n, sum == sha256.Sum256(video))
	}
}

// failingWriter is a client that goes away after limit bytes.
type failingWriter struct {
	h     http.Header
	n     int
	limit int
}

func (w *failingWriter) Header() http.Header { return w.h }
func (w *failingWriter) WriteHeader(int)     {}
func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.limit {
		return 0, errors.New("client gone")
	}
	w.n += len(p)
	return len(p), nil
}

// A multi-range request whose client goes away: http.ServeContent returns
// while its goroutine still reads the bodySeeker. serveStored's Close waits
// for that Read and stops later ones, so no block is reopened after it and
// left open (nor, under -race, a race reported).
func TestMultiRangeAbortLeavesNoBlockOpen(t *testing.T) {
	a, _ := largeVideoArchive(t)
	c := a.caps["http://example.com/big.mp4 20240101120000"]
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no finalizer closes a leaked file
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	for range 20 {
		resp, _, err := a.srv.openLarge(context.Background(), c)
		if err != nil || resp == nil || resp.body == nil {
			t.Fatalf("openLarge: %v, %v", resp, err)
		}
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Range", "bytes=0-9999999,20000000-29999999")
		w := &failingWriter{h: http.Header{"Content-Type": {"video/mp4"}}, limit: 100 << 10}
		func() {
			defer func() { recover() }() // http.ErrAbortHandler
			serveStored(w, r, 200, resp.body)
		}()
	}
	time.Sleep(2 * time.Second) // the ServeContent goroutines finish
	if after := fds(); after > before {
		t.Errorf("%d files open before 20 aborted multi-range requests, %d after: blocks reopened after Close are leaked", before, after)
	}
}
