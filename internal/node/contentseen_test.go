package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/dedup"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// A payload archived by one node is not stored again by another: the
// digest's owner on the ring says where it is, the second node writes a
// revisit record pointing there, and replay follows the pointer from any
// node. Every websim site serves the same vendor.min.js.
func TestContentSeenAcrossNodes(t *testing.T) {
	nodes, seeds := scriptNetwork(t, 3)
	ctx := context.Background()

	type held struct {
		node string
		c    index.Capture
	}
	var vendor []held
	byRecord := map[string]held{}
	byName := map[string]*testNode{}
	look := func() {
		vendor = nil
		for _, n := range nodes {
			byName[n.name] = n
			err := n.LocalCaptures(ctx, func(c index.Capture) bool {
				byRecord[c.RecordID] = held{n.name, c}
				if strings.HasSuffix(c.URL, "/js/vendor.min.js") {
					vendor = append(vendor, held{n.name, c})
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Sites one at a time until one has archived the payload, then all the
	// others. Two nodes that fetch a payload new to the network at the same
	// moment both store it (registration is first-wins, package dedup says
	// so); a payload archived before is what the test is about.
	// A page of every host, not just websim's seeds (four sites), so that
	// the sites serving the script are spread over the nodes: with four,
	// one node owned them all in about one run in 27; with the twelve of
	// these hosts, in about one in 177,000.
	for len(vendor) == 0 && len(seeds) > 0 {
		seeds = crawlNext(t, nodes, seeds)
		look()
	}
	if _, err := Submit(ctx, nodes[0].data, seeds); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	look()
	sites := map[string]bool{}
	responses, crossNode := 0, 0
	for _, v := range vendor {
		sites[urlkey.Site(v.c.URL)] = true
		if v.c.Type == warc.TypeResponse {
			responses++
		}
	}
	if len(vendor) < 3 || len(sites) < 2 {
		t.Fatalf("websim served vendor.min.js %d times on %d sites; the test needs more", len(vendor), len(sites))
	}
	for _, v := range vendor {
		if v.c.Type != warc.TypeRevisit {
			continue
		}
		rec, err := byName[v.node].local.Record(ctx, v.c)
		if err != nil {
			t.Fatal(err)
		}
		orig, ok := byRecord[rec.Header.Get("WARC-Refers-To")]
		if !ok || orig.c.Type != warc.TypeResponse || orig.c.Digest != v.c.Digest {
			t.Errorf("%s on %s refers to %s, which is not a response of its payload", v.c.URL, v.node, rec.Header.Get("WARC-Refers-To"))
			continue
		}
		if orig.node != v.node {
			crossNode++
		}
	}
	t.Logf("vendor.min.js: %d captures on %d sites, %d responses, %d revisits pointing at another node",
		len(vendor), len(sites), responses, crossNode)
	if responses != 1 {
		t.Errorf("%d captures of the same payload stored it %d times, want once", len(vendor), responses)
	}
	if crossNode == 0 {
		t.Error("no node pointed at a payload another node holds")
	}
	var hits uint64
	for _, n := range nodes {
		if cs := n.Status(ctx).ContentSeen; cs != nil {
			hits += cs.Hits
		}
	}
	if hits < uint64(crossNode) {
		t.Errorf("status reports %d content-seen hits over the nodes; %d revisits point across the network", hits, crossNode)
	}

	// Any node replays any of them, payload byte for byte.
	var want []byte
	for i, v := range vendor {
		n := nodes[i%len(nodes)]
		resp, err := http.Get("http://" + n.Addrs().Content + "/web/" + v.c.Timestamp14() + "id_/" + v.c.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("%s replaying %s (%s on %s): %s", n.name, v.c.URL, v.c.Type, v.node, resp.Status)
			continue
		}
		if want == nil {
			want = body
		} else if !bytes.Equal(body, want) {
			t.Errorf("%s replays %s as %d bytes, another capture of the payload as %d", n.name, v.c.URL, len(body), len(want))
		}
	}

	// An export through a node holds a revisit's original wherever it lives;
	// one of the node's own archive cannot.
	var cross held
	for _, v := range vendor {
		if rec, err := byName[v.node].local.Record(ctx, v.c); err == nil && v.c.Type == warc.TypeRevisit {
			if orig := byRecord[rec.Header.Get("WARC-Refers-To")]; orig.node != v.node {
				cross = v
				break
			}
		}
	}
	if cross.node == "" {
		t.Fatal("no revisit points at another node's capture")
	}
	sel := wacz.Selection{Host: urlkey.Host(cross.c.URL)}
	var buf bytes.Buffer
	es, err := Export(ctx, nodes[0].data, sel, &buf)
	if err != nil {
		t.Fatalf("export of %s through %s: %v", sel.Host, nodes[0].name, err)
	}
	records := exportedRecords(t, buf.Bytes())
	rec, err := byName[cross.node].local.Record(ctx, cross.c)
	if err != nil {
		t.Fatal(err)
	}
	original := rec.Header.Get("WARC-Refers-To")
	if es.Missing != 0 || es.Unreadable != 0 || es.Originals == 0 ||
		records[cross.c.RecordID] != warc.TypeRevisit || records[original] != warc.TypeResponse {
		t.Errorf("export of %s through %s: %+v; the revisit %s is a %q record in it, its original %s on %s a %q record",
			sel.Host, nodes[0].name, es, cross.c.RecordID, records[cross.c.RecordID], original, byRecord[original].node, records[original])
	}
	own, err := wacz.Export(ctx, io.Discard, wacz.Source{Archive: byName[cross.node].local, TempDir: t.TempDir()}, sel)
	if err != nil {
		t.Fatal(err)
	}
	if own.Missing == 0 || own.Captures != es.Captures {
		t.Errorf("export of %s from %s's own archive: %+v; through the network: %+v", sel.Host, cross.node, own, es)
	}
	t.Logf("export of %s: %+v through the network, %+v from %s alone", sel.Host, es, own, cross.node)
}

// exportedRecords verifies a WACZ and returns the type of each WARC record
// in it, by record ID.
func exportedRecords(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := wacz.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := zr.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := zr.Open("archive/data.warc.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := warc.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for {
		rec, _, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return types
		}
		if err != nil {
			t.Fatal(err)
		}
		types[rec.ID()] = rec.Type()
	}
}

// Nodes revisit their own sites as URLs fall due, with conditional GETs,
// and no URL is revisited by a node that does not hold its site.
func TestNetworkRecrawl(t *testing.T) {
	web := websim.New(websim.Config{Seed: 11, Hosts: 12, Pages: 150})
	_, proxyURL := startPoliteProxy(t, web)
	rule, err := recrawl.ParseRule("2s,1s,10s")
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := startNetwork(t, 3, proxyURL, func(c *Config) {
		c.Replicas = 1
		c.Crawl.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
	})
	ctx := context.Background()
	if _, err := Submit(ctx, nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	// Which sites a node holds follows from its random identity: one may
	// hold none. Every node that archived something must revisit it.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		crawling, done := 0, 0
		for _, n := range nodes {
			if st := n.Status(ctx); st.Crawl.Captures > 0 {
				crawling++
				if st.Crawl.Revisits.NotModified > 0 {
					done++
				}
			}
		}
		if crawling >= 2 && done == crawling {
			break
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				t.Logf("%s: %+v", n.name, n.Status(ctx).Crawl)
			}
			t.Fatal("not every node revisited its pages")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range nodes {
		err := n.LocalCaptures(ctx, func(c index.Capture) bool {
			if owner := n.router.Owner(urlkey.Site(c.URL)); owner != "" && c.Type == warc.TypeRevisit {
				t.Errorf("%s revisited %s, whose site %s holds", n.name, c.URL, owner[:8])
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		st := n.Status(ctx).Crawl
		t.Logf("%s: %d captures, revisits %+v, %d queued again", n.name, st.Captures, st.Revisits, st.RevisitsQueued)
	}
}

// The registry's word is checked against the archive: a hit whose capture
// the archive does not hold (lost with a disk, or never made: a faulty
// peer's entry) is a miss, so the crawler stores the payload. So is one
// whose capture the index lists but whose holder cannot prove it has the
// payload's bytes (an index entry forged by the peer that owns its site),
// when the crawler has the payload to check with.
func TestContentSeenChecksTheCaptureIsArchived(t *testing.T) {
	dir := t.TempDir()
	db, err := crawl.OpenDB(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := dedup.NewRegistry(db)
	client := dedup.NewClient(dedup.ClientConfig{
		Self:  "self",
		Owner: func(string) (string, bool) { return "self", true }, // this node's registry answers
		Local: reg,
		Send: func(context.Context, string, string, []byte) ([]byte, error) {
			return nil, errors.New("no other node")
		},
	})
	var log bytes.Buffer
	warcDir := filepath.Join(dir, "warc")
	seen := newContentSeen(client, archive.NewLocal(index.New(db), warcDir), nil, slog.New(slog.NewTextHandler(&log, nil)))
	if err := os.MkdirAll(warcDir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := warc.NewWriter(warcDir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}

	at := time.Date(2026, 11, 23, 10, 0, 0, 123456000, time.UTC)
	payload := func(i int) []byte { return []byte(fmt.Sprintf("function lib%d() {}\n", i)) }
	// capture i is a response of payload(i) at its own URL, written to the
	// archive when it is to be held.
	capture := func(i int, write bool) index.Capture {
		u := fmt.Sprintf("http://www.example.org/lib%d.js", i)
		key, err := urlkey.SURT(u)
		if err != nil {
			t.Fatal(err)
		}
		c := index.Capture{URLKey: key, URL: u, Time: at, Type: warc.TypeResponse, Status: 200, Digest: warc.Digest(payload(i)),
			RecordID: fmt.Sprintf("<urn:uuid:00000000-0000-0000-0000-%012d>", i)}
		if write {
			rec, err := warc.NewResponse(u, at, fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(payload(i)), payload(i)))
			if err != nil {
				t.Fatal(err)
			}
			rec.Header.Set("WARC-Record-ID", c.RecordID)
			loc, err := w.Write(rec)
			if err != nil {
				t.Fatal(err)
			}
			c.Segment, c.Offset, c.Length = loc.Segment, loc.Offset, loc.Length
		}
		return c
	}
	held, lost, forged, other := capture(1, true), capture(2, false), capture(3, false), capture(4, true)
	forged.RecordID = "<urn:uuid:ffffffff-0000-0000-0000-000000000003>" // the archive has capture 3 under another ID
	// The index lists payload 5 at capture 4's record, which holds payload 4.
	impostor := other
	impostor.URLKey, impostor.URL, impostor.Digest = capture(5, false).URLKey, capture(5, false).URL, capture(5, false).Digest
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for _, c := range []index.Capture{held, capture(3, false), impostor} {
		if err := index.Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var refs []dedup.Ref
	for _, c := range []index.Capture{held, lost, forged, impostor} {
		refs = append(refs, dedup.Ref{Digest: c.Digest, URL: c.URL, Time: c.Time, RecordID: c.RecordID})
	}
	if _, err := reg.Register(refs); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		c       index.Capture
		payload []byte // the crawler's copy, to check the holder's with
		want    bool
	}{
		{"archived", held, nil, true},
		{"archived, proved", held, payload(1), true},
		// Other bytes under the same digest (a SHA-1 collision): what was
		// proved above was another payload.
		{"archived, other bytes under its digest", held, payload(2), false},
		{"lost", lost, nil, false},
		{"never made", forged, nil, false},
		// Without the payload, the index's word is all there is.
		{"listed with other bytes, unchecked", impostor, nil, true},
		// Found above, but not proved: the payload is checked now.
		{"listed with other bytes", impostor, payload(5), false},
	} {
		for range 2 { // the second time from what was verified
			ref, ok, err := seen.Lookup(ctx, tc.c.Digest, tc.payload)
			if err != nil || ok != tc.want || ok && (ref.RecordID != tc.c.RecordID || ref.URL != tc.c.URL) {
				t.Errorf("%s: Lookup = %+v, %v, %v; want found %v", tc.name, ref, ok, err, tc.want)
			}
		}
	}
	if st := seen.stats(); st.Unproven != 4 || st.NotArchived != 4 {
		t.Errorf("stats: %d hits unproven, %d not archived; want 4 and 4", st.Unproven, st.NotArchived)
	}
	if !strings.Contains(log.String(), "proved it has the payload") {
		t.Errorf("an unproved hit was not logged; log:\n%s", log.String())
	}
}

// A new payload is registered with the digest's owner only once its
// capture's copies have reached its replicas: before, a revisit made on
// the registry's word would lose its payload with the one disk that held
// it. Captures without copies to wait for are registered at once, and
// those one of whose copies was given up never.
func TestPayloadRegisteredOnceReplicated(t *testing.T) {
	db, err := crawl.OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client := dedup.NewClient(dedup.ClientConfig{
		Self:  "self",
		Owner: func(string) (string, bool) { return "peer", true },
		Local: dedup.NewRegistry(db),
		Send: func(context.Context, string, string, []byte) ([]byte, error) {
			return nil, errors.New("not sent in this test")
		},
	})
	var mu sync.Mutex
	copies := map[string]replicate.Copies{} // record ID → where its copies stand
	seen := newContentSeen(client, nil, func(c index.Capture) replicate.Copies {
		mu.Lock()
		defer mu.Unlock()
		return copies[c.RecordID]
	}, nil)
	capture := func(i int) index.Capture {
		return index.Capture{URLKey: fmt.Sprintf("org,example)/%d", i), URL: fmt.Sprintf("http://example.org/%d", i),
			Time: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC), Type: warc.TypeResponse, Status: 200,
			Digest: fmt.Sprintf("sha1:%032d", i), RecordID: fmt.Sprintf("<urn:uuid:00000000-0000-0000-0000-%012d>", i)}
	}
	replicated, copying, unsent, dropped := capture(1), capture(2), capture(3), capture(4)
	set := func(c index.Capture, to replicate.Copies) {
		mu.Lock()
		defer mu.Unlock()
		copies[c.RecordID] = to
	}
	set(copying, replicate.CopiesQueued)
	set(unsent, replicate.CopiesAbandoned)
	set(dropped, replicate.CopiesQueued)
	seen.Stored([]index.Capture{replicated, copying, unsent, dropped})
	if q := client.Stats().Queued; q != 1 {
		t.Fatalf("%d registrations queued, want only the capture without copies on their way", q)
	}
	seen.registerReplicated()
	if q := client.Stats().Queued; q != 1 {
		t.Fatalf("%d registrations queued while the copies are on their way, want 1", q)
	}
	set(copying, replicate.CopiesArrived)
	set(dropped, replicate.CopiesAbandoned) // a copy could not be sent
	seen.registerReplicated()
	if q := client.Stats().Queued; q != 2 {
		t.Fatalf("%d registrations queued once the copies arrived, want 2", q)
	}
	seen.registerReplicated()
	if q, st := client.Stats().Queued, seen.stats(); q != 2 || st.AwaitingCopies != 0 || st.Dropped != 2 {
		t.Fatalf("after another look: %d registrations queued, %d waiting, %d given up; want 2 (each once), none, and the 2 whose copies were given up",
			q, st.AwaitingCopies, st.Dropped)
	}
}

// A payload whose only capture was lost with its disk is stored again when
// it is next fetched, though the digest's owner still names the lost
// capture: the network must not keep pointing at what it no longer holds.
// The new copy then replaces the lost one in the registry, so that the
// payload is not stored again on every later fetch.
func TestLostPayloadIsStoredAgain(t *testing.T) {
	web := websim.New(websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	_, proxyURL := startPoliteProxy(t, web)
	nodes, cfgs := startNetwork(t, 3, proxyURL, func(c *Config) {
		c.Replicas = 1 // the lost capture has no copy to come back from
		c.Crawl.Scope = crawl.ScopeHost
	})
	ctx := context.Background()
	type held struct {
		node int
		c    index.Capture
	}
	vendor := func() []held {
		var out []held
		for i, n := range nodes {
			n.LocalCaptures(ctx, func(c index.Capture) bool {
				if strings.HasSuffix(c.URL, "/js/vendor.min.js") {
					out = append(out, held{i, c})
				}
				return true
			})
		}
		return out
	}
	seeds := web.Seeds()
	var v []held
	for len(v) == 0 && len(seeds) > 0 {
		if _, err := Submit(ctx, nodes[0].data, seeds[:1]); err != nil {
			t.Fatal(err)
		}
		seeds = seeds[1:]
		waitQuiet(t, nodes...)
		v = vendor()
	}
	if len(v) != 1 || v[0].c.Type != warc.TypeResponse {
		t.Fatalf("want the script stored once first, have %+v", v)
	}
	h := v[0].node
	waitRegistered(t, nodes[h]) // with the digest's owner
	nodes[h].stop(t)
	if err := os.Remove(filepath.Join(nodes[h].data, "warc", v[0].c.Segment)); err != nil {
		t.Fatal(err)
	}
	nodes[h] = start(t, nodes[h].name, cfgs[h])
	waitMembers(t, 3, nodes...)
	responses := func() (n int) {
		for _, x := range vendor() {
			if x.c.Type == warc.TypeResponse {
				n++
			}
		}
		return n
	}
	// Sites one at a time until one has stored the script again.
	for responses() == 0 && len(seeds) > 0 {
		if _, err := Submit(ctx, nodes[0].data, seeds[:1]); err != nil {
			t.Fatal(err)
		}
		seeds = seeds[1:]
		waitQuiet(t, nodes...)
	}
	again := responses()
	if again == 0 || len(seeds) == 0 {
		t.Fatalf("after the loss the script was stored %d times, with %d sites left; the test needs it stored and sites left", again, len(seeds))
	}
	// The new copy took the lost one's place in the registry: the other
	// sites point at it instead of storing the script once each.
	waitRegistered(t, nodes...)
	if _, err := Submit(ctx, nodes[0].data, seeds); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	v = vendor()
	if got := responses(); got != again {
		t.Errorf("the script was stored %d times after the loss, %d of them after a new copy was registered; want none then", got, got-again)
	}
	if len(v) <= again+1 {
		t.Errorf("%d captures of the script after the loss; the later sites did not capture it", len(v))
	}
	for _, x := range v {
		n := nodes[(x.node+1)%3]
		resp, err := http.Get("http://" + n.Addrs().Content + "/web/" + x.c.Timestamp14() + "id_/" + x.c.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s (%s on %s) replays from %s with %s", x.c.URL, x.c.Type, nodes[x.node].name, n.name, resp.Status)
		}
	}
	var notArchived uint64
	for _, n := range nodes {
		notArchived += n.Status(ctx).ContentSeen.NotArchived
	}
	if notArchived == 0 {
		t.Error("status reports no content-seen hit whose capture was missing")
	}
}

// A node that joins takes over part of the digests, as of the sites; the
// entries its predecessor kept for them move to it, so that the payloads
// archived before it came are still found by the network's content-seen
// test, and each entry is kept by its owner alone.
func TestRegistryMovesToANewOwner(t *testing.T) {
	web := websim.New(websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	_, proxyURL := startPoliteProxy(t, web)
	netDir := newNetwork(t)
	configure := func(c *Config) {
		c.Replicas = 1
		c.Crawl.Scope = crawl.ScopeHost
	}
	nodes, _ := startNetworkIn(t, netDir, 1, proxyURL, configure)
	ctx := context.Background()
	if _, err := Submit(ctx, nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitRegistered(t, nodes[0])
	// The payloads archived, and the response records that stored each.
	stored := map[string]map[string]bool{}
	err := nodes[0].LocalCaptures(ctx, func(c index.Capture) bool {
		if c.Type == warc.TypeResponse && c.Digest != "" {
			if stored[c.Digest] == nil {
				stored[c.Digest] = map[string]bool{}
			}
			stored[c.Digest][c.RecordID] = true
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for d := range stored {
		digests = append(digests, d)
	}
	if found, err := nodes[0].seen.Lookup(digests); err != nil || len(found) != len(digests) {
		t.Fatalf("the only node registered %d of %d payloads (%v)", len(found), len(digests), err)
	}

	cfg := nodeConfig(t.TempDir(), proxyURL, admit(t, netDir, "n2"), nodes[0].Addrs().Peer)
	configure(&cfg)
	nodes = append(nodes, start(t, "n2", cfg))
	waitMembers(t, 2, nodes...)

	// Each entry on its owner, and only there.
	misplaced := func() (problems []string, owned map[string]int) {
		owned = map[string]int{}
		for _, d := range digests {
			owner, _ := nodes[0].digestOwner(d)
			for _, n := range nodes {
				found, err := n.seen.Lookup([]string{d})
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case n.ID() != owner && len(found) > 0:
					problems = append(problems, fmt.Sprintf("%s keeps %s, owned by the other node", n.name, d))
				case n.ID() == owner && len(found) == 0:
					problems = append(problems, fmt.Sprintf("%s, the owner, lacks %s", n.name, d))
				case n.ID() == owner && !stored[d][found[0].RecordID]:
					problems = append(problems, fmt.Sprintf("%s's entry for %s names %s, no response record of it", n.name, d, found[0].RecordID))
				case n.ID() == owner:
					owned[n.name]++
				}
			}
		}
		return problems, owned
	}
	var (
		problems []string
		owned    map[string]int
	)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if problems, owned = misplaced(); len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for i, p := range problems {
		if i == 10 {
			t.Errorf("… and %d more", len(problems)-i)
			break
		}
		t.Error(p)
	}
	t.Logf("%d payloads: %v entries on each owner", len(digests), owned)
	if owned["n2"] == 0 {
		t.Fatal("the new node owns none of the payloads' digests; the test shows nothing")
	}
	if got := nodes[0].Status(ctx).ContentSeen.HandedOver; got != uint64(owned["n2"]) {
		t.Errorf("n1's status reports %d entries handed over, want %d", got, owned["n2"])
	}
	// The network's content-seen test finds, through the new owner, the
	// payloads archived before it joined.
	for _, d := range digests {
		if owner, _ := nodes[0].digestOwner(d); owner != nodes[1].ID() {
			continue
		}
		ref, ok, err := nodes[0].contentSeen.Lookup(ctx, d, nil)
		if err != nil || !ok || !stored[d][ref.RecordID] {
			t.Errorf("n1 asking n2 about %s: %+v, %v, %v", d, ref, ok, err)
		}
	}
}

// waitRegistered waits until the nodes' content-seen registrations have
// all reached their digests' owners: none waiting for its capture's copies
// to arrive (with more than one replica), none queued to send.
func waitRegistered(t *testing.T, nodes ...*testNode) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, n := range nodes {
		for {
			s := n.contentSeen.stats()
			if s.AwaitingCopies == 0 && s.Queued == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d content-seen registrations waiting for copies, %d queued, after a minute", n.name, s.AwaitingCopies, s.Queued)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A faulty peer cannot make another node drop a payload that it cannot
// produce: here the node that archived vendor.min.js first lists that
// capture in its index, and registered it, but its index entry points at
// a record of the same ID holding other bytes, as a forged entry would. A
// node that fetches the script later finds the capture listed, asks its
// holder to prove it has the payload, and stores the payload itself when
// the proof is wrong.
func TestContentSeenUnprovenHitIsStored(t *testing.T) {
	nodes, seeds := scriptNetwork(t, 2)
	ctx := context.Background()
	vendorOn := func(n *testNode) []index.Capture {
		var caps []index.Capture
		if err := n.LocalCaptures(ctx, func(c index.Capture) bool {
			if strings.HasSuffix(c.URL, "/js/vendor.min.js") {
				caps = append(caps, c)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return caps
	}
	// One site at a time, until a node has archived the script.
	var liar, honest *testNode
	for liar == nil {
		if len(seeds) == 0 {
			t.Fatal("no site served vendor.min.js")
		}
		seeds = crawlNext(t, nodes, seeds)
		for i, n := range nodes {
			if len(vendorOn(n)) > 0 {
				liar, honest = n, nodes[1-i]
			}
		}
	}
	waitRegistered(t, liar)
	script := vendorOn(liar)[0]
	if script.Type != warc.TypeResponse {
		t.Fatalf("%s's first capture of the script is a %s", liar.name, script.Type)
	}
	// The liar's index entry keeps the script's record ID and digest but
	// points at a record of that ID with other bytes.
	w, err := warc.NewWriter(filepath.Join(liar.data, "warc"), warc.WriterOptions{Prefix: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := warc.NewResponse(script.URL, script.Time, []byte("HTTP/1.1 200 OK\r\nContent-Type: application/javascript\r\n\r\n/* not the script */"))
	if err != nil {
		t.Fatal(err)
	}
	rec.Header.Set("WARC-Record-ID", script.RecordID)
	loc, err := w.Write(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	forged := script
	forged.Segment, forged.Offset, forged.Length = loc.Segment, loc.Offset, loc.Length
	b := liar.db.NewBatch()
	if err := index.Put(b, forged); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}

	// Sites one at a time until the other node has fetched the script.
	for len(vendorOn(honest)) == 0 {
		if len(seeds) == 0 {
			t.Fatalf("%s crawled no site serving vendor.min.js", honest.name)
		}
		seeds = crawlNext(t, nodes, seeds)
	}
	got := vendorOn(honest)[0]
	cs := honest.Status(ctx).ContentSeen
	if got.Type != warc.TypeResponse || cs == nil || cs.Unproven == 0 {
		t.Fatalf("%s stored the script as a %s record (content-seen status %+v); want the payload stored, its holder having proved nothing",
			honest.name, got.Type, cs)
	}
	rec, err = honest.local.Record(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if payload, _ := warc.HTTPPayload(rec.Block); warc.Digest(payload) != script.Digest {
		t.Errorf("%s's capture of the script holds another payload", honest.name)
	}
}

// scriptNetwork starts n nodes crawling a websim whose every site serves
// the same vendor.min.js, and returns them with a seed of each host. Each
// capture has one copy, so that a node's own index knows only the
// payloads it fetched: what it knows of others', it learnt by asking. The
// nodes crawl each site's own pages only, so that a site is crawled when
// its seed is given.
func scriptNetwork(t *testing.T, n int) ([]*testNode, []string) {
	t.Helper()
	web := websim.New(websim.Config{Seed: 7, Hosts: 24, Pages: 240})
	_, proxyURL := startPoliteProxy(t, web)
	nodes, _ := startNetwork(t, n, proxyURL, func(c *Config) {
		c.Replicas = 1
		c.Crawl.Scope = crawl.ScopeHost
	})
	var seeds []string
	hosts := map[string]bool{}
	for _, p := range web.Pages() {
		if h := urlkey.Host(p); !hosts[h] {
			hosts[h] = true
			seeds = append(seeds, p)
		}
	}
	return nodes, seeds
}

// crawlNext has the network crawl the site of seeds[0], waits until it
// is done, and returns the seeds left.
func crawlNext(t *testing.T, nodes []*testNode, seeds []string) []string {
	t.Helper()
	if _, err := Submit(context.Background(), nodes[0].data, seeds[:1]); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	return seeds[1:]
}

// A payload fetched again at another site of the same node, while the
// first capture's copy cannot reach that site's other replica (here: a
// partition between the two), is stored again: a revisit, pushed to the
// second site's replicas, would point at a payload on one disk only.
func TestDuplicateOfAnotherSiteIsStoredWhileTheOriginalsCopyWaits(t *testing.T) {
	script := strings.Repeat("function shared(){return 42}\n", 200)
	var servers []*httptest.Server
	for range 24 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/robots.txt":
				http.NotFound(w, r)
			case "/big.js":
				w.Header().Set("Content-Type", "application/javascript")
				io.WriteString(w, script)
			default:
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprintf(w, `<html><body>%s<script src="/big.js"></script></body></html>`, r.Host)
			}
		}))
		t.Cleanup(s.Close)
		servers = append(servers, s)
	}
	faults := NewFaults()
	nodes, _ := startNetwork(t, 3, "", func(c *Config) {
		c.Faults = faults
		c.Replicas = 2
		c.Crawl.Scope = crawl.ScopeHost
	})
	rg := nodes[0].members.Ring()
	byID := map[string]*testNode{}
	for _, n := range nodes {
		byID[n.ID()] = n
	}
	// Two sites owned by x, whose other replicas differ: y and z.
	var x, y *testNode
	var s1, s2 string
	for _, a := range servers {
		ra := rg.Replicas(urlkey.Site(a.URL+"/"), 2)
		for _, b := range servers {
			if rb := rg.Replicas(urlkey.Site(b.URL+"/"), 2); ra[0].ID == rb[0].ID && ra[1].ID != rb[1].ID {
				x, y = byID[ra[0].ID], byID[ra[1].ID]
				s1, s2 = a.URL+"/", b.URL+"/"
			}
		}
	}
	if x == nil {
		t.Fatal("fixture: no two sites of one owner with different replicas among 24")
	}
	faults.Split([]string{x.ID()}, []string{y.ID()})
	// y stays a member, probed through z, and so s1's replica: its copy
	// waits.
	time.Sleep(3 * time.Second)
	waitMembers(t, 3, nodes...)
	ctx := context.Background()
	typeOf := func(u string) string {
		typ := ""
		x.local.Index().Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
			if c.URL == u {
				typ = c.Type
			}
			return typ == "", nil
		})
		return typ
	}
	if _, err := Submit(ctx, x.data, []string{s1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x to archive the first site's script", func() bool { return typeOf(s1+"big.js") != "" })
	if _, err := Submit(ctx, x.data, []string{s2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x to archive the second site's script", func() bool { return typeOf(s2+"big.js") != "" })
	if got := typeOf(s2 + "big.js"); got != warc.TypeResponse {
		t.Errorf("the second site's copy of the script, while the first's copy cannot reach %s: %s, want the payload stored", y.name, got)
	}
}
