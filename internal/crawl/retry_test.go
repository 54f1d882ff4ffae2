package crawl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/websim"
)

// A fetch that fails for a reason that may pass (here the proxy, standing
// for the network, is down for the first run) is not dropped: running the
// same command again, the documented way to resume, fetches it, and what
// it links to.
func TestFailedFetchesAreRetriedOnTheNextRun(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 2, Pages: 20})
	// A proxy address nothing listens on: every fetch fails to connect.
	down := startWebDown(t)
	cfg := testConfig(t, down, web.Seeds()[0])
	cfg.IgnoreRobots = true
	s1 := runCrawl(t, cfg)
	if s1.Errors == 0 || s1.Deferred != s1.Errors {
		t.Fatalf("first run: %d fetches failed, %d deferred; want all deferred (%+v)", s1.Errors, s1.Deferred, s1)
	}
	again := cfg
	again.Proxy = srv.URL()
	s2 := runCrawl(t, again)
	if s2.Retried != s1.Deferred || s2.New < 2 {
		t.Errorf("the network is back, the same crawl run again archived nothing: "+
			"the %d URLs whose fetch failed are never retried (first run %+v, second %+v)", s1.Errors, s1, s2)
	}
}

func startWebDown(t *testing.T) string {
	t.Helper()
	_, srv := startWeb(t, websim.Config{Seed: 1, Hosts: 1, Pages: 1})
	u := srv.URL()
	srv.Close() // the port is now closed
	return u
}

// The same through robots.txt: with the network down, the seed's robots.txt
// cannot be fetched. That is an error, not a disallow, and the seed waits
// for the next run instead of being dropped.
func TestSeedLostToAnOutageIsNotPoisoned(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 2, Pages: 20})
	cfg := testConfig(t, startWebDown(t), web.Seeds()[0])
	s1 := runCrawl(t, cfg)
	if s1.Errors != 1 || s1.Deferred != 1 || s1.Robots != 0 {
		t.Errorf("first run (network down): errors %d, deferred %d, robots-blocked %d; want 1, 1, 0", s1.Errors, s1.Deferred, s1.Robots)
	}
	again := cfg
	again.Proxy = srv.URL()
	again.IgnoreRobots = true
	if s2 := runCrawl(t, again); s2.New == 0 {
		t.Errorf("network back, robots ignored: the same crawl run again archived nothing (%+v)", s2)
	}
}

// A --recrawl-all run stopped partway and run again visits the URLs it had
// not visited yet, and not again those it had: every URL ends with one
// capture from the first crawl and one from the re-crawl.
func TestInterruptedRecrawlAllResumes(t *testing.T) {
	const pages = 40
	cfg, _, stop := crawledSite(t, pages)
	if n := len(archived(t, cfg.Data)); n != pages {
		t.Fatalf("first crawl: %d URLs archived, want %d", n, pages)
	}

	all := cfg
	all.RecrawlAll = true
	runStopped(t, all, stop)
	caps := archived(t, cfg.Data)
	revisited := 0
	for _, cs := range caps {
		revisited += len(cs) - 1
	}
	if revisited == 0 || revisited >= pages {
		t.Fatalf("fixture: the stopped re-crawl revisited %d of %d URLs", revisited, pages)
	}
	runCrawl(t, all)
	for u, cs := range archived(t, cfg.Data) {
		if len(cs) != 2 {
			t.Errorf("%s: %d captures after a first crawl and a --recrawl-all stopped and resumed, want 2", u, len(cs))
		}
	}
}

// crawledSite serves a site of pages pages, all linked from its home
// page, and crawls it into a new data directory; stop closes at the tenth
// fetch after that crawl.
func crawledSite(t *testing.T, pages int) (Config, *httptest.Server, <-chan struct{}) {
	t.Helper()
	var hits atomic.Int64
	stop := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == int64(pages)+10 { // ten fetches into what follows
			once.Do(func() { close(stop) })
		}
		sitePage(w, r.URL.Path, pages)
	}))
	t.Cleanup(srv.Close)
	cfg := directConfig(t, srv.URL+"/")
	cfg.Workers = 2
	runCrawl(t, cfg)
	return cfg, srv, stop
}

// sitePage writes the page at path of a site of pages pages: the home
// page links to all the others.
func sitePage(w http.ResponseWriter, path string, pages int) {
	w.Header().Set("Content-Type", "text/html")
	if path == "/" {
		for i := range pages - 1 {
			fmt.Fprintf(w, `<a href="/p%d">p%d</a> `, i, i)
		}
		return
	}
	fmt.Fprintf(w, "<html><body><p>page %s</p></body></html>", path)
}

// runStopped runs a crawl of cfg until stop closes, and fails the test if
// it was not stopped partway.
func runStopped(t *testing.T, cfg Config, stop <-chan struct{}) {
	t.Helper()
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	if _, err := c.Run(ctx); err == nil {
		t.Fatal("fixture: the run was not stopped partway")
	}
	c.Close()
}

// A run retries, once nothing else is queued, the URLs whose fetch failed
// for a reason that may pass: a server that drops the first connection for
// each path, its robots.txt's included, is archived whole in one run, the
// robots.txt that could not be had fetched again for the retry (three
// rounds: robots.txt, the home page, the pages it links to); one that
// drops every connection is asked 1+Retries times, and its URLs wait for
// the next run.
func TestRunRetriesFailedFetches(t *testing.T) {
	const pages = 6
	serve := func(failFirst int) (*httptest.Server, func(string) int) {
		var mu sync.Mutex
		tries := map[string]int{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tries[r.URL.Path]++
			n := tries[r.URL.Path]
			mu.Unlock()
			// Each connection serves one request, so that every failure
			// reaches the crawler (the fetcher tries a reused connection
			// that drops once more at once).
			w.Header().Set("Connection", "close")
			if failFirst < 0 || n <= failFirst {
				// The connection drops before an answer: io.EOF at the client.
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			if r.URL.Path == "/robots.txt" {
				io.WriteString(w, "User-agent: *\nDisallow: /private/\n")
				return
			}
			sitePage(w, r.URL.Path, pages)
		}))
		t.Cleanup(srv.Close)
		return srv, func(p string) int { mu.Lock(); defer mu.Unlock(); return tries[p] }
	}

	flaky, tries := serve(1)
	cfg := testConfig(t, "", flaky.URL+"/")
	cfg.Retries, cfg.RetryWait = 3, 10*time.Millisecond
	s := runCrawl(t, cfg)
	pagesArchived := 0
	for u := range archived(t, cfg.Data) {
		if !strings.HasSuffix(u, "/robots.txt") {
			pagesArchived++
		}
	}
	if pagesArchived != pages || s.Deferred != 0 || s.Retried < pages || s.Robots != 0 {
		t.Errorf("each path dropped once, robots.txt's too: %d of %d pages archived in one run (robots.txt asked %d times), %d left deferred, %d retried (%+v)",
			pagesArchived, pages, tries("/robots.txt"), s.Deferred, s.Retried, s)
	}

	down, tries := serve(-1)
	cfg = directConfig(t, down.URL+"/")
	cfg.Retries, cfg.RetryWait = 2, 10*time.Millisecond
	s = runCrawl(t, cfg)
	if n := tries("/"); n != 1+cfg.Retries || s.Deferred != 1 || s.Retried != int64(cfg.Retries) || s.New != 0 {
		t.Errorf("a server always down: asked %d times for its page, want %d; %d left deferred, %d retried (%+v)", n, 1+cfg.Retries, s.Deferred, s.Retried, s)
	}
}

// A robots.txt answered with a server error disallows everything for now
// (RFC 9309 §2.3.1.4), but its host's URLs wait for a retry: they are not
// dropped as disallowed.
func TestRobotsServerErrorIsWaitedOut(t *testing.T) {
	var robotsAsked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			if robotsAsked.Add(1) == 1 {
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
				return
			}
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body><p>home</p></body></html>")
	}))
	defer srv.Close()
	cfg := testConfig(t, "", srv.URL+"/")
	s := runCrawl(t, cfg)
	if s.Robots != 0 || s.Deferred != 1 || s.New != 0 {
		t.Fatalf("robots.txt 503, no retries: %+v; want the seed deferred, not disallowed", s)
	}
	cfg.Retries, cfg.RetryWait = 1, 10*time.Millisecond
	if s := runCrawl(t, cfg); s.New == 0 || s.Deferred != 0 {
		t.Errorf("the next run, robots.txt answering 404: %+v; want the seed archived", s)
	}
}

func TestRetryWait(t *testing.T) {
	for _, tc := range []struct {
		base  time.Duration
		round int
		want  time.Duration
	}{
		{30 * time.Second, 0, 30 * time.Second},
		{30 * time.Second, 1, time.Minute},
		{30 * time.Second, 6, 32 * time.Minute},
		{30 * time.Second, 7, time.Hour},
		{30 * time.Second, 1000, time.Hour}, // no overflow
		{2 * time.Hour, 3, 2 * time.Hour},   // a base past the bound is kept
		{time.Duration(1) << 62, 5, time.Duration(1) << 62},
	} {
		if got := retryWait(tc.base, tc.round); got != tc.want {
			t.Errorf("retryWait(%v, %d) = %v, want %v", tc.base, tc.round, got, tc.want)
		}
	}
}
