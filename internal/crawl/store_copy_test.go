package crawl

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Every 404 page of a site has the same body, so all but the first are
// identical-payload revisit records with status 404, carrying the error
// page's ETag and Last-Modified. The fetching node drops those validators
// (noteVisit: only a whole 2xx capture makes a revisit conditional), and
// so does a node that receives the capture as a copy (replication,
// anti-entropy, hand-over): its re-crawl sends no 404's validators.
func TestCopiedErrorRevisitGivesNoValidators(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"error-page"`)
		w.Header().Set("Last-Modified", "Wed, 01 Jan 2020 00:00:00 GMT")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "<html><body><h1>Not found</h1><p>The page you asked for is not here.</p></body></html>")
	}))
	defer srv.Close()
	a, b := srv.URL+"/a-missing", srv.URL+"/b-missing"
	src, caps, copyOf := crawledOneByOne(t, a, b)
	var copies []Copy
	for _, u := range []string{a, b} {
		for _, cp := range caps[u] {
			copies = append(copies, copyOf(cp))
		}
	}
	if bc := caps[b]; len(bc) != 1 || bc[0].Type != warc.TypeRevisit || bc[0].Status != http.StatusNotFound {
		t.Fatalf("captures of %s: %+v; want one 404 revisit", b, bc)
	}

	srcDB, err := OpenDB(src.Data)
	if err != nil {
		t.Fatal(err)
	}
	se, _, _ := recrawl.Get(srcDB, b)
	srcDB.Close()

	dst := directConfig(t)
	storeCopies(t, dst, copies...)
	dstDB, err := OpenDB(dst.Data)
	if err != nil {
		t.Fatal(err)
	}
	de, ok, err := recrawl.Get(dstDB, b)
	dstDB.Close()
	if err != nil || !ok {
		t.Fatalf("no entry for the copy of %s (%v)", b, err)
	}
	if de.ETag != se.ETag || de.LastModified != se.LastModified {
		t.Errorf("%s (a 404): the fetching node's entry has validators %q %q, the copy's %q %q",
			b, se.ETag, se.LastModified, de.ETag, de.LastModified)
	}

	mu.Lock()
	asked = map[string][]string{}
	mu.Unlock()
	all := dst
	all.RecrawlAll = true
	runCrawl(t, all)
	mu.Lock()
	defer mu.Unlock()
	for _, inm := range asked["/b-missing"] {
		if inm != "" {
			t.Errorf("the holder of the copy re-crawled /b-missing, whose last capture was a 404, with If-None-Match %q", inm)
		}
	}
}

// A revisit has no text to hash: a node that stores a copy of one gives it
// its original's SimHash when it holds the original and that has one, and
// otherwise the one the owner sent, so that every replica collapses
// near-duplicates alike.
func TestCopiedRevisitKeepsSimHash(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusNotFound)
		}
		io.WriteString(w, "<html><body><h1>Mirror</h1><p>The same page served at two addresses of the site.</p></body></html>")
	}))
	defer srv.Close()
	a, b := srv.URL+"/a", srv.URL+"/b"
	_, caps, copyOf := crawledOneByOne(t, a, b)
	if len(caps[a]) != 1 || len(caps[b]) != 1 || caps[b][0].Type != warc.TypeRevisit || caps[b][0].SimHash == 0 ||
		caps[b][0].SimHash != caps[a][0].SimHash {
		t.Fatalf("captures %+v and %+v; want a page and a revisit of it with its SimHash", caps[a], caps[b])
	}
	stored := func(copies ...Copy) index.Capture {
		t.Helper()
		dst := testConfig(t, "")
		storeCopies(t, dst, copies...)
		got := archived(t, dst.Data)[b]
		if len(got) != 1 {
			t.Fatalf("the copy of %s stored as %+v", b, got)
		}
		return got[0]
	}
	want := caps[b][0].SimHash
	if got := stored(copyOf(caps[b][0])); got.SimHash != want {
		t.Errorf("a revisit copied without its original has SimHash %016x, the owner's %016x", got.SimHash, want)
	}
	// The original held here outweighs what the owner says.
	wrong := caps[b][0]
	wrong.SimHash = ^want
	if got := stored(copyOf(caps[a][0]), copyOf(wrong)); got.SimHash != want {
		t.Errorf("a revisit copied with its original has SimHash %016x, the original's %016x", got.SimHash, want)
	}

	// An original without one (an error page with the same body) does not
	// outweigh the owner's.
	gone, page := srv.URL+"/gone", srv.URL+"/page"
	_, caps, copyOf = crawledOneByOne(t, gone, page)
	if len(caps[gone]) != 1 || caps[gone][0].SimHash != 0 || len(caps[page]) != 1 || caps[page][0].Type != warc.TypeRevisit || caps[page][0].SimHash == 0 {
		t.Fatalf("captures %+v and %+v; want a 404 without SimHash and a revisit of it with one", caps[gone], caps[page])
	}
	dst := testConfig(t, "")
	storeCopies(t, dst, copyOf(caps[gone][0]), copyOf(caps[page][0]))
	if got := archived(t, dst.Data)[page]; len(got) != 1 || got[0].SimHash != caps[page][0].SimHash {
		t.Errorf("a revisit copied with a 404 original: %+v, want the owner's SimHash %016x", got, caps[page][0].SimHash)
	}
}

// crawledOneByOne crawls each of urls in a run of its own, robots.txt
// ignored, and returns the crawl's configuration, what it archived (by
// URL), and a function that makes a capture's copy as replication sends it.
func crawledOneByOne(t *testing.T, urls ...string) (Config, map[string][]index.Capture, func(index.Capture) Copy) {
	t.Helper()
	src := directConfig(t)
	for _, u := range urls {
		src.Seeds = []string{u}
		runCrawl(t, src)
	}
	srcDir := filepath.Join(src.Data, "warc")
	return src, archived(t, src.Data), func(cp index.Capture) Copy {
		return captureCopy(t, srcDir, cp)
	}
}

// captureCopy is the copy of capture cp, whose record is in the WARC
// directory dir, as replication sends it.
func captureCopy(t *testing.T, dir string, cp index.Capture) Copy {
	t.Helper()
	return Copy{Member: member(t, dir, warc.Location{Segment: cp.Segment, Offset: cp.Offset, Length: cp.Length}), Capture: &cp}
}
