package archive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/gzip"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// page is a capture to archive on a test node.
type page struct {
	url  string
	at   time.Time
	body string
	id   string // the record's ID; empty for a new one
}

// testNode is a node with its own archive, served on loopback.
type testNode struct {
	cred  *admission.Credential
	local *Local
	addr  string
	calls atomic.Int64 // requests its handler received
	stop  func()
}

var t0 = time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)

// archivePages writes pages into a new archive (pebble index and WARC
// segments) in a temporary directory, as the crawler does.
func archivePages(t testing.TB, pages []page) *Local {
	t.Helper()
	dir := t.TempDir()
	db, err := pebble.Open(filepath.Join(dir, "db"), frontier.PebbleOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	warcDir := filepath.Join(dir, "warc")
	if err := os.Mkdir(warcDir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := warc.NewWriter(warcDir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewIndexedBatch()
	for _, p := range pages {
		raw := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(p.body), p.body)
		rec, err := warc.NewResponse(p.url, p.at, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if p.id != "" {
			rec.Header.Set("WARC-Record-ID", p.id)
		}
		loc, err := w.Write(rec)
		if err != nil {
			t.Fatal(err)
		}
		key, err := urlkey.SURT(p.url)
		if err != nil {
			t.Fatal(err)
		}
		c := index.Capture{URLKey: key, Time: p.at, URL: p.url, Type: warc.TypeResponse, Status: 200, MIME: "text/html",
			Digest: rec.Header.Get("WARC-Payload-Digest"), Segment: loc.Segment, Offset: loc.Offset, Length: loc.Length,
			RecordID: rec.ID()}
		if err := index.Put(b, c); err != nil {
			t.Fatal(err)
		}
		if _, found, err := index.ByDigest(b, c.Digest); err != nil {
			t.Fatal(err)
		} else if !found {
			if err := index.PutDigest(b, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return NewLocal(index.New(db), warcDir)
}

// servePeer serves h for cred on loopback behind a peer.Server.
func servePeer(t *testing.T, cred *admission.Credential, h http.Handler) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- peer.NewServer(cred, h, nil).Serve(ctx, ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// newTestNode archives pages and serves them; owns says which sites the
// node owns (nil: none).
func newTestNode(t *testing.T, netDir, name string, pages []page, owns func(site string) bool) *testNode {
	t.Helper()
	cred, err := admission.Admit(netDir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if owns == nil {
		owns = func(string) bool { return false }
	}
	n := &testNode{cred: &cred, local: archivePages(t, pages)}
	mux := http.NewServeMux()
	mux.Handle(Path, Handler(n.local, owns))
	n.addr, n.stop = servePeer(t, n.cred, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.calls.Add(1)
		mux.ServeHTTP(w, r)
	}))
	return n
}

func (n *testNode) node() Node { return Node{ID: n.cred.ID(), Addr: n.addr} }

func newNetworkDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sitePages returns captures of two URLs of host, each at two times.
func sitePages(host string, hour int) []page {
	var ps []page
	for i, path := range []string{"/", "/about"} {
		for k := range 2 {
			at := t0.Add(time.Duration(hour+10*k+i) * time.Hour)
			ps = append(ps, page{url: "http://" + host + path, at: at, body: fmt.Sprintf("%s%s at %s", host, path, at)})
		}
	}
	return ps
}

// cluster is three nodes: node i owns sites[i]. Besides its own sites,
// node 1 holds a capture of a.test, which it owned before, and node 2 a
// replica of one of node 0's captures (replicaID: the same record).
type cluster struct {
	answerTimeout time.Duration // of the Networks network makes (0: the default)
	dir           string        // the network's admission directory
	nodes         []*testNode
	owners        map[string]int // site → node
	stale         page           // a.test's capture on node 1
	net           *Network       // as node 0 sees the network
	client        *peer.Client
}

var sites = [][]string{{"a.test", "d.test"}, {"b.test", "e.test"}, {"c.test", "f.test"}}

// replicaID is the record ID of the capture of node 0's that node 2 holds
// a copy of.
const replicaID = "<urn:uuid:00000000-0000-4000-8000-00000000a7e5>"

func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir := newNetworkDir(t)
	cl := &cluster{dir: dir, owners: map[string]int{}}
	cl.stale = page{url: "http://a.test/", at: t0.Add(-time.Hour), body: "a.test before the move"}
	for i, hosts := range sites {
		var pages []page
		for j, h := range hosts {
			pages = append(pages, sitePages(h, i+3*j)...)
			cl.owners[urlkey.Site("http://"+h+"/")] = i
		}
		switch i {
		case 0:
			pages[0].id = replicaID
		case 1:
			pages = append(pages, cl.stale)
		case 2:
			replica := sitePages("a.test", 0)[0]
			replica.id = replicaID
			pages = append(pages, replica)
		}
		owns := func(site string) bool { j, ok := cl.owners[site]; return ok && j == i }
		cl.nodes = append(cl.nodes, newTestNode(t, dir, fmt.Sprintf("node%d", i), pages, owns))
	}
	cl.client = peer.NewClient(cl.nodes[0].cred)
	t.Cleanup(cl.client.Close)
	cl.net = cl.network(cl.nodes[0], nil)
	return cl
}

// network returns the network archive as self sees it, with members (all
// the cluster's nodes if nil).
func (cl *cluster) network(self *testNode, members []Node) *Network {
	if members == nil {
		for _, n := range cl.nodes {
			members = append(members, n.node())
		}
	}
	return NewNetwork(NetworkConfig{
		Local:  self.local,
		Self:   self.cred.ID(),
		Client: cl.client,
		Owner: func(site string) (string, string, bool) {
			i, ok := cl.owners[site]
			if !ok {
				return "", "", false
			}
			return cl.nodes[i].cred.ID(), cl.nodes[i].addr, true
		},
		Members:       func() []Node { return members },
		AnswerTimeout: cl.answerTimeout,
	})
}

// all returns what fn calls back with.
func all(t *testing.T, scan func(fn func(index.Capture) (bool, error)) error) []index.Capture {
	t.Helper()
	var got []index.Capture
	if err := scan(func(c index.Capture) (bool, error) {
		got = append(got, c)
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// held returns node i's captures in [lo, hi), tagged as node 0's network
// archive tags them.
func (cl *cluster) held(t *testing.T, i int, lo, hi string) []index.Capture {
	t.Helper()
	caps := all(t, func(fn func(index.Capture) (bool, error)) error {
		return cl.nodes[i].local.Range(context.Background(), lo, hi, false, fn)
	})
	for k := range caps {
		if i != 0 {
			caps[k].Node = cl.nodes[i].cred.ID()
		}
	}
	return caps
}

// union is every node's captures in [lo, hi) in index order, a capture
// held by several nodes given once, from the first.
func (cl *cluster) union(t *testing.T, lo, hi string) []index.Capture {
	t.Helper()
	var u []index.Capture
	for i := range cl.nodes {
		for _, c := range cl.held(t, i, lo, hi) {
			if !slices.ContainsFunc(u, func(o index.Capture) bool { return compareCaptures(o, c) == 0 }) {
				u = append(u, c)
			}
		}
	}
	slices.SortStableFunc(u, compareCaptures)
	return u
}

func keyOf(t *testing.T, u string) string {
	t.Helper()
	k, err := urlkey.SURT(u)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sameRecord(t *testing.T, got, want *warc.Record) {
	t.Helper()
	if !reflect.DeepEqual(got.Header.Fields(), want.Header.Fields()) || !bytes.Equal(got.Block, want.Block) {
		t.Errorf("record %s differs from the owner's own", want.ID())
	}
}

func TestCapturesFromOwner(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	for _, u := range []string{"http://b.test/about", "http://f.test/"} {
		key := keyOf(t, u)
		owner := cl.nodes[cl.owners[urlkey.SiteOfKey(key)]]
		want := all(t, func(fn func(index.Capture) (bool, error)) error {
			return owner.local.Captures(ctx, key, false, fn)
		})
		if len(want) != 2 {
			t.Fatalf("fixture: %d captures of %s", len(want), key)
		}
		for k := range want {
			want[k].Node = owner.cred.ID()
		}
		got := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Captures(ctx, key, false, fn) })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Captures(%s):\n got %+v\nwant %+v", key, got, want)
		}
		rev := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Captures(ctx, key, true, fn) })
		if !reflect.DeepEqual(rev, []index.Capture{want[1], want[0]}) {
			t.Errorf("Captures(%s, reverse): %+v", key, rev)
		}
		// A window holding only the later capture, to the nanosecond.
		between := all(t, func(fn func(index.Capture) (bool, error)) error {
			return cl.net.CapturesBetween(ctx, key, want[1].Time, want[1].Time, false, fn)
		})
		if !reflect.DeepEqual(between, want[1:]) {
			t.Errorf("CapturesBetween(%s, %s): %+v", key, want[1].Time, between)
		}
		for _, c := range got {
			rec, err := cl.net.Record(ctx, c)
			if err != nil {
				t.Fatalf("Record(%s %s): %v", c.URLKey, c.Timestamp14(), err)
			}
			own, err := owner.local.Record(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			sameRecord(t, rec, own)
			// The member travels byte for byte.
			m, _, err := cl.net.Member(ctx, c)
			if err != nil {
				t.Fatalf("Member(%s %s): %v", c.URLKey, c.Timestamp14(), err)
			}
			ownMember, _, err := owner.local.Member(ctx, c)
			if err != nil || !bytes.Equal(m, ownMember) {
				t.Errorf("Member(%s): %d bytes differ from the owner's %d (%v)", c.URLKey, len(m), len(ownMember), err)
			}
			// So does the warcinfo record its segment starts with.
			info, err := cl.net.Warcinfo(ctx, c)
			if err != nil {
				t.Fatalf("Warcinfo(%s): %v", c.Segment, err)
			}
			ownInfo, err := owner.local.Warcinfo(ctx, c)
			if err != nil || len(ownInfo) == 0 || !bytes.Equal(info, ownInfo) {
				t.Errorf("Warcinfo(%s): %d bytes, the owner's %d (%v)", c.Segment, len(info), len(ownInfo), err)
			}
		}
		// ByDigest asks the node the capture came from.
		o, ok, err := cl.net.ByDigest(ctx, got[1], got[1].Digest)
		if err != nil || !ok || o.Node != owner.cred.ID() || o.RecordID != got[1].RecordID {
			t.Errorf("ByDigest(%s): %+v, %v, %v", got[1].Digest, o, ok, err)
		}
		if _, ok, err := cl.net.ByDigest(ctx, got[1], "sha1:NOTHERE"); ok || err != nil {
			t.Errorf("ByDigest of an unknown digest: %v, %v", ok, err)
		}
	}
	if n := cl.nodes[0].calls.Load(); n != 0 {
		t.Errorf("node 0 answered %d peer requests for other nodes' sites", n)
	}

	// Its own sites node 0 answers itself, without a Node.
	key := keyOf(t, "http://d.test/")
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Captures(ctx, key, false, fn) })
	if len(got) != 2 || got[0].Node != "" {
		t.Errorf("Captures of an own key: %+v", got)
	}
	if _, err := cl.net.Record(ctx, got[0]); err != nil {
		t.Errorf("Record of an own capture: %v", err)
	}
	if n := cl.nodes[1].calls.Load() + cl.nodes[2].calls.Load(); n != 2*11 {
		// Per URL: Captures twice, CapturesBetween, Record, Member, Warcinfo and ByDigest twice each.
		t.Errorf("%d peer requests, want %d", n, 2*11)
	}
}

func TestRangeMerges(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	want := cl.union(t, "", "")
	if len(want) != 6*4+1 {
		t.Fatalf("fixture: %d captures in the union", len(want))
	}
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, "", "", false, fn) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Range over everything:\n got %+v\nwant %+v", got, want)
	}
	// The capture a.test's previous owner holds is merged in among the
	// owner's, and the replica on node 2 is given once, from node 0.
	aKey := keyOf(t, "http://a.test/")
	var a []index.Capture
	for _, c := range got {
		if c.URLKey == aKey {
			a = append(a, c)
		}
	}
	if len(a) != 3 || !a[0].Time.Equal(cl.stale.at) || a[0].Node != cl.nodes[1].cred.ID() || a[1].Node != "" || a[2].Node != "" {
		t.Errorf("captures of %s: %+v", aKey, a)
	}

	rev := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, "", "", true, fn) })
	slices.Reverse(want)
	if !reflect.DeepEqual(rev, want) {
		t.Errorf("Range reverse:\n got %+v\nwant %+v", rev, want)
	}

	// A range across sites, bounded both ways.
	lo, hi := "test,b)/about", "test,e)/about"
	sub := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, lo, hi, false, fn) })
	if w := cl.union(t, lo, hi); !reflect.DeepEqual(sub, w) || len(w) != 12 {
		t.Errorf("Range(%s, %s): %d captures, want %d", lo, hi, len(sub), len(w))
	}

	// Stopping early: fn returning false, and an error from fn.
	var first []index.Capture
	err := cl.net.Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		first = append(first, c)
		return len(first) < 7, nil
	})
	slices.Reverse(want)
	if err != nil || !reflect.DeepEqual(first, want[:7]) {
		t.Errorf("Range stopped after 7: %d captures, %v", len(first), err)
	}
	stop := errors.New("enough")
	n := 0
	err = cl.net.Range(ctx, "", "", true, func(index.Capture) (bool, error) { n++; return true, stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("Range with fn failing: %d calls, %v", n, err)
	}
	// The nodes are still fine after streams were abandoned.
	if again := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, "", "", false, fn) }); len(again) != len(want) {
		t.Errorf("Range after early stops: %d captures", len(again))
	}

	// An empty range asks nobody.
	before := cl.nodes[1].calls.Load() + cl.nodes[2].calls.Load()
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return cl.net.Range(ctx, "test,c", "test,b", false, fn)
	}); len(got) != 0 {
		t.Errorf("empty range: %d captures", len(got))
	}
	if after := cl.nodes[1].calls.Load() + cl.nodes[2].calls.Load(); after != before {
		t.Errorf("an empty range made %d requests", after-before)
	}
}

