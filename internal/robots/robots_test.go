package robots

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

type fakeSite struct {
	status int
	body   string
	err    error
	calls  atomic.Int64
}

func (s *fakeSite) fetch(ctx context.Context, u string) (int, []byte, string, error) {
	s.calls.Add(1)
	time.Sleep(5 * time.Millisecond) // let concurrent callers pile up
	return s.status, []byte(s.body), u, s.err
}

func check(t *testing.T, c *Cache, u string) Decision {
	t.Helper()
	d, err := c.Check(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRules(t *testing.T) {
	site := &fakeSite{status: 200, body: `
User-agent: *
Disallow: /private/
Allow: /private/public/
Disallow: /*.pdf$
Disallow: /search?
Disallow: /foo*bar

User-Agent: WAGGLE
Disallow: /nowaggle
Allow: /
Crawl-delay: 2
`}
	c := New(site.fetch, Options{UserAgent: "waggle"})
	for u, want := range map[string]bool{
		"http://a.test/":           true,
		"http://a.test/nowaggle/x": false, // waggle's own group, matched case-insensitively
		"http://a.test/private/x":  true,  // the * group does not apply to waggle
	} {
		if d := check(t, c, u); d.Allowed != want {
			t.Errorf("waggle %s: %v, want %v", u, d.Allowed, want)
		}
	}
	if d := check(t, c, "http://a.test/"); d.CrawlDelay != 2*time.Second {
		t.Errorf("crawl delay %v", d.CrawlDelay)
	}
	other := New(site.fetch, Options{UserAgent: "otherbot"})
	for u, want := range map[string]bool{
		"http://a.test/private/x":        false,
		"http://a.test/private/public/y": true, // longest match wins
		"http://a.test/doc.pdf":          false,
		"http://a.test/doc.pdf?x":        true,
		"http://a.test/search?q=1":       false,
		"http://a.test/search":           true,
		"http://a.test/foo/bar":          false,
		"http://a.test/x/foo/bar":        true, // rules match from the path's start
	} {
		if d := check(t, other, u); d.Allowed != want {
			t.Errorf("otherbot %s: %v, want %v", u, d.Allowed, want)
		}
	}
}

func TestStatusAndGarbage(t *testing.T) {
	bin := make([]byte, 1<<16)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range bin {
		bin[i] = byte(r.Uint32())
	}
	huge := "User-agent: *\nDisallow: /early\n" + strings.Repeat("# padding\n", 600_000) + "Disallow: /late\n"
	for _, c := range []struct {
		name  string
		site  *fakeSite
		path  string
		allow bool
	}{
		{"404 allows all", &fakeSite{status: 404}, "/x", true},
		{"403 allows all", &fakeSite{status: 403}, "/x", true},
		{"500 disallows all", &fakeSite{status: 500}, "/x", false},
		{"network error disallows all", &fakeSite{err: errors.New("connection refused")}, "/x", false},
		{"binary body", &fakeSite{status: 200, body: string(bin)}, "/x", true},
		{"huge: early rule kept", &fakeSite{status: 200, body: huge}, "/early", false},
		{"huge: rule past 500 KiB ignored", &fakeSite{status: 200, body: huge}, "/late", true},
	} {
		d := check(t, New(c.site.fetch, Options{UserAgent: "waggle"}), "http://a.test"+c.path)
		if d.Allowed != c.allow {
			t.Errorf("%s: allowed %v (%s)", c.name, d.Allowed, d.Reason)
		}
	}
	d := check(t, New((&fakeSite{err: errors.New("boom")}).fetch, Options{}), "http://a.test/")
	if d.Err == nil {
		t.Error("unreachable robots.txt: Decision.Err not set")
	}
	// A server error is a reason to wait, not a disallow: the crawler tells
	// the two apart by Err.
	for _, status := range []int{500, 503, 100} {
		d := check(t, New((&fakeSite{status: status}).fetch, Options{}), "http://a.test/")
		if d.Allowed || !errors.Is(d.Err, ErrServerError) {
			t.Errorf("robots.txt answered %d: %+v; want disallowed with ErrServerError", status, d)
		}
	}
}

// An unreachable robots.txt is kept an hour, but ForgetUnreachable has the
// next check fetch it again (a crawler retrying the URLs it held back);
// files that were had are kept.
func TestForgetUnreachable(t *testing.T) {
	down := &fakeSite{status: 503}
	up := &fakeSite{status: 200, body: "User-agent: *\nDisallow: /x\n"}
	byHost := func(ctx context.Context, u string) (int, []byte, string, error) {
		if strings.Contains(u, "down.test") {
			return down.fetch(ctx, u)
		}
		return up.fetch(ctx, u)
	}
	c := New(byHost, Options{})
	check(t, c, "http://down.test/")
	check(t, c, "http://up.test/")
	check(t, c, "http://down.test/")
	if down.calls.Load() != 1 {
		t.Fatalf("an unreachable robots.txt fetched %d times in its hour, want 1", down.calls.Load())
	}
	down.status = 200
	c.ForgetUnreachable()
	if d := check(t, c, "http://down.test/"); !d.Allowed || down.calls.Load() != 2 {
		t.Errorf("after ForgetUnreachable: %+v, %d fetches; want the file fetched again and allowing", d, down.calls.Load())
	}
	check(t, c, "http://up.test/")
	if up.calls.Load() != 1 {
		t.Errorf("a robots.txt that was had fetched %d times, want 1", up.calls.Load())
	}
}

func TestSharedFetchAndTTL(t *testing.T) {
	site := &fakeSite{status: 200, body: "User-agent: *\nDisallow: /x\n"}
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := New(site.fetch, Options{TTL: time.Hour, Now: clock})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); check(t, c, "http://a.test/y") }()
	}
	wg.Wait()
	if n := site.calls.Load(); n != 1 {
		t.Fatalf("%d fetches for 50 concurrent checks of one host, want 1", n)
	}
	check(t, c, "http://a.test/z")
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	check(t, c, "http://a.test/z")
	if n := site.calls.Load(); n != 2 {
		t.Fatalf("%d fetches after expiry, want 2", n)
	}
}

