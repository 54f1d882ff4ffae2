package frontier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func openDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, PebbleOptions())
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// add queues items through a committed batch, as the crawler does.
func add(t testing.TB, db *pebble.DB, f *Frontier, items ...Item) int {
	t.Helper()
	b := db.NewIndexedBatch()
	n, err := f.Add(b, items)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	f.Committed()
	return n
}

func done(t testing.TB, db *pebble.DB, f *Frontier, l Lease) {
	t.Helper()
	b := db.NewIndexedBatch()
	if err := f.Done(b, l); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	f.Committed()
}

func item(host, path string, depth int) Item {
	return Item{URL: "http://" + host + path, Host: host, Depth: depth}
}

func next(t *testing.T, f *Frontier) Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBreadthFirstWithinHost(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	f, _ := Open(db, Options{})
	add(t, db, f, item("a", "/deep", 3), item("a", "/one", 1), item("a", "/zero", 0), item("a", "/one-b", 1))
	var order []string
	for range 4 {
		l := next(t, f)
		order = append(order, l.URL)
		f.Release(l)
		done(t, db, f, l)
	}
	want := "[http://a/zero http://a/one http://a/one-b http://a/deep]"
	if fmt.Sprint(order) != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	if _, err := f.Next(context.Background()); !errors.Is(err, ErrEmpty) {
		t.Fatalf("after all done: %v, want ErrEmpty", err)
	}
}

func TestSeenAndTrapLimits(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	f, _ := Open(db, Options{MaxDepth: 2, MaxPagesPerHost: 3, MaxURLLength: 40, MaxPathRepeat: 2})
	n := add(t, db, f,
		item("a", "/x", 0), item("a", "/x", 1), // duplicate within one batch
		item("a", "/too-deep", 3),
		item("a", "/"+string(make([]byte, 50)), 0),
		item("a", "/s/t/s/t/s/t", 0),
		item("a", "/y", 1), item("a", "/z", 1), item("a", "/over-limit", 1))
	if n != 3 {
		t.Fatalf("queued %d, want 3", n)
	}
	n = add(t, db, f, item("a", "/x", 0), item("b", "/x", 0))
	if n != 1 {
		t.Fatalf("second batch queued %d, want 1 (b/x only)", n)
	}
	s := f.Stats()
	for reason, want := range map[string]int{"seen": 2, "depth": 1, "length": 1, "repeat": 1, "host-limit": 1} {
		if s.Dropped[reason] != want {
			t.Errorf("dropped[%s] = %d, want %d (%v)", reason, s.Dropped[reason], want, s.Dropped)
		}
	}
}

// TestHopLimits: a URL reached through more than 20 redirects in a row, or
// more than 3 hops off the scope, is dropped; the counts survive a restart,
// and an item stored before they existed reads as having none.
func TestHopLimits(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	f, _ := Open(db, Options{})
	redirected, off := item("a", "/r20", 1), item("b", "/o3", 1)
	redirected.Redirects, off.OffScopeHops = 20, 3
	tooRedirected, tooFar := item("a", "/r21", 1), item("b", "/o4", 1)
	tooRedirected.Redirects, tooFar.OffScopeHops = 21, 4
	if n := add(t, db, f, redirected, off, tooRedirected, tooFar); n != 2 {
		t.Fatalf("queued %d, want 2", n)
	}
	if d := f.Stats().Dropped; d["redirects"] != 1 || d["off-scope-hops"] != 1 {
		t.Errorf("dropped %v, want one for redirects and one for off-scope hops", d)
	}
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	f, _ = Open(db, Options{})
	got := map[string]Item{}
	for range 2 {
		l := next(t, f)
		got[l.URL] = l.Item
	}
	if it := got[redirected.URL]; it.Redirects != 20 || it.OffScopeHops != 0 {
		t.Errorf("after a restart %s has %d redirects and %d off-scope hops, want 20 and 0", it.URL, it.Redirects, it.OffScopeHops)
	}
	if it := got[off.URL]; it.Redirects != 0 || it.OffScopeHops != 3 {
		t.Errorf("after a restart %s has %d redirects and %d off-scope hops, want 0 and 3", it.URL, it.Redirects, it.OffScopeHops)
	}

	// As the version before the counts wrote it: depth, flags, URL, via, key.
	old := []byte{2, flagEmbed, 8, 'h', 't', 't', 'p', ':', '/', '/', 'a', 0, 0}
	if it, err := decodeItem(old); err != nil || it.URL != "http://a" || it.Depth != 2 || !it.Embed || it.Redirects != 0 || it.OffScopeHops != 0 {
		t.Errorf("an item of the older layout reads as %+v, %v", it, err)
	}
	if _, err := decodeItem(append(old, 1)); err == nil {
		t.Error("an item with one hop count of two reads without error")
	}
}

