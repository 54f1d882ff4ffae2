package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// A member that crashes and never comes back takes its frontier with it:
// the URLs it had accepted and not fetched yet, which the others sent it
// once and will not send again (an unchanged page's revisit follows no
// links). Once it has been away for RediscoverAfter, the others follow
// again the links into its sites from the pages they hold, and the crawl
// ends as complete as if it had stayed. With 4 nodes and 2 copies, some
// of the links come from nodes that hold none of the victim's sites.
func TestGoneMembersFrontierRediscovered(t *testing.T) {
	web := websim.New(websim.Config{Seed: 5, Hosts: 12, Pages: 360})
	// The victim's hosts answer slowly: the others are done with their
	// sites, and have sent it every link they found, while it still has
	// URLs queued.
	var slow sync.Map // host → true
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := slow.Load(r.URL.Hostname()); ok {
			time.Sleep(300 * time.Millisecond)
		}
		web.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	nodes, _ := startNetwork(t, 4, proxy.URL, func(c *Config) {
		c.Replicas = 2
		c.LeaveTimeout = -1
		c.RediscoverAfter = time.Second
	})
	// The victim is the node that owns the most hosts.
	owned := map[*testNode][]string{}
	for _, h := range web.Hosts() {
		o, _ := nodes[0].members.Ring().Owner(urlkey.Site("http://" + h + "/"))
		for _, n := range nodes {
			if n.ID() == o.ID {
				owned[n] = append(owned[n], h)
			}
		}
	}
	victim := slices.MaxFunc(nodes, func(a, b *testNode) int { return len(owned[a]) - len(owned[b]) })
	survivors := slices.DeleteFunc(slices.Clone(nodes), func(n *testNode) bool { return n == victim })
	for _, h := range owned[victim] {
		slow.Store(h, true)
	}
	if _, err := Submit(context.Background(), survivors[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the others to be done while the victim has URLs queued", func() bool {
		done := int64(0)
		for _, n := range survivors {
			captures, busy := n.Progress()
			if busy {
				return false
			}
			done += captures
		}
		return done >= 100 && victim.crawl.Stats().Queued >= 5
	})
	queued := victim.crawl.Stats().Queued
	victim.stop(t)
	slow.Clear()
	waitMembers(t, 3, survivors...)
	waitFor(t, "the survivors to follow again the links into the victim's sites", func() bool {
		return rediscovered(survivors) > 0
	})
	waitQuiet(t, survivors...)
	again := rediscovered(survivors)

	a := holdings(t, survivors)
	missing := 0
	for _, p := range web.Pages() {
		if len(a.fetches[p]) == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("page %s was not archived", p)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d pages not archived after a member crashed for good with %d URLs queued", missing, len(web.Pages()), queued)
	}
	t.Logf("victim crashed with %d URLs queued; the survivors queued %d links again; coverage %d/%d; overlap %d of %d captures",
		queued, again, len(web.Pages())-missing, len(web.Pages()), a.overlap(), len(a.copies))
}

// A node cut off from the others for longer than RediscoverAfter sees
// every one of them go, and owns all their sites: seeing more members
// gone than present, it takes itself for cut off and follows no links
// again, since it would crawl what the others hold. The other side does,
// and fetches nothing again: the node that took each of the cut-off
// node's sites held copies of it, and skips what it holds.
func TestLongPartitionFetchesNothingAgain(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 9, Hosts: 12, Pages: 360})
	faults := NewFaults()
	nodes, _ := startNetwork(t, 3, srv.URL(), func(c *Config) {
		c.Faults = faults
		c.Replicas = 2 // no node holds every site
		// Longer than failure detection takes to see both others go,
		// so that the node alone acts on both departures at once.
		c.RediscoverAfter = 5 * time.Second
	})
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 2, nodes...)
	before := map[string]int64{}
	for _, n := range nodes {
		before[n.name] = n.crawl.Stats().Captures
	}
	alone, rest := nodes[2:], nodes[:2]
	faults.Split(ids(alone), ids(rest))
	waitMembers(t, 1, alone...)
	waitMembers(t, 2, rest...)
	waitFor(t, "the side of two to act on the departure it saw", func() bool {
		for _, n := range rest {
			if ds, err := n.departures(); err != nil || len(ds) > 0 {
				return false
			}
		}
		return true
	})
	var ds []departure
	waitFor(t, "the node alone to have seen the others gone for twice RediscoverAfter", func() bool {
		var err error
		ds, err = alone[0].departures()
		return err == nil && len(ds) == 2 && time.Since(ds[0].Since) > 10*time.Second && time.Since(ds[1].Since) > 10*time.Second
	})
	waitQuiet(t, alone...)
	waitQuiet(t, rest...)
	for _, n := range nodes {
		if got := n.crawl.Stats().Captures; got != before[n.name] {
			t.Errorf("%s made %d captures during the partition, with nothing new on the web", n.name, got-before[n.name])
		}
	}
	if got := rediscovered(alone); got != 0 {
		t.Errorf("the node alone queued %d links again", got)
	}
	if ds, err := alone[0].departures(); err != nil || len(ds) != 2 {
		t.Errorf("the node alone holds %d departures (%v), want both, not acted on", len(ds), err)
	}
	t.Logf("%d links queued again on the side of two (none archived: no capture made)", rediscovered(rest))
}

