package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/membership"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// Fault (a) of the replication issue: five nodes keep three copies of every
// capture; two crash for good. Every capture still replays from the
// survivors, and three copies exist again, made by anti-entropy among the
// survivors.
func TestTwoOfFiveCrash(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	nodes, _ := startNetwork(t, 5, srv.URL(), func(c *Config) { c.LeaveTimeout = -1 })
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)

	type capture struct {
		url, ts string
		status  int
	}
	var all []capture
	seen := map[string]bool{}
	for _, n := range nodes {
		err := n.local.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
			if !seen[c.RecordID] {
				seen[c.RecordID] = true
				all = append(all, capture{c.URL, c.Timestamp14(), c.Status})
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	killed := time.Now()
	nodes[3].stop(t)
	nodes[4].stop(t)
	survivors := nodes[:3]
	waitMembers(t, 3, survivors...)
	detected := time.Since(killed)
	waitCopies(t, 3, survivors...)
	restored := time.Since(killed)

	// Every capture replays from a survivor, byte for byte as archived (id_).
	failed := 0
	for i, c := range all {
		n := survivors[i%3]
		resp, err := http.Get("http://" + n.Addrs().Content + "/web/" + c.ts + "id_/" + c.url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// An archived error replays as that error; an archived redirect as a
		// redirect, which the client follows to the archived target.
		ok := resp.StatusCode == c.status || c.status >= 300 && c.status < 400 || resp.StatusCode == http.StatusOK && c.status < 300
		if !ok {
			failed++
			if failed <= 5 {
				t.Errorf("%s at %s (archived %d) from %s: %s", c.url, c.ts, c.status, n.name, resp.Status)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d captures do not replay after two of five nodes crashed", failed, len(all))
	}
	t.Logf("%d captures, all replayed after 2 of 5 nodes crashed; failure detected in %v; 3 copies of every capture %v after the crash (anti-entropy every 200ms)",
		len(all), detected.Round(time.Millisecond), restored.Round(time.Millisecond))
}

// Fault (c): a node loses its newest WARC segment while it is down. It
// starts anyway, with the lost captures out of its index, and anti-entropy
// copies them back from the replicas.
func TestLostSegmentRepaired(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	nodes, cfgs := startNetwork(t, 3, srv.URL(), func(c *Config) { c.Crawl.SegmentSize = 256 << 10 })
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)
	count := func(n *testNode) int {
		k := 0
		n.local.Index().Range(context.Background(), "", "", false, func(index.Capture) (bool, error) {
			k++
			return true, nil
		})
		return k
	}
	before := count(nodes[1])
	recordsBefore := recordTypes(t, nodes[1].data)

	nodes[1].stop(t)
	segs, err := filepath.Glob(filepath.Join(nodes[1].data, "warc", "*.warc.gz"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("want several segments to lose one: %v, %v", segs, err)
	}
	sort.Strings(segs)
	newest := segs[len(segs)-1]
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}
	nodes[1] = start(t, "n2", cfgs[1])
	if after := count(nodes[1]); after >= before {
		t.Fatalf("%d captures indexed after losing %s, %d before: the lost ones are still indexed", after, filepath.Base(newest), before)
	} else {
		t.Logf("losing %s took %d of %d captures out of n2's index", filepath.Base(newest), before-after, before)
	}
	waitMembers(t, 3, nodes...)
	took := waitCopies(t, 3, nodes...)
	if got := count(nodes[1]); got != before {
		t.Errorf("n2 holds %d captures after repair, %d before the loss", got, before)
	}
	t.Logf("repaired from the replicas in %v", took.Round(time.Millisecond))
	// Record for record: the captures came back with their request and
	// metadata records.
	recordsAfter := recordTypes(t, nodes[1].data)
	for _, typ := range []string{warc.TypeResponse, warc.TypeRequest, warc.TypeMetadata} {
		if recordsAfter[typ] < recordsBefore[typ] {
			t.Errorf("n2 holds %d %s records after repair, %d before the loss", recordsAfter[typ], typ, recordsBefore[typ])
		}
	}
	t.Logf("records before the loss %v, after repair %v", recordsBefore, recordsAfter)
}

// recordTypes counts the records of a data directory's segments by type.
func recordTypes(t *testing.T, data string) map[string]int {
	t.Helper()
	n := map[string]int{}
	eachRecord(t, segments(t, data), func(rec *warc.Record) { n[rec.Type()]++ })
	return n
}

// segments lists a data directory's WARC segments in the order written.
func segments(t *testing.T, data string) []string {
	t.Helper()
	segs, err := warc.Segments(filepath.Join(data, "warc"))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// eachRecord calls fn with every record of the segments, in order, up to
// a record still being written. A segment gone meanwhile (compacted away)
// is passed over.
func eachRecord(t *testing.T, segs []string, fn func(*warc.Record)) {
	t.Helper()
	for _, seg := range segs {
		f, err := os.Open(seg)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := warc.NewReader(f)
		for err == nil {
			var rec *warc.Record
			if rec, _, err = r.Next(); err == nil {
				fn(rec)
			}
		}
		f.Close()
	}
}

// waggle node leave: a node hands its copies over to the nodes that hold
// its sites once it is gone, and only then leaves. With anti-entropy
// switched off, the handover alone must leave three copies of everything.
func TestLeaveHandsOver(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	nodes, _ := startNetwork(t, 4, srv.URL(), func(c *Config) { c.RepairEvery = time.Hour })
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)
	leaving := nodes[3]
	// The content-seen registry entries the leaving node keeps.
	var digests []string
	for _, n := range nodes {
		n.LocalCaptures(context.Background(), func(c index.Capture) bool {
			if c.Type == warc.TypeResponse && c.Digest != "" {
				digests = append(digests, c.Digest)
			}
			return true
		})
	}
	waitRegistered(t, leaving)
	entries, err := leaving.seen.Lookup(digests)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("the leaving node keeps no content-seen registry entry; the test shows nothing")
	}
	leave(t, leaving)
	rest := nodes[:3]
	waitMembers(t, 3, rest...)
	// Each of the others heard that it retired, its part handed over: its
	// departure is not one to rediscover a frontier after (checked at the
	// end, once each has long seen it go).
	waitFor(t, "the others to see the node gone", func() bool {
		for _, n := range rest {
			if inRing(n.past.current(), leaving.ID()) {
				return false
			}
		}
		return true
	})
	// The hand-over was charged to the repair budget, which caps it.
	if rs := leaving.replicationStats(); rs.HandedOverBytes == 0 || leaving.budget.Charged() < rs.HandedOverBytes {
		t.Errorf("leaving node queued %d bytes for the new holders, its repair budget was charged %d", rs.HandedOverBytes, leaving.budget.Charged())
	}
	held := map[string]int{}
	for _, n := range rest {
		n.LocalCaptures(context.Background(), func(c index.Capture) bool { held[c.RecordID]++; return true })
	}
	under := 0
	for _, k := range held {
		if k < 3 {
			under++
		}
	}
	if under > 0 {
		t.Errorf("%d of %d captures have fewer than 3 copies after the node left", under, len(held))
	}
	// Record for record: each copy came with its request record.
	for _, n := range rest {
		if bare := withoutRequest(t, n); bare > 0 {
			t.Errorf("%s holds %d captures without their request record", n.name, bare)
		}
	}
	// The registry entries went to the digests' owners without the node.
	byID := map[string]*testNode{}
	for _, n := range rest {
		byID[n.ID()] = n
	}
	lost := 0
	for _, e := range entries {
		owner, _ := rest[0].digestOwner(e.Digest)
		found, err := byID[owner].seen.Lookup([]string{e.Digest})
		if err != nil {
			t.Fatal(err)
		}
		if len(found) == 0 || found[0].RecordID != e.RecordID {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of the %d registry entries of the node that left are not on their new owners", lost, len(entries))
	}
	for _, n := range rest {
		if ds, err := n.departures(); err != nil || len(ds) > 0 {
			t.Errorf("%s recorded %d departures (%v) after a member retired: it would rediscover what was handed over", n.name, len(ds), err)
		}
		// Nor is a mark left that would hide a later departure of its ID.
		if ok, err := n.retired(leaving.ID(), time.Now()); err != nil || ok {
			t.Errorf("%s keeps the retired member's notice after seeing it go (%v)", n.name, err)
		}
	}
}

// A node left alone after the other retired does not keep it among the
// peers it joins through at its next start (it would try it forever).
func TestLastNodeForgetsRetiredPeer(t *testing.T) {
	nodes, _ := startNetwork(t, 2, "")
	last, leaving := nodes[0], nodes[1]
	gossip := leaving.Addrs().Gossip
	waitFor(t, "the node to remember the other's gossip address", func() bool {
		return slices.Contains(last.knownPeers(), gossip)
	})
	leave(t, leaving)
	waitMembers(t, 1, last)
	waitFor(t, "the node to see the other gone", func() bool { return !inRing(last.past.current(), leaving.ID()) })
	if got := last.knownPeers(); slices.Contains(got, gossip) {
		t.Errorf("the last node still joins through the retired one at its next start: %v", got)
	}
	if ds, err := last.departures(); err != nil || len(ds) > 0 {
		t.Errorf("the last node recorded %d departures (%v) after the other retired", len(ds), err)
	}
}

// leave runs waggle node leave on n and waits for n to stop. The limits
// find a hang; they are not speed limits.
func leave(t *testing.T, n *testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := Leave(ctx, n.data); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.done:
		if err != nil {
			t.Fatalf("the leaving node's Run: %v", err)
		}
		n.cancel = nil
	case <-time.After(time.Minute):
		t.Fatal("the node did not stop after leaving")
	}
}

// withoutRequest counts the captures a node indexes whose request record
// (WARC-Concurrent-To the capture) is not in its segments.
func withoutRequest(t *testing.T, n *testNode) int {
	t.Helper()
	requests := map[string]bool{}
	eachRecord(t, segments(t, n.data), func(rec *warc.Record) {
		if rec.Type() == warc.TypeRequest {
			requests[rec.Header.Get("WARC-Concurrent-To")] = true
		}
	})
	bare := 0
	n.LocalCaptures(context.Background(), func(c index.Capture) bool {
		if !requests[c.RecordID] {
			bare++
		}
		return true
	})
	return bare
}

// A node joins a network of three that keep three copies: the sites it
// now holds come to it (anti-entropy pulls them), and each node that is
// no longer a replica of a site releases its copy once the site's replicas
// confirm they hold it — in the end every capture sits on exactly its
// site's three replicas.
func TestJoinMovesCopies(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	netDir := newNetwork(t)
	// Small segments, rewritten when they hold any released copy, so that
	// released copies must leave the disks.
	small := func(c *Config) { c.Crawl.SegmentSize, c.CompactMinDead = 64<<10, 1e-9 }
	nodes, _ := startNetworkIn(t, netDir, 3, srv.URL(), small)
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)

	cfg4 := nodeConfig(t.TempDir(), srv.URL(), admit(t, netDir, "n4"), nodes[0].Addrs().Peer)
	small(&cfg4)
	nodes = append(nodes, start(t, "n4", cfg4))
	waitMembers(t, 4, nodes...)
	joined := time.Now()
	waitCond(t, "every capture held by exactly its site's 3 replicas", 2*time.Minute, func() error {
		rg := nodes[0].members.Ring()
		holders := map[string][]string{}
		site := map[string]string{}
		for _, n := range nodes {
			n.LocalCaptures(context.Background(), func(c index.Capture) bool {
				holders[c.RecordID] = append(holders[c.RecordID], n.ID())
				site[c.RecordID] = urlkey.SiteOfKey(c.URLKey)
				return true
			})
		}
		wrong := 0
		for id, hs := range holders {
			var want []string
			for _, m := range rg.Replicas(site[id], 3) {
				want = append(want, m.ID)
			}
			slices.Sort(hs)
			slices.Sort(want)
			if !slices.Equal(hs, want) {
				wrong++
			}
		}
		if wrong > 0 {
			return fmt.Errorf("%d of %d captures are held elsewhere", wrong, len(holders))
		}
		return nil
	})
	placed := time.Since(joined)
	var handed, released int64
	for _, n := range nodes {
		rs := n.replicationStats()
		handed += rs.HandedOver
		released += rs.Released
		if rs.HandedOver > 0 && (rs.HandedOverBytes == 0 || n.budget.Charged() < rs.HandedOverBytes) {
			t.Errorf("%s handed over %d captures, %d bytes, but its repair budget was charged %d", n.name, rs.HandedOver, rs.HandedOverBytes, n.budget.Charged())
		}
	}
	if released == 0 {
		t.Error("no node released a copy")
	}
	// The released copies leave the disks: every segment holding one is
	// rewritten without it, except the one each node is writing.
	waitCond(t, "no released copy on disk outside the segments being written", time.Minute, func() error {
		left := 0
		for _, n := range nodes[:3] {
			left += releasedOnDisk(t, n)
		}
		if left > 0 {
			return fmt.Errorf("%d released copies left", left)
		}
		return nil
	})
	cleaned := time.Since(joined)
	var compacted, reclaimed int64
	for _, n := range nodes {
		rs := n.replicationStats()
		compacted += rs.Compacted
		reclaimed += rs.Reclaimed
		checkIndexAgrees(t, n)
	}
	if compacted == 0 || reclaimed <= 0 {
		t.Errorf("%d segments compacted, %d bytes reclaimed", compacted, reclaimed)
	}
	// And /metrics says so, of each node that compacted.
	for _, n := range nodes {
		rs := n.replicationStats()
		if rs.Compacted == 0 {
			continue
		}
		resp, err := http.Get("http://" + n.Addrs().HTTP + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("waggle_segments_compacted_total %d\n", rs.Compacted)
		if !strings.Contains(string(body), want) || !strings.Contains(string(body), "waggle_released_total ") {
			t.Errorf("%s: /metrics lacks %q or waggle_released_total:\n%s", n.name, want, body)
		}
	}
	t.Logf("after a join, every capture on exactly its 3 replicas %v later; %d captures handed over, %d copies released; "+
		"no released copy on disk outside the segments being written %v after the join (10s of it the grace for readers): %d segments compacted, %d bytes reclaimed",
		placed.Round(time.Millisecond), handed, released, cleaned.Round(time.Millisecond), compacted, reclaimed)
}

// releasedOnDisk counts the response and revisit records in n's segments,
// except the newest, that its index does not hold. (A compacted segment's
// file stays for a grace period of 10s after it is dropped.)
func releasedOnDisk(t *testing.T, n *testNode) int {
	t.Helper()
	indexed := map[string]bool{}
	n.LocalCaptures(context.Background(), func(c index.Capture) bool {
		indexed[c.RecordID] = true
		return true
	})
	segs := segments(t, n.data)
	left := 0
	eachRecord(t, segs[:max(0, len(segs)-1)], func(rec *warc.Record) {
		typ := rec.Type()
		if (typ == warc.TypeResponse || typ == warc.TypeRevisit) && !indexed[rec.ID()] {
			left++
		}
	})
	return left
}

// checkIndexAgrees checks that every capture n indexes is the record at
// its location.
func checkIndexAgrees(t *testing.T, n *testNode) {
	t.Helper()
	n.LocalCaptures(context.Background(), func(c index.Capture) bool {
		rec, err := warc.ReadAt(filepath.Join(n.data, "warc"), warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
		if err != nil || rec.ID() != c.RecordID {
			t.Errorf("%s: capture %s %s: the record at %s:%d is not it (%v)", n.name, c.URL, c.RecordID, c.Segment, c.Offset, err)
			return false
		}
		return true
	})
}

// A node's status says what its last anti-entropy rounds found still to
// copy, both ways: an operator taking nodes down in turn waits until every
// node reports nothing lacking and every member compared. Rounds are run
// here by hand (RepairEvery is an hour), so each step is seen.
func TestRepairStatusSaysWhatIsLacking(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 6, Pages: 60})
	nodes, _ := startNetwork(t, 3, srv.URL(), func(c *Config) { c.RepairEvery = time.Hour })
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)
	ctx := context.Background()
	member := func(from, of *testNode) membership.Member {
		for _, m := range from.members.Members() {
			if m.ID == of.ID() {
				return m
			}
		}
		t.Fatalf("%s does not see %s", from.name, of.name)
		return membership.Member{}
	}
	if st := nodes[0].repairStats(); st.NotCompared != 2 || st.Lacking != 0 || st.PeersLack != 0 {
		t.Fatalf("before any round: %+v; want both members not compared", st)
	}

	// n2 loses some captures from its index.
	var lost []index.Capture
	nodes[1].LocalCaptures(ctx, func(c index.Capture) bool {
		lost = append(lost, c)
		return len(lost) < 5
	})
	for _, c := range lost {
		if err := nodes[1].crawl.DropDamaged(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].repairWith(ctx, member(nodes[0], nodes[1])); err != nil {
		t.Fatal(err)
	}
	if st := nodes[0].repairStats(); st.PeersLack != int64(len(lost)) || st.Lacking != 0 || st.NotCompared != 1 {
		t.Errorf("n1 after its round with n2, which lost %d captures: %+v", len(lost), st)
	}
	for _, o := range []*testNode{nodes[0], nodes[2]} {
		if err := nodes[1].repairWith(ctx, member(nodes[1], o)); err != nil {
			t.Fatal(err)
		}
	}
	if st := nodes[1].repairStats(); st.Lacking != 0 || st.PeersLack != 0 || st.NotCompared != 0 || st.Copied < int64(len(lost)) {
		t.Errorf("n2 after copying back what it lost: %+v", st)
	}
	for _, o := range []*testNode{nodes[1], nodes[2]} {
		if err := nodes[0].repairWith(ctx, member(nodes[0], o)); err != nil {
			t.Fatal(err)
		}
	}
	if st := nodes[0].repairStats(); st.Lacking != 0 || st.PeersLack != 0 || st.NotCompared != 0 {
		t.Errorf("n1 once n2 is repaired: %+v", st)
	}
	// A round that fails leaves nothing known of that member.
	unreachable := member(nodes[0], nodes[1])
	unreachable.PeerAddr = "127.0.0.1:1"
	if err := nodes[0].repairWith(ctx, unreachable); err == nil {
		t.Fatal("a round with an address nothing listens on succeeded")
	}
	if st := nodes[0].repairStats(); st.NotCompared != 1 {
		t.Errorf("n1 after a failed round with n2: %+v; want n2 not compared", st)
	}
}

// URLs set aside after a failed fetch (their host down) are handed over
// with the rest of the frontier when their node leaves: none is lost with
// it.
func TestLeaveHandsOverDeferredURLs(t *testing.T) {
	nodes, _ := startNetwork(t, 3, "", func(c *Config) { c.RepairEvery = time.Hour })
	// Hosts on loopback addresses nothing listens on: every fetch is
	// refused, a failure that may pass.
	var seeds []string
	for i := 2; i < 14; i++ {
		seeds = append(seeds, fmt.Sprintf("http://127.0.0.%d:9/", i))
	}
	if _, err := Submit(context.Background(), nodes[0].data, seeds); err != nil {
		t.Fatal(err)
	}
	deferred := func(ns ...*testNode) (total int64, most *testNode) {
		for _, n := range ns {
			d := n.crawl.Stats().Deferred
			total += d
			if most == nil || d > most.crawl.Stats().Deferred {
				most = n
			}
		}
		return total, most
	}
	waitFor(t, "every seed to fail and be set aside", func() bool { n, _ := deferred(nodes...); return n == int64(len(seeds)) })
	_, leaving := deferred(nodes...)
	kept := leaving.crawl.Stats().Deferred
	leave(t, leaving)
	var rest []*testNode
	for _, n := range nodes {
		if n != leaving {
			rest = append(rest, n)
		}
	}
	waitFor(t, "the leaving node's URLs to be set aside by the others", func() bool { n, _ := deferred(rest...); return n == int64(len(seeds)) })
	t.Logf("%s left with %d of the %d URLs set aside; the others hold them all", leaving.name, kept, len(seeds))
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