// TestSessionIDsAreOneURL: a site that puts a new session ID in every link
// (a trap) has each of its pages queued once, under the first variant
// found, and the variants do not eat into the host's page limit.
func TestSessionIDsAreOneURL(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	f, _ := Open(db, Options{MaxPagesPerHost: 3})
	const id1, id2 = "0123456789abcdef0123456789abcdef", "FEDCBA9876543210FEDCBA9876543210"
	if n := add(t, db, f, item("a", "/shop;jsessionid="+id1, 0), item("a", "/shop;jsessionid="+id2, 1),
		item("a", "/shop?PHPSESSID="+id2, 1)); n != 1 {
		t.Fatalf("queued %d session variants of /shop, want 1", n)
	}
	if n := add(t, db, f, item("a", "/Shop;jsessionid="+id1, 1), item("a", "/cart?sid="+id1, 1),
		item("a", "/cart?sid="+id2, 1), item("a", "/shop", 2)); n != 2 {
		t.Fatalf("queued %d of /Shop, /cart twice and /shop, want 2 (/Shop and /cart; paths keep their case)", n)
	}
	if l, want := next(t, f), "http://a/shop;jsessionid="+id1; l.URL != want {
		t.Errorf("first lease %s, want the variant found first, %s", l.URL, want)
	}
	if d := f.Stats().Dropped; d["seen"] != 4 || d["host-limit"] != 0 {
		t.Errorf("dropped %v, want 4 seen and none at the host limit", d)
	}
}

// TestRestart: URLs queued or leased when the process stopped come back;
// URLs done or seen stay so; nothing is queued twice.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	f, _ := Open(db, Options{})
	for i := range 200 { // more than one RAM head per host
		add(t, db, f, item("a", fmt.Sprintf("/%03d", i), 0))
	}
	l1 := next(t, f)
	f.Release(l1)
	done(t, db, f, l1)
	l2 := next(t, f) // leased, never done: a crash mid-fetch
	_ = l2
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	f, _ = Open(db, Options{})
	if n := add(t, db, f, item("a", "/000", 0), item("a", "/150", 0)); n != 0 {
		t.Fatalf("re-added %d seen URLs", n)
	}
	seen := map[string]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := f.Next(ctx)
		cancel()
		if errors.Is(err, ErrEmpty) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if seen[l.URL] {
			t.Fatalf("%s leased twice", l.URL)
		}
		seen[l.URL] = true
		f.Release(l)
		done(t, db, f, l)
	}
	if len(seen) != 199 || seen[l1.URL] || !seen[l2.URL] {
		t.Fatalf("after restart leased %d URLs (done one again: %v, in-flight one back: %v)", len(seen), seen[l1.URL], seen[l2.URL])
	}
}

// TestPoliteness runs many workers over few hosts and checks, from the
// recorded start and end times, that no host ever had two requests in flight
// and that its requests were at least the delay apart.
func TestPoliteness(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	const delay = 20 * time.Millisecond
	f, _ := Open(db, Options{Delay: delay})
	var items []Item
	for h := range 3 {
		for i := range 8 {
			items = append(items, item(fmt.Sprintf("h%d", h), fmt.Sprintf("/%d", i), 0))
		}
	}
	add(t, db, f, items...)
	f.SetHostDelay("h2", 2*delay) // Crawl-delay above the default
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := map[string][]span{}
	var leases []Lease
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := f.Next(context.Background())
				if err != nil {
					return
				}
				s := span{start: time.Now()}
				time.Sleep(2 * time.Millisecond)
				s.end = time.Now()
				mu.Lock()
				spans[l.Host] = append(spans[l.Host], s)
				leases = append(leases, l)
				mu.Unlock()
				f.Release(l)
			}
		}()
	}
	wg.Wait()
	if len(leases) != 24 {
		t.Fatalf("%d leases, want 24", len(leases))
	}
	for h, ss := range spans {
		min := delay
		if h == "h2" {
			min = 2 * delay
		}
		for i := 1; i < len(ss); i++ {
			if ss[i].start.Before(ss[i-1].end) {
				t.Errorf("%s: two requests in flight at once", h)
			}
			if gap := ss[i].start.Sub(ss[i-1].end); gap < min {
				t.Errorf("%s: %v between requests, want ≥ %v", h, gap, min)
			}
		}
	}
}

