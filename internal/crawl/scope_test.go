package crawl

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
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
// are unchanged (an unchanged page's revisit follows no links); once.
func TestWiderScopeFollowsArchivedLinks(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<p>another site</p>")
	}))
	defer other.Close()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="%s/elsewhere">elsewhere</a>`, other.URL)
	}))
	defer site.Close()
	cfg := directConfig(t, site.URL+"/")
	cfg.Scope = ScopeHost
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
}
