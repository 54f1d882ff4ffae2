package crawl

import "testing"

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
