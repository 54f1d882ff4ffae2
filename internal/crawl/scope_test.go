package crawl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A data directory keeps the scope it was crawled with: a restart without
// a scope (a node restarted without --scope) keeps it, and a scope given
// replaces it.
func TestRestartKeepsScope(t *testing.T) {
	cfg := testConfig(t, "", "http://www.example.test/")
	reopen := func(scope Scope) *scope {
		t.Helper()
		cfg.Scope = scope
		c, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cfg.Seeds = nil // the data directory keeps them too
		return c.scope.Load()
	}
	const elsewhere = "http://other.example.net/page"
	if s := reopen(ScopeAny); !s.contains(elsewhere) {
		t.Fatalf("scope any does not contain %s", elsewhere)
	}
	if s := reopen(""); s.kind != ScopeAny || !s.contains(elsewhere) {
		t.Errorf("restarted without a scope: %q, want the any it was crawled with", s.kind)
	}
	if s := reopen(ScopeHost); s.kind != ScopeHost || s.contains(elsewhere) {
		t.Errorf("restarted with scope host: %q", s.kind)
	}
	if s := reopen(""); s.kind != ScopeHost {
		t.Errorf("restarted without a scope after host: %q", s.kind)
	}
	fresh := testConfig(t, "", "http://www.example.test/")
	fresh.Scope = ""
	c, err := Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if k := c.scope.Load().kind; k != ScopeHost {
		t.Errorf("a new data directory without a scope: %q, want host", k)
	}
}

// A scope that widens on an archive crawled before reaches the links its
// archived pages hold that the narrower one left out, though those pages
// are unchanged (an unchanged page's revisit follows no links); once. A
// narrower scope reaches nothing new and does not look; an interrupted
// look goes on after the last site it finished.
func TestWiderScopeFollowsArchivedLinks(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<p>another site</p>")
	}))
	defer other.Close()
	var link atomic.Value
	link.Store("/elsewhere")
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="%s%s">elsewhere</a>`, other.URL, link.Load())
	}))
	defer site.Close()
	// No scope given: the default, host, which is not written down.
	cfg := directConfig(t, site.URL+"/")
	cfg.Scope = ""
	runCrawl(t, cfg)
	if caps := archived(t, cfg.Data)[other.URL+"/elsewhere"]; len(caps) != 0 {
		t.Fatalf("scope host archived the other site's page: %+v", caps)
	}

	wider := cfg
	wider.Seeds, wider.Scope = nil, ScopeAny
	if s := runCrawl(t, wider); s.Rediscovered != 1 {
		t.Errorf("the run with a wider scope queued %d links again, want the one it left out", s.Rediscovered)
	}
	if caps := archived(t, cfg.Data)[other.URL+"/elsewhere"]; len(caps) != 1 {
		t.Fatalf("after widening the scope, the other site's page has %d captures, want 1", len(caps))
	}
	if s := runCrawl(t, wider); s.Rediscovered != 0 || s.New != 0 {
		t.Errorf("the next run with the same scope queued %d links again and made %d captures, want none", s.Rediscovered, s.New)
	}

	// Narrowed again, the page changes to link elsewhere on the other
	// site, which the scope leaves out; the narrowing itself looks at
	// nothing.
	narrower := wider
	narrower.Scope, narrower.RecrawlAll = ScopeHost, true
	link.Store("/second")
	if s := runCrawl(t, narrower); s.Rediscovered != 0 {
		t.Errorf("narrowing the scope queued %d links again, want none", s.Rediscovered)
	}
	// Widened again, by a pass cut short after the site holding the page:
	// it goes on after it, and the link stays out.
	widen := func(done bool) Stats {
		t.Helper()
		db, err := OpenDB(cfg.Data)
		if err == nil {
			// As settleScope left them, the scope any recorded.
			err = errors.Join(db.Set([]byte(scopeKey), []byte(ScopeAny), nil), db.Set([]byte(rescopeKey), []byte(ScopeHost), nil))
			if done {
				err = errors.Join(err, db.Set([]byte(rescopeDoneKey), []byte(urlkey.SiteOfKey(mustSURT(t, site.URL+"/"))), nil))
			}
			err = errors.Join(err, db.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
		return runCrawl(t, wider)
	}
	if s := widen(true); s.Rediscovered != 0 {
		t.Errorf("a pass that had done the page's site queued %d links again, want none", s.Rediscovered)
	}
	if s := widen(false); s.Rediscovered != 1 {
		t.Errorf("a pass from the start queued %d links again, want the new one", s.Rediscovered)
	}

	// Only a wider scope marks the archive for a pass.
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, step := range []struct {
		to     Scope
		marked bool
	}{{ScopeHost, false}, {ScopePrefix, false}, {ScopeDomain, true}} {
		if _, err := settleScope(db, step.to, true); err != nil {
			t.Fatal(err)
		}
		_, closer, err := db.Get([]byte(rescopeKey))
		if err == nil {
			closer.Close()
		}
		if marked := err == nil; marked != step.marked {
			t.Errorf("scope changed to %s: marked for a pass %v, want %v", step.to, marked, step.marked)
		}
		if err := db.Delete([]byte(rescopeKey), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A new data directory given a scope has nothing to look at again.
	fresh, err := OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := settleScope(fresh, ScopeAny, false); err != nil {
		t.Fatal(err)
	}
	if _, closer, err := fresh.Get([]byte(rescopeKey)); err == nil {
		closer.Close()
		t.Error("a first crawl given scope any is marked for a pass over an empty archive")
	}
}

// A widened scope's pass reaches the links of imported pages too, whose
// metadata records give no hop counts: their re-crawl entries are made
// first, with or without --recrawl.
func TestWiderScopeFollowsImportedPagesLinks(t *testing.T) {
	other, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<p>another site</p>")
	})
	data := filepath.Join(t.TempDir(), "data")
	at := time.Now().Add(-time.Hour)
	resp, err := warc.NewResponse("http://site.example/", at, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<a href=\""+other.URL+"/x\">x</a>"))
	if err != nil {
		t.Fatal(err)
	}
	meta := warc.NewMetadata("http://site.example/", at, []warc.Field{{Name: "outlink", Value: other.URL + "/x L a/@href"}})
	meta.Header.Set("WARC-Concurrent-To", resp.ID())
	importFiles(t, data, warcFile(t, resp, meta))

	cfg := directConfig(t)
	cfg.Data, cfg.Scope = data, ScopeHost
	runCrawl(t, cfg) // the scope the archive was crawled with
	wider := cfg
	wider.Scope = ScopeAny
	if s := runCrawl(t, wider); s.Rediscovered != 1 || hits()["/x"] != 1 {
		t.Errorf("a widened run without --recrawl: %d links queued again, %d fetches of the other site's page; want the imported page's link", s.Rediscovered, hits()["/x"])
	}
}

func mustSURT(t *testing.T, u string) string {
	t.Helper()
	k, err := urlkey.SURT(u)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A seed given with a wider scope, in a re-crawl, is queued as a seed
// (depth 0) before the pass that follows the archived pages' links again
// finds it linked from one of them, a hop further: the pass comes after
// the revisits and the seeds they hold back.
func TestWiderScopeKeepsNewSeedsAtDepthZero(t *testing.T) {
	var b *httptest.Server
	b = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			fmt.Fprintf(w, `<a href="%s/1">1</a>`, b.URL)
		case "/1":
			fmt.Fprintf(w, `<a href="%s/2">2</a>`, b.URL)
		default:
			io.WriteString(w, "<p>leaf</p>")
		}
	}))
	defer b.Close()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="%s/">b</a>`, b.URL)
	}))
	defer a.Close()
	cfg := directConfig(t, a.URL+"/")
	cfg.Scope = ScopeHost
	runCrawl(t, cfg)
	next := cfg
	next.Seeds, next.Scope, next.MaxDepth, next.Recrawl = []string{b.URL + "/"}, ScopeAny, 2, true
	runCrawl(t, next)
	if caps := archived(t, cfg.Data)[b.URL+"/2"]; len(caps) != 1 {
		t.Errorf("the new seed's page two hops down has %d captures, want 1: the seed was not queued at depth 0", len(caps))
	}
}

