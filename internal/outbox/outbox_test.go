package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
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
	"sync/atomic"
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
	got   map[string]int  // URL → times accepted
	links map[string]Link // URL → the link last accepted
	from  map[string]bool
	fails int // accept fails this many more times
	calls int
	ch    chan struct{}
}

func newReceiver() *receiver {
	return &receiver{got: map[string]int{}, links: map[string]Link{}, from: map[string]bool{}, ch: make(chan struct{}, 1)}
}

func (r *receiver) accept(_ context.Context, from string, links []Link) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fails > 0 {
		r.fails--
		return errors.New("frontier is busy")
	}
	r.from[from] = true
	for _, l := range links {
		r.got[l.URL]++
		r.links[l.URL] = l
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

// check asserts that the receiver got exactly want, each once, with its
// depth and embed flag, from id.
func (r *receiver) check(t *testing.T, want []Link, from string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != len(want) {
		t.Errorf("receiver got %d distinct URLs, want %d", len(r.got), len(want))
	}
	for _, w := range want {
		if r.got[w.URL] != 1 {
			t.Errorf("URL %q accepted %d times, want once", w.URL, r.got[w.URL])
			break
		}
		if got := r.links[w.URL]; got != w {
			t.Errorf("accepted %+v, want %+v", got, w)
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

// deliver runs the outbox, queues urls for id, waits until rcv has them
// all and nothing is pending, and stops it.
func (s *sender) deliver(t *testing.T, rcv *receiver, id string, urls []Link) {
	t.Helper()
	s.run(t)
	s.add(t, id, urls)
	rcv.waitFor(t, len(urls))
	s.drained(t, id)
	s.close(t)
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

// add queues links for id in commits of 100, as the crawler would.
func (s *sender) add(t *testing.T, id string, links []Link) {
	t.Helper()
	for chunk := range slices.Chunk(links, 100) {
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

// links returns n websim URLs as links of every kind: depths from 0 (a
// seed) to MaxDepth, embeds or not.
func links(n int) []Link {
	var ls []Link
	for i, u := range pages(n) {
		d := i % 7
		switch i % 97 {
		case 1:
			d = MaxDepth
		case 2:
			d = 300 // a tag of more than one byte
		}
		ls = append(ls, Link{URL: u, Depth: d, Embed: i%3 == 0})
	}
	return ls
}

// other returns ls with every depth and embed flag changed.
func other(ls []Link) []Link {
	out := make([]Link, len(ls))
	for i, l := range ls {
		out[i] = Link{URL: l.URL, Depth: (l.Depth + 1) % MaxDepth, Embed: !l.Embed}
	}
	return out
}

func TestDelivery(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{BatchSize: 300})
	urls := links(3000)
	s.deliver(t, rcv, n.b.ID(), urls)
	rcv.check(t, urls, n.a.ID())
	if p := s.o.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v after delivery, want none", p)
	}
	st := s.o.Stats()
	text := 0
	for _, l := range urls {
		text += len(l.URL)
	}
	if st.URLs != int64(len(urls)) || st.Text != int64(text) || st.Batches < int64(len(urls)/300) || st.Wire <= 0 {
		t.Errorf("Stats = %+v, want %d URLs of %d bytes in at least %d batches", st, len(urls), text, len(urls)/300)
	}
	if st.Wire >= st.Text {
		t.Errorf("%d bytes on the wire for %d bytes of URLs", st.Wire, st.Text)
	}
}

// Flush sends a queue that is neither full nor old, once: URLs queued
// after the queue emptied wait for a batch again.
func TestFlush(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	addr, _ := serve(t, n.b, Handler(rcv.accept))
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{BatchSize: 500, MaxDelay: time.Hour})
	ls := links(15)
	s.run(t)
	s.add(t, n.b.ID(), ls[:10])
	s.o.Flush()
	rcv.waitFor(t, 10)
	s.drained(t, n.b.ID())
	// Let the sender see the empty queue and stop, so that the next URLs
	// are not taken for leftovers found on disk (which leave at once).
	for {
		s.o.mu.Lock()
		running := s.o.peers[n.b.ID()].sender
		s.o.mu.Unlock()
		if !running {
			break
		}
		time.Sleep(time.Millisecond)
	}

	s.add(t, n.b.ID(), ls[10:])
	time.Sleep(300 * time.Millisecond) // they would leave in this time if the flush had stuck
	rcv.mu.Lock()
	early := len(rcv.got)
	rcv.mu.Unlock()
	if early != 10 {
		t.Errorf("receiver has %d URLs before the second Flush, want 10", early)
	}
	s.o.Flush()
	rcv.waitFor(t, 15)
	s.drained(t, n.b.ID())
	s.close(t)
	rcv.check(t, ls, n.a.ID())
}

func TestPeerDown(t *testing.T) {
	n := newNet(t)
	res := &resolver{addrs: map[string]string{}}
	s := newSender(t, n.a, t.TempDir(), res, Config{})
	s.run(t)
	urls := links(1000)
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
	urls := links(800)
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
	urls := links(1500)
	s.add(t, n.b.ID(), urls)
	// A batch staged but never committed is not queued.
	b := s.db.NewIndexedBatch()
	if err := s.o.Add(b, n.b.ID(), []Link{{URL: "http://uncommitted.example/"}}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	s.close(t) // without ever running

	s = newSender(t, n.a, dir, res, Config{})
	if got := s.o.Pending(); got[n.b.ID()] != len(urls) || len(got) != 1 {
		t.Fatalf("Pending after reopening = %v, want %d for %s", got, len(urls), n.b.ID())
	}
	// What is still queued is still recent: adding it again queues
	// nothing, whatever the depth, and the receiver gets the depth and
	// embed flag stored before the reopening.
	s.add(t, n.b.ID(), other(urls[:10]))
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
	urls := links(400)
	twice := append(slices.Clone(urls), other(urls[:50])...)
	s.add(t, n.b.ID(), twice)
	if got := s.o.Pending()[n.b.ID()]; got != len(urls) {
		t.Errorf("Pending = %d, want %d", got, len(urls))
	}
	s.run(t)
	rcv.waitFor(t, len(urls))
	s.drained(t, n.b.ID())
	// Sent a moment ago: dropped before being queued, even at another depth.
	s.add(t, n.b.ID(), other(urls[100:200]))
	// So are the session-ID variants of a URL sent, as the peer's seen
	// test would drop them.
	s.add(t, n.b.ID(), []Link{{URL: urls[0].URL + ";jsessionid=0123456789ABCDEF0123456789ABCDEF"}})
	// The same URLs for another peer are not repeats.
	s.add(t, "other-peer", urls[100:200])
	st := s.o.Stats()
	if st.Repeats != 151 {
		t.Errorf("Repeats = %d, want 151", st.Repeats)
	}
	if p := s.o.Pending(); p[n.b.ID()] != 0 || p["other-peer"] != 100 {
		t.Errorf("Pending = %v, want 100 for other-peer only", p)
	}
	// Unsendable links are dropped, not queued.
	s.add(t, n.b.ID(), []Link{
		{URL: ""},
		{URL: "http://x.example/\n"},
		{URL: "http://x.example/" + strings.Repeat("a", MaxURLBytes)},
		{URL: "http://x.example/\xff"},
		{URL: "http://x.example/negative", Depth: -1},
		{URL: "http://x.example/deep", Depth: MaxDepth + 1},
	})
	if st := s.o.Stats(); st.Invalid != 6 {
		t.Errorf("Invalid = %d, want 6", st.Invalid)
	}
	if p := s.o.Pending(); p[n.b.ID()] != 0 {
		t.Errorf("Pending after unsendable links = %v, want none for %s", p, n.b.ID())
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
	urls := links(1200)
	s.add(t, gone, urls[:1000])
	s.add(t, n.b.ID(), urls[1000:])
	s.run(t)
	rcv.waitFor(t, 200)
	if got := s.o.Pending()[gone]; got != 1000 {
		t.Fatalf("Pending for the gone peer = %d, want 1000", got)
	}
	b := s.db.NewIndexedBatch()
	err := s.o.Reroute(b, func(u string) string {
		if u == urls[0].URL {
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

// TestRerouteReopen moves links from a gone peer, then reopens the
// database before sending them: their depth and embed flag survive both.
func TestRerouteReopen(t *testing.T) {
	n := newNet(t)
	dir := t.TempDir()
	res := &resolver{addrs: map[string]string{}}
	s := newSender(t, n.a, dir, res, Config{})
	urls := links(600)
	s.add(t, "gone-for-good", urls)
	b := s.db.NewIndexedBatch()
	if err := s.o.Reroute(b, func(string) string { return n.b.ID() }); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.o.Committed()
	s.close(t)

	s = newSender(t, n.a, dir, res, Config{})
	if p := s.o.Pending(); p[n.b.ID()] != len(urls) || len(p) != 1 {
		t.Fatalf("Pending after Reroute and reopening = %v, want %d for %s", p, len(urls), n.b.ID())
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
		ls := make([]Link, len(urls))
		for i, u := range urls {
			ls[i] = Link{URL: u, Depth: 2}
		}
		p, _ := encodePayload(nil, ls)
		return p
	}
	// A batch of one link with a raw, unchecked URL and tag.
	rawTag := func(u string, tag ...byte) []byte {
		p := append(slices.Clone(magic), 1, 0, byte(len(u)))
		return append(append(p, u...), tag...)
	}
	raw := func(u string) []byte { return rawTag(u, 0) }
	var many bytes.Buffer
	many.Write(magic)
	many.Write([]byte{0xa1, 0x8d, 0x06}) // 100,001
	for i := range MaxBatchURLs + 1 {
		fmt.Fprintf(&many, "\x00\x05%05d\x00", i)
	}
	long := valid("http://x.example/" + strings.Repeat("a", MaxURLBytes-17))
	long[len(long)-2] = 'b' // the last byte is the tag
	zeros := z(append(valid("http://x.example/"), make([]byte, 100<<20)...))
	// 80 MB of URLs, front-coded into 200 kB, compressed into less.
	var big []string
	for i := range 20_000 {
		big = append(big, fmt.Sprintf("http://x.example/%s%06d", strings.Repeat("a", 3980), i))
	}
	bomb := z(valid(big...))
	tooDeep := binary.AppendUvarint(nil, (MaxDepth+1)<<2)
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
		{"version 1", "POST", ContentType, "zstd", z([]byte("WGU\x01\x01\x00\x11http://x.example/")), 400},
		{"version 4", "POST", ContentType, "zstd", z([]byte("WGU\x04\x00")), 400},
		{"control char", "POST", ContentType, "zstd", z(raw("http://x\x07/")), 400},
		{"newline", "POST", ContentType, "zstd", z(raw("http://x/\n")), 400},
		{"bad utf-8", "POST", ContentType, "zstd", z(raw("http://x/\xff")), 400},
		{"no tag", "POST", ContentType, "zstd", z(rawTag("http://x/")), 400},
		{"too deep", "POST", ContentType, "zstd", z(rawTag("http://x/", tooDeep...)), 400},
		{"tag overflow", "POST", ContentType, "zstd", z(rawTag("http://x/", 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)), 400},
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
	// The one-byte difference of "long" is what makes it valid.
	if _, err := decodeBatch(mustDecoder(t), z(long)); err != nil {
		t.Errorf("URL of %d bytes refused: %v", MaxURLBytes, err)
	}
}

func mustDecoder(t testing.TB) *zstd.Decoder {
	t.Helper()
	dec, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

// TestDecodeErrors checks that the errors a sender sees say what is wrong.
func TestDecodeErrors(t *testing.T) {
	dec := mustDecoder(t)
	enc, _ := zstd.NewWriter(nil)
	tests := []struct {
		payload, want string
	}{
		{"WGU\x01\x01\x00\x11http://x.example/", "outbox: URL batch version 1 is not supported (want 2"},
		{"WGU\x02\x01\x00\x09http://x/\x84\x80\x80\x02", "outbox: URL batch: URL 0: depth 1048577 is over 1048576"},
		{"WGU\x02\x01\x00\x09http://x/", "outbox: URL batch: URL 0: bad depth: "},
		{"WGU\x02\x02\x00\x09http://x/\x00\x09\x00\x00", "outbox: URL batch: URL 1 repeats the previous one or is empty"},
	}
	for _, tt := range tests {
		_, err := decodeBatch(dec, enc.EncodeAll([]byte(tt.payload), nil))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("decoding %q: error %v, want %q", tt.payload, err, tt.want)
		}
	}
	// A seed travels as such; a seed below depth 0 or marked a requisite does not.
	ls, err := decodeBatch(dec, enc.EncodeAll([]byte("WGU\x02\x01\x00\x09http://x/\x02"), nil))
	if want := (Link{URL: "http://x/", Seed: true}); err != nil || len(ls) != 1 || ls[0] != want {
		t.Errorf("decoding a seed: %v, %v; want [%+v]", ls, err, want)
	}
	for _, bad := range []string{"\x06", "\x03"} {
		if _, err := decodeBatch(dec, enc.EncodeAll([]byte("WGU\x02\x01\x00\x09http://x/"+bad), nil)); err == nil {
			t.Errorf("a seed with tag %q was accepted", bad)
		}
	}
	// The greatest depth passes.
	ls, err = decodeBatch(dec, enc.EncodeAll([]byte("WGU\x02\x01\x00\x09http://x/\x81\x80\x80\x02"), nil))
	if want := (Link{URL: "http://x/", Depth: MaxDepth, Embed: true}); err != nil || len(ls) != 1 || ls[0] != want {
		t.Errorf("decoding a link at MaxDepth: %v, %v; want [%+v]", ls, err, want)
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
	dec := mustDecoder(t)
	enc, _ := zstd.NewWriter(nil)
	ls := links(2000)
	want := slices.SortedFunc(slices.Values(ls), func(a, b Link) int { return strings.Compare(a.URL, b.URL) })
	// Copies of a URL travel once, as the shallowest, an embed if any is.
	ls = append(ls, other(ls[:10])...)
	for i := range 10 {
		l := &want[slices.IndexFunc(want, func(w Link) bool { return w.URL == ls[i].URL })]
		l.Depth = min(l.Depth, ls[2000+i].Depth)
		l.Embed = true
	}
	p, sent := encodePayload(nil, slices.Clone(ls))
	if !slices.Equal(sent, want) {
		t.Errorf("encodePayload kept %d links, want %d, or not the same", len(sent), len(want))
	}
	got, err := decodeBatch(dec, enc.EncodeAll(p, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("round trip gave %d links, want %d, or not the same", len(got), len(want))
	}
}

func TestMergeCopies(t *testing.T) {
	in := []Link{
		{URL: "http://b.example/", Depth: 2},
		{URL: "http://a.example/x", Depth: 3},
		{URL: "http://a.example/x", Depth: 1},
		{URL: "http://a.example/x", Depth: 5, Embed: true},
		{URL: "http://c.example/", Depth: 0, Embed: true},
		{URL: "http://c.example/", Depth: 0, Embed: true},
	}
	want := []Link{
		{URL: "http://a.example/x", Depth: 1, Embed: true},
		{URL: "http://b.example/", Depth: 2},
		{URL: "http://c.example/", Depth: 0, Embed: true},
	}
	p, sent := encodePayload(nil, in)
	if !slices.Equal(sent, want) {
		t.Errorf("encodePayload kept %+v, want %+v", sent, want)
	}
	enc, _ := zstd.NewWriter(nil)
	got, err := decodeBatch(mustDecoder(t), enc.EncodeAll(p, nil))
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("decoded %+v, %v; want %+v", got, err, want)
	}
}

func TestValue(t *testing.T) {
	for _, l := range []Link{
		{URL: "http://x.example/"},
		{URL: "http://x.example/", Seed: true},
		{URL: "http://x.example/", Embed: true},
		{URL: "http://x.example/a", Depth: 63},
		{URL: "http://x.example/a", Depth: 64, Embed: true},
		{URL: "http://x.example/" + strings.Repeat("a", MaxURLBytes-17), Depth: MaxDepth, Embed: true},
		{URL: "http://x.example/r", Depth: 2, Embed: true, Redirects: 7},
		{URL: "http://x.example/o", OffScopeHops: 2},
		{URL: "http://x.example/m", Depth: 1, Redirects: MaxHops, OffScopeHops: MaxHops},
	} {
		got, err := parseValue(appendValue(nil, l))
		if err != nil || got != l {
			t.Errorf("value of %+v parses as %+v, %v", l, got, err)
		}
	}
	// A value queued before hop counts existed has none; bad counts are
	// refused.
	if got, err := parseValue([]byte("\x05http://x.example/")); err != nil || got != (Link{URL: "http://x.example/", Depth: 1, Embed: true}) {
		t.Errorf("a value without hop counts parses as %+v, %v", got, err)
	}
	for _, bad := range []string{"\x00http://x/\x00", "\x00http://x/\x00\x01", "\x00http://x/\x00\x01\x01\x01", "\x00http://x/\x00\x80\x02\x00"} {
		if got, err := parseValue([]byte(bad)); err == nil {
			t.Errorf("value %q parses as %+v", bad, got)
		}
	}
}

// Hop counts travel in a version 3 batch, and only when a link has them:
// a batch without is version 2, which nodes that predate them read.
func TestWireHopCounts(t *testing.T) {
	dec := mustDecoder(t)
	enc, _ := zstd.NewWriter(nil)
	plain := []Link{{URL: "http://a.example/", Depth: 1}, {URL: "http://b.example/", Embed: true}}
	p, _ := encodePayload(nil, slices.Clone(plain))
	if p[3] != 2 {
		t.Errorf("a batch without hop counts is version %d, want 2", p[3])
	}
	withHops := append(slices.Clone(plain), Link{URL: "http://c.example/", Depth: 2, Embed: true, Redirects: 4, OffScopeHops: 2})
	// Copies of a URL travel with the fewest hops; a seed with none.
	in := append(slices.Clone(withHops),
		Link{URL: "http://c.example/", Depth: 3, Embed: true, Redirects: 9, OffScopeHops: 1},
		Link{URL: "http://a.example/", Depth: 1, Redirects: 3},
		Link{URL: "http://a.example/", Seed: true})
	want := []Link{{URL: "http://a.example/", Seed: true}, plain[1], {URL: "http://c.example/", Depth: 2, Embed: true, Redirects: 4, OffScopeHops: 1}}
	p, sent := encodePayload(nil, in)
	if p[3] != versionHops || !slices.Equal(sent, want) {
		t.Errorf("batch version %d kept %+v, want version %d and %+v", p[3], sent, versionHops, want)
	}
	got, err := decodeBatch(dec, enc.EncodeAll(p, nil))
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("decoded %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{
		"WGU\x03\x01\x00\x09http://x/\x00\x01",         // a count missing
		"WGU\x03\x01\x00\x09http://x/\x00\x80\x02\x00", // over MaxHops
	} {
		if got, err := decodeBatch(dec, enc.EncodeAll([]byte(bad), nil)); err == nil {
			t.Errorf("batch %q decoded as %+v", bad, got)
		}
	}
}

// TestOpenMalformed stores bad queue values behind the outbox's back:
// Open, Reroute and the sender refuse them with an error that names the
// key, and do not panic.
func TestOpenMalformed(t *testing.T) {
	cred := newNet(t).a
	for _, tt := range []struct{ name, value, want string }{
		{"empty", "", "malformed depth"},
		{"truncated tag", "\x80", "malformed depth"},
		{"tag overflow", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01http://x/", "malformed depth"},
		{"too deep", "\x84\x80\x80\x02http://x/", "depth 1048577 is over 1048576"},
		{"no URL", "\x00", "empty URL"},
		{"control char", "\x00http://x/\n", "control character"},
		{"bad utf-8", "\x00http://x/\xff", "not valid UTF-8"},
	} {
		dir := t.TempDir()
		db := openDB(t, dir)
		if err := db.Set(queueKey("p", 7), []byte(tt.value), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		client := peer.NewClient(cred)
		res := (&resolver{addrs: map[string]string{}}).resolve
		_, err := Open(Config{DB: db, Client: client, Resolve: res})
		if err == nil || !strings.Contains(err.Error(), `outbox: queued link at key "o/q/p\x00`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Open: %v, want an error naming the key and %q", tt.name, err, tt.want)
		}
		// Written after Open.
		if err := db.Delete(queueKey("p", 7), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		o, err := Open(Config{DB: db, Client: client, Resolve: res})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(queueKey("p", 7), []byte(tt.value), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		b := db.NewIndexedBatch()
		if err := o.Reroute(b, func(string) string { return "q" }); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Reroute: %v, want %q", tt.name, err, tt.want)
		}
		b.Close()
		if _, _, err := o.read("p", 0); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: reading the queue: %v, want %q", tt.name, err, tt.want)
		}
		client.Close()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkWire reports bytes on the wire per link for batches of websim
// URLs split among peers by host, against the URLs' average length. With
// ctx=path a link's depth is its URL's number of path segments, as a
// breadth-first crawl of a site's hierarchy would give, and it is not an
// embed; with ctx=random, the worst case, depths are uniform in 0..15 and
// a quarter are embeds.
func BenchmarkWire(b *testing.B) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	urls := pages(1 << 30)
	rng := rand.New(rand.NewSource(2))
	contexts := map[string][]Link{}
	for _, u := range urls {
		path := strings.Trim(strings.SplitN(strings.TrimPrefix(u, "http://"), "/", 2)[1], "/")
		depth := 0
		if path != "" {
			depth = strings.Count(path, "/") + 1
		}
		contexts["path"] = append(contexts["path"], Link{URL: u, Depth: depth})
		contexts["random"] = append(contexts["random"], Link{URL: u, Depth: rng.Intn(16), Embed: rng.Intn(4) == 0})
	}
	for _, ctx := range []string{"path", "random"} {
		for _, peers := range []int{3, 10} {
			b.Run(fmt.Sprintf("ctx=%s/peers=%d", ctx, peers), func(b *testing.B) {
				var wire, text, n int
				for b.Loop() {
					wire, text, n = 0, 0, 0
					queues := make([][]Link, peers)
					flush := func(i int) {
						for _, l := range queues[i] {
							text += len(l.URL)
						}
						n += len(queues[i])
						p, _ := encodePayload(nil, queues[i])
						wire += len(enc.EncodeAll(p, nil))
						queues[i] = nil
					}
					for _, l := range contexts[ctx] {
						host, _, _ := strings.Cut(strings.TrimPrefix(l.URL, "http://"), "/")
						i := int(fnv32(host) % uint32(peers))
						if queues[i] = append(queues[i], l); len(queues[i]) == DefaultBatchSize {
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
	seeds := [][]Link{
		{{URL: "http://a.example/"}},
		{{URL: "http://a.example/", Depth: 3}, {URL: "http://a.example/b", Embed: true}, {URL: "https://b.example/?q=1", Depth: MaxDepth, Embed: true}},
		links(50),
		{{URL: "http://a.example/", Redirects: 2}, {URL: "http://c.example/", Depth: 1, Embed: true, OffScopeHops: MaxHops}},
	}
	for _, s := range seeds {
		p, _ := encodePayload(nil, s)
		f.Add(enc.EncodeAll(p, nil))
		f.Add(p) // not compressed: must be refused
	}
	f.Add([]byte{})
	f.Add(enc.EncodeAll([]byte("WGU\x02\x02\x00\x01a\x00\x00\x01a\x01"), nil))         // a repeat
	f.Add(enc.EncodeAll([]byte("WGU\x02\x01\x00\x01a\x84\x80\x80\x02"), nil))          // too deep
	f.Add(enc.EncodeAll([]byte("WGU\x01\x02\x00\x01a\x01\x01b"), nil))                 // version 1
	f.Add(enc.EncodeAll([]byte("WGU\x02\x02\x00\x01a\x03\x01\x01b\xff\xff\x7f"), nil)) // valid
	dec, err := newDecoder()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ls, err := decodeBatch(dec, body)
		if err != nil {
			return
		}
		if len(ls) > MaxBatchURLs {
			t.Fatalf("%d links accepted", len(ls))
		}
		for i, l := range ls {
			if why := validLink(l); why != "" {
				t.Fatalf("link %d accepted: %s", i, why)
			}
			if i > 0 && ls[i-1].URL >= l.URL {
				t.Fatalf("links %d and %d out of order", i-1, i)
			}
		}
		// What decodes re-encodes to the same links.
		p, _ := encodePayload(nil, slices.Clone(ls))
		again, err := decodeBatch(dec, enc.EncodeAll(p, nil))
		if err != nil || !slices.Equal(again, ls) {
			t.Fatalf("re-encoded batch does not decode the same: %v", err)
		}
	})
}

// A URL handed over with Forward is queued even if it was sent to the same
// peer a moment ago: it may have come back from there.
func TestForwardIgnoresRecent(t *testing.T) {
	n := newNet(t)
	s := newSender(t, n.a, t.TempDir(), &resolver{addrs: map[string]string{}}, Config{})
	urls := links(20)
	s.add(t, n.b.ID(), urls)
	s.add(t, n.b.ID(), urls[:5])
	if st := s.o.Stats(); st.Repeats != 5 {
		t.Fatalf("Repeats = %d, want 5", st.Repeats)
	}
	b := s.db.NewBatch()
	if err := s.o.Forward(b, n.b.ID(), urls[:5]); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.o.Committed()
	if got := s.o.Pending()[n.b.ID()]; got != 25 {
		t.Errorf("Pending after Forward = %d, want 25", got)
	}
	if st := s.o.Stats(); st.Repeats != 5 {
		t.Errorf("Repeats after Forward = %d, want still 5", st.Repeats)
	}
	s.close(t)
}

// A peer that predates hop counts refuses version 3 batches: it gets every
// URL without the counts instead of none, and a peer that reads them gets
// them with.
func TestOlderPeerGetsURLsWithoutHopCounts(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	current := Handler(rcv.accept)
	dec := mustDecoder(t)
	var mu sync.Mutex
	refused := 0
	older := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if p, err := dec.DecodeAll(body, nil); err == nil && len(p) > 3 && p[3] != 2 {
			mu.Lock()
			refused++
			mu.Unlock()
			http.Error(w, "outbox: URL batch version 3 is not supported (want 2)", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		current.ServeHTTP(w, r)
	})
	addr, _ := serve(t, n.b, older)
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{BatchSize: 100})
	urls := links(1000)
	for i := range urls {
		if i%10 == 0 {
			urls[i].Redirects, urls[i].OffScopeHops = 1, 2
		}
	}
	s.deliver(t, rcv, n.b.ID(), urls)
	plain := slices.Clone(urls)
	for i := range plain {
		plain[i].Redirects, plain[i].OffScopeHops = 0, 0
	}
	rcv.check(t, plain, n.a.ID())
	mu.Lock()
	defer mu.Unlock()
	if refused != 1 {
		t.Errorf("the older peer refused %d batches, want only the first: the sender should remember", refused)
	}
}

// A 400 that does not name the version (a batch cut in transit) is not
// taken for an older peer: the batch is sent again, with its hop counts.
func TestOther400KeepsHopCounts(t *testing.T) {
	n := newNet(t)
	rcv := newReceiver()
	current := Handler(rcv.accept)
	var failed atomic.Bool
	flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failed.CompareAndSwap(false, true) {
			http.Error(w, "outbox: reading batch: unexpected EOF", http.StatusBadRequest)
			return
		}
		current.ServeHTTP(w, r)
	})
	addr, _ := serve(t, n.b, flaky)
	res := &resolver{addrs: map[string]string{n.b.ID(): addr}}
	s := newSender(t, n.a, t.TempDir(), res, Config{BatchSize: 100})
	urls := links(10)
	urls[3].Redirects, urls[3].OffScopeHops = 1, 2
	s.deliver(t, rcv, n.b.ID(), urls)
	rcv.check(t, urls, n.a.ID())
}
