package crawl

import "testing"

// A stopped --recrawl-all whose queue a plain run finishes is over: a
// later --recrawl-all that starts with something queued (a new seed, a URL
// deferred by an outage) is not taken for its resumption, and re-crawls
// every URL.
func TestFinishedRecrawlAllIsNotResumed(t *testing.T) {
	const pages = 40
	cfg, srv, stop := crawledSite(t, pages)

	all := cfg
	all.RecrawlAll = true
	runStopped(t, all, stop)

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
