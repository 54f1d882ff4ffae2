package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/websim"
)

// net2 is a network of two admitted nodes: a sends, b receives.
type net2 struct {
	a, b *admission.Credential
}

func newNet(t testing.TB) net2 {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	var n net2
	for _, c := range []**admission.Credential{&n.a, &n.b} {
		name := "a"
		if c == &n.b {
			name = "b"
		}
		cred, err := admission.Admit(dir, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		*c = &cred
	}
	return n
}

// receiver records what its accept was given.
type receiver struct {
	mu    sync.Mutex
	got   map[string]int // URL → times accepted
	from  map[string]bool
	fails int // accept fails this many more times
	calls int
	ch    chan struct{}
}

func newReceiver() *receiver {
	return &receiver{got: map[string]int{}, from: map[string]bool{}, ch: make(chan struct{}, 1)}
}

func (r *receiver) accept(_ context.Context, from string, urls []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fails > 0 {
		r.fails--
		return errors.New("frontier is busy")
	}
	r.from[from] = true
	for _, u := range urls {
		r.got[u]++
	}
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

// waitFor waits until the receiver holds n distinct URLs.
func (r *receiver) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(2 * time.Minute) // a hang, not a speed limit
	for {
		r.mu.Lock()
		have := len(r.got)
		r.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-r.ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("receiver has %d URLs after 2 minutes, want %d", have, n)
		}
	}
}

// check asserts that the receiver got exactly want, each once, from id.
func (r *receiver) check(t *testing.T, want []string, from string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != len(want) {
		t.Errorf("receiver got %d distinct URLs, want %d", len(r.got), len(want))
	}
	for _, u := range want {
		if r.got[u] != 1 {
			t.Errorf("URL %q accepted %d times, want once", u, r.got[u])
			break
		}
	}
	if len(r.from) != 1 || !r.from[from] {
		t.Errorf("batches came from %v, want only %s", slices.Collect(maps.Keys(r.from)), from)
	}
}

// serve runs a peer server for cred with the outbox handler on a fresh
// loopback port, until the test ends or stop is called.
func serve(t *testing.T, cred *admission.Credential, h http.Handler) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := peer.NewServer(cred, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// resolver is a member list the test changes.
type resolver struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (r *resolver) set(id, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if addr == "" {
		delete(r.addrs, id)
	} else {
		r.addrs[id] = addr
	}
}

func (r *resolver) resolve(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.addrs[id]
	return a, ok
}

func openDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// quiet drops pebble's informational messages.
type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

type sender struct {
	o      *Outbox
	db     *pebble.DB
	res    *resolver
	client *peer.Client
	cancel context.CancelFunc
	done   chan error
}

func newSender(t *testing.T, cred *admission.Credential, dir string, res *resolver, cfg Config) *sender {
	t.Helper()
	s := &sender{db: openDB(t, dir), res: res, client: peer.NewClient(cred)}
	cfg.DB, cfg.Client, cfg.Resolve = s.db, s.client, res.resolve
	o, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.backoff0, o.backoffMax = 5*time.Millisecond, 50*time.Millisecond
	s.o = o
	return s
}

// drained waits until nothing is pending for id.
func (s *sender) drained(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a speed limit
	for s.o.Pending()[id] > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still pending for %s after 2 minutes: %v", id, s.o.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *sender) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- s.o.Run(ctx) }()
	t.Cleanup(func() { s.close(t) })
}

// close stops Run, if running, and closes the database.
func (s *sender) close(t *testing.T) {
	if s.db == nil {
		return
	}
	if s.cancel != nil {
		s.cancel()
		if err := <-s.done; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.cancel = nil
	}
	s.client.Close()
	if err := s.db.Close(); err != nil {
		t.Error(err)
	}
	s.db = nil
}

// add queues urls for id in commits of 100, as the crawler would.
func (s *sender) add(t *testing.T, id string, urls []string) {
	t.Helper()
	for chunk := range slices.Chunk(urls, 100) {
		b := s.db.NewIndexedBatch()
		if err := s.o.Add(b, id, chunk); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		s.o.Committed()
	}
}

func pages(n int) []string {
	p := websim.New(websim.Config{Seed: 7}).Pages()
	rand.New(rand.NewSource(1)).Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p[:min(n, len(p))]
}

func TestDelivery(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{BatchSize: 300})
	urls := pages(3000)
	s.run(t)
	s.add(t, n.b.ID(), urls)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	s.close(t)
	rcv.check(t, urls, n.a.ID())
	if p := s.o.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v after delivery, want none", p)
	}
	st := s.o.Stats()
	text := 0
	for _, u := range urls {
		text += len(u)
	}
	if st.URLs != int64(len(urls)) || st.Text != int64(text) || st.Batches < int64(len(urls)/300) || st.Wire <= 0 {
		t.Errorf("Stats = %+v, want %d URLs of %d bytes in at least %d batches", st, len(urls), text, len(urls)/300)
	}
	if st.Wire >= st.Text {
		t.Errorf("%d bytes on the wire for %d bytes of URLs", st.Wire, st.Text)
	}
}

