package crawl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// networkDedup is a content-seen test whose answers the test sets: the
// capture the digests' owner names for any payload, or none, and the
// captures the network's archive holds besides it.
type networkDedup struct {
	mu      sync.Mutex
	ref     recrawl.Ref // zero: the owner knows of no such payload
	held    map[string]bool
	lookups int
	asked   [][]byte // the payload each lookup gave, for its holder to prove it has
	pending bool     // copies of this node's captures are still on their way
}

func (d *networkDedup) set(ref recrawl.Ref) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ref = ref
}

func (d *networkDedup) hold(ref recrawl.Ref, held bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held == nil {
		d.held = map[string]bool{}
	}
	d.held[ref.RecordID] = held
}

func (d *networkDedup) Holds(_ context.Context, _ string, ref recrawl.Ref) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held[ref.RecordID], nil
}

func (d *networkDedup) Lookup(_ context.Context, _ string, payload []byte) (recrawl.Ref, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	d.asked = append(d.asked, bytes.Clone(payload))
	return d.ref, d.ref.RecordID != "", nil
}

func (d *networkDedup) Stored([]index.Capture) {}
func (d *networkDedup) Replicated(index.Capture) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.pending
}

// A URL whose payload was first archived by another node is asked of the
// network again at each revisit. While the network holds it, the revisit
// points where the network says it is now; once it does not, the page is
// fetched without conditions and its payload stored, rather than pointing
// at a lost capture forever.
func TestRevisitDoesNotKeepPointingAtALostPayload(t *testing.T) {
	const body = "function shared() { return 'a payload first archived on another node'; }\n"
	var mu sync.Mutex
	var conditional []bool // per request: did it carry If-None-Match
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conditional = append(conditional, r.Header.Get("If-None-Match") != "")
		mu.Unlock()
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/javascript")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	u := srv.URL + "/lib.js"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	first := recrawl.Ref{URL: "http://other.example/lib.js", Time: at, RecordID: "<urn:uuid:00000000-0000-0000-0000-0000000000a1>"}
	again := recrawl.Ref{URL: "http://third.example/lib.js", Time: at.Add(time.Hour), RecordID: "<urn:uuid:00000000-0000-0000-0000-0000000000a2>"}
	d := &networkDedup{ref: first}
	cfg := directConfig(t, u)
	cfg.Dedup = d
	runCrawl(t, cfg)
	revisit := cfg
	revisit.Seeds, revisit.RecrawlAll = nil, true

	last := func() (index.Capture, *warc.Record) {
		t.Helper()
		caps := archived(t, cfg.Data)[u]
		c := caps[len(caps)-1]
		rec, err := warc.ReadAt(filepath.Join(cfg.Data, "warc"), warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
		if err != nil {
			t.Fatal(err)
		}
		return c, rec
	}
	if c, rec := last(); c.Type != warc.TypeRevisit || rec.Header.Get("WARC-Refers-To") != first.RecordID {
		t.Fatalf("first crawl: %s referring to %q, want a revisit of %s", c.Type, rec.Header.Get("WARC-Refers-To"), first.RecordID)
	}
	// The network was given the payload fetched, for the capture's
	// holder to prove it has those bytes before this one drops them.
	if len(d.asked) != 1 || string(d.asked[0]) != body {
		t.Fatalf("first crawl asked the network about payloads %q, want the one fetched", d.asked)
	}

	// The first capture was lost and the payload stored again elsewhere.
	d.set(again)
	runCrawl(t, revisit)
	if len(d.asked) != 2 || d.asked[1] != nil {
		t.Fatalf("a 304 gave the network payloads %q, want none after the first crawl's", d.asked)
	}
	c, rec := last()
	if c.Type != warc.TypeRevisit || rec.Header.Get("WARC-Profile") != warc.ProfileServerNotModified || rec.Header.Get("WARC-Refers-To") != again.RecordID {
		t.Fatalf("after the payload moved: %s (%s) referring to %q, want a not-modified revisit of %s",
			c.Type, rec.Header.Get("WARC-Profile"), rec.Header.Get("WARC-Refers-To"), again.RecordID)
	}

	// The owner lost its registry (a node failed), but the capture is
	// still archived: the revisit keeps pointing at it.
	d.set(recrawl.Ref{})
	d.hold(again, true)
	runCrawl(t, revisit)
	if c, rec := last(); c.Type != warc.TypeRevisit || rec.Header.Get("WARC-Refers-To") != again.RecordID {
		t.Fatalf("after the owner forgot the payload: %s referring to %q, want a revisit of %s, still archived",
			c.Type, rec.Header.Get("WARC-Refers-To"), again.RecordID)
	}

	// Now no node holds it.
	d.hold(again, false)
	runCrawl(t, revisit)
	if c, _ := last(); c.Type != warc.TypeResponse {
		t.Fatalf("after the payload was lost: %s, want the payload stored", c.Type)
	}
	mu.Lock()
	if want := []bool{false, true, true, false}; !slices.Equal(conditional, want) {
		t.Errorf("requests conditional: %v, want %v", conditional, want)
	}
	mu.Unlock()

	// Stored here, it is compared with as any payload of this node's.
	d.set(first)
	runCrawl(t, revisit)
	if c, rec := last(); c.Type != warc.TypeRevisit || rec.Header.Get("WARC-Refers-To") == first.RecordID {
		t.Fatalf("after the payload was stored here: %s referring to %q, want a revisit of this node's capture", c.Type, rec.Header.Get("WARC-Refers-To"))
	}
}

// A revisit whose payload this node holds as a copy is compared with it
// without asking the network, though the copy names its original to the
// microsecond (WARC-Refers-To-Date) and the index to the nanosecond.
func TestRevisitOfACopyComparesWithThePayloadHeldHere(t *testing.T) {
	const body = "function shared() { return 'one payload under two URLs, long enough'; }\n"
	var mu sync.Mutex
	conditional := map[string][]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conditional[r.URL.Path] = append(conditional[r.URL.Path], r.Header.Get("If-None-Match") != "")
		mu.Unlock()
		if notModified(w, r, `"`+r.URL.Path+`"`) {
			return
		}
		w.Header().Set("Content-Type", "application/javascript")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	src := directConfig(t, srv.URL+"/a", srv.URL+"/b")
	src.Workers = 1 // /b a revisit of /a
	runCrawl(t, src)
	srcDir := filepath.Join(src.Data, "warc")
	var copies []Copy
	for _, cs := range archived(t, src.Data) {
		for _, cp := range cs {
			copies = append(copies, captureCopy(t, srcDir, cp))
		}
	}
	if len(copies) != 2 {
		t.Fatalf("%d captures, want /a and /b", len(copies))
	}
	dst := directConfig(t)
	storeCopies(t, dst, copies...)
	mu.Lock()
	clear(conditional)
	mu.Unlock()
	d := &networkDedup{} // whose registry lost the payload's entry
	dst.Dedup, dst.RecrawlAll = d, true
	runCrawl(t, dst)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/a", "/b"} {
		if got := conditional[p]; len(got) != 1 || !got[0] {
			t.Errorf("%s: requests conditional %v, want one conditional request", p, got)
		}
	}
	if d.lookups != 0 {
		t.Errorf("%d lookups in the network for payloads this node holds", d.lookups)
	}
}

