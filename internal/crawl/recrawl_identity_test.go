package crawl

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A directory URL without its slash redirects to the URL with it, the
// most common redirect on the web. The two have an entry each: the
// redirect is never sent the page's validators, and the page is revisited
// on its own schedule (not only reached again through the redirect, a
// link seen before, which would freeze it at its first capture).
func TestRecrawlRevisitsPageBehindSlashRedirect(t *testing.T) {
	var version atomic.Int32
	version.Store(1)
	var mu sync.Mutex
	asked := map[string][]string{} // path → If-None-Match of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-None-Match"))
		mu.Unlock()
		switch r.URL.Path {
		case "/dir":
			http.Redirect(w, r, "/dir/", http.StatusMovedPermanently)
		case "/dir/":
			v := version.Load()
			if notModified(w, r, fmt.Sprintf(`"page-v%d"`, v)) {
				return
			}
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<html><body><p>Directory listing, version %d.</p></body></html>", v)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/dir")
	runCrawl(t, cfg)
	if c := archived(t, cfg.Data)[srv.URL+"/dir/"]; len(c) != 1 {
		t.Fatalf("first crawl: %d captures of /dir/, want 1", len(c))
	}

	version.Store(2) // the page changes
	all := cfg
	all.RecrawlAll = true
	runCrawl(t, all)
	runCrawl(t, all)

	mu.Lock()
	for i, inm := range asked["/dir"] {
		if inm != "" {
			t.Errorf("request %d of /dir (a redirect) sent If-None-Match %q: /dir/'s validator", i+1, inm)
		}
	}
	t.Logf("requests: /dir %q, /dir/ %q", asked["/dir"], asked["/dir/"])
	mu.Unlock()
	caps := archived(t, cfg.Data)[srv.URL+"/dir/"]
	if len(caps) < 2 {
		t.Errorf("/dir/ has %d captures after two re-crawls of everything, and has changed meanwhile; want it revisited", len(caps))
	}
}

// "/news" and "/news/" are two pages. Were they one entry, the re-crawl
// would ask "/news" If-Modified-Since "/news/"'s date; "/news", older,
// would answer 304, and its server-not-modified revisit would point at
// "/news/"'s payload: replay would show the wrong page.
func TestRecrawlSendsOnlyItsOwnValidators(t *testing.T) {
	older := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	asked := map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-Modified-Since"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/news":
			http.ServeContent(w, r, "", older, strings.NewReader(`<html><body><p>NEWS PAGE</p><a href="/news/">all news</a></body></html>`))
		case "/news/":
			http.ServeContent(w, r, "", newer, strings.NewReader(`<html><body><p>NEWS INDEX</p></body></html>`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/news")
	runCrawl(t, cfg)
	all := cfg
	all.RecrawlAll = true
	runCrawl(t, all)
	mu.Lock()
	t.Logf("If-Modified-Since sent: /news %q, /news/ %q", asked["/news"], asked["/news/"])
	mu.Unlock()

	caps := archived(t, cfg.Data)[srv.URL+"/news"]
	if len(caps) != 2 {
		t.Fatalf("/news: %d captures, want 2", len(caps))
	}
	rv := caps[1]
	rec, err := warc.ReadAt(filepath.Join(cfg.Data, "warc"), warc.Location{Segment: rv.Segment, Offset: rv.Offset, Length: rv.Length})
	if err != nil {
		t.Fatal(err)
	}
	if target := rec.Header.Get("WARC-Refers-To-Target-URI"); rec.Type() == warc.TypeRevisit && target != srv.URL+"/news" {
		t.Errorf("the re-crawl of /news is a %s revisit referring to %s (%s): replay of /news shows another page's payload",
			rec.Header.Get("WARC-Profile"), target, rec.Header.Get("WARC-Payload-Digest"))
	}
}

// Paths and queries are case-sensitive (RFC 3986 §6.2.2.1): "/v?id=Ab3"
// and "/v?id=ab3" are two resources, which the frontier crawls as two
// URLs, and the re-crawl revisits both.
func TestRecrawlRevisitsCaseVariants(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.RequestURI()]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body><p>Resource %s</p></body></html>", r.URL.RequestURI())
	}))
	defer srv.Close()
	upper, lower := srv.URL+"/v?id=Ab3", srv.URL+"/v?id=ab3"
	cfg := directConfig(t, upper, lower)
	runCrawl(t, cfg)
	if c := archived(t, cfg.Data); len(c[upper]) != 1 || len(c[lower]) != 1 {
		t.Fatalf("first crawl: %d and %d captures; want each URL once", len(c[upper]), len(c[lower]))
	}
	all := cfg
	all.RecrawlAll = true
	runCrawl(t, all)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/v?id=Ab3", "/v?id=ab3"} {
		if hits[p] != 2 {
			t.Errorf("%s fetched %d times by a crawl and a re-crawl of everything; want 2", p, hits[p])
		}
	}
}