func rediscovered(nodes []*testNode) int64 {
	var sum int64
	for _, n := range nodes {
		sum += n.crawl.Stats().Rediscovered
	}
	return sum
}

// BenchmarkRediscover measures the pass a node makes over its archive when
// a member is gone for good: every site's pages read, with the links of
// their metadata records, and handed to the crawler, which finds almost
// all archived already (the common case: only the gone member's queue is
// new). The few it queues are links its frontier dropped at a trap limit
// (websim's host over 300 URLs), which it drops again.
func BenchmarkRediscover(b *testing.B) {
	web := websim.New(websim.Config{Seed: 1, Hosts: 40, Pages: 2000})
	srv, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cfg := nodeConfig(b.TempDir(), srv.URL(), nil)
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := Submit(context.Background(), cfg.Crawl.Data, web.Seeds()); err != nil {
		b.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer wcancel()
	if _, _, err := WaitIdle(wctx, []*Node{n}, 2*time.Second); err != nil {
		b.Fatal(err)
	}
	sites, err := n.crawl.Sites(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	all := func(string) bool { return true }
	var pages, links, queued int
	for b.Loop() {
		pages, links, queued = 0, 0, 0
		for _, site := range sites {
			err := n.crawl.ArchivedPages(context.Background(), site, crawl.PageBatch, func(ps []crawl.Page) error {
				for _, p := range ps {
					links += len(p.Links)
				}
				pages += len(ps)
				q, err := n.crawl.Rediscover(context.Background(), ps, all)
				queued += q
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(pages)*float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(pages), "pages")
	b.ReportMetric(float64(links), "links")
	b.ReportMetric(float64(queued), "queued")
}

// intoGone follows into a gone member's site only where its owner now was
// one of its replicas, in the ring before any of the departures that moved
// it: a site A owned, then B after A left, then C after B left, where C was
// B's replica but not A's, is followed into from C.
func TestIntoGoneWithChainedDepartures(t *testing.T) {
	members := func(ids ...string) []ring.Member {
		var ms []ring.Member
		for _, id := range ids {
			ms = append(ms, ring.Member{ID: id, Capacity: 1})
		}
		return ms
	}
	mustRing := func(ids ...string) *ring.Ring {
		r, err := ring.New(members(ids...), ring.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	all, withoutA, now := mustRing("A", "B", "C", "D"), mustRing("B", "C", "D"), mustRing("C", "D")
	formers := []former{{"A", all}, {"B", withoutA}} // ID order, as the records are read
	const replicas = 2
	chained, direct, joined := 0, 0, 0
	for i := range 2000 {
		site := fmt.Sprintf("test,site%d", i)
		a, _ := all.Owner(site)
		b, _ := withoutA.Owner(site)
		c, _ := now.Owner(site)
		wasGone, follow := intoGone(site, now, formers, replicas)
		heldBy := func(r *ring.Ring, id string) bool {
			return slices.ContainsFunc(r.Replicas(site, replicas), func(m ring.Member) bool { return m.ID == id })
		}
		switch {
		case a.ID != "A" && b.ID != "B":
			if wasGone || !follow {
				t.Errorf("%s, never a gone member's: (%v, %v), want (false, true)", site, wasGone, follow)
			}
		case a.ID == "A" && b.ID == "B" && !heldBy(all, c.ID) && heldBy(withoutA, c.ID):
			chained++
			if !wasGone || !follow {
				t.Errorf("%s: A's, then B's, now %s's, B's replica: (%v, %v), want (true, true)", site, c.ID, wasGone, follow)
			}
		case heldBy(all, c.ID) || b.ID == "B" && heldBy(withoutA, c.ID):
			direct++
			if !wasGone || !follow {
				t.Errorf("%s: now %s's, a replica before: (%v, %v), want (true, true)", site, c.ID, wasGone, follow)
			}
		default:
			joined++
			if !wasGone || follow {
				t.Errorf("%s: now %s's, a replica in neither ring: (%v, %v), want (true, false)", site, c.ID, wasGone, follow)
			}
		}
	}
	if chained == 0 || direct == 0 {
		t.Errorf("the sites drawn cover %d chained and %d direct hand-overs; want some of each", chained, direct)
	}
	t.Logf("%d sites handed over twice, %d once, %d to a node that held no copy", chained, direct, joined)
}