func TestRangeOneSite(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	// The keys of e.test: asked of its owner, node 1, only.
	lo, hi := "test,e)/", "test,e)0"
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, lo, hi, false, fn) })
	if want := cl.held(t, 1, lo, hi); len(want) != 4 || !reflect.DeepEqual(got, want) {
		t.Errorf("Range of one site: %+v, want %+v", got, want)
	}
	if c1, c2 := cl.nodes[1].calls.Load(), cl.nodes[2].calls.Load(); c1 != 1 || c2 != 0 {
		t.Errorf("Range of one site: %d and %d requests to nodes 1 and 2, want 1 and 0", c1, c2)
	}
	// A site's prefix of a single path, and a site of node 0's.
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return cl.net.Range(ctx, "test,e)/about", "test,e)/about\x01", true, fn)
	}); len(got) != 2 || got[0].Time.Before(got[1].Time) {
		t.Errorf("Range of one URL, reverse: %+v", got)
	}
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return cl.net.Range(ctx, "test,d)/", "test,d)0", false, fn)
	}); len(got) != 4 {
		t.Errorf("Range of an own site: %d captures", len(got))
	}
	if c1, c2 := cl.nodes[1].calls.Load(), cl.nodes[2].calls.Load(); c1 != 2 || c2 != 0 {
		t.Errorf("%d and %d requests to nodes 1 and 2, want 2 and 0", c1, c2)
	}
	for _, tc := range []struct {
		lo, hi string
		one    bool
	}{
		{"test,e)/", "test,e)0", true},
		{"test,e)/a", "test,e)/b", true},
		{"test,e)/", "test,e)1", false},
		{"test,e)/", "", false},
		{"test,e", "test,e)0", false},
		{"", "test,a)/", false},
	} {
		if _, one := oneSite(tc.lo, tc.hi); one != tc.one {
			t.Errorf("oneSite(%q, %q) = %v", tc.lo, tc.hi, one)
		}
	}
}