func TestPersistentCache(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	site := &fakeSite{status: 200, body: "User-agent: *\nDisallow: /x\n"}
	check(t, New(site.fetch, Options{Store: db}), "http://a.test/")
	db.Close()
	db, _ = pebble.Open(dir, &pebble.Options{})
	defer db.Close()
	if d := check(t, New(site.fetch, Options{Store: db}), "http://a.test/x"); d.Allowed {
		t.Error("rule lost across restart")
	}
	if n := site.calls.Load(); n != 1 {
		t.Errorf("%d fetches across a restart, want 1", n)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("User-agent: *\nDisallow: /a*b$\nAllow: /a\nCrawl-delay: x", "/ab")
	f.Fuzz(func(t *testing.T, body, path string) {
		c := New(func(_ context.Context, u string) (int, []byte, string, error) { return 200, []byte(body), u, nil }, Options{UserAgent: "waggle"})
		if _, err := c.Check(context.Background(), "http://a.test/"+path); err != nil {
			t.Fatal(err)
		}
	})
}

// fakeWeb serves robots.txt files and redirects between them, counting
// fetches.
type fakeWeb struct {
	mu        sync.Mutex
	fetched   map[string]int
	redirects map[string]string
}

func (w *fakeWeb) fetch(_ context.Context, u string) (int, []byte, string, error) {
	w.mu.Lock()
	w.fetched[u]++
	to, ok := w.redirects[u]
	w.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // let concurrent callers pile up
	if ok {
		return 301, nil, to, nil
	}
	return 200, []byte("User-agent: *\nDisallow: /private\n"), "", nil
}

func (w *fakeWeb) check(t *testing.T, want map[string]int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for u, n := range w.fetched {
		if want[u] != n {
			t.Errorf("%s fetched %d times, want %d", u, n, want[u])
		}
	}
	for u, n := range want {
		if w.fetched[u] != n {
			t.Errorf("%s fetched %d times, want %d", u, w.fetched[u], n)
		}
	}
}

// A robots.txt reached through a redirect to another origin's /robots.txt
// is that origin's robots.txt, fetched once whichever origin asks first. A
// redirect to any other path is followed as it is.
func TestRedirectTargetIsFetchedOnce(t *testing.T) {
	web := &fakeWeb{fetched: map[string]int{}, redirects: map[string]string{
		"http://a.test/robots.txt":   "http://www.a.test/robots.txt",
		"http://b.test/robots.txt":   "http://www.b.test/robots.txt?x=1",
		"http://c.test/robots.txt":   "http://www.c.test/other.txt",
		"http://d.test/robots.txt":   "https://d.test/robots.txt",
		"http://old.test/robots.txt": "http://new.test/robots.txt",
	}}
	c := New(web.fetch, Options{})
	check(t, c, "http://new.test/")
	for _, u := range []string{"http://a.test/", "http://b.test/", "http://c.test/", "http://d.test/", "http://old.test/"} {
		check(t, c, u)
	}
	if d := check(t, c, "http://www.a.test/private"); d.Allowed {
		t.Error("www.a.test/private allowed; want the redirected robots.txt's rules")
	}
	if d := check(t, c, "http://old.test/private"); d.Allowed {
		t.Error("old.test/private allowed; want the rules of new.test, where its robots.txt redirects")
	}
	check(t, c, "https://d.test/")
	check(t, c, "http://www.b.test/")
	check(t, c, "http://www.c.test/")
	web.check(t, map[string]int{
		"http://a.test/robots.txt": 1, "http://www.a.test/robots.txt": 1,
		"http://b.test/robots.txt": 1, "http://www.b.test/robots.txt?x=1": 1, "http://www.b.test/robots.txt": 1,
		"http://c.test/robots.txt": 1, "http://www.c.test/other.txt": 1, "http://www.c.test/robots.txt": 1,
		"http://d.test/robots.txt": 1, "https://d.test/robots.txt": 1,
		"http://old.test/robots.txt": 1, "http://new.test/robots.txt": 1,
	})
}

// Hosts and their www. names checked at once, in any order, fetch each
// robots.txt once; origins redirecting to each other, or too far, do not
// hang: their robots.txt is unreachable.
func TestRedirectsUnderConcurrency(t *testing.T) {
	web := &fakeWeb{fetched: map[string]int{}, redirects: map[string]string{
		"http://e.test/robots.txt":  "http://www.e.test/robots.txt",
		"http://f.test/robots.txt":  "https://f.test/robots.txt",
		"https://f.test/robots.txt": "https://www.f.test/robots.txt",
		"http://x.test/robots.txt":  "http://y.test/robots.txt",
		"http://y.test/robots.txt":  "http://x.test/robots.txt",
	}}
	const chain = 50 // origins each redirecting to the next one's robots.txt
	for i := range chain {
		web.redirects[fmt.Sprintf("http://c%d.test/robots.txt", i)] = fmt.Sprintf("http://c%d.test/robots.txt", i+1)
	}
	c := New(web.fetch, Options{})
	urls := []string{"http://e.test/", "http://www.e.test/", "http://f.test/", "https://f.test/", "https://www.f.test/", "http://x.test/", "http://y.test/", "http://c0.test/"}
	var wg sync.WaitGroup
	decisions := make([]Decision, len(urls)*4)
	for i := range decisions {
		wg.Go(func() { decisions[i] = check(t, c, urls[(i*5)%len(urls)]) })
	}
	wg.Wait()
	for i, d := range decisions {
		u := urls[(i*5)%len(urls)]
		unreachable := strings.Contains(u, "x.test") || strings.Contains(u, "y.test") || strings.Contains(u, "c0.test")
		if d.Allowed == unreachable {
			t.Errorf("%s: %+v", u, d)
		}
	}
	web.mu.Lock()
	defer web.mu.Unlock()
	for _, u := range []string{"http://e.test/robots.txt", "http://www.e.test/robots.txt", "http://f.test/robots.txt", "https://f.test/robots.txt", "https://www.f.test/robots.txt"} {
		if web.fetched[u] != 1 {
			t.Errorf("%s fetched %d times, want once", u, web.fetched[u])
		}
	}
	// However many origins a chain of redirects goes through, one check
	// follows it only so far: nested fills, then redirects of the last.
	fetched := 0
	for i := range chain + 1 {
		fetched += web.fetched[fmt.Sprintf("http://c%d.test/robots.txt", i)]
	}
	if most := 2 * (maxRedirects + 1); fetched > most {
		t.Errorf("a chain of %d redirects cost %d fetches, want at most %d", chain, fetched, most)
	}
}

// A caller waiting for another's fetch of the same robots.txt, which that
// caller gave up (its context ended), fetches it itself rather than take
// the abandoned entry as an unreachable robots.txt.
func TestAbandonedFetchIsRetried(t *testing.T) {
	var calls atomic.Int64
	started := make(chan struct{})
	fetch := func(ctx context.Context, u string) (int, []byte, string, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			return 0, nil, "", ctx.Err()
		}
		return 200, []byte("User-agent: *\nDisallow: /private\n"), "", nil
	}
	c := New(fetch, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Check(ctx, "http://a.test/")
		first <- err
	}()
	<-started
	second := make(chan Decision, 1)
	go func() { second <- check(t, c, "http://a.test/private") }()
	time.Sleep(20 * time.Millisecond) // the second caller waits for the first's fetch
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled caller: %v", err)
	}
	if d := <-second; d.Allowed || d.Reason != "disallowed by robots.txt" {
		t.Errorf("the waiting caller: %+v; want the rules, fetched again", d)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}
}