func TestNextHonoursContext(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	f, _ := Open(db, Options{Delay: time.Hour})
	add(t, db, f, item("a", "/1", 0), item("a", "/2", 0))
	l := next(t, f)
	f.Release(l) // a's next request may start in an hour
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { _, err := f.Next(ctx); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
}

// BenchmarkMemoryPerURL queues 1,000,000 URLs over 10,000 hosts as the
// crawler does and reports the heap held per URL known to the frontier.
func BenchmarkMemoryPerURL(b *testing.B) {
	for b.Loop() {
		db := openDB(b, b.TempDir())
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := rss(b)
		f, _ := Open(db, Options{ExpectedURLs: 1_000_000})
		const n, hosts = 1_000_000, 10_000
		batch := make([]Item, 0, 1000)
		for i := range n {
			h := fmt.Sprintf("host-%05d.example", i%hosts)
			batch = append(batch, Item{URL: fmt.Sprintf("http://%s/some/path/page-%07d.html", h, i), Host: h, Depth: 1})
			if len(batch) == cap(batch) {
				add(b, db, f, batch...)
				batch = batch[:0]
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/url")
		b.ReportMetric(float64(rss(b)-rssBefore)/n, "rss-B/url")
		if s := f.Stats(); s.Queued != n {
			b.Fatalf("queued %d", s.Queued)
		}
		db.Close()
	}
}

// rss is the process's resident set size in bytes: Go heap, pebble's
// off-heap memtables and block cache, and everything else.
func rss(b *testing.B) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.Fields(v)[0]), 10, 64)
			return kb << 10
		}
	}
	b.Skip("no VmRSS")
	return 0
}