func TestPeerDown(t *testing.T) {
	n := newNet(t)
	res := &resolver{addrs: map[string]string{}}
	s := newSender(t, n.a, t.TempDir(), res, Config{})
	s.run(t)
	urls := pages(1000)
	s.add(t, n.b.ID(), urls[:500]) // not live
	// A live member whose port refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	res.set(n.b.ID(), ln.Addr().String())
	s.add(t, n.b.ID(), urls[500:])
	for s.o.Stats().Failures < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.o.Pending()[n.b.ID()]; got != len(urls) {
		t.Fatalf("Pending while the peer is down = %d, want %d", got, len(urls))
	}
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res.set(n.b.ID(), addr)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	s.close(t)
	rcv.check(t, urls, n.a.ID())
}

func TestAcceptFailsForAWhile(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	rcv.fails = 4
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{})
	s.run(t)
	urls := pages(800)
	s.add(t, n.b.ID(), urls)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	s.close(t)
	rcv.check(t, urls, n.a.ID())
	if st := s.o.Stats(); st.Failures < 4 {
		t.Errorf("Failures = %d, want at least 4", st.Failures)
	}
}

func TestCrashSafety(t *testing.T) {
	n := newNet(t)
	dir := t.TempDir()
	res := &resolver{addrs: map[string]string{}}
	s := newSender(t, n.a, dir, res, Config{})
	urls := pages(1500)
	s.add(t, n.b.ID(), urls)
	// A batch staged but never committed is not queued.
	b := s.db.NewIndexedBatch()
	if err := s.o.Add(b, n.b.ID(), []string{"http://uncommitted.example/"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	s.close(t) // without ever running

	s = newSender(t, n.a, dir, res, Config{})
	if got := s.o.Pending(); got[n.b.ID()] != len(urls) || len(got) != 1 {
		t.Fatalf("Pending after reopening = %v, want %d for %s", got, len(urls), n.b.ID())
	}
	// What is still queued is still recent: adding it again queues nothing.
	s.add(t, n.b.ID(), urls[:10])
	if st := s.o.Stats(); st.Repeats != 10 {
		t.Errorf("Repeats after re-adding queued URLs = %d, want 10", st.Repeats)
	}
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res.set(n.b.ID(), addr)
	s.run(t)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	s.close(t)
	rcv.check(t, urls, n.a.ID())
}

func TestRecent(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{})
	urls := pages(400)
	twice := append(slices.Clone(urls), urls[:50]...)
	s.add(t, n.b.ID(), twice)
	if got := s.o.Pending()[n.b.ID()]; got != len(urls) {
		t.Errorf("Pending = %d, want %d", got, len(urls))
	}
	s.run(t)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	// Sent a moment ago: dropped before being queued.
	s.add(t, n.b.ID(), urls[100:200])
	// The same URLs for another peer are not repeats.
	s.add(t, "other-peer", urls[100:200])
	st := s.o.Stats()
	if st.Repeats != 150 {
		t.Errorf("Repeats = %d, want 150", st.Repeats)
	}
	if p := s.o.Pending(); p[n.b.ID()] != 0 || p["other-peer"] != 100 {
		t.Errorf("Pending = %v, want 100 for other-peer only", p)
	}
	// Unsendable URLs are dropped, not queued.
	s.add(t, n.b.ID(), []string{"", "http://x.example/\n", "http://x.example/" + strings.Repeat("a", MaxURLBytes), "http://x.example/\xff"})
	if st := s.o.Stats(); st.Invalid != 4 {
		t.Errorf("Invalid = %d, want 4", st.Invalid)
	}
	s.close(t)
	rcv.check(t, urls, n.a.ID())
}

func TestRecentSetBounded(t *testing.T) {
	s := newRecentSet(5000)
	for h := range uint64(100_000) {
		s.add(h)
	}
	if n := len(s.cur) + len(s.old); n > 5000 {
		t.Errorf("set holds %d hashes, want at most 5000", n)
	}
	for h := uint64(100_000 - 2500); h < 100_000; h++ {
		if !s.has(h) {
			t.Fatalf("hash %d of the last 2500 is not in the set", h)
		}
	}
	if s.has(0) {
		t.Error("the oldest hash is still in the set")
	}
}

func TestReroute(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	const gone = "gone-for-good"
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{})
	urls := pages(1200)
	s.add(t, gone, urls[:1000])
	s.add(t, n.b.ID(), urls[1000:])
	s.run(t)
	rcv.waitFor(t, 200)
	if got := s.o.Pending()[gone]; got != 1000 {
		t.Fatalf("Pending for the gone peer = %d, want 1000", got)
	}
	b := s.db.NewIndexedBatch()
	err := s.o.Reroute(b, func(u string) string {
		if u == urls[0] {
			return "" // left where it is
		}
		return n.b.ID()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.o.Committed()
	rcv.waitFor(t, len(urls)-1)
	s.drained(t, n.b.ID())
	if p := s.o.Pending(); p[gone] != 1 || len(p) != 1 {
		t.Errorf("Pending after Reroute = %v, want 1 left for %s", p, gone)
	}
	s.close(t)
	rcv.check(t, urls[1:], n.a.ID())
	if err := s.o.Reroute(pebbleBatchNotIndexed(t), func(string) string { return "" }); err == nil {
		t.Error("Reroute accepted a batch that is not indexed")
	}
}

func pebbleBatchNotIndexed(t *testing.T) *pebble.Batch {
	db := openDB(t, t.TempDir())
	t.Cleanup(func() { db.Close() })
	return db.NewBatch()
}

// TestHandlerRejects posts bad batches through a real peer channel.
func TestHandlerRejects(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	client := peer.NewClient(n.a)
	defer client.Close()
	enc, _ := zstd.NewWriter(nil)
	z := func(p []byte) []byte { return enc.EncodeAll(p, nil) }
	valid := func(urls ...string) []byte {
		p, _ := encodePayload(nil, urls)
		return p
	}
	// A front-coded batch of one URL with a raw, unchecked body.
	raw := func(u string) []byte {
		p := append(slices.Clone(magic), 1, 0, byte(len(u)))
		return append(p, u...)
	}
	var many bytes.Buffer
	many.Write(magic)
	many.Write([]byte{0xa1, 0x8d, 0x06}) // 100,001
	for i := range MaxBatchURLs + 1 {
		fmt.Fprintf(&many, "\x00\x05%05d", i)
	}
	long := valid("http://x.example/" + strings.Repeat("a", MaxURLBytes-17))
	long[len(long)-1] = 'b'
	zeros := z(append(valid("http://x.example/"), make([]byte, 100<<20)...))
	// 80 MB of URLs, front-coded into 200 kB, compressed into less.
	var big []string
	for i := range 20_000 {
		big = append(big, fmt.Sprintf("http://x.example/%s%06d", strings.Repeat("a", 3980), i))
	}
	bomb := z(valid(big...))
	tests := []struct {
		name, method, ctype, cenc string
		body                      []byte
		want                      int
	}{
		{"get", http.MethodGet, ContentType, "zstd", nil, 405},
		{"content type", "POST", "text/plain", "zstd", z(valid("http://x.example/")), 415},
		{"encoding", "POST", ContentType, "gzip", z(valid("http://x.example/")), 415},
		{"not zstd", "POST", ContentType, "zstd", []byte("http://x.example/\n"), 400},
		{"not a batch", "POST", ContentType, "zstd", z([]byte("http://x.example/\n")), 400},
		{"version", "POST", ContentType, "zstd", z([]byte("WGU\x02\x00")), 400},
		{"control char", "POST", ContentType, "zstd", z(raw("http://x\x07/")), 400},
		{"newline", "POST", ContentType, "zstd", z(raw("http://x/\n")), 400},
		{"bad utf-8", "POST", ContentType, "zstd", z(raw("http://x/\xff")), 400},
		{"truncated", "POST", ContentType, "zstd", z(valid("http://a.example/", "http://b.example/")[:20]), 400},
		{"trailing", "POST", ContentType, "zstd", z(append(valid("http://x.example/"), 0)), 400},
		{"too long", "POST", ContentType, "zstd", z(valid("http://x.example/" + strings.Repeat("a", MaxURLBytes))), 400},
		{"too many", "POST", ContentType, "zstd", z(many.Bytes()), 413},
		{"zeros", "POST", ContentType, "zstd", zeros, 400},
		{"bomb", "POST", ContentType, "zstd", bomb, 413},
		{"oversized body", "POST", ContentType, "zstd", make([]byte, MaxBodyBytes+1), 413},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, Path, bytes.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", tt.ctype)
		req.Header.Set("Content-Encoding", tt.cenc)
		resp, err := client.Do(context.Background(), addr, n.b.ID(), req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, resp.StatusCode, bytes.TrimSpace(msg), tt.want)
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.calls != 0 {
		t.Errorf("accept called %d times for bad batches", rcv.calls)
	}
}

func TestHandlerNeedsPeer(t *testing.T) {
	rcv := newReceiver()
	h := Handler(rcv.accept)
	rw := &recorder{h: http.Header{}}
	req, _ := http.NewRequest(http.MethodPost, Path, nil)
	h.ServeHTTP(rw, req)
	if rw.code != http.StatusForbidden || rcv.calls != 0 {
		t.Errorf("request without a peer: status %d, %d accepts; want 403, none", rw.code, rcv.calls)
	}
}

type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

func TestWireRoundTrip(t *testing.T) {
	dec, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(nil)
	urls := pages(2000)
	urls = append(urls, urls[:10]...)
	want := slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(urls)))))
	p, _ := encodePayload(nil, slices.Clone(urls))
	got, err := decodeBatch(dec, enc.EncodeAll(p, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("round trip gave %d URLs, want %d", len(got), len(want))
	}
}