// A fetch that panics, and a caller that recovers from it, leave no one
// waiting for the file: a waiter fetches it itself.
func TestPanickingFetchReleasesWaiters(t *testing.T) {
	var calls atomic.Int64
	started, proceed := make(chan struct{}), make(chan struct{})
	fetch := func(ctx context.Context, u string) (int, []byte, string, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-proceed
			panic("a bug in the fetcher")
		}
		return 200, []byte("User-agent: *\nDisallow: /private\n"), "", nil
	}
	c := New(fetch, Options{})
	first := make(chan any, 1)
	go func() {
		defer func() { first <- recover() }()
		c.Check(context.Background(), "http://a.test/")
	}()
	<-started
	second := make(chan Decision, 1)
	go func() { second <- check(t, c, "http://a.test/private") }()
	time.Sleep(20 * time.Millisecond) // the second caller waits for the first's fetch
	close(proceed)
	if r := <-first; r != "a bug in the fetcher" {
		t.Errorf("the first caller recovered %v, want the fetcher's panic", r)
	}
	select {
	case d := <-second:
		if d.Allowed || d.Reason != "disallowed by robots.txt" {
			t.Errorf("the waiting caller: %+v; want the rules, fetched again", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting caller still waits a minute after the fetch panicked")
	}
}

// An origin whose robots.txt redirects to another's keeps that one's rules
// in the persistent cache too, whichever of the two was checked first:
// after a restart neither the redirect nor the file is fetched again.
func TestPersistentCacheOfARedirect(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	web := &fakeWeb{fetched: map[string]int{}, redirects: map[string]string{
		"http://a.test/robots.txt": "http://www.a.test/robots.txt",
		"http://b.test/robots.txt": "http://www.b.test/robots.txt",
	}}
	first := New(web.fetch, Options{Store: db})
	check(t, first, "http://a.test/")     // a.test first: it fills www.a.test's entry
	check(t, first, "http://www.b.test/") // www.b.test first: b.test shares a ready entry
	check(t, first, "http://b.test/")
	again := New(web.fetch, Options{Store: db})
	for _, u := range []string{"http://a.test/private", "http://www.a.test/private", "http://b.test/private", "http://www.b.test/private"} {
		if d := check(t, again, u); d.Allowed {
			t.Errorf("%s allowed after a restart; want the rules kept", u)
		}
	}
	web.check(t, map[string]int{
		"http://a.test/robots.txt": 1, "http://www.a.test/robots.txt": 1,
		"http://b.test/robots.txt": 1, "http://www.b.test/robots.txt": 1,
	})
}

// The redirects that led to a robots.txt are kept with it: after a
// restart, a chain of more than five through stored entries is still too
// long, and one of five still is not.
func TestPersistentCacheKeepsRedirectCounts(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	web := &fakeWeb{fetched: map[string]int{}, redirects: map[string]string{}}
	for i := range 6 { // c0 → … → c6: six redirects; c1 → … → c6: five
		web.redirects[fmt.Sprintf("http://c%d.test/robots.txt", i)] = fmt.Sprintf("http://c%d.test/robots.txt", i+1)
	}
	for run := range 2 {
		c := New(web.fetch, Options{Store: db})
		if d := check(t, c, "http://c1.test/private"); d.Allowed {
			t.Errorf("run %d: c1 (five redirects) allowed /private: %+v", run, d)
		}
		if d := check(t, c, "http://c0.test/"); d.Allowed {
			t.Errorf("run %d: c0 (six redirects) allowed: %+v", run, d)
		}
	}
}
