package replicate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// network admits n nodes: creds[0] is the sender.
func network(t testing.TB, n int) []*admission.Credential {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	var creds []*admission.Credential
	for i := range n {
		cred, err := admission.Admit(dir, fmt.Sprintf("n%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		creds = append(creds, &cred)
	}
	return creds
}

// receiver records what its store was given.
type receiver struct {
	mu      sync.Mutex
	members map[string][][]byte      // capture record ID → members, as stored
	capts   map[string]index.Capture // record ID → capture
	times   map[string]int           // record ID → times stored
	from    map[string]bool
	fails   int // store fails this many more times
	calls   int
}

func newReceiver() *receiver {
	return &receiver{members: map[string][][]byte{}, capts: map[string]index.Capture{}, times: map[string]int{}, from: map[string]bool{}}
}

func (r *receiver) store(_ context.Context, from string, copies []Copy) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fails > 0 {
		r.fails--
		return errors.New("disk is busy")
	}
	r.from[from] = true
	var id string
	for _, cp := range copies {
		if cp.Capture != nil {
			id = cp.Capture.RecordID
			r.capts[id] = *cp.Capture
			r.times[id]++
			r.members[id] = nil
		}
		r.members[id] = append(r.members[id], bytes.Clone(cp.Member))
	}
	return nil
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.capts)
}

// check asserts that r holds exactly entries, each once, byte for byte as
// in the segments of dir, with their index entries, from sender id.
func (r *receiver) check(t *testing.T, dir string, entries []Entry, id string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.capts) != len(entries) {
		t.Errorf("receiver holds %d captures, want %d", len(r.capts), len(entries))
	}
	for _, e := range entries {
		c := e.Capture
		got, ok := r.capts[c.RecordID]
		if !ok {
			t.Errorf("capture %s missing", c.URL)
			continue
		}
		if r.times[c.RecordID] != 1 {
			t.Errorf("capture %s stored %d times", c.URL, r.times[c.RecordID])
		}
		want := c
		want.Segment, want.Offset, want.Length = "", 0, 0
		if !got.Time.Equal(want.Time) {
			t.Errorf("time %v, want %v", got.Time, want.Time)
		}
		got.Time = want.Time
		if got != want {
			t.Errorf("capture %+v, want %+v", got, want)
		}
		members := r.members[c.RecordID]
		if len(members) != len(e.Records) {
			t.Errorf("capture %s: %d records, want %d", c.URL, len(members), len(e.Records))
			continue
		}
		for i, l := range e.Records {
			if !bytes.Equal(members[i], segmentBytes(t, dir, l)) {
				t.Errorf("capture %s record %d: bytes differ from the segment's", c.URL, i)
			}
		}
	}
	if len(r.from) != 1 || !r.from[id] {
		t.Errorf("batches came from %v, want only %s", r.from, id)
	}
}

func segmentBytes(t *testing.T, dir string, l warc.Location) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, l.Segment))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, l.Length)
	if _, err := f.ReadAt(b, l.Offset); err != nil {
		t.Fatal(err)
	}
	return b
}

// serve runs a peer server for cred with h on a fresh loopback port,
// until the test ends or stop is called.
func serve(t testing.TB, cred *admission.Credential, h http.Handler) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := peer.NewServer(cred, h, nil)
	srv.MaxBodyBytes = MaxLargeBodyBytes
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
// onePeer starts b, the second node of a two-node network, which stores
// the copies it is sent in rb; res resolves it.
func onePeer(t testing.TB) (creds []*admission.Credential, b string, rb *receiver, res *resolver) {
	t.Helper()
	creds = network(t, 2)
	b, rb = creds[1].ID(), newReceiver()
	addr, _ := serve(t, creds[1], Handler(rb.store))
	return creds, b, rb, &resolver{addrs: map[string]string{b: addr}}
}

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

type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// sender is a node's queue with its database.
type sender struct {
	q      *Queue
	db     *pebble.DB
	client *peer.Client
	cancel context.CancelFunc
	done   chan error
}

