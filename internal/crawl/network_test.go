package crawl

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// URLs from peers are held to the rules local links are: canonical form,
// scope (requisites excepted), trap limits and address rules.
func TestAcceptHoldsPeerURLsToLocalRules(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 30, Pages: 300})
	seed := web.Seeds()[0]
	home := urlkey.Host(seed)
	var inScope string
	var offScope []string
	for _, p := range web.Pages() {
		switch {
		case urlkey.Host(p) == home && p != seed && inScope == "":
			inScope = p
		case urlkey.Site(p) != urlkey.Site(seed) && len(offScope) < 4 &&
			!slices.ContainsFunc(offScope, func(o string) bool { return urlkey.Host(o) == urlkey.Host(p) }):
			offScope = append(offScope, p) // on hosts of their own: a seed widens the scope to its host
		}
	}
	if inScope == "" || len(offScope) < 4 {
		t.Fatal("websim has too few pages for this test")
	}
	cfg := testConfig(t, srv.URL(), seed)
	cfg.Scope = ScopeHost
	cfg.AllowPrivate = false // the proxy is still reachable; targets on loopback are not
	cfg.MaxDepth = 5
	cfg.Continuous = true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx); done <- err }()

	trap := "http://" + home + strings.Repeat("/a", 8) + "/"
	private := "http://127.0.0.1:9/peer-sent"
	items := []frontier.Item{
		{URL: inScope, Depth: 1},                                    // taken
		{URL: offScope[0], Depth: 1},                                // refused: off-scope link
		{URL: offScope[1], Depth: 1, Embed: true},                   // taken: a requisite
		{URL: offScope[2], Seed: true},                              // taken: a seed given at another node
		{URL: offScope[3], Depth: 0},                                // refused: depth 0 alone is not a seed (a seed page's requisite or redirect)
		{URL: strings.ToUpper(inScope[:7]) + inScope[7:], Depth: 1}, // refused: not canonical
		{URL: inScope + "?neg", Depth: -1},                          // refused: bad depth
		{URL: inScope + "?deep", Depth: 6},                          // taken, then dropped by the depth limit
		{URL: trap, Depth: 1},                                       // taken, then dropped as a trap
		{URL: private, Depth: 1, Embed: true},                       // taken, then refused by the fetcher
	}
	refused, err := c.Accept(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if refused != 4 {
		t.Errorf("Accept refused %d URLs, want 4", refused)
	}
	if !slices.Contains(c.Seeds(), offScope[2]) {
		t.Errorf("a seed from a peer did not join the scope: seeds %v", c.Seeds())
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if s := c.Stats(); s.Queued == 0 && s.Errors > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crawl did not settle: %+v", c.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	c.Close()
	caps := archived(t, cfg.Data)
	for _, u := range []string{inScope, offScope[1], offScope[2]} {
		if len(caps[u]) == 0 {
			t.Errorf("%s, accepted, was not archived", u)
		}
	}
	for _, u := range []string{offScope[0], offScope[3], inScope + "?deep", trap, private} {
		if len(caps[u]) != 0 {
			t.Errorf("%s was archived although the rules forbid it", u)
		}
	}
}
