package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

func largeCapture(id string) index.Capture {
	return index.Capture{RecordID: id, Length: minCachedPayload}
}

// loader counts its loads and gives payloads of size bytes.
type loader struct {
	size  int
	calls atomic.Int64
	fail  error
	gate  chan struct{} // if set, a load waits for it
}

func (l *loader) load(context.Context) (*response, error) {
	l.calls.Add(1)
	if l.gate != nil {
		<-l.gate
	}
	if l.fail != nil {
		return nil, l.fail
	}
	return &response{status: 200, payload: make([]byte, l.size)}, nil
}

func TestPayloadCache(t *testing.T) {
	ctx := context.Background()
	pc := newPayloadCache(3 << 20)

	// Requests that come while a load runs share it.
	l := &loader{size: 1 << 20, gate: make(chan struct{})}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if resp, err := pc.get(ctx, largeCapture("a"), l.load); err != nil || len(resp.payload) != 1<<20 {
				t.Errorf("get: %v", err)
			}
		})
	}
	for l.calls.Load() == 0 {
		runtime.Gosched() // until the first load starts; the others then find it
	}
	close(l.gate)
	wg.Wait()
	if n := l.calls.Load(); n != 1 {
		t.Errorf("8 requests at once loaded %d times, want 1", n)
	}
	pc.get(ctx, largeCapture("a"), l.load)
	if n := l.calls.Load(); n != 1 {
		t.Errorf("a request after the load loaded again (%d loads)", n)
	}

	// Least recently used first out: a, b, c at 1 MiB each fill 3 MiB;
	// a is used again, then d pushes b out.
	for _, id := range []string{"b", "c", "a", "d"} {
		pc.get(ctx, largeCapture(id), (&loader{size: 1 << 20}).load)
	}
	for id, kept := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, got := pc.entries[id]; got != kept {
			t.Errorf("%s kept: %v, want %v", id, got, kept)
		}
	}
	if pc.held != 3<<20 {
		t.Errorf("holds %d bytes, want the %d of three payloads", pc.held, 3<<20)
	}
	again := &loader{size: 1 << 20}
	pc.get(ctx, largeCapture("d"), again.load)
	if again.calls.Load() != 0 {
		t.Error("a kept payload was loaded again")
	}

	// Not kept: a failed load, a payload larger than the cache, a small record.
	for _, tc := range []struct {
		name string
		c    index.Capture
		l    *loader
	}{
		{"a failed load", largeCapture("e"), &loader{size: 1, fail: errors.New("disk")}},
		{"a payload over the cache's size", largeCapture("f"), &loader{size: 4 << 20}},
		{"a small record", index.Capture{RecordID: "g", Length: minCachedPayload - 1}, &loader{size: 10}},
	} {
		pc.get(ctx, tc.c, tc.l.load)
		pc.get(ctx, tc.c, tc.l.load)
		if n := tc.l.calls.Load(); n != 2 {
			t.Errorf("%s: loaded %d times in two requests, want 2", tc.name, n)
		}
	}
}

// countingArchive counts the records read through it.
type countingArchive struct {
	archive.Archive
	reads atomic.Int64
}

func (a *countingArchive) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	a.reads.Add(1)
	return a.Archive.Record(ctx, c)
}

// videoArchive archives a 2 MiB video at 2024-01-01 (incompressible, so
// that its record is over a MiB as stored) and, with revisit, a revisit of
// it at 2024-03-01, served through an archive that counts its record reads.
func videoArchive(t *testing.T, revisit bool) (*testArchive, *countingArchive, []byte) {
	t.Helper()
	video := make([]byte, 2<<20)
	rand.NewChaCha8([32]byte{5}).Read(video)
	h := "Content-Type: video/mp4\r\n"
	fixtures := []fixture{{url: "http://example.com/film.mp4", at: "20240101120000", header: h, body: string(video)}}
	if revisit {
		fixtures = append(fixtures, fixture{url: "http://example.com/film.mp4", at: "20240301120000", header: h, body: string(video), revisit: true})
	}
	var counted *countingArchive
	a := newTestArchiveVia(t, fixtures, func(l *archive.Local) archive.Archive {
		counted = &countingArchive{Archive: l}
		return counted
	})
	return a, counted, video
}