func newSender(t testing.TB, cred *admission.Credential, dbDir, warcDir string, res *resolver, batchBytes int) *sender {
	t.Helper()
	db, err := pebble.Open(dbDir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	s := &sender{db: db, client: peer.NewClient(cred)}
	q, err := Open(Config{DB: db, Client: s.client, WARCDir: warcDir, Resolve: res.resolve, BatchBytes: batchBytes})
	if err != nil {
		t.Fatal(err)
	}
	q.backoff0, q.backoffMax = 5*time.Millisecond, 50*time.Millisecond
	s.q = q
	t.Cleanup(func() { s.close(t) })
	return s
}

func (s *sender) run() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- s.q.Run(ctx) }()
}

func (s *sender) close(t testing.TB) {
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

// add queues entries for peers in commits of 10, as the crawler would.
func (s *sender) add(t testing.TB, peers []string, entries []Entry) {
	t.Helper()
	for chunk := range slices.Chunk(entries, 10) {
		b := s.db.NewIndexedBatch()
		for _, e := range chunk {
			if err := s.q.Add(b, peers, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		s.q.Committed()
	}
}

// waitUntil polls cond; the limit finds a hang, it is not a speed limit.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 2 minutes for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// captures writes n captures (a response or revisit, its request and, for
// some, a metadata record) into segments in dir, as the crawler does.
func captures(t testing.TB, dir string, n int) []Entry {
	t.Helper()
	w, err := warc.NewWriter(dir, warc.WriterOptions{MaxSegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	var entries []Entry
	for i := range n {
		u := fmt.Sprintf("https://www.site%d.example/page/%d?b=2&a=1", i%4, i)
		at := base.Add(time.Duration(i) * time.Second)
		body := bytes.Repeat([]byte(fmt.Sprintf("<p>page %d</p>\n", i)), 20+i%50)
		raw := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		rec, err := warc.NewResponse(u, at, raw)
		if err != nil {
			t.Fatal(err)
		}
		typ := warc.TypeResponse
		if i%5 == 4 {
			rec = warc.NewRevisit(u, at, warc.ProfileIdenticalPayload, raw[:warc.HTTPHeaderEnd(raw)], rec.Header.Get("WARC-Payload-Digest"),
				warc.RefersTo{ID: entries[0].Capture.RecordID, URI: entries[0].Capture.URL, Date: entries[0].Capture.Time})
			typ = warc.TypeRevisit
		}
		req := warc.NewRequest(u, at, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		req.Header.Set("WARC-Concurrent-To", rec.ID())
		recs := []*warc.Record{rec, req}
		if i%3 == 0 {
			meta := warc.NewMetadata(u, at, []warc.Field{{Name: "outlink", Value: u + "/next"}})
			meta.Header.Set("WARC-Concurrent-To", rec.ID())
			recs = append(recs, meta)
		}
		locs, err := w.WriteGroup(recs)
		if err != nil {
			t.Fatal(err)
		}
		key, err := urlkey.SURT(u)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, Entry{
			Capture: index.Capture{
				URLKey: key, Time: at, URL: u, Type: typ, Status: 200, MIME: "text/html",
				Digest: rec.Header.Get("WARC-Payload-Digest"), RecordID: rec.ID(),
				Segment: locs[0].Segment, Offset: locs[0].Offset, Length: locs[0].Length,
			},
			Records: locs,
		})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestDelivery(t *testing.T) {
	creds := network(t, 3)
	b, c := creds[1].ID(), creds[2].ID()
	rb, rc := newReceiver(), newReceiver()
	addrB, _ := serve(t, creds[1], Handler(rb.store))
	addrC, _ := serve(t, creds[2], Handler(rc.store))
	res := &resolver{addrs: map[string]string{b: addrB, c: addrC}}
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 200)
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 16<<10)
	s.add(t, []string{c, b, c}, entries)
	if got := s.q.Under(); got != len(entries) {
		t.Errorf("Under = %d before sending, want %d", got, len(entries))
	}
	if p := s.q.Pending(); p[b] != len(entries) || p[c] != len(entries) {
		t.Errorf("Pending = %v, want %d each", p, len(entries))
	}
	s.run()
	waitUntil(t, "delivery", func() bool { return s.q.Under() == 0 })
	if p := s.q.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v after delivery, want none", p)
	}
	rb.check(t, warcDir, entries, creds[0].ID())
	rc.check(t, warcDir, entries, creds[0].ID())
	st := s.q.Stats()
	records, n := 0, int64(0)
	for _, e := range entries {
		records += len(e.Records)
		for _, l := range e.Records {
			n += l.Length
		}
	}
	if st.Entries != 2*int64(len(entries)) || st.Records != 2*int64(records) || st.Bytes != 2*n || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want %d entries, %d records, %d bytes", st, 2*len(entries), 2*records, 2*n)
	}
	if st.Batches < 4 {
		t.Errorf("%d batches for %d bytes at a 16 KiB batch size", st.Batches, 2*n)
	}
}

func TestPeerDownThenUp(t *testing.T) {
	creds := network(t, 2)
	b := creds[1].ID()
	rb := newReceiver()
	rb.fails = 3 // then its disk is busy a while: 503, kept and retried
	res := &resolver{addrs: map[string]string{}}
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 40)
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.run()
	s.add(t, []string{b}, entries)
	waitUntil(t, "failures while the peer is not live", func() bool { return s.q.Stats().Failures >= 2 })
	// A live address where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	res.set(b, dead)
	f := s.q.Stats().Failures
	waitUntil(t, "failures while the peer is down", func() bool { return s.q.Stats().Failures >= f+2 })
	if s.q.Under() != len(entries) || s.q.Pending()[b] != len(entries) {
		t.Fatalf("Under %d, Pending %v while the peer is down; want all %d", s.q.Under(), s.q.Pending(), len(entries))
	}
	// While they wait, their segments are in use (compaction must not
	// move them away); once delivered, no longer.
	seg := entries[0].Records[0].Segment
	if used, err := s.q.Refers(s.db, seg); err != nil || !used {
		t.Errorf("Refers(%s) = %v, %v with entries queued in it", seg, used, err)
	}
	if used, err := s.q.Refers(s.db, "waggle-20000101000000-99999.warc.gz"); err != nil || used {
		t.Errorf("Refers(another segment) = %v, %v", used, err)
	}
	addr, _ := serve(t, creds[1], Handler(rb.store))
	res.set(b, addr)
	waitUntil(t, "delivery", func() bool { return s.q.Under() == 0 })
	waitUntil(t, "the queue to empty", func() bool { return len(s.q.Pending()) == 0 })
	if used, err := s.q.Refers(s.db, seg); err != nil || used {
		t.Errorf("Refers(%s) = %v, %v after delivery", seg, used, err)
	}
	rb.check(t, warcDir, entries, creds[0].ID())
	if rb.calls < 4 {
		t.Errorf("store called %d times, want the 3 failures and a success at least", rb.calls)
	}
}

func TestResume(t *testing.T) {
	creds := network(t, 2)
	b := creds[1].ID()
	res := &resolver{addrs: map[string]string{}}
	warcDir, dbDir := t.TempDir(), t.TempDir()
	entries := captures(t, warcDir, 30)
	s := newSender(t, creds[0], dbDir, warcDir, res, 0)
	s.add(t, []string{b}, entries)
	s.close(t)

	rb := newReceiver()
	addr, _ := serve(t, creds[1], Handler(rb.store))
	res.set(b, addr)
	s = newSender(t, creds[0], dbDir, warcDir, res, 4<<10)
	if p := s.q.Pending(); p[b] != len(entries) || s.q.Under() != len(entries) {
		t.Fatalf("reopened: Pending %v, Under %d; want %d", p, s.q.Under(), len(entries))
	}
	s.run()
	waitUntil(t, "delivery", func() bool { return s.q.Under() == 0 })
	rb.check(t, warcDir, entries, creds[0].ID())
	s.close(t)
	s = newSender(t, creds[0], dbDir, warcDir, res, 0)
	if p := s.q.Pending(); len(p) != 0 || s.q.Under() != 0 {
		t.Errorf("reopened after delivery: Pending %v, Under %d", p, s.q.Under())
	}
}

func TestRetarget(t *testing.T) {
	creds := network(t, 4)
	b, c, d := creds[1].ID(), creds[2].ID(), creds[3].ID()
	rc, rd := newReceiver(), newReceiver()
	addrC, _ := serve(t, creds[2], Handler(rc.store))
	res := &resolver{addrs: map[string]string{c: addrC}} // b is down for good
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 24)
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.run()
	s.add(t, []string{b, c}, entries)
	waitUntil(t, "c's copies", func() bool { return s.q.Pending()[c] == 0 && rc.count() == len(entries) })
	if s.q.Under() != len(entries) {
		t.Errorf("Under = %d with b down, want %d", s.q.Under(), len(entries))
	}
	// b is replaced by d for the sites of captures 0, 4, 8, …, and
	// stays a replica of the others.
	moved := map[string]bool{}
	for _, e := range entries[:4] {
		moved[urlkey.SiteOfKey(e.Capture.URLKey)] = true
	}
	delete(moved, urlkey.SiteOfKey(entries[1].Capture.URLKey))
	delete(moved, urlkey.SiteOfKey(entries[2].Capture.URLKey))
	delete(moved, urlkey.SiteOfKey(entries[3].Capture.URLKey))
	var wantD []Entry
	for _, e := range entries {
		if moved[urlkey.SiteOfKey(e.Capture.URLKey)] {
			wantD = append(wantD, e)
		}
	}
	replicas := func(site string) []string {
		if moved[site] {
			return []string{c, d}
		}
		return []string{b, c}
	}
	batch := s.db.NewIndexedBatch()
	if err := s.q.Retarget(batch, replicas); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.q.Committed()
	if p := s.q.Pending(); p[b] != len(entries)-len(wantD) || p[d] != len(wantD) || p[c] != 0 {
		t.Errorf("Pending = %v after Retarget; want b %d, d %d, c none", p, len(entries)-len(wantD), len(wantD))
	}
	addrD, _ := serve(t, creds[3], Handler(rd.store))
	res.set(d, addrD)
	waitUntil(t, "d's copies", func() bool { return s.q.Pending()[d] == 0 })
	rd.check(t, warcDir, wantD, creds[0].ID())
	rc.check(t, warcDir, entries, creds[0].ID()) // each once: not sent again
	if got, want := s.q.Under(), len(entries)-len(wantD); got != want {
		t.Errorf("Under = %d, want %d (those still waiting for b)", got, want)
	}
	// Retargeting again with the same replicas changes nothing.
	batch = s.db.NewIndexedBatch()
	if err := s.q.Retarget(batch, replicas); err != nil {
		t.Fatal(err)
	}
	if !batch.Empty() {
		t.Errorf("a second Retarget staged %d changes", batch.Count())
	}
	batch.Close()
	// b leaves for good.
	batch = s.db.NewIndexedBatch()
	if err := s.q.Retarget(batch, func(string) []string { return []string{c, d} }); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.q.Committed()
	waitUntil(t, "d's other copies", func() bool { return s.q.Under() == 0 })
	rd.check(t, warcDir, entries, creds[0].ID())
	if p := s.q.Pending(); len(p) != 0 {
		t.Errorf("Pending = %v, want none", p)
	}
}

func TestDropsCorruptLocalRecords(t *testing.T) {
	creds, b, rb, res := onePeer(t)
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 30)
	// Flip a byte inside entry 3's request member, and point entry 7 at a
	// segment that is not there.
	l := entries[3].Records[1]
	f, err := os.OpenFile(filepath.Join(warcDir, l.Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	f.ReadAt(one[:], l.Offset+l.Length/2)
	one[0] ^= 0x55
	if _, err := f.WriteAt(one[:], l.Offset+l.Length/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	entries[7].Records[0].Segment = "gone-00001.warc.gz"
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.run()
	s.add(t, []string{b}, entries)
	waitUntil(t, "the queue to drain", func() bool { return len(s.q.Pending()) == 0 })
	want := slices.Concat(entries[:3], entries[4:7], entries[8:])
	rb.check(t, warcDir, want, creds[0].ID())
	if st := s.q.Stats(); st.Dropped != 2 || st.Entries != int64(len(want)) {
		t.Errorf("Stats = %+v, want 2 dropped, %d sent", st, len(want))
	}
	if s.q.Under() != 0 {
		t.Errorf("Under = %d, want 0", s.q.Under())
	}
}

// A peer that refuses a batch over an entry that checks out here (a bug,
// another version) holds its queue back only while the sender narrows the
// batches down to that entry, which it then drops; everything else arrives.
func TestRefusedEntryIsolated(t *testing.T) {
	creds := network(t, 2)
	b := creds[1].ID()
	rb := newReceiver()
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 30)
	poisoned := entries[10].Capture.RecordID
	real := Handler(rb.store)
	refusals := 0
	var mu sync.Mutex
	addr, _ := serve(t, creds[1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		copies, err := decodeCopies(body)
		for _, cp := range copies {
			if err == nil && cp.Capture != nil && cp.Capture.RecordID == poisoned {
				mu.Lock()
				refusals++
				mu.Unlock()
				http.Error(w, "replicate: cannot take this one", http.StatusBadRequest)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		real.ServeHTTP(w, r)
	}))
	res := &resolver{addrs: map[string]string{b: addr}}
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.run()
	s.add(t, []string{b}, entries)
	waitUntil(t, "the queue to drain", func() bool { return len(s.q.Pending()) == 0 })
	want := slices.Concat(entries[:10], entries[11:])
	rb.check(t, warcDir, want, creds[0].ID())
	if st := s.q.Stats(); st.Dropped != 1 || st.Entries != int64(len(want)) {
		t.Errorf("Stats = %+v, want 1 dropped, %d sent", st, len(want))
	}
	mu.Lock()
	defer mu.Unlock()
	if refusals < 2 {
		t.Errorf("%d refused batches; the entry should have been narrowed down", refusals)
	}
}

func TestAddRefuses(t *testing.T) {
	creds := network(t, 1)
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 3)
	s := newSender(t, creds[0], t.TempDir(), warcDir, &resolver{addrs: map[string]string{}}, 0)
	b := s.db.NewIndexedBatch()
	defer b.Close()
	if err := s.q.Add(b, []string{""}, entries[0]); err == nil {
		t.Error("Add took an empty peer ID")
	}
	bad := []Entry{entries[0], entries[1], entries[2], entries[0]}
	bad[0].Records = nil
	bad[1].Records = slices.Clone(bad[1].Records)
	bad[1].Records[1].Segment = "../x.warc.gz"
	bad[2].Records = slices.Clone(bad[2].Records)
	bad[2].Records[0].Length = 0 // shares a member
	bad[3].Capture.RecordID = ""
	for _, e := range bad {
		if err := s.q.Add(b, []string{"p"}, e); err != nil {
			t.Fatal(err)
		}
	}
	if !b.Empty() || s.q.Stats().Invalid != int64(len(bad)) {
		t.Errorf("staged %d, Invalid %d; want nothing staged, %d invalid", b.Count(), s.q.Stats().Invalid, len(bad))
	}
}

// An entry sent between the commit of its batch and Committed (the sender
// reads the database while the crawler is between the two) is counted
// gone, not queued for good: Under would otherwise never reach zero, and a
// node leaving the network waits for it to.
func TestSentBeforeCommitted(t *testing.T) {
	creds, b, rb, res := onePeer(t)
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 10)
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	batch := s.db.NewIndexedBatch()
	for _, e := range entries {
		if err := s.q.Add(batch, []string{b}, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.q.mu.Lock()
	p := s.q.peer(b)
	s.q.mu.Unlock()
	if err := s.q.sendBatch(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	s.q.Committed()
	rb.check(t, warcDir, entries, creds[0].ID())
	if n, pending := s.q.Under(), s.q.Pending(); n != 0 || len(pending) != 0 {
		t.Errorf("Under = %d, Pending = %v after every entry was sent; want 0 and none", n, pending)
	}
}

// A revisit's SimHash travels with it (the receiver cannot compute one:
// a revisit has no text). A peer of an older version refuses the batch of
// version 2 that carries it; it gets version 1 instead, and loses nothing
// else.
func TestSimHashTravels(t *testing.T) {
	creds := network(t, 3)
	b, c := creds[1].ID(), creds[2].ID()
	rb, rc := newReceiver(), newReceiver()
	addrB, _ := serve(t, creds[1], Handler(rb.store))
	current := Handler(rc.store)
	var mu sync.Mutex
	refusals := 0
	addrC, _ := serve(t, creds[2], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 3 && body[3] != magic[3] {
			mu.Lock()
			refusals++
			mu.Unlock()
			// What every node before version 2 answers.
			http.Error(w, fmt.Sprintf("replicate: batch version %d is not supported (want 1)", body[3]), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		current.ServeHTTP(w, r)
	}))
	res := &resolver{addrs: map[string]string{b: addrB, c: addrC}}
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 60)
	revisits := 0
	for i := range entries {
		entries[i].Capture.SimHash = 0x9e3779b97f4a7c15 * uint64(i+1)
		if entries[i].Capture.Type == warc.TypeRevisit {
			revisits++
		}
	}
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 16<<10)
	s.add(t, []string{b, c}, entries)
	s.run()
	waitUntil(t, "delivery", func() bool { return s.q.Under() == 0 })

	rb.mu.Lock()
	for _, e := range entries {
		if got := rb.capts[e.Capture.RecordID]; e.Capture.Type == warc.TypeRevisit && got.SimHash != e.Capture.SimHash {
			t.Errorf("revisit %s arrived with SimHash %x, want %x", e.Capture.URL, got.SimHash, e.Capture.SimHash)
		}
	}
	rb.mu.Unlock()
	old := slices.Clone(entries)
	for i := range old {
		old[i].Capture.SimHash = 0
	}
	rc.check(t, warcDir, old, creds[0].ID())
	if st := s.q.Stats(); st.Dropped != 0 || st.Entries != 2*int64(len(entries)) {
		t.Errorf("Stats = %+v, want none dropped, %d sent", st, 2*len(entries))
	}
	mu.Lock()
	defer mu.Unlock()
	// One refusal: the sender remembers the peer's version a while.
	if revisits == 0 || refusals != 1 {
		t.Errorf("the older peer refused %d batches (%d revisits), want 1", refusals, revisits)
	}
}

// CopiesOf tells a capture whose copies arrived from one whose copy is on
// its way, and from one whose copy was given up: dropped unsent (its
// records unreadable here) or never queued (Add refused it). The node's
// content-seen test registers only the first kind.
func TestCopiesOf(t *testing.T) {
	creds, b, rb, res := onePeer(t)
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 4)
	entries[1].Records[0].Segment = "gone-00001.warc.gz" // unsendable
	entries[2].Records[0].Length = 0                     // refused by Add: no gzip member of its own
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.add(t, []string{b}, entries[:3])
	if got := s.q.CopiesOf(entries[0].Capture); got != CopiesQueued {
		t.Errorf("a copy queued, not sent: %v, want CopiesQueued", got)
	}
	if got := s.q.CopiesOf(entries[3].Capture); got != CopiesArrived {
		t.Errorf("a capture with no copy due: %v, want CopiesArrived", got)
	}
	s.run()
	waitUntil(t, "the queue to drain", func() bool { return len(s.q.Pending()) == 0 })
	if rb.count() != 1 {
		t.Fatalf("the receiver holds %d captures, want 1", rb.count())
	}
	for i, want := range []Copies{CopiesArrived, CopiesAbandoned, CopiesAbandoned} {
		if got := s.q.CopiesOf(entries[i].Capture); got != want {
			t.Errorf("capture %d: %v, want %v", i, got, want)
		}
	}
}

// A copy that Retarget takes back, its peer no longer a replica, when no
// other node is live to hold the capture, leaves it on this disk alone:
// given up, not arrived. One whose site has another replica, which holds
// the capture already or is sent it now, is not given up.
func TestRetargetWithNoOneInsteadGivesTheCopyUp(t *testing.T) {
	creds := network(t, 3)
	b, c := creds[1].ID(), creds[2].ID()
	rc := newReceiver()
	addrC, _ := serve(t, creds[2], Handler(rc.store))
	res := &resolver{addrs: map[string]string{c: addrC}} // b is down
	warcDir := t.TempDir()
	entries := captures(t, warcDir, 3) // three sites
	s := newSender(t, creds[0], t.TempDir(), warcDir, res, 0)
	s.run()
	s.add(t, []string{b}, entries[:2])
	s.add(t, []string{b, c}, entries[2:])
	waitUntil(t, "c's copy", func() bool { return rc.count() == 1 })
	batch := s.db.NewIndexedBatch()
	err := s.q.Retarget(batch, func(site string) []string {
		if site == urlkey.SiteOfKey(entries[0].Capture.URLKey) {
			return nil // nobody but this node
		}
		return []string{c} // b's place is c's
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s.q.Committed()
	waitUntil(t, "c's second copy", func() bool { return rc.count() == 2 })
	for i, want := range []Copies{CopiesAbandoned, CopiesArrived, CopiesArrived} {
		if got := s.q.CopiesOf(entries[i].Capture); got != want {
			t.Errorf("capture %d: %v, want %v", i, got, want)
		}
	}
}
