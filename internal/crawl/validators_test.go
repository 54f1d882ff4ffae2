package crawl

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/warc"
)

// versionedPage serves /page in the version set, with that version's ETag
// and a Last-Modified that never moves, as a CMS does that bumps the ETag
// with the content but not the date. It answers 304 to any request whose
// If-Modified-Since is that date, whatever its If-None-Match: a server
// that judges by the date alone.
type versionedPage struct {
	mu      sync.Mutex
	etag    string
	body    string
	always  bool        // answer 304 to every request after the first, as a broken cache does
	matched []string    // If-None-Match of every request
	at      []time.Time // when each came
}

const fixedDate = "Mon, 02 Jan 2006 15:04:05 GMT"

func (p *versionedPage) set(etag, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.etag, p.body = etag, body
}

func (p *versionedPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/page" {
		http.NotFound(w, r)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.matched = append(p.matched, r.Header.Get("If-None-Match"))
	p.at = append(p.at, time.Now())
	w.Header().Set("ETag", p.etag)
	w.Header().Set("Last-Modified", fixedDate)
	w.Header().Set("Content-Type", "text/html")
	if r.Header.Get("If-Modified-Since") == fixedDate || p.always && len(p.at) > 1 {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	io.WriteString(w, p.body)
}

// A 304 that names another ETag than the one sent does not say the page is
// as it was (RFC 9111 §4.3.4): the page is fetched whole in the same visit,
// and its new version archived, not a revisit of the old one that would
// pair the old payload with the new ETag for good.
func TestNotModifiedNamingAnotherVersionIsFetchedWhole(t *testing.T) {
	v1 := `<html><body><p>The first version of the page, with words enough.</p></body></html>`
	v2 := `<html><body><p>The SECOND version of the page, with other words.</p></body></html>`
	p := &versionedPage{}
	p.set(`"v1"`, v1)
	caps, e, _ := recrawlPage(t, p, func() { p.set(`"v2"`, v2) }, func() {})
	pages := caps["/page"]
	if len(pages) != 3 {
		t.Fatalf("%d captures of /page; want 3", len(pages))
	}
	if pages[1].Type != warc.TypeResponse || pages[1].Digest == pages[0].Digest {
		t.Errorf("after the version changed, the capture is a %s of digest %s (the first's %s); want the new version's response",
			pages[1].Type, pages[1].Digest, pages[0].Digest)
	}
	// The visit after that, answered by a 304 naming the version fetched,
	// is a revisit of it.
	if pages[2].Type != warc.TypeRevisit || pages[2].Status != http.StatusNotModified || pages[2].Digest != pages[1].Digest {
		t.Errorf("the third capture is a %s (%d) of %s; want a 304 revisit of %s", pages[2].Type, pages[2].Status, pages[2].Digest, pages[1].Digest)
	}
	if e.ETag != `"v2"` || e.Digest != pages[1].Digest {
		t.Errorf("the entry pairs ETag %s with digest %s; want \"v2\" with %s", e.ETag, e.Digest, pages[1].Digest)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	want := []string{"", `"v1"`, "", `"v2"`} // the second visit asked twice: conditionally, then whole
	if strings.Join(p.matched, " ") != strings.Join(want, " ") {
		t.Errorf("If-None-Match of the requests: %q; want %q", p.matched, want)
	}
}

// The request that fetches the page whole after such a 304 waits the
// host's delay, as the next request to the host would.
func TestRefetchAfterAContradicting304WaitsTheHostsDelay(t *testing.T) {
	p := &versionedPage{}
	p.set(`"v1"`, `<html><body><p>The first version.</p></body></html>`)
	srv := httptest.NewServer(p)
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/page")
	cfg.NoDelay, cfg.Delay = false, 300*time.Millisecond
	runCrawl(t, cfg)
	p.set(`"v2"`, `<html><body><p>The second version.</p></body></html>`)
	all := cfg
	all.Seeds, all.RecrawlAll = nil, true
	runCrawl(t, all)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.at) != 3 {
		t.Fatalf("%d requests; want the first crawl's, then a conditional one and the refetch", len(p.at))
	}
	if gap := p.at[2].Sub(p.at[1]); gap < cfg.Delay {
		t.Errorf("the refetch came %v after the conditional request; the host's delay is %v", gap, cfg.Delay)
	}
}

// A 304 to the unconditional refetch (a cache in the way that answers so
// to anything) archives nothing and teaches nothing: the page is tried
// again at its interval, not backed off as one that fails, and is still
// what its last capture was.
func TestNotModifiedToAnUnconditionalRequestIsNoVisit(t *testing.T) {
	p := &versionedPage{always: true}
	p.set(`"v1"`, `<html><body><p>The first version.</p></body></html>`)
	newETag := func() { p.set(`"v2"`, `<html><body><p>The second version.</p></body></html>`) }
	caps, e, _ := recrawlPage(t, p, newETag, newETag)
	pages := caps["/page"]
	def := schedule.DefaultPolicy().Default
	if len(pages) != 1 || e.Digest != pages[0].Digest || e.ETag != `"v1"` || e.State.Interval != def {
		t.Errorf("%d captures; entry digest %s, ETag %s, interval %v; want the first capture's, \"v1\" and %v",
			len(pages), e.Digest, e.ETag, e.State.Interval, def)
	}
}

func TestConfirms(t *testing.T) {
	sent := &recrawl.Entry{ETag: `"a1"`, LastModified: fixedDate}
	for _, c := range []struct {
		etag, lastModified string
		want               bool
	}{
		{"", "", true},
		{`"a1"`, "", true},
		{`W/"a1"`, "", true}, // a weak match is enough for a 304 (RFC 9110 §13.1.2)
		{`"a2"`, "", false},
		{`"a1"`, fixedDate, true},
		{"", "Sun, 01 Jan 2006 15:04:05 GMT", true},  // earlier: not modified since
		{"", "Tue, 03 Jan 2006 15:04:05 GMT", false}, // modified after the date sent
		{"", "yesterday", false},
	} {
		h := http.Header{}
		if c.etag != "" {
			h.Set("ETag", c.etag)
		}
		if c.lastModified != "" {
			h.Set("Last-Modified", c.lastModified)
		}
		if got := confirms(sent, h); got != c.want {
			t.Errorf("a 304 with ETag %q, Last-Modified %q after %q, %q: confirms %v; want %v", c.etag, c.lastModified, sent.ETag, sent.LastModified, got, c.want)
		}
	}
	// What was not sent cannot be contradicted.
	if !confirms(&recrawl.Entry{LastModified: fixedDate}, http.Header{"Etag": {`"new"`}}) {
		t.Error("a 304 that brings an ETag to a request without If-None-Match does not confirm it")
	}
}

// A hostile server's huge ETag is not kept: it would be read with every
// entry and sent back with every visit. The page is revisited all the same,
// compared by its payload.
func TestHugeValidatorsAreNotKept(t *testing.T) {
	big := `"` + strings.Repeat("x", 512<<10) + `"`
	var mu sync.Mutex
	var sent []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, len(r.Header.Get("If-None-Match")))
		mu.Unlock()
		w.Header().Set("ETag", big)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "a small page, the same at every visit")
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/page")
	runCrawl(t, cfg)
	all := cfg
	all.Seeds, all.RecrawlAll = nil, true
	if s := runCrawl(t, all); s.Unchanged != 1 {
		t.Errorf("the re-crawl found %d unchanged; want the page's revisit by its payload", s.Unchanged)
	}
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, _, err := recrawl.Get(db, srv.URL+"/page")
	if err != nil || len(e.ETag) > maxValidator {
		t.Errorf("the entry keeps an ETag of %d bytes (%v)", len(e.ETag), err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range sent {
		if n != 0 {
			t.Errorf("request %d sent an If-None-Match of %d bytes", i, n)
		}
	}
}