// seekFiveTimes asks u for five ranges of video, as a player seeking would,
// and checks each.
func seekFiveTimes(t *testing.T, u string, video []byte) {
	t.Helper()
	for i := range 5 {
		from := i * 400_000
		resp, body := get(t, u, "Range", fmt.Sprintf("bytes=%d-%d", from, from+99))
		if resp.StatusCode != 206 || body != string(video[from:from+100]) {
			t.Fatalf("range at %d: %d, %d bytes", from, resp.StatusCode, len(body))
		}
	}
}

// A video asked for in ranges is read from the archive once.
func TestRangesOfALargeCaptureReadItOnce(t *testing.T) {
	a, counted, video := videoArchive(t, false)
	seekFiveTimes(t, a.content.URL+"/web/20240101120000oe_/http://example.com/film.mp4", video)
	if n := counted.reads.Load(); n != 1 {
		t.Errorf("5 ranges read the record %d times, want 1", n)
	}
	if st := a.srv.CacheStats(); st.Loads != 1 || st.Hits != 4 || st.Entries != 1 || st.Bytes < int64(len(video)) || st.Limit != DefaultPayloadCacheBytes {
		t.Errorf("CacheStats = %+v, want 1 load, 4 hits, the video kept", st)
	}
}

// BenchmarkVideoRange measures one range request near the end of a 32 MiB
// archived video, with the payload cache and without.
func BenchmarkVideoRange(b *testing.B) {
	video := make([]byte, 32<<20)
	rand.NewChaCha8([32]byte{6}).Read(video)
	for _, bc := range []struct {
		name  string
		cache int64
	}{{"cached", DefaultPayloadCacheBytes}, {"uncached", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			a := newTestArchive(b, []fixture{
				{url: "http://example.com/film.mp4", at: "20240101120000", header: "Content-Type: video/mp4\r\n", body: string(video)},
			})
			a.srv.payloads = newPayloadCache(bc.cache)
			u := a.content.URL + "/web/20240101120000oe_/http://example.com/film.mp4"
			from := len(video) - 1<<20
			for b.Loop() {
				resp, body := get(b, u, "Range", fmt.Sprintf("bytes=%d-", from))
				if resp.StatusCode != 206 || len(body) != 1<<20 {
					b.Fatalf("%d, %d bytes", resp.StatusCode, len(body))
				}
			}
		})
	}
}