// TestQueueOrderUnderChurn adds, leases and finishes URLs of one host in a
// random interleaving, as the crawler's committer does: one batch at a
// time, the URLs it queues published (Publish) before the batch commits or
// not, and a lease finished only in a batch after the one current when it
// was leased. There are many more URLs than fit in the host's RAM head.
// Each lease is checked against a model: it is a URL queued and not leased
// before, never after a committed URL that comes first in breadth-first
// order; and after the last commit the rest come in that order exactly. It
// covers the refill cursor (entries a shallower add pushes out of the head
// must still be found on disk) and publication before commit.
func TestQueueOrderUnderChurn(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	f, err := Open(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	type entry struct{ depth, n int }
	before := func(a, b entry) bool { return a.depth < b.depth || a.depth == b.depth && a.n < b.n }
	committed := map[string]entry{} // queued in a committed batch, not leased
	staged := map[string]entry{}    // queued in the open batch, not leased
	type leaseAt struct {
		l     Lease
		batch int
	}
	var leases []leaseAt
	b, batch, n := db.NewIndexedBatch(), 0, 0
	commit := func() {
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		f.Committed()
		b, batch = db.NewIndexedBatch(), batch+1
		for u, e := range staged {
			committed[u] = e
		}
		clear(staged)
	}
	lease := func() {
		l := next(t, f)
		f.Release(l)
		e, ok := committed[l.URL]
		if ok {
			delete(committed, l.URL)
		} else if e, ok = staged[l.URL]; ok {
			delete(staged, l.URL)
		} else {
			t.Fatalf("after %d URLs: leased %s, which is not queued (or leased before)", n, l.URL)
		}
		for u, c := range committed {
			if before(c, e) {
				t.Fatalf("after %d URLs: leased %s before %s, which comes first", n, l.URL, u)
			}
		}
		leases = append(leases, leaseAt{l, batch})
	}
	for range 8000 {
		switch x := r.IntN(20); {
		case x < 5:
			var items []Item
			for range 1 + r.IntN(6) {
				n++
				it := item("h", "/p"+strconv.Itoa(n), r.IntN(4))
				items = append(items, it)
				staged[it.URL] = entry{it.Depth, n}
			}
			if _, err := f.Add(b, items); err != nil {
				t.Fatal(err)
			}
			if r.IntN(2) == 0 {
				f.Publish()
			}
		case x < 13:
			if len(committed) > 0 {
				lease()
			}
		case x < 17:
			// A lease's result commits after the batch open when it was leased.
			if i := slices.IndexFunc(leases, func(l leaseAt) bool { return l.batch < batch }); i >= 0 {
				if err := f.Done(b, leases[i].l); err != nil {
					t.Fatal(err)
				}
				leases = slices.Delete(leases, i, i+1)
			}
		default:
			commit()
		}
	}
	commit()
	for len(committed) > 0 {
		lease()
	}
	commit()
	for _, l := range leases {
		if err := f.Done(b, l.l); err != nil {
			t.Fatal(err)
		}
	}
	commit()
	if _, err := f.Next(context.Background()); !errors.Is(err, ErrEmpty) {
		t.Fatalf("after %d URLs, all done: %v, want ErrEmpty", n, err)
	}
}

// fakeArchive holds some URLs already and counts some of a host's.
type fakeArchive struct {
	urls  map[string]bool
	hosts map[string]int
	asked map[string]int
}

func (a *fakeArchive) Archived(_ pebble.Reader, it Item) (bool, error) { return a.urls[it.URL], nil }

func (a *fakeArchive) HostArchived(_ pebble.Reader, host string, limit int) (int, error) {
	a.asked[host]++
	return min(a.hosts[host], limit), nil
}

// With an Archive, a URL archived already is marked seen, not queued, and
// a host's archived URLs count toward its limit, asked once per host.
func TestArchivedURLsAreSeen(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	a := &fakeArchive{urls: map[string]bool{"http://a/held": true}, hosts: map[string]int{"a": 1, "b": 2}, asked: map[string]int{}}
	f, _ := Open(db, Options{MaxPagesPerHost: 3, Archive: a})
	if n := add(t, db, f, item("a", "/held", 1), item("a", "/new", 1), item("a", "/new2", 1), item("a", "/over", 1)); n != 2 {
		t.Errorf("host a: queued %d, want 2 (/new, /new2: 1 archived + 2 reach the limit of 3)", n)
	}
	if n := add(t, db, f, item("b", "/1", 1), item("b", "/2", 1)); n != 1 {
		t.Errorf("host b: queued %d, want 1 (2 archived + 1)", n)
	}
	s := f.Stats()
	for reason, want := range map[string]int{"archived": 1, "host-limit": 2} {
		if s.Dropped[reason] != want {
			t.Errorf("dropped[%s] = %d, want %d (%v)", reason, s.Dropped[reason], want, s.Dropped)
		}
	}
	// The seen set remembers it, across a restart.
	f.Close()
	delete(a.urls, "http://a/held")
	f, _ = Open(db, Options{MaxPagesPerHost: 3, Archive: a})
	if n := add(t, db, f, item("a", "/held", 1)); n != 0 {
		t.Errorf("an archived URL offered again after a restart: queued %d, want 0", n)
	}
	if a.asked["a"] != 1 || a.asked["b"] != 1 {
		t.Errorf("hosts' archived URLs asked %v, want once each", a.asked)
	}
}

// A held lease is set aside until the frontier is next opened: the run's
// retries (RequeueDeferred) leave it, Open queues it again, once, and it
// counts neither as deferred nor as retried.
func TestHoldUntilReopened(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	f, _ := Open(db, Options{})
	add(t, db, f, item("a", "/refused", 0))
	l := next(t, f)
	f.Release(l)
	commit := func(stage func(b *pebble.Batch) error) {
		t.Helper()
		b := db.NewIndexedBatch()
		if err := stage(b); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		f.Committed()
	}
	commit(func(b *pebble.Batch) error { return f.Hold(b, l) })
	commit(f.RequeueDeferred)
	if s := f.Stats(); s.Queued != 0 || s.Deferred != 0 || s.Retried != 0 {
		t.Fatalf("held, after the run's retry: %d queued, %d deferred, %d retried; want none", s.Queued, s.Deferred, s.Retried)
	}
	if n := add(t, db, f, item("a", "/refused", 0)); n != 0 {
		t.Errorf("a held URL found again in the same run was queued %d times; it is seen", n)
	}
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	f, _ = Open(db, Options{})
	if s := f.Stats(); s.Queued != 1 || s.Deferred != 0 || s.Retried != 0 {
		t.Fatalf("reopened: %d queued, %d deferred, %d retried; want the held URL queued", s.Queued, s.Deferred, s.Retried)
	}
	if got := next(t, f); got.URL != l.URL {
		t.Errorf("reopened, the frontier gives %s, want %s", got.URL, l.URL)
	}
}
