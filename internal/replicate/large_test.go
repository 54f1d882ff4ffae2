package replicate

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// largeCapture writes into dir a capture whose response body, of size
// bytes, does not compress, with its request record.
func largeCapture(t testing.TB, dir string, size int) Entry {
	t.Helper()
	body := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(body)
	return videoCapture(t, dir, body)
}

// videoCapture writes into dir a capture of a video whose body is body,
// with its request record.
func videoCapture(t testing.TB, dir string, body []byte) Entry {
	t.Helper()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: %d\r\n\r\n", len(body))
	raw = append(raw, body...)
	u := "https://video.example/films/large.mp4"
	at := time.Date(2026, 11, 24, 1, 2, 3, 456789000, time.UTC)
	rec, err := warc.NewResponse(u, at, raw)
	if err != nil {
		t.Fatal(err)
	}
	req := warc.NewRequest(u, at, []byte("GET /films/large.mp4 HTTP/1.1\r\nHost: video.example\r\n\r\n"))
	req.Header.Set("WARC-Concurrent-To", rec.ID())
	locs, err := w.WriteGroup([]*warc.Record{rec, req})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	key, err := urlkey.SURT(u)
	if err != nil {
		t.Fatal(err)
	}
	return Entry{
		Capture: index.Capture{
			URLKey: key, Time: at, URL: u, Type: warc.TypeResponse, Status: 200, MIME: "video/mp4",
			Digest: rec.Header.Get("WARC-Payload-Digest"), RecordID: rec.ID(),
			Segment: locs[0].Segment, Offset: locs[0].Offset, Length: locs[0].Length,
		},
		Records: locs,
	}
}

// batchCounter wraps a store, noting the captures of each batch it took.
type batchCounter struct {
	mu      sync.Mutex
	batches [][]string // record IDs of the captures of each batch
}

func (b *batchCounter) wrap(store func(context.Context, string, []Copy) error) func(context.Context, string, []Copy) error {
	return func(ctx context.Context, from string, copies []Copy) error {
		var ids []string
		for _, cp := range copies {
			if cp.Capture != nil {
				ids = append(ids, cp.Capture.RecordID)
			}
		}
		b.mu.Lock()
		b.batches = append(b.batches, ids)
		b.mu.Unlock()
		return store(ctx, from, copies)
	}
}

// A capture too large for a batch (a video, say, with --max-body-size
// raised, or imported) is queued and travels alone, byte for byte, to
// every peer; the captures around it travel as usual.
func TestLargeCaptureTravelsAlone(t *testing.T) {
	creds := network(t, 3)
	b, c := creds[1].ID(), creds[2].ID()
	rb, rc := newReceiver(), newReceiver()
	var cb, cc batchCounter
	addrB, _ := serve(t, creds[1], Handler(cb.wrap(rb.store)))
	addrC, _ := serve(t, creds[2], Handler(cc.wrap(rc.store)))
	res := &resolver{addrs: map[string]string{b: addrB, c: addrC}}
	warcDir := t.TempDir()
	small := captures(t, warcDir, 6)
	large := largeCapture(t, warcDir, MaxBodyBytes+(1<<20))
	if large.Records[0].Length <= MaxBodyBytes {
		t.Fatalf("the large capture's member is %d bytes, not over %d", large.Records[0].Length, MaxBodyBytes)
	}
	entries := slices.Concat(small[:3], []Entry{large}, small[3:])
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.add(t, []string{b, c}, entries)
	if st := s.q.Stats(); st.Invalid != 0 {
		t.Fatalf("Add refused %d entries", st.Invalid)
	}
	s.run()
	waitUntil(t, "delivery", func() bool { return s.q.Under() == 0 })
	rb.check(t, warcDir, entries, creds[0].ID())
	rc.check(t, warcDir, entries, creds[0].ID())
	for name, cnt := range map[string]*batchCounter{"B": &cb, "C": &cc} {
		cnt.mu.Lock()
		for _, ids := range cnt.batches {
			if slices.Contains(ids, large.Capture.RecordID) && len(ids) != 1 {
				t.Errorf("peer %s: the large capture came in a batch of %d captures", name, len(ids))
			}
		}
		cnt.mu.Unlock()
	}
	if st := s.q.Stats(); st.Dropped != 0 || st.Entries != 2*int64(len(entries)) {
		t.Errorf("Stats = %+v, want %d entries sent, none dropped", st, 2*len(entries))
	}
}