// A copy's index entry is its sender's word. A peer that pushes a
// well-formed response whose entry names the digest of another payload
// must not make this node drop that payload when it fetches it: the
// copy is stored, but stands for no payload in the digest index, so the
// fetch asks the network, whose holder must prove it has the bytes.
func TestCopyWithAnotherPayloadsDigestStandsForNothing(t *testing.T) {
	const script = "function vendor() { /* the script every site serves */ }\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/javascript")
		io.WriteString(w, script)
	}))
	defer srv.Close()
	u := srv.URL + "/vendor.js"
	cfg := directConfig(t, u)
	d := &networkDedup{}
	cfg.Dedup = d

	tmp := t.TempDir()
	w, err := warc.NewWriter(tmp, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forgedURL := "http://peer.example/x.js"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec, err := warc.NewResponse(forgedURL, at, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nX"))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := w.Write(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	key, err := urlkey.SURT(forgedURL)
	if err != nil {
		t.Fatal(err)
	}
	forged := index.Capture{URLKey: key, URL: forgedURL, Time: at, Type: warc.TypeResponse, Status: 200,
		Digest: warc.Digest([]byte(script)), RecordID: rec.ID(), Segment: loc.Segment, Offset: loc.Offset, Length: loc.Length}
	noSeeds := cfg
	noSeeds.Seeds = nil
	c, stop := running(t, noSeeds)
	if n, err := c.Store(context.Background(), []Copy{captureCopy(t, tmp, forged)}); err != nil || n != 1 {
		t.Fatalf("Store = %d, %v; want the copy stored", n, err)
	}
	stop()

	runCrawl(t, cfg)
	caps := archived(t, cfg.Data)[u]
	if len(caps) != 1 || caps[0].Type != warc.TypeResponse {
		t.Fatalf("captures of %s: %+v; want one response, the payload stored", u, caps)
	}
	if len(d.asked) != 1 || string(d.asked[0]) != script {
		t.Errorf("the network was asked about payloads %q, want the script once", d.asked)
	}
}

// On a network, a payload this node stored moments ago is on its disk
// alone until its copies reach the site's replicas. A revisit of another
// site, whose copies go to other nodes, must not point at it until then:
// were this node lost, those copies would point at nothing. A revisit of
// the same site may, for its copies follow the original's to the same
// nodes.
func TestRevisitOfAnotherSiteWaitsForTheOriginalsCopies(t *testing.T) {
	const body = "function shared() { return 'one payload served by two sites'; }\n"
	serve := func() *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/javascript")
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b, c := serve(), serve(), serve()
	d := &networkDedup{pending: true}
	cfg := directConfig(t, a.URL+"/lib.js")
	cfg.Dedup = d
	runCrawl(t, cfg)
	typeOf := func(u string) string {
		t.Helper()
		caps := archived(t, cfg.Data)[u]
		if len(caps) != 1 {
			t.Fatalf("%s: %d captures, want 1", u, len(caps))
		}
		return caps[0].Type
	}
	crawl := func(seed string) {
		t.Helper()
		next := cfg
		next.Seeds = []string{seed}
		runCrawl(t, next)
	}
	crawl(a.URL + "/copy.js")
	if got := typeOf(a.URL + "/copy.js"); got != warc.TypeRevisit {
		t.Errorf("a duplicate of the same site while the original's copies are on their way: %s, want a revisit", got)
	}
	crawl(b.URL + "/lib.js")
	if got := typeOf(b.URL + "/lib.js"); got != warc.TypeResponse {
		t.Errorf("a duplicate of another site while the original's copies are on their way: %s, want the payload stored", got)
	}
	d.mu.Lock()
	d.pending = false
	d.mu.Unlock()
	crawl(c.URL + "/lib.js")
	if got := typeOf(c.URL + "/lib.js"); got != warc.TypeRevisit {
		t.Errorf("a duplicate of another site once the copies arrived: %s, want a revisit", got)
	}
}

// A page that comes back whole and unchanged, whose last payload is on
// another node, has that node prove it has the payload before this one
// drops the bytes it holds: the network's index alone (the capture listed)
// is not enough, as for any payload met again.
func TestUnchangedPageOfAnotherNodesPayloadIsProven(t *testing.T) {
	const body = "function shared() { return 'a payload first archived on another node'; }\n"
	var mu sync.Mutex
	etag := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		etag++ // a new ETag at every answer: the page comes back whole
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, etag))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/javascript")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	u := srv.URL + "/lib.js"
	first := recrawl.Ref{URL: "http://other.example/lib.js", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), RecordID: "<urn:uuid:00000000-0000-0000-0000-0000000000b1>"}
	d := &networkDedup{ref: first}
	cfg := directConfig(t, u)
	cfg.Dedup = d
	runCrawl(t, cfg)
	if caps := archived(t, cfg.Data)[u]; len(caps) != 1 || caps[0].Type != warc.TypeRevisit {
		t.Fatalf("first crawl: %v, want one revisit of the other node's capture", caps)
	}
	// The registry no longer names a holder that proves it; the capture
	// is still listed in the network's index.
	d.set(recrawl.Ref{})
	d.hold(first, true)
	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	runCrawl(t, again)
	caps := archived(t, cfg.Data)[u]
	if c := caps[len(caps)-1]; c.Type != warc.TypeResponse {
		t.Errorf("an unchanged page whose payload no holder proved: %s, want the payload stored", c.Type)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.asked); n < 2 || string(d.asked[n-1]) != body {
		t.Errorf("the revisit asked the network with payloads %q, want the one fetched", d.asked)
	}
}