// cancellingRouter owns every site here, and cancels a run's context the
// first time it is asked about one site: a run stopped at that point.
type cancellingRouter struct {
	halfRouter
	site   string
	cancel context.CancelFunc
}

func (r *cancellingRouter) Owner(site string) string {
	if site == r.site {
		r.cancel()
	}
	return ""
}

// A widened scope's pass stopped part way records the last site it
// finished, and the next run goes on from the site after it.
func TestWiderScopePassResumes(t *testing.T) {
	other, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<p>leaf</p>") })
	page := func(path string) *httptest.Server {
		srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<a href="%s%s">out</a>`, other.URL, path)
		})
		return srv
	}
	a, b := page("/a"), page("/b")
	cfg := directConfig(t, a.URL+"/", b.URL+"/")
	cfg.Scope = ScopeHost
	runCrawl(t, cfg)
	sites := []string{urlkey.SiteOfKey(mustSURT(t, a.URL+"/")), urlkey.SiteOfKey(mustSURT(t, b.URL+"/"))}
	slices.Sort(sites)

	// Stopped when the pass comes to the second site.
	ctx, cancel := context.WithCancel(context.Background())
	stopped := cfg
	stopped.Seeds, stopped.Scope = nil, ScopeAny
	stopped.Router = &cancellingRouter{halfRouter: halfRouter{routed: map[string]int{}}, site: sites[1], cancel: cancel}
	c, err := Open(stopped)
	if err != nil {
		t.Fatal(err)
	}
	c.Run(ctx)
	done, closer, err := c.db.Get([]byte(rescopeDoneKey))
	if err != nil {
		t.Fatalf("the stopped pass recorded no site done: %v", err)
	}
	if string(done) != sites[0] {
		t.Errorf("the stopped pass recorded %q done, want the first site, %q", done, sites[0])
	}
	closer.Close()
	if _, _, ok := c.Rescoping(); !ok {
		t.Error("the stopped pass is not marked to go on")
	}
	c.Close()

	again := stopped
	again.Router = nil
	if s := runCrawl(t, again); s.Rediscovered != 1 {
		t.Errorf("the next run queued %d links again, want the second site's one only", s.Rediscovered)
	}
}