// batchPoster returns a function that posts a batch body, of length bytes
// (-1: not declared), as node creds[0] to the peer server of creds[1] at
// addr, and returns the answer's status and message.
func batchPoster(t *testing.T, creds []*admission.Credential) func(addr string, body io.Reader, length int64) (int, string) {
	client := newSender(t, creds[0], t.TempDir(), t.TempDir(), &resolver{addrs: map[string]string{}}, 0).client
	return func(addr string, body io.Reader, length int64) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, Path, body)
		req.ContentLength = length
		req.Header.Set("Content-Type", ContentType)
		resp, err := client.Do(context.Background(), addr, creds[1].ID(), req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(msg))
	}
}

// A receiver holds one large batch in memory at a time: another, meanwhile,
// is answered 503 (the sender tries it again later). Large is over
// MaxBodyBytes on the wire, or in the blocks its records declare: a
// record of zeros is small on the wire and large once checked. Batches
// over MaxBodyBytes must carry one entry and declare their length.
func TestHandlerTakesOneLargeBatchAtATime(t *testing.T) {
	creds := network(t, 2)
	post := batchPoster(t, creds)
	batchOf := func(dir string, e Entry) []byte {
		c := e.Capture
		c.Segment, c.Offset, c.Length = "", 0, 0
		var members [][]byte
		for _, l := range e.Records {
			members = append(members, segmentBytes(t, dir, l))
		}
		return batchBytes([]wireEntry{{capture: c, members: members}})
	}

	var body []byte // the large batch of the first case, for the refusals below
	var addr string
	var rb *receiver
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"large on the wire", nil},
		{"large once checked", make([]byte, MaxBodyBytes+(1<<20))},
	} {
		dir := t.TempDir()
		e := largeCapture(t, dir, MaxBodyBytes+(1<<20))
		if tc.body != nil {
			e = videoCapture(t, dir, tc.body)
		}
		b := batchOf(dir, e)
		if tc.body != nil && len(b) > MaxBodyBytes/8 {
			t.Fatalf("%s: a batch of %d bytes is not small on the wire", tc.name, len(b))
		}
		rb = newReceiver()
		entered, release := make(chan struct{}), make(chan struct{})
		var first atomic.Bool
		addr, _ = serve(t, creds[1], Handler(func(ctx context.Context, from string, copies []Copy) error {
			if first.CompareAndSwap(false, true) {
				close(entered)
				<-release
			}
			return rb.store(ctx, from, copies)
		}))
		firstCode := make(chan int, 1)
		go func() {
			code, _ := post(addr, bytes.NewReader(b), int64(len(b)))
			firstCode <- code
		}()
		<-entered
		if code, msg := post(addr, bytes.NewReader(b), int64(len(b))); code != http.StatusServiceUnavailable {
			t.Errorf("%s: a second large batch during the first answered %d %s, want 503", tc.name, code, msg)
		}
		close(release)
		if code := <-firstCode; code != http.StatusNoContent {
			t.Fatalf("%s: the large batch answered %d, want 204", tc.name, code)
		}
		rb.check(t, dir, []Entry{e}, creds[0].ID())
		// The slot is free again: the same batch is taken (and skipped by
		// a real store, as delivery is at least once).
		if code, msg := post(addr, bytes.NewReader(b), int64(len(b))); code != http.StatusNoContent {
			t.Errorf("%s: a large batch after the first answered %d %s, want 204", tc.name, code, msg)
		}
		if body == nil {
			body = b
		}
	}

	c := index.Capture{URLKey: "com,example)/", RecordID: "<urn:uuid:x>", Type: warc.TypeResponse}
	calls := rb.calls
	twoEntries := batchBytes([]wireEntry{
		{capture: c, members: [][]byte{make([]byte, MaxBodyBytes/2)}},
		{capture: c, members: [][]byte{make([]byte, MaxBodyBytes/2)}},
	})
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
	}{
		{"two entries over MaxBodyBytes", bytes.NewReader(twoEntries), int64(len(twoEntries))},
		{"over MaxBodyBytes of undeclared length", io.MultiReader(bytes.NewReader(body)), -1},
		{"over MaxLargeBodyBytes", io.LimitReader(zeros{}, MaxLargeBodyBytes+1), MaxLargeBodyBytes + 1},
	} {
		if code, msg := post(addr, tc.body, tc.length); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: answered %d %s, want 413", tc.name, code, msg)
		}
	}
	if rb.calls != calls {
		t.Errorf("store was called for a refused batch")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// BenchmarkLargeCapture measures pushing one capture too large for a
// batch to a peer over loopback TLS: read from its segment, sent alone,
// checked whole (gzip, block digest) and handed to the store.
func BenchmarkLargeCapture(b *testing.B) {
	creds := network(b, 2)
	peerID := creds[1].ID()
	var stored atomic.Int64
	addr, _ := serve(b, creds[1], Handler(func(_ context.Context, _ string, copies []Copy) error {
		stored.Add(1)
		return nil
	}))
	res := &resolver{addrs: map[string]string{peerID: addr}}
	warcDir := b.TempDir()
	large := largeCapture(b, warcDir, MaxBodyBytes+(1<<20))
	s := newSender(b, creds[0], b.TempDir(), warcDir, res, 0)
	s.run()
	b.SetBytes(large.Records[0].Length + large.Records[1].Length)
	b.ResetTimer()
	for i := range b.N {
		s.add(b, []string{peerID}, []Entry{large})
		waitUntil(b, "delivery", func() bool { return stored.Load() == int64(i+1) && s.q.Under() == 0 })
	}
}

// A member made of an empty gzip member followed by the real one: the
// gate's header read sees an empty first member, while a warc.Reader
// skips it and inflates the second's block. It must count as large (and,
// once taken, be refused: a copy is one gzip member).
func TestEmptyMemberBeforeARecordDoesNotSlipPastTheGate(t *testing.T) {
	creds := network(t, 2)
	postBatch := batchPoster(t, creds)
	post := func(addr string, body []byte) (int, string) {
		return postBatch(addr, bytes.NewReader(body), int64(len(body)))
	}
	dir := t.TempDir()
	e := videoCapture(t, dir, make([]byte, MaxBodyBytes+(1<<20))) // zeros: ~65 KB on the wire
	batch := func(prefix []byte) []byte {
		c := e.Capture
		c.Segment, c.Offset, c.Length = "", 0, 0
		var members [][]byte
		for i, l := range e.Records {
			m := segmentBytes(t, dir, l)
			if i == 0 {
				m = append(append([]byte(nil), prefix...), m...)
			}
			members = append(members, m)
		}
		return batchBytes([]wireEntry{{capture: c, members: members}})
	}
	var empty bytes.Buffer
	zw := gzip.NewWriter(&empty)
	zw.Close()
	honest, sneaky := batch(nil), batch(empty.Bytes())

	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	addr, _ := serve(t, creds[1], Handler(func(ctx context.Context, from string, copies []Copy) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	}))
	done := make(chan int, 1)
	go func() { code, _ := post(addr, honest); done <- code }()
	<-entered // the honest large batch holds the gate

	code, msg := post(addr, sneaky)
	close(release)
	<-done
	if code != http.StatusServiceUnavailable {
		t.Errorf("with the large slot held, a batch whose record declares %d bytes answered %d %.120s, want 503", MaxBodyBytes+(1<<20), code, msg)
	}
	if code, msg := post(addr, sneaky); code != http.StatusBadRequest || !strings.Contains(msg, "before the record") {
		t.Errorf("the batch with the slot free: %d %.120s, want 400", code, msg)
	}
}