// A load that panics (net/http recovers a handler's panic) leaves no one
// waiting: the next request for the capture loads it.
func TestPanickingLoadLeavesNoOneWaiting(t *testing.T) {
	pc := newPayloadCache(64 << 20)
	c := largeCapture("<urn:uuid:p>")
	func() {
		defer func() { recover() }()
		pc.get(context.Background(), c, func(context.Context) (*response, error) { panic("damaged record") })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := pc.get(ctx, c, (&loader{size: 1 << 20}).load)
	if err != nil || resp == nil {
		t.Fatalf("a request after a load that panicked: %v; want it loaded again", err)
	}
}

// A payload is a slice of its record's block, whose buffer grew by
// doubling: the cache keeps, and counts, only the payload's own bytes.
func TestCacheCountsWhatItHolds(t *testing.T) {
	video := make([]byte, 2<<20+100<<10) // 2.1 MiB
	rand.NewChaCha8([32]byte{5}).Read(video)
	a := newTestArchive(t, []fixture{
		{url: "http://example.com/film.mp4", at: "20240101120000", header: "Content-Type: video/mp4\r\n", body: string(video)},
	})
	resp, _ := get(t, a.content.URL+"/web/20240101120000oe_/http://example.com/film.mp4", "Range", "bytes=0-9")
	if resp.StatusCode != 206 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	pc := a.srv.payloads
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var kept int64
	for _, e := range pc.entries {
		kept += int64(cap(e.resp.payload))
	}
	if kept == 0 || kept > int64(len(video))+int64(len(video))/16 || kept != pc.held {
		t.Errorf("cache counts %d bytes held; the payloads it keeps pin %d bytes (%.2fx)", pc.held, kept, float64(kept)/float64(pc.held))
	}
}

// Archived bytes with a Content-Encoding are served whole, with their
// length, whatever range is asked: a slice of a gzip stream decodes for no
// client.
func TestEncodedBytesAreServedWhole(t *testing.T) {
	a := exampleArchive(t)
	u := a.content.URL + "/web/20240101120000id_/http://example.com/zipped"
	resp, body := get(t, u, "Range", "bytes=12-", "Accept-Encoding", "identity")
	zr, err := gzip.NewReader(bytes.NewReader([]byte(body)))
	if err == nil {
		_, err = io.ReadAll(zr)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || err != nil {
		t.Errorf("Range bytes=12- of a gzip payload: %d, Content-Encoding %q, %s; decoding it: %v; want 200 and the whole gzip body",
			resp.StatusCode, resp.Header.Get("Content-Encoding"), resp.Header.Get("Content-Range"), err)
	}
	req, _ := http.NewRequest(http.MethodHead, u, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	hresp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.Header.Get("Content-Length") == "" {
		t.Errorf("HEAD of a gzip payload (id_): no Content-Length: %v", hresp.Header)
	}
}

// A re-crawl of an unchanged video is stored as a revisit, a small record:
// what is kept is decided by the payload, so its ranges read the revisit
// and the original once.
func TestRangesOfARevisitReadOnce(t *testing.T) {
	a, counted, video := videoArchive(t, true)
	seekFiveTimes(t, a.content.URL+"/web/20240301120000oe_/http://example.com/film.mp4", video)
	if n := counted.reads.Load(); n > 2 {
		t.Errorf("5 ranges of a revisit of a 2 MiB video read %d records, want at most 2", n)
	}
}

// The first request for a capture is cancelled (a player seeking aborts
// it) while another waits: the waiter loads, and what it loaded is kept
// for the next request.
func TestWaiterLoadsWhenTheFirstRequestGoesAway(t *testing.T) {
	pc := newPayloadCache(64 << 20)
	c := largeCapture("<urn:uuid:w>")
	l := &loader{size: 1 << 20}
	started, release := make(chan struct{}), make(chan struct{})
	ctx1, cancel1 := context.WithCancel(context.Background())
	go pc.get(ctx1, c, func(ctx context.Context) (*response, error) {
		close(started)
		<-release
		return nil, ctx.Err()
	})
	<-started
	done := make(chan struct{})
	go func() { pc.get(context.Background(), c, l.load); close(done) }()
	time.Sleep(50 * time.Millisecond) // the waiter waits on the first load (if not yet, it loads after: the same)
	cancel1()
	close(release)
	<-done
	pc.get(context.Background(), c, l.load)
	if n := l.calls.Load(); n != 1 {
		t.Errorf("after a cancelled first load, two requests loaded %d times, want 1 (the waiter's load kept)", n)
	}
}

// A kept payload is a copy of its own: the slice a load gives shares the
// record's block, HTTP header before it included, which would stay in
// memory with it, uncounted.
func TestKeptPayloadHoldsOnlyItself(t *testing.T) {
	pc := newPayloadCache(64 << 20)
	block := make([]byte, 16<<20+(1<<20)) // a 16 MiB header, then a 1 MiB payload
	load := func(context.Context) (*response, error) {
		return &response{status: 200, payload: block[16<<20:]}, nil
	}
	resp, err := pc.get(context.Background(), largeCapture("pinned"), load)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(resp.payload) == unsafe.SliceData(block[16<<20:]) {
		t.Error("the kept payload shares the record's block")
	}
	if st := pc.stats(); st.Bytes != int64(cap(resp.payload)) || st.Bytes > 1<<20+(64<<10) {
		t.Errorf("cache counts %d bytes for a payload of %d", st.Bytes, len(resp.payload))
	}
}
