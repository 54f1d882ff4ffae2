package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// A stopped --recrawl-all whose queue a plain run finishes is over: a
// later --recrawl-all that starts with something queued (a new seed, a URL
// deferred by an outage) is not taken for its resumption, and re-crawls
// every URL.
func TestFinishedRecrawlAllIsNotResumed(t *testing.T) {
	const pages = 40
	var hits atomic.Int64
	stop := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == pages+10 {
			once.Do(func() { close(stop) })
		}
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			for i := range pages - 1 {
				fmt.Fprintf(w, `<a href="/p%d">p%d</a> `, i, i)
			}
			return
		}
		fmt.Fprintf(w, "<html><body><p>page %s</p></body></html>", r.URL.Path)
	}))
	defer srv.Close()
	cfg := testConfig(t, "", srv.URL+"/")
	cfg.IgnoreRobots = true
	cfg.Workers = 2
	runCrawl(t, cfg)

	all := cfg
	all.RecrawlAll = true
	c, err := Open(all)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	if _, err := c.Run(ctx); err == nil {
		t.Fatal("fixture: the --recrawl-all was not stopped")
	}
	c.Close()

	runCrawl(t, cfg) // a plain run finishes what the stopped one queued
	before := archived(t, cfg.Data)

	later := all
	later.Seeds = []string{srv.URL + "/new"} // anything queued at start will do
	runCrawl(t, later)
	after := archived(t, cfg.Data)
	missed := 0
	for u, cs := range before {
		if len(after[u]) != len(cs)+1 {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("a --recrawl-all run revisited %d of %d URLs: %d were not visited", len(before)-missed, len(before), missed)
	}
}