// A record's WARC header (up to 1 MiB, compressing about 1000:1) counts
// as what the batch inflates and keeps, as its block does: headers alone
// pass the budget, and records past the retained bound are let go.
func TestHeadersCountAgainstTheBudget(t *testing.T) {
	rec := warc.NewRequest("http://example.test/", time.Now(), []byte("GET / HTTP/1.1\r\nHost: example.test\r\n\r\n"))
	rec.Header.Set("X-Pad", strings.Repeat("a", 1_000_000))
	m := member(t, rec)
	const n = 100
	copies := make([]Copy, n)
	for i := range copies {
		copies[i] = Copy{Member: m}
	}
	if err := verifyCopies(copies, MaxBodyBytes); !errors.Is(err, errOverBudget) {
		t.Errorf("%d records of 1 MB headers, %d bytes on the wire, against a budget of %d: %v; want errOverBudget", n, n*len(m), MaxBodyBytes, err)
	}
	copies = copies[:50] // within the budget: checked, but not all kept
	if err := verifyCopies(copies, MaxBodyBytes); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, cp := range copies {
		if cp.Record != nil {
			kept += cp.Record.Header.Size()
		}
	}
	if kept > maxRetainedBlocks+2_000_000 {
		t.Errorf("%d bytes of headers kept, past the bound of %d", kept, maxRetainedBlocks)
	}
}