func TestUnavailable(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	key := keyOf(t, "http://c.test/")
	caps := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Captures(ctx, key, false, fn) })
	var live []index.Capture // what the nodes that stay up hold, each capture once
	for i := range 2 {
		for _, c := range cl.held(t, i, "", "") {
			if !slices.ContainsFunc(live, func(o index.Capture) bool { return compareCaptures(o, c) == 0 }) {
				live = append(live, c)
			}
		}
	}
	slices.SortStableFunc(live, compareCaptures)
	if len(live) == 0 {
		t.Fatal("fixture: nodes 0 and 1 hold nothing")
	}
	cl.nodes[2].stop()

	// Read whole, the range is read through from the nodes that answer;
	// the error says which did not.
	var gathered []index.Capture
	err := cl.net.Gather(ctx, "", "", false, func(c index.Capture) (bool, error) {
		c.Node = ""
		gathered = append(gathered, c)
		return true, nil
	})
	var partial *PartialError
	if !errors.As(err, &partial) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), cl.nodes[2].cred.ID()) {
		t.Errorf("Gather with a member stopped: %v; want a PartialError naming it", err)
	}
	for i := range live {
		live[i].Node = ""
	}
	if !reflect.DeepEqual(gathered, live) {
		t.Errorf("Gather with a member stopped gave %d captures, want the %d the others hold", len(gathered), len(live))
	}

	err = cl.net.Captures(ctx, key, false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), cl.nodes[2].cred.ID()) {
		t.Errorf("Captures from a stopped owner: %v", err)
	}
	// A range over several sites (a CDX prefix query) gives what the others
	// hold, as Gather does, and logs the node it could not ask.
	var log bytes.Buffer
	cl.net.log = slog.New(slog.NewTextHandler(&log, nil))
	ranged := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Range(ctx, "", "", false, fn) })
	for i := range ranged {
		ranged[i].Node = ""
	}
	if !reflect.DeepEqual(ranged, live) {
		t.Errorf("Range with a member stopped gave %d captures, want the %d the others hold", len(ranged), len(live))
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), cl.nodes[2].cred.ID()) {
		t.Errorf("the stopped member's failure not logged:\n%s", log.String())
	}
	if _, err := cl.net.Record(ctx, caps[0]); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Record from a stopped node: %v", err)
	}
	if _, _, err := cl.net.ByDigest(ctx, caps[0], caps[0].Digest); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ByDigest on a stopped node: %v", err)
	}
	// A node that is no longer a member, and a site nobody owns.
	gone := cl.network(cl.nodes[0], []Node{cl.nodes[0].node(), cl.nodes[1].node()})
	if _, err := gone.Record(ctx, caps[0]); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not a live member") {
		t.Errorf("Record from a departed node: %v", err)
	}
	err = cl.net.Captures(ctx, "org,nobody)/", false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Captures of an unowned site: %v", err)
	}
	// The caller's own cancellation is not the network's failure.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = cl.net.Captures(cctx, keyOf(t, "http://b.test/"), false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Errorf("Captures with a cancelled context: %v", err)
	}
}