// A URL queued for its revisit when the re-crawl rules narrow takes the new
// rules at its visit (applyRules skips it), a failed visit included: with
// --revisit 1h,1s,1h the page comes back within the hour, not in a day.
// (A failure that may pass is retried instead, without a schedule; this
// one, a response that is not HTTP, would fail again.)
func TestFailedRevisitTakesNewBounds(t *testing.T) {
	hang := make(chan struct{})
	var served atomic.Int32
	var broken atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			conn, _, _ := w.(http.Hijacker).Hijack()
			io.WriteString(conn, "this is not an HTTP response\r\n\r\n")
			conn.Close()
			return
		}
		if served.Add(1) > 1 {
			<-hang // the revisit: in flight when the run stops
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body><p>a page</p></body></html>")
	}))
	page := srv.URL + "/"
	cfg := directConfig(t, page)
	runCrawl(t, cfg)

	// A re-crawl of everything stops while the revisit is in flight: the URL
	// stays queued, its entry without a due time.
	all := cfg
	all.RecrawlAll = true
	stop := make(chan struct{})
	go func() {
		for served.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		close(stop)
	}()
	runStopped(t, all, stop)
	broken.Store(true) // the next visit fails, for good
	close(hang)
	defer srv.Close()

	rule, err := recrawl.ParseRule("1h,1s,1h")
	if err != nil {
		t.Fatal(err)
	}
	narrow := cfg
	narrow.Recrawl = true
	narrow.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
	start := time.Now()
	runCrawl(t, narrow)

	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, page)
	if err != nil || !ok {
		t.Fatalf("no entry for %s (%v)", page, err)
	}
	if e.Due.IsZero() {
		t.Fatalf("%s is still queued; the test did not reach the failed visit", page)
	}
	if wait := e.Due.Sub(start); wait > 66*time.Minute {
		t.Errorf("after a failed visit under --revisit 1h,1s,1h, %s is due in %v (interval %v): outside the rule's bounds", page, wait.Round(time.Minute), e.State.Interval)
	}
}

// Entries written under the earlier form of recrawl.Key (the SURT key's
// path: lower-cased, without a trailing slash) move to their key now at
// the next start, with their due keys; an old entry whose URL has an entry
// under its own key already gives way to it.
func TestEntriesMoveToTheirKeys(t *testing.T) {
	cfg := testConfig(t, "")
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	old := []recrawl.Entry{
		{Key: "http://x.test/dir", URL: "http://x.test/dir/", Due: due, ETag: `"dir"`},
		{Key: "http://x.test/v?id=ab3", URL: "http://x.test/v?id=Ab3", Due: due, ETag: `"v"`},
		{Key: "http://x.test/news", URL: "http://x.test/News", Due: due, ETag: `"old"`},
		{Key: "http://x.test/same", URL: "http://x.test/same", Due: due, ETag: `"same"`},
	}
	b := db.NewIndexedBatch()
	for _, e := range old {
		if err := recrawl.Put(b, nil, e); err != nil {
			t.Fatal(err)
		}
	}
	// /News has an entry under its own key: the old one gives way.
	if err := recrawl.Put(b, nil, recrawl.Entry{URL: "http://x.test/News", Due: due, ETag: `"own"`}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	db.Close()

	again := cfg
	again.Recrawl = true
	runCrawl(t, again)

	db, err = OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	es, err := recrawl.Entries(db, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.Key] = e.URL + " " + e.ETag
	}
	want := map[string]string{
		"http://x.test/dir/":     `http://x.test/dir/ "dir"`,
		"http://x.test/v?id=Ab3": `http://x.test/v?id=Ab3 "v"`,
		"http://x.test/News":     `http://x.test/News "own"`,
		"http://x.test/same":     `http://x.test/same "same"`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("entries after the move:\n%v\nwant\n%v", got, want)
	}
	n := 0
	recrawl.Due(db, due, func(e recrawl.Entry, stale bool) bool {
		if stale {
			t.Errorf("due key of %q left behind", e.Key)
		}
		n++
		return true
	})
	if n != len(want) {
		t.Errorf("%d due keys, want %d", n, len(want))
	}
}
