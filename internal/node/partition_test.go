package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// Fault (d) of the replication issue: a network partition splits five
// crawling nodes into two groups, {n1, n2} and {n3, n4, n5}, which declare
// each other dead; each goes on crawling every host with the ring of its
// own members. Then the network heals: the groups find each other again
// (membership reconnects to the members that failed), URLs queued on one
// side for the other reach their owners, and anti-entropy restores three
// copies of every capture. Nothing a node reported archived is lost, every
// page is archived, and every node sees every member. The URLs fetched on
// both sides while they were apart (overlap) are reported.
func TestPartitionHeal(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 11, Hosts: 24, Pages: 600}) // no host above the trap limit (300 URLs)
	faults := NewFaults()
	nodes, _ := startNetwork(t, 5, srv.URL(), func(c *Config) {
		c.Faults = faults
		// A crawl long enough to go on on both sides of the partition.
		c.Crawl.NoDelay, c.Crawl.Delay = false, 100*time.Millisecond
	})
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	// Split mid-crawl, once every node that holds a site has archived
	// something (which sites a node holds follows from its random
	// identity: it may hold none).
	waitCond(t, "every node archives", time.Minute, func() error {
		for _, n := range nodes {
			holds := false
			for _, h := range web.Hosts() {
				if o, _ := n.members.Ring().Owner(urlkey.Site("http://" + h + "/")); o.ID == n.ID() {
					holds = true
				}
			}
			if holds && n.crawl.Stats().Captures == 0 {
				return fmt.Errorf("%s has no capture yet", n.name)
			}
		}
		return nil
	})
	sides := [][]*testNode{nodes[:2], nodes[2:]}
	before := map[string]bool{} // record IDs indexed anywhere before the split
	for _, n := range nodes {
		for _, c := range indexed(t, n) {
			before[c.RecordID] = true
		}
	}
	reported := map[string]int64{}
	record := func(when string) {
		for _, n := range nodes {
			c := n.crawl.Stats().Captures
			if c < reported[n.name] {
				t.Errorf("%s reported %d captures, and %d %s", n.name, reported[n.name], c, when)
			}
			reported[n.name] = c
		}
	}
	record("at the split")

	faults.Split(ids(sides[0]), ids(sides[1]))
	waitMembers(t, 2, sides[0]...)
	waitMembers(t, 3, sides[1]...)
	// Each side's ring gives every host to one of its own members.
	for _, side := range sides {
		mine := map[string]bool{}
		for _, id := range ids(side) {
			mine[id] = true
		}
		for _, n := range side {
			for _, seed := range web.Seeds() {
				if o, _ := n.members.Ring().Owner(urlkey.Site(seed)); !mine[o.ID] {
					t.Errorf("%s's ring gives %s to %s, across the partition", n.name, urlkey.Site(seed), o.ID)
				}
			}
		}
	}
	// Each side keeps crawling by itself.
	apart := make([]int64, len(sides))
	for i, side := range sides {
		apart[i] = sideCaptures(side)
	}
	waitCond(t, "both sides crawl while apart", time.Minute, func() error {
		for i, side := range sides {
			if sideCaptures(side) == apart[i] {
				return fmt.Errorf("side %d has archived nothing since it was cut off", i+1)
			}
		}
		return nil
	})
	record("during the partition")

	// What each side fetched while apart; and everything indexed before the heal.
	fetchedApart := make([]map[string]bool, len(sides))
	healBefore := map[string]bool{}
	for i, side := range sides {
		fetchedApart[i] = map[string]bool{}
		for _, n := range side {
			for _, c := range indexed(t, n) {
				healBefore[c.RecordID] = true
				if !before[c.RecordID] {
					fetchedApart[i][c.URL] = true
				}
			}
		}
	}
	pending := 0
	for _, n := range nodes {
		for _, k := range n.localStatus().Exchange.Pending {
			pending += k
		}
	}
	healed := time.Now()
	faults.Heal()
	waitMembers(t, 5, nodes...)
	rejoined := time.Since(healed)
	waitQuiet(t, nodes...)
	took := waitReplicated(t, 3, nodes)
	record("after the heal")

	after := map[string]bool{}
	for _, n := range nodes {
		for _, c := range indexed(t, n) {
			after[c.RecordID] = true
		}
	}
	lost := 0
	for id := range healBefore {
		if !after[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d captures indexed before the heal are indexed nowhere after it", lost, len(healBefore))
	}
	a := holdings(t, nodes)
	for _, p := range web.Pages() {
		if len(a.fetches[p]) == 0 {
			t.Errorf("page %s was not archived by any node", p)
		}
	}
	overlap := 0
	for u := range fetchedApart[0] {
		if fetchedApart[1][u] && !strings.HasSuffix(u, "/robots.txt") {
			overlap++
		}
	}
	t.Logf("partition {n1,n2} | {n3,n4,n5} mid-crawl: %d and %d captures made apart, %d URLs queued for the other side at the heal; "+
		"all 5 members again %v after the heal, 3 copies of all %d captures %v after the network was quiet; coverage 1, nothing lost; "+
		"overlap: %d URLs fetched on both sides while apart (%d over the whole crawl)",
		len(fetchedApart[0]), len(fetchedApart[1]), pending, rejoined.Round(time.Millisecond), len(a.copies), took.Round(time.Millisecond),
		overlap, a.overlap())
}

// waitCond waits until cond returns nil.
func waitCond(t *testing.T, what string, limit time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ids(nodes []*testNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.ID())
	}
	return out
}

func sideCaptures(nodes []*testNode) int64 {
	var k int64
	for _, n := range nodes {
		k += n.crawl.Stats().Captures
	}
	return k
}

// indexed reads a running node's index.
func indexed(t *testing.T, n *testNode) []index.Capture {
	t.Helper()
	var caps []index.Capture
	err := n.local.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		caps = append(caps, c)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return caps
}

// waitReplicated waits until every capture of the running network is held
// by r nodes, and returns how long that took; if that does not happen, it
// fails the test naming the holders of the captures short of copies and
// the replicas the ring gives them.
func waitReplicated(t *testing.T, r int, nodes []*testNode) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		holders := map[string][]string{}
		site := map[string]string{}
		for _, n := range nodes {
			for _, c := range indexed(t, n) {
				holders[c.RecordID] = append(holders[c.RecordID], n.name)
				site[c.RecordID] = urlkey.SiteOfKey(c.URLKey)
			}
		}
		var short []string
		for id, hs := range holders {
			if len(hs) < r {
				var want []string
				for _, m := range nodes[0].members.Ring().Replicas(site[id], r) {
					for _, n := range nodes {
						if n.ID() == m.ID {
							want = append(want, n.name)
						}
					}
				}
				short = append(short, fmt.Sprintf("%s (site %s) held by %v, replicas %v", id, site[id], hs, want))
			}
		}
		if len(short) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%d of %d captures still have fewer than %d copies, e.g.:\n%s", len(short), len(holders), r, strings.Join(short[:min(len(short), 10)], "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
