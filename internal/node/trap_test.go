package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
)

// A chain of sites, each redirecting to the next or importing the next
// one's stylesheet, ends after three hops off the scope in a network as on
// one node: the hop counts travel with the URLs from node to node, where
// the chain's sites are spread.
func TestChainsAcrossSitesEndInANetwork(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, path := r.URL.Hostname(), r.URL.Path
		var n int
		is := func(format string) bool { _, err := fmt.Sscanf(host, format, &n); return err == nil }
		switch {
		case path == "/robots.txt":
			http.NotFound(w, r)
		case host == "seed.test":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><img src="http://r0-trap.test/i.png">
<link rel=stylesheet href="http://c0-trap.test/s.css"></body></html>`)
		case is("r%d-trap.test"):
			http.Redirect(w, r, fmt.Sprintf("http://r%d-trap.test/i.png", n+1), http.StatusFound)
		case is("c%d-trap.test"):
			w.Header().Set("Content-Type", "text/css")
			fmt.Fprintf(w, "@import url(http://c%d-trap.test/s.css);", n+1)
		default:
			http.NotFound(w, r)
		}
	}))
	defer proxy.Close()
	nodes, _ := startNetwork(t, 3, proxy.URL, func(c *Config) {
		c.Replicas = 1
		c.Crawl.Scope = crawl.ScopeHost
	})
	if _, err := Submit(context.Background(), nodes[0].data, []string{"http://seed.test/"}); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	var got []string
	holders := map[string]bool{}
	for _, n := range nodes {
		n.LocalCaptures(context.Background(), func(c index.Capture) bool {
			if !strings.HasSuffix(c.URL, "/robots.txt") {
				got = append(got, c.URL)
				holders[n.name] = true
			}
			return true
		})
	}
	slices.Sort(got)
	want := []string{"http://c0-trap.test/s.css", "http://c1-trap.test/s.css", "http://c2-trap.test/s.css",
		"http://r0-trap.test/i.png", "http://r1-trap.test/i.png", "http://r2-trap.test/i.png", "http://seed.test/"}
	if !slices.Equal(got, want) {
		t.Errorf("archived %d URLs on %d nodes:\n%s\nwant %d:\n%s", len(got), len(holders), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	if len(holders) < 2 {
		t.Logf("the chains' sites fell on %d node: the test showed little this time", len(holders))
	}
}