// A node that is up but does not answer — no headers, or headers and then
// silence — is passed over after the answer timeout, not waited for: a
// whole-network listing is read through from the others.
func TestSilentNodeIsPassedOver(t *testing.T) {
	cl := newCluster(t)
	cl.answerTimeout = 300 * time.Millisecond
	want := cl.union(t, "", "")
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"no headers", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"headers, then silence", func(w http.ResponseWriter, r *http.Request) {
			ct := streamContentType
			if r.URL.Path == recordPath {
				ct = "application/octet-stream"
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	} {
		cred, err := admission.Admit(cl.dir, "silent-"+strings.NewReplacer(" ", "-", ",", "").Replace(tc.name), 0)
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := servePeer(t, &cred, tc.handler)
		var members []Node
		for _, n := range cl.nodes {
			members = append(members, n.node())
		}
		members = append(members, Node{ID: cred.ID(), Addr: addr})
		net := cl.network(cl.nodes[0], members)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // finds a hang
		var got []index.Capture
		err = net.Gather(ctx, "", "", false, func(c index.Capture) (bool, error) {
			c.Node = ""
			got = append(got, c)
			return true, nil
		})
		cancel()
		var partial *PartialError
		if !errors.As(err, &partial) || !strings.Contains(err.Error(), cred.ID()) || !strings.Contains(err.Error(), "no answer for") {
			t.Errorf("%s: Gather: %v; want a PartialError naming the silent node", tc.name, err)
		}
		for i := range want {
			want[i].Node = ""
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Gather gave %d captures, want the %d the others hold", tc.name, len(got), len(want))
		}
		c := want[0]
		c.Node = cred.ID()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		// The silent node's copy is given up on, and another node's read.
		if rec, err := net.Record(ctx, c); err != nil || rec.ID() != c.RecordID {
			t.Errorf("%s: Record of a capture the silent node holds, as others do: %v; want it read from another", tc.name, err)
		}
		cancel()
	}
}

// get sends a GET of path to node with c and returns the status and body.
func get(t *testing.T, c *peer.Client, n *testNode, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(context.Background(), n.addr, n.cred.ID(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestHandlerRequests(t *testing.T) {
	cl := newCluster(t)
	n := cl.nodes[1]
	caps := cl.held(t, 1, "", "")
	c := caps[0]
	seg := filepath.Join(n.local.dir, c.Segment)
	file, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.local.dir), "secret.warc.gz"), []byte("\x1f\x8bsecret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.warc.gz", filepath.Join(n.local.dir, "link.warc.gz")); err != nil {
		t.Fatal(err)
	}
	loc := func(segment string, off, length any) string {
		return recordPath + "?" + url.Values{"segment": {segment}, "offset": {fmt.Sprint(off)}, "length": {fmt.Sprint(length)}}.Encode()
	}
	status, body := get(t, cl.client, n, loc(c.Segment, c.Offset, c.Length))
	if status != http.StatusOK || !bytes.Equal(body, file[c.Offset:c.Offset+c.Length]) {
		t.Errorf("record: %d, %d bytes", status, len(body))
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{loc("../db/MANIFEST.warc.gz", 0, 10), http.StatusBadRequest},
		{loc("a/"+c.Segment, 0, 10), http.StatusBadRequest},
		{loc(`a\`+c.Segment, 0, 10), http.StatusBadRequest},
		{loc("/etc/passwd", 0, 10), http.StatusBadRequest},
		{loc(".warc.gz", 0, 10), http.StatusBadRequest},
		{loc(".hidden.warc.gz", 0, 10), http.StatusBadRequest},
		{loc("x..warc.gz", 0, 10), http.StatusBadRequest},
		{loc(strings.TrimSuffix(c.Segment, ".gz"), 0, 10), http.StatusBadRequest},
		{loc(c.Segment+"\x00", 0, 10), http.StatusBadRequest},
		{loc("", 0, 10), http.StatusBadRequest},
		{loc(c.Segment, -1, 10), http.StatusBadRequest},
		{loc(c.Segment, 0, 0), http.StatusBadRequest},
		{loc(c.Segment, 0, MaxRecordBytes+1), http.StatusBadRequest},
		{loc(c.Segment, "x", 10), http.StatusBadRequest},
		{loc(c.Segment, len(file)-5, 10), http.StatusBadRequest},
		{loc(c.Segment, c.Offset+1, 10), http.StatusBadRequest}, // not a gzip member's start
		{loc("waggle-19990101000000-00099.warc.gz", 0, 10), http.StatusNotFound},
		{loc("link.warc.gz", 0, 8), http.StatusNotFound}, // out of the WARC directory
		{loc(c.Segment, 0, 10) + "&offset=3", http.StatusBadRequest},
		{loc(c.Segment, 0, 10) + "&x=1", http.StatusBadRequest},
		{rangePath + "?key=test,b)/&lo=a", http.StatusBadRequest},
		{rangePath + "?key=", http.StatusBadRequest},
		{rangePath + "?lo=a&from=2024", http.StatusBadRequest},
		{rangePath + "?key=a&from=yesterday", http.StatusBadRequest},
		{rangePath + "?lo=a&reverse=maybe", http.StatusBadRequest},
		{rangePath + "?lo=a&limit=-1", http.StatusBadRequest},
		{rangePath + "?lo=a&lo=b", http.StatusBadRequest},
		{rangePath + "?lo=%zz", http.StatusBadRequest},
		{digestPath, http.StatusBadRequest},
		{warcinfoPath, http.StatusBadRequest},
		{warcinfoPath + "?segment=../db/MANIFEST.warc.gz", http.StatusBadRequest},
		{warcinfoPath + "?segment=" + c.Segment + "&segment=" + c.Segment, http.StatusBadRequest},
		{warcinfoPath + "?segment=" + c.Segment + "&offset=0", http.StatusBadRequest},
		{warcinfoPath + "?segment=waggle-19990101000000-00099.warc.gz", http.StatusNotFound},
		{warcinfoPath + "?segment=link.warc.gz", http.StatusNotFound},
		{Path + "nothing", http.StatusNotFound},
	} {
		if status, body := get(t, cl.client, n, tc.path); status != tc.want {
			t.Errorf("GET %s: %d %q; want %d", tc.path, status, body, tc.want)
		}
	}

	// limit bounds a stream, which still ends properly.
	status, body = get(t, cl.client, n, rangePath+"?lo=&limit=3")
	got, err := decodeAll(body)
	if status != http.StatusOK || !errors.Is(err, io.EOF) || len(got) != 3 {
		t.Errorf("range with limit 3: %d, %d captures, %v", status, len(got), err)
	}
	// A window in 14-digit timestamps: the to second is whole.
	key := keyOf(t, "http://b.test/")
	all := cl.held(t, 1, key+"\x00", key+"\x01")
	ts := all[1].Timestamp14()
	status, body = get(t, cl.client, n, rangePath+"?"+url.Values{"key": {key}, "from": {ts}, "to": {ts}}.Encode())
	if got, err := decodeAll(body); status != http.StatusOK || !errors.Is(err, io.EOF) || len(got) != 1 || !got[0].Time.Equal(all[1].Time) {
		t.Errorf("range of one second: %d, %+v, %v", status, got, err)
	}

	// Not through a peer server: refused.
	rec := httptest.NewRecorder()
	Handler(n.local, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, loc(c.Segment, c.Offset, c.Length), nil))
	if rec.Code != http.StatusForbidden {
		t.Errorf("request without a peer caller: %d, want 403", rec.Code)
	}
	// POST is not served.
	req, _ := http.NewRequest(http.MethodPost, rangePath, nil)
	resp, err := cl.client.Do(context.Background(), n.addr, n.cred.ID(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	// A TLS client without a certificate gets no answer at all.
	var p http.Protocols
	p.SetHTTP2(true)
	tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	defer tr.CloseIdleConnections()
	before := n.calls.Load()
	for _, path := range []string{loc(c.Segment, c.Offset, c.Length), rangePath + "?lo=", digestPath + "?d=" + url.QueryEscape(c.Digest)} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+n.addr+path, nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
			t.Errorf("GET %s without a client certificate: %s", path, resp.Status)
		}
	}
	if after := n.calls.Load(); after != before {
		t.Errorf("the handler ran %d times for a client without a certificate", after-before)
	}
}

func TestUntrustedPeer(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	cred, err := admission.Admit(cl.dir, "liar", 0)
	if err != nil {
		t.Fatal(err)
	}
	var answer atomic.Pointer[http.HandlerFunc]
	addr, _ := servePeer(t, &cred, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*answer.Load())(w, r) }))
	liar := Node{ID: cred.ID(), Addr: addr}
	const liarKey = "test,liar)/"
	net := NewNetwork(NetworkConfig{
		Local: cl.nodes[0].local, Self: cl.nodes[0].cred.ID(), Client: cl.client,
		Owner:   func(string) (string, string, bool) { return liar.ID, liar.Addr, true },
		Members: func() []Node { return []Node{cl.nodes[0].node(), liar} },
	})
	// Real captures and records of node 1, which the liar passes off as its own.
	src := cl.held(t, 1, "test,b)/\x00", "test,b)/\x01")
	good := slices.Clone(src)
	for k := range good {
		good[k].URLKey, good[k].Node = liarKey, liar.ID
	}
	stream := func(caps []index.Capture, tail func(*captureEncoder) error) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", streamContentType)
			w.Write(encodeStream(t, caps, tail))
		}
	}
	serve := func(h func(http.ResponseWriter, *http.Request)) { f := http.HandlerFunc(h); answer.Store(&f) }
	collect := func(scan func(fn func(index.Capture) (bool, error)) error) ([]index.Capture, error) {
		var got []index.Capture
		err := scan(func(c index.Capture) (bool, error) { got = append(got, c); return true, nil })
		return got, err
	}
	captures := func() ([]index.Capture, error) {
		return collect(func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, liarKey, false, fn) })
	}

	// The honest answer passes.
	serve(stream(good, nil))
	if got, err := captures(); err != nil || !reflect.DeepEqual(got, good) {
		t.Fatalf("honest answer: %+v, %v", got, err)
	}
	other := slices.Clone(good)
	other[1].URLKey = "test,liar)/other"
	cut := func(*captureEncoder) error { return nil }
	for name, h := range map[string]func(http.ResponseWriter, *http.Request){
		"out of order":   stream([]index.Capture{good[1], good[0]}, nil),
		"twice the same": stream([]index.Capture{good[0], good[0]}, nil),
		"another key":    stream(other, nil),
		"cut off":        stream(good, cut),
		"error frame":    stream(good[:1], func(e *captureEncoder) error { return e.fail("disk gone") }),
		"wrong count":    stream(good, func(e *captureEncoder) error { e.n = 9; return e.end() }),
		"garbage": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", streamContentType)
			w.Write([]byte("WGC\x01\x01\xff"))
		},
		"not a stream":   func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<html>hello</html>")) },
		"server error":   func(w http.ResponseWriter, _ *http.Request) { http.Error(w, strings.Repeat("no ", 1000), 500) },
		"nothing at all": func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Content-Type", streamContentType) },
	} {
		serve(h)
		if got, err := captures(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), liar.ID) {
			t.Errorf("%s: %d captures, %v; want ErrUnavailable", name, len(got), err)
		} else if len(err.Error()) > 1000 {
			t.Errorf("%s: an error of %d bytes", name, len(err.Error()))
		}
	}

	// A member failing in the middle of a merge is passed over: the merge
	// goes on with this node's captures.
	zz := index.Capture{URLKey: "test,zz)/", Time: t0, URL: "http://zz.test/"}
	serve(func(w http.ResponseWriter, r *http.Request) {
		q, _, err := parseQuery(r.URL.Query())
		if err != nil || q.byKey {
			t.Errorf("merge asked the liar %s", r.URL.RawQuery)
		}
		stream([]index.Capture{zz}, cut)(w, r)
	})
	mine := cl.held(t, 0, "", "")
	got, err := collect(func(fn func(index.Capture) (bool, error)) error { return net.Range(ctx, "", "", false, fn) })
	if err != nil || len(got) != len(mine)+1 || !reflect.DeepEqual(got[:len(mine)], mine) || got[len(mine)].URLKey != zz.URLKey {
		t.Errorf("Range with a member cut off after %s: %d captures (want this node's %d and that one), %v", zz.URLKey, len(got), len(mine), err)
	}
	// With no capture found anywhere, its failure is the answer.
	serve(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 500) })
	if got, err := collect(func(fn func(index.Capture) (bool, error)) error { return net.Range(ctx, "test,zy", "", false, fn) }); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), liar.ID) {
		t.Errorf("Range found nowhere with a member failing: %d captures, %v", len(got), err)
	}

	// ByDigest answers.
	serve(stream(good[:1], nil))
	if c, ok, err := net.ByDigest(ctx, good[0], good[0].Digest); err != nil || !ok || c.Node != liar.ID {
		t.Errorf("honest ByDigest: %+v, %v, %v", c, ok, err)
	}
	if _, _, err := net.ByDigest(ctx, good[0], "sha1:OTHER"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ByDigest answered with another digest's capture: %v", err)
	}
	serve(stream(good, nil))
	if _, _, err := net.ByDigest(ctx, good[0], good[0].Digest); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ByDigest answered with two captures: %v", err)
	}

	// Record answers.
	c := good[0]
	file, err := os.ReadFile(filepath.Join(cl.nodes[1].local.dir, c.Segment))
	if err != nil {
		t.Fatal(err)
	}
	member := file[c.Offset : c.Offset+c.Length]
	bytesAnswer := func(b []byte) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(b)
		}
	}
	// A record too large to read whole is read as a stream (OpenBlock), or
	// copied as it is read (CopyMember, for an export), and checked as it
	// is read: opening it, or reading it to its end with Check, and
	// copying it fail for every answer Record refuses.
	var copied bytes.Buffer
	streamed := func(c index.Capture) error {
		b, err := net.OpenBlock(ctx, c)
		if err != nil {
			return err
		}
		defer b.Close()
		if _, err = b.Check(); err != nil {
			return err
		}
		copied.Reset()
		h, start, err := net.CopyMember(ctx, c, &copied, 0)
		if err == nil && (h.Get("WARC-Record-ID") != b.Header.Get("WARC-Record-ID") || len(start) != 0) {
			t.Errorf("CopyMember of %s: header of record %s, %d bytes of block start", c.URL, h.Get("WARC-Record-ID"), len(start))
		}
		return err
	}
	serve(bytesAnswer(member))
	rec, err := net.Record(ctx, c)
	if err != nil {
		t.Fatalf("honest record: %v", err)
	}
	own, _ := cl.nodes[1].local.Record(ctx, src[0])
	sameRecord(t, rec, own)
	if err := streamed(c); err != nil {
		t.Fatalf("honest record, streamed: %v", err)
	}
	if !bytes.Equal(copied.Bytes(), member) {
		t.Errorf("CopyMember wrote %d bytes, not the %d of the member", copied.Len(), len(member))
	}
	// CopyMember of this node's own copy, the start of its block too.
	copied.Reset()
	ownCap := src[0]
	ownCap.Node = ""
	h, start, err := cl.nodes[1].local.CopyMember(ctx, ownCap, &copied, 10)
	if own0, _, _ := cl.nodes[1].local.Member(ctx, ownCap); err != nil || !bytes.Equal(copied.Bytes(), own0) || h.Get("WARC-Record-ID") != own.ID() || !bytes.Equal(start, own.Block[:10]) {
		t.Errorf("Local.CopyMember: %d bytes, record %s, start %q, %v; want the member of %s", copied.Len(), h.Get("WARC-Record-ID"), start, err, own.ID())
	}
	// A failure to write is this side's, not the peer's nor the record's.
	if _, _, err := net.CopyMember(ctx, c, failingWriter{}, 0); !errors.Is(err, ErrWrite) || errors.Is(err, ErrUnavailable) {
		t.Errorf("CopyMember to a writer that fails: %v; want ErrWrite, not blaming the peer", err)
	}
	if _, _, err := cl.nodes[1].local.CopyMember(ctx, ownCap, failingWriter{}, 0); !errors.Is(err, ErrWrite) {
		t.Errorf("Local.CopyMember to a writer that fails: %v; want ErrWrite", err)
	}
	// Nor is a local record read on for a reader gone.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := cl.nodes[1].local.CopyMember(gone, ownCap, io.Discard, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Local.CopyMember with its context cancelled: %v", err)
	}

	// The same record with a byte of its block changed, in a sound gzip member.
	zr, err := gzip.NewReader(bytes.NewReader(member))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	plain[len(plain)-5] ^= 1
	var damaged bytes.Buffer
	zw := gzip.NewWriter(&damaged)
	zw.Write(plain)
	zw.Close()
	serve(bytesAnswer(damaged.Bytes()))
	dc := c
	dc.Length = int64(damaged.Len())
	if _, err := net.Record(ctx, dc); !errors.Is(err, ErrUnavailable) || !errors.Is(err, warc.ErrDigestMismatch) {
		t.Errorf("record with a damaged block: %v", err)
	}
	if err := streamed(dc); !errors.Is(err, warc.ErrDigestMismatch) {
		t.Errorf("record with a damaged block, streamed: %v", err)
	}
	if _, _, err := net.CopyMember(ctx, dc, io.Discard, 0); !errors.Is(err, ErrUnavailable) || !errors.Is(err, warc.ErrDigestMismatch) {
		t.Errorf("record with a damaged block, copied: %v", err)
	}
	flipped := bytes.Clone(member)
	flipped[len(flipped)-6] ^= 0xff // in the CRC-32 trailer
	for name, tc := range map[string]struct {
		c    index.Capture
		body []byte
	}{
		"short":          {c, member[:len(member)/2]},
		"long":           {c, append(bytes.Clone(member), member...)},
		"bad CRC":        {c, flipped},
		"not gzip":       {c, bytes.Repeat([]byte("x"), int(c.Length))},
		"another record": {func() index.Capture { o := c; o.RecordID = "<urn:uuid:someone-else>"; return o }(), member},
	} {
		serve(bytesAnswer(tc.body))
		if _, err := net.Record(ctx, tc.c); !errors.Is(err, ErrUnavailable) {
			t.Errorf("record answer %s: %v", name, err)
		}
		if err := streamed(tc.c); err == nil {
			t.Errorf("record answer %s, streamed: no error", name)
		}
		if _, _, err := net.CopyMember(ctx, tc.c, io.Discard, 0); !errors.Is(err, ErrUnavailable) {
			t.Errorf("record answer %s, copied: %v", name, err)
		}
	}
	for _, length := range []int64{0, -1, MaxRecordBytes + 1} {
		lc := c
		lc.Length = length
		if _, err := net.Record(ctx, lc); err == nil {
			t.Errorf("Record with length %d: no error", length)
		}
	}
}

// Ensure a stream goes out before the scan ends: the handler flushes
// after the first capture, so a reader sees it while the rest is pending.
func TestStreamIsStreamed(t *testing.T) {
	pr, pw := io.Pipe()
	rec := &pipeWriter{header: http.Header{}, w: pw}
	release := make(chan struct{})
	go func() {
		stream(context.Background(), rec, 0, func(fn func(index.Capture) (bool, error)) error {
			fn(sampleCaptures()[0])
			<-release
			fn(sampleCaptures()[2])
			return nil
		})
		pw.Close()
	}()
	dec, err := newCaptureDecoder(bufio.NewReader(pr))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := dec.next(); err != nil || c.URLKey != sampleCaptures()[0].URLKey {
		t.Fatalf("first capture before the scan ended: %+v, %v", c, err)
	}
	close(release)
	if c, err := dec.next(); err != nil || c.URLKey != sampleCaptures()[2].URLKey {
		t.Fatalf("second capture: %+v, %v", c, err)
	}
	if _, err := dec.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

// pipeWriter is a ResponseWriter that passes each flush to a pipe.
type pipeWriter struct {
	header http.Header
	w      *io.PipeWriter
	buf    bytes.Buffer
}

func (p *pipeWriter) Header() http.Header         { return p.header }
func (p *pipeWriter) WriteHeader(int)             {}
func (p *pipeWriter) Write(b []byte) (int, error) { return p.buf.Write(b) }
func (p *pipeWriter) Flush() {
	p.w.Write(p.buf.Bytes())
	p.buf.Reset()
}

// movedCluster is the cluster with a fourth node, node 3, that holds
// nothing and now owns a.test: its captures are on node 0 (the previous
// owner), node 1 (an owner before that) and node 2 (a replica of one of
// node 0's). It returns the network as node 0 sees it, logging to log.
func movedCluster(t *testing.T, log *bytes.Buffer) (*cluster, *Network) {
	t.Helper()
	cl := newCluster(t)
	cl.nodes = append(cl.nodes, newTestNode(t, cl.dir, "node3", nil, nil))
	cl.owners[urlkey.Site("http://a.test/")] = 3
	n := cl.network(cl.nodes[0], nil)
	n.log = slog.New(slog.NewTextHandler(log, nil))
	return cl, n
}

// calls returns how many requests each node has answered.
func (cl *cluster) calls() []int64 {
	var c []int64
	for _, n := range cl.nodes {
		c = append(c, n.calls.Load())
	}
	return c
}

// Gather reads a one-site range whole, from every node, where Range takes
// the answer of an owner holding some captures as it stands.
func TestGather(t *testing.T) {
	var log bytes.Buffer
	cl, _ := movedCluster(t, &log)
	cl.owners[urlkey.Site("http://a.test/")] = 1 // holds one capture of the site; the others hold more
	net := cl.network(cl.nodes[0], nil)
	ctx := context.Background()
	lo, hi := "test,a)/", "test,a)0"
	want := cl.union(t, lo, hi)
	r := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Range(ctx, lo, hi, false, fn) })
	if len(r) == 0 || len(r) >= len(want) {
		t.Fatalf("fixture: Range from the owner gives %d of the %d captures the nodes hold; the test needs fewer", len(r), len(want))
	}
	g := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Gather(ctx, lo, hi, false, fn) })
	if !reflect.DeepEqual(g, want) {
		t.Errorf("Gather(%s, %s):\n got %+v\nwant %+v", lo, hi, g, want)
	}
	rev := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Gather(ctx, lo, hi, true, fn) })
	if len(rev) != len(want) || !reflect.DeepEqual(rev[0], want[len(want)-1]) {
		t.Errorf("Gather reversed: %+v", rev)
	}
}

func TestCapturesElsewhere(t *testing.T) {
	var log bytes.Buffer
	cl, net := movedCluster(t, &log)
	ctx := context.Background()
	key := keyOf(t, "http://a.test/")
	local := cl.held(t, 0, key, key+"\x01")
	if len(local) != 2 {
		t.Fatalf("fixture: node 0 holds %d captures of %s", len(local), key)
	}
	stale := cl.held(t, 1, key, key+"\x01")
	// Node 1's capture comes first in time; node 2's replica of local[0]
	// is given once, from node 0.
	want := []index.Capture{stale[0], local[0], local[1]}

	got := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, key, false, fn) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Captures(%s) with an empty owner:\n got %+v\nwant %+v", key, got, want)
	}
	if c := cl.calls(); !slices.Equal(c, []int64{0, 1, 1, 1}) {
		t.Errorf("requests to each node: %v, want [0 1 1 1]", c)
	}
	rev := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, key, true, fn) })
	if !reflect.DeepEqual(rev, []index.Capture{want[2], want[1], want[0]}) {
		t.Errorf("Captures(%s, reverse): %+v", key, rev)
	}
	between := all(t, func(fn func(index.Capture) (bool, error)) error {
		return net.CapturesBetween(ctx, key, cl.stale.at, cl.stale.at, false, fn)
	})
	if len(between) != 1 || between[0].Node != cl.nodes[1].cred.ID() || !between[0].Time.Equal(cl.stale.at) {
		t.Fatalf("CapturesBetween of the stale capture: %+v", between)
	}
	rec, err := net.Record(ctx, between[0])
	if err != nil {
		t.Fatal(err)
	}
	if own, err := cl.nodes[1].local.Record(ctx, between[0]); err != nil {
		t.Fatal(err)
	} else {
		sameRecord(t, rec, own)
	}
	// Stopping early stops every stream, and the nodes are fine after.
	n := 0
	if err := net.Captures(ctx, key, false, func(index.Capture) (bool, error) { n++; return false, nil }); err != nil || n != 1 {
		t.Errorf("Captures stopped after one: %d calls, %v", n, err)
	}
	stop := errors.New("enough")
	if err := net.Captures(ctx, key, true, func(index.Capture) (bool, error) { return true, stop }); !errors.Is(err, stop) {
		t.Errorf("Captures with fn failing: %v", err)
	}

	// A one-site range merges what the other nodes hold.
	lo, hi := "test,a)/", "test,a)0"
	r := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Range(ctx, lo, hi, false, fn) })
	if w := cl.union(t, lo, hi); len(w) != 5 || !reflect.DeepEqual(r, w) {
		t.Errorf("Range of a moved site:\n got %+v\nwant %+v", r, w)
	}

	// A URL nobody holds: every node answers nothing, and so does Captures.
	before := cl.calls()
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return net.Captures(ctx, keyOf(t, "http://a.test/nothing"), false, fn)
	}); len(got) != 0 {
		t.Errorf("Captures of an unarchived URL: %+v", got)
	}
	if after := cl.calls(); after[1]-before[1] != 1 || after[2]-before[2] != 1 || after[3]-before[3] != 1 {
		t.Errorf("requests for an unarchived URL: %v then %v", before, after)
	}

	// An owner that holds captures is the only node asked, local or remote.
	before = cl.calls()
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return net.Captures(ctx, keyOf(t, "http://e.test/"), false, fn)
	}); len(got) != 2 || got[0].Node != cl.nodes[1].cred.ID() {
		t.Errorf("Captures from a remote owner: %+v", got)
	}
	if got := all(t, func(fn func(index.Capture) (bool, error)) error {
		return net.Range(ctx, "test,d)/", "test,d)0", false, fn)
	}); len(got) != 4 || got[0].Node != "" {
		t.Errorf("Range of an own site: %+v", got)
	}
	if after := cl.calls(); after[0] != before[0] || after[1]-before[1] != 1 || after[2] != before[2] || after[3] != before[3] {
		t.Errorf("requests with owners holding captures: %v then %v", before, after)
	}

	if log.Len() != 0 {
		t.Errorf("logged with every node up:\n%s", log.String())
	}
}

func TestCapturesElsewhereOwnSite(t *testing.T) {
	// b.test moves to node 0, which holds none of its captures yet.
	cl := newCluster(t)
	cl.owners[urlkey.Site("http://b.test/")] = 0
	ctx := context.Background()
	key := keyOf(t, "http://b.test/about")
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return cl.net.Captures(ctx, key, false, fn) })
	if want := cl.held(t, 1, key, key+"\x01"); len(want) != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("Captures(%s) from the previous owner:\n got %+v\nwant %+v", key, got, want)
	}
	if c := cl.calls(); !slices.Equal(c, []int64{0, 1, 1}) {
		t.Errorf("requests to each node: %v, want [0 1 1]", c)
	}
}

func TestCapturesElsewhereUnavailable(t *testing.T) {
	var log bytes.Buffer
	cl, net := movedCluster(t, &log)
	ctx := context.Background()
	key := keyOf(t, "http://a.test/")
	nothing := keyOf(t, "http://a.test/nothing")
	id := func(i int) string { return cl.nodes[i].cred.ID() }

	// Owner up with nothing, node 1 down: what nodes 0 and 2 hold is
	// given, node 1's failure logged.
	cl.nodes[1].stop()
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, key, false, fn) })
	if len(got) != 2 || got[0].Node != "" || got[1].Node != "" {
		t.Errorf("Captures with a holder down: %+v", got)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), id(1)) {
		t.Errorf("node 1's failure not logged:\n%s", log.String())
	}
	// ... but with nothing found, node 1 might hold the captures.
	err := net.Captures(ctx, nothing, false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), id(1)) {
		t.Errorf("Captures found nowhere with node 1 down: %v", err)
	}

	// Owner down: the others' captures are found.
	cl.nodes[3].stop()
	log.Reset()
	r := all(t, func(fn func(index.Capture) (bool, error)) error {
		return net.Range(ctx, "test,a)/", "test,a)0", true, fn)
	})
	if len(r) != 4 || r[0].URLKey != keyOf(t, "http://a.test/about") || r[3].URLKey != key {
		t.Errorf("Range of a site with its owner down: %+v", r)
	}
	if !strings.Contains(log.String(), id(3)) {
		t.Errorf("the owner's failure not logged:\n%s", log.String())
	}
	// Owner down and nobody has any: the owner's failure.
	err = net.Captures(ctx, nothing, false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), id(3)) {
		t.Errorf("Captures found nowhere with the owner down: %v", err)
	}
	err = net.CapturesBetween(ctx, key, t0.Add(100*time.Hour), time.Time{}, false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), id(3)) {
		t.Errorf("CapturesBetween found nowhere with the owner down: %v", err)
	}
}

func TestCapturesElsewherePartial(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	cred, err := admission.Admit(cl.dir, "flaky", 0)
	if err != nil {
		t.Fatal(err)
	}
	var answer atomic.Pointer[[]byte]
	addr, _ := servePeer(t, &cred, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", streamContentType)
		w.Write(*answer.Load())
	}))
	flaky := Node{ID: cred.ID(), Addr: addr}
	serve := func(caps []index.Capture, tail func(*captureEncoder) error) {
		b := encodeStream(t, caps, tail)
		answer.Store(&b)
	}
	fail := func(e *captureEncoder) error { return e.fail("disk gone") }
	// b.test moves to node 0, which has none of its captures; node 1 has
	// them, and the flaky node some.
	cl.owners[urlkey.Site("http://b.test/")] = 0
	key := keyOf(t, "http://b.test/")
	held := cl.held(t, 1, key, key+"\x01")
	var log bytes.Buffer
	net := cl.network(cl.nodes[0], []Node{cl.nodes[0].node(), flaky, cl.nodes[1].node()})
	net.log = slog.New(slog.NewTextHandler(&log, nil))

	// The flaky node gives the later capture, then fails: the merge goes on
	// without it, and the capture it gave is not given again from node 1.
	serve(held[1:], fail)
	got := all(t, func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, key, false, fn) })
	if len(got) != 2 || got[0] != held[0] || got[1].Node != flaky.ID || !got[1].Time.Equal(held[1].Time) {
		t.Errorf("Captures with a node failing midway: %+v", got)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), flaky.ID) {
		t.Errorf("the flaky node's failure not logged:\n%s", log.String())
	}
	// Failing before its first capture, likewise.
	serve(nil, fail)
	got = all(t, func(fn func(index.Capture) (bool, error)) error { return net.Captures(ctx, key, true, fn) })
	if !reflect.DeepEqual(got, []index.Capture{held[1], held[0]}) {
		t.Errorf("Captures with a node failing at once: %+v", got)
	}
	// With nothing found elsewhere, the failure is the answer.
	alone := cl.network(cl.nodes[0], []Node{cl.nodes[0].node(), flaky})
	err = alone.Captures(ctx, key, false, func(index.Capture) (bool, error) { return true, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), flaky.ID) {
		t.Errorf("Captures found nowhere with a node failing: %v", err)
	}
}

// Replay reads another node's record with OpenBlock (and Block.Record or
// Check): it refuses what Record refuses — a record not in a gzip member,
// a member followed by other bytes.
func TestStreamRefusesWhatRecordRefuses(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	cred, err := admission.Admit(cl.dir, "liar", 0)
	if err != nil {
		t.Fatal(err)
	}
	var body atomic.Pointer[[]byte]
	addr, _ := servePeer(t, &cred, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(*body.Load())
	}))
	liar := Node{ID: cred.ID(), Addr: addr}
	net := NewNetwork(NetworkConfig{
		Local: cl.nodes[0].local, Self: cl.nodes[0].cred.ID(), Client: cl.client,
		Owner:   func(string) (string, string, bool) { return liar.ID, liar.Addr, true },
		Members: func() []Node { return []Node{cl.nodes[0].node(), liar} },
	})
	src := cl.held(t, 1, "test,b)/\x00", "test,b)/\x01")
	c := slices.Clone(src)[0]
	c.Node = liar.ID
	file, err := os.ReadFile(filepath.Join(cl.nodes[1].local.dir, c.Segment))
	if err != nil {
		t.Fatal(err)
	}
	member := file[c.Offset : c.Offset+c.Length]
	zr, _ := gzip.NewReader(bytes.NewReader(member))
	plain, _ := io.ReadAll(zr)
	for name, tc := range map[string]struct {
		length int64
		body   []byte
	}{
		"record not gzipped":      {int64(len(plain)), plain},
		"member then other bytes": {c.Length + 100, append(bytes.Clone(member), bytes.Repeat([]byte{0}, 100)...)},
	} {
		b := tc.body
		body.Store(&b)
		cc := c
		cc.Length = tc.length
		_, rerr := net.Record(ctx, cc)
		var serr error
		blk, err := net.OpenBlock(ctx, cc)
		if err == nil {
			_, serr = blk.Record()
			blk.Close()
		} else {
			serr = err
		}
		_, _, cerr := net.CopyMember(ctx, cc, io.Discard, 0)
		if rerr == nil || serr == nil || cerr == nil {
			t.Errorf("%s: Record: %v; OpenBlock and Block.Record: %v; CopyMember: %v; want all refused", name, rerr, serr, cerr)
		}
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }
