package crawl

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
)

// A URL whose fetch failed transiently is deferred (f/d/, queued again at
// Open) and its re-crawl entry marked queued: a --recrawl run (or a node
// restart) after its interval queues it once, not also from the due queue.
func TestDeferredAndDueURLIsFetchedOnce(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body>%s %d</body></html>", r.URL.Path, time.Now().UnixNano())
	})
	seed := srv.URL + "/"
	cfg := testConfig(t, startWebDown(t), seed)
	cfg.IgnoreRobots = true
	cfg.Workers = 1
	rule, err := recrawl.ParseRule("1s,1s,1s")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
	s1 := runCrawl(t, cfg)
	if s1.Deferred != 1 {
		t.Fatalf("first run: %+v, want the seed deferred", s1)
	}
	time.Sleep(3 * time.Second) // the failed visit's entry falls due
	again := cfg
	again.Proxy = ""
	again.Recrawl = true
	runCrawl(t, again)
	if n := hits()["/"]; n != 1 {
		t.Errorf("the deferred seed was fetched %d times in the run after the outage, want 1", n)
	}
	if n := len(archived(t, cfg.Data)[seed]); n != 1 {
		t.Errorf("%d captures of the seed, want 1", n)
	}
}

// countingServer serves with h and counts the requests per path: hits
// returns a copy of the counts so far.
func countingServer(t *testing.T, h http.HandlerFunc) (srv *httptest.Server, hits func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		counts[r.URL.Path]++
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}