// BenchmarkWire reports bytes on the wire per URL for batches of websim
// URLs split among peers by host, against the URLs' average length.
func BenchmarkWire(b *testing.B) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	urls := pages(1 << 30)
	for _, peers := range []int{3, 10} {
		b.Run(fmt.Sprintf("peers=%d", peers), func(b *testing.B) {
			var wire, text, n int
			for b.Loop() {
				wire, text, n = 0, 0, 0
				queues := make([][]string, peers)
				flush := func(i int) {
					for _, u := range queues[i] {
						text += len(u)
					}
					n += len(queues[i])
					p, _ := encodePayload(nil, queues[i])
					wire += len(enc.EncodeAll(p, nil))
					queues[i] = nil
				}
				for _, u := range urls {
					host, _, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
					i := int(fnv32(host) % uint32(peers))
					if queues[i] = append(queues[i], u); len(queues[i]) == DefaultBatchSize {
						flush(i)
					}
				}
				for i := range queues {
					if len(queues[i]) > 0 {
						flush(i)
					}
				}
			}
			b.ReportMetric(float64(wire)/float64(n), "wireB/URL")
			b.ReportMetric(float64(text)/float64(n), "urlB/URL")
		})
	}
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func FuzzDecodeBatch(f *testing.F) {
	enc, _ := zstd.NewWriter(nil)
	seeds := [][]string{
		{"http://a.example/"},
		{"http://a.example/", "http://a.example/b", "https://b.example/?q=1"},
		pages(50),
	}
	for _, s := range seeds {
		p, _ := encodePayload(nil, s)
		f.Add(enc.EncodeAll(p, nil))
		f.Add(p) // not compressed: must be refused
	}
	f.Add([]byte{})
	f.Add(enc.EncodeAll([]byte("WGU\x01\x02\x00\x01a\x00\x01a"), nil))
	dec, err := newDecoder()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		urls, err := decodeBatch(dec, body)
		if err != nil {
			return
		}
		if len(urls) > MaxBatchURLs {
			t.Fatalf("%d URLs accepted", len(urls))
		}
		for i, u := range urls {
			if why := validURL(u); why != "" {
				t.Fatalf("URL %d accepted: %s", i, why)
			}
			if i > 0 && urls[i-1] >= u {
				t.Fatalf("URLs %d and %d out of order", i-1, i)
			}
		}
		// What decodes re-encodes to the same payload.
		p, _ := encodePayload(nil, slices.Clone(urls))
		again, err := decodeBatch(dec, enc.EncodeAll(p, nil))
		if err != nil || !slices.Equal(again, urls) {
			t.Fatalf("re-encoded batch does not decode the same: %v", err)
		}
	})
}
