package crawl

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// halfRouter pretends that another node owns every other site, and
// records what is routed to it.
type halfRouter struct {
	mine   map[string]bool // sites kept whatever their hash
	mu     sync.Mutex
	routed map[string]int
}

func (r *halfRouter) Owner(site string) string {
	h := fnv.New32a()
	h.Write([]byte(site))
	if h.Sum32()%2 == 0 && !r.mine[site] {
		return "peer"
	}
	return ""
}

func (r *halfRouter) Route(_ *pebble.Batch, _ string, items []frontier.Item) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		r.routed[it.URL]++
	}
	return nil
}

func (r *halfRouter) Handover(b *pebble.Batch, node string, items []frontier.Item) error {
	return r.Route(b, node, items)
}

func (r *halfRouter) Committed() {}

func (r *halfRouter) Idle() {}

func (r *halfRouter) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.routed
	r.routed = map[string]int{}
	return m
}

// A re-crawl asks the server for changes only: unchanged pages become
// revisit records (a 304 or an identical payload), changed pages are
// archived anew, and only links new on a changed page are routed again.
func TestRecrawl(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 20, Pages: 400})
	router := &halfRouter{mine: map[string]bool{}, routed: map[string]int{}}
	for _, s := range web.Seeds() {
		router.mine[urlkey.Site(s)] = true
	}
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	cfg.Router = router
	first := runCrawl(t, cfg)
	routedFirst := router.take()
	if first.New == 0 || len(routedFirst) == 0 {
		t.Fatalf("the first crawl archived %d and routed %d URLs", first.New, len(routedFirst))
	}
	firstCaps := archived(t, cfg.Data)

	// Nothing is due yet: the default schedule comes back in about a day.
	again := cfg
	again.Recrawl = true
	if s := runCrawl(t, again); s.RevisitsQueued != 0 || s.New != 0 {
		t.Errorf("a re-crawl right after the crawl queued %d and archived %d URLs; nothing is due", s.RevisitsQueued, s.New)
	}
	checkDue(t, cfg.Data, firstCaps)

	const step = 4
	web.SetVersion(step)
	changed := map[string]bool{}
	for _, u := range web.ChangedPages(0, step) {
		changed[u] = true
	}
	all := cfg
	all.RecrawlAll = true
	start := time.Now()
	s := runCrawl(t, all)
	t.Logf("first crawl: %d captures, %d B fetched, %d B stored; re-crawl: %d captures, %d B fetched, %d B stored, revisits: %d not-modified, %d unchanged, %d duplicate; %d pages changed",
		first.New, first.Bytes, first.Stored, s.New, s.Bytes, s.Stored, s.NotModified, s.Unchanged, s.Duplicates, len(changed))
	if s.RevisitsQueued == 0 || s.NotModified == 0 {
		t.Fatalf("re-crawl queued %d URLs and got %d 304s", s.RevisitsQueued, s.NotModified)
	}
	if s.Bytes*4 > first.Bytes {
		t.Errorf("the re-crawl fetched %d bytes, the first crawl %d: conditional GETs should save most", s.Bytes, first.Bytes)
	}
	for u, n := range router.take() {
		if routedFirst[u] > 0 {
			t.Errorf("%s was routed again by the re-crawl (%d times)", u, n)
		}
	}

	caps := archived(t, cfg.Data)
	verifyWARCs(t, cfg.Data, caps)
	seenChanged := 0
	for _, p := range web.Pages() {
		for _, c := range caps[p] {
			if c.Status == http.StatusOK && c.SimHash == 0 {
				t.Errorf("%s: an HTML page captured without SimHash", p)
			}
		}
		var fresh []index.Capture
		for _, c := range caps[p] {
			if !c.Time.Before(start) {
				fresh = append(fresh, c)
			}
		}
		if router.Owner(urlkey.Site(p)) != "" {
			continue // another node's page
		}
		if len(fresh) == 0 {
			// A page's revisits go to the URL replay lists it under, not
			// to a session-ID variant of it.
			t.Errorf("%s was not revisited under its own URL", p)
			continue
		}
		if len(fresh) > 1 {
			t.Errorf("%s: %d captures in one re-crawl", p, len(fresh))
		}
		c := fresh[0]
		switch {
		case changed[p] && c.Type != warc.TypeResponse:
			t.Errorf("%s changed but its re-crawl capture is a %s", p, c.Type)
		case changed[p]:
			seenChanged++
		case c.Type != warc.TypeRevisit || c.Status != http.StatusNotModified:
			t.Errorf("%s did not change but its re-crawl capture is a %s with status %d", p, c.Type, c.Status)
		default:
			checkRevisit(t, cfg.Data, caps, c)
			if last := firstCaps[p][len(firstCaps[p])-1]; c.SimHash != last.SimHash {
				t.Errorf("%s: the revisit has SimHash %x, the capture it repeats %x", p, c.SimHash, last.SimHash)
			}
		}
	}
	if seenChanged == 0 {
		t.Error("no changed page of this node's was re-archived")
	}

	// The schedule adapts: a page found changed comes back sooner than
	// the default day. One found unchanged keeps the day: seconds without
	// a change, long before it was due, say nothing of a day
	// (TestRecrawlContinuousAdapts sees unchanged pages visited on time
	// come back later).
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	def := schedule.DefaultPolicy().Default
	adapted := map[bool]int{}
	for _, p := range web.Pages() {
		e, ok, err := recrawl.Get(db, p)
		if err != nil || !ok || e.URL != p || e.State.Visits == 0 {
			continue // another node's, or not revisited
		}
		adapted[changed[p]]++
		if changed[p] && e.State.Interval >= def || !changed[p] && e.State.Interval != def {
			t.Errorf("%s (changed: %v) comes back after %v; the default is %v", p, changed[p], e.State.Interval, def)
		}
	}
	if adapted[true] == 0 || adapted[false] == 0 {
		t.Errorf("schedules checked: %d changed pages, %d unchanged", adapted[true], adapted[false])
	}
}

// checkRevisit checks that a revisit record points at a response record
// with its payload digest.
func checkRevisit(t *testing.T, data string, caps map[string][]index.Capture, c index.Capture) {
	t.Helper()
	dir := filepath.Join(data, "warc")
	rec, err := warc.ReadAt(dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
	if err != nil {
		t.Fatal(err)
	}
	want := warc.ProfileIdenticalPayload
	if c.Status == http.StatusNotModified {
		want = warc.ProfileServerNotModified
	}
	if p := rec.Header.Get("WARC-Profile"); p != want {
		t.Errorf("%s: revisit profile %q, want %q", c.URL, p, want)
	}
	target, id := rec.Header.Get("WARC-Refers-To-Target-URI"), rec.Header.Get("WARC-Refers-To")
	for _, o := range caps[target] {
		if o.RecordID == id {
			if o.Type != warc.TypeResponse || o.Digest != c.Digest || o.Digest != rec.Header.Get("WARC-Payload-Digest") {
				t.Errorf("%s: revisit refers to a %s of digest %s; its own digest is %s", c.URL, o.Type, o.Digest, c.Digest)
			}
			if when, err := warc.ParseDate(rec.Header.Get("WARC-Refers-To-Date")); err != nil || !when.Equal(o.Time.Truncate(time.Microsecond)) {
				t.Errorf("%s: WARC-Refers-To-Date %q, the original is of %s", c.URL, rec.Header.Get("WARC-Refers-To-Date"), o.Time)
			}
			return
		}
	}
	t.Errorf("%s: revisit refers to record %s of %s, which is not in the index", c.URL, id, target)
}

// checkDue checks that every URL archived has a re-crawl entry due in
// about a day, the default schedule.
func checkDue(t *testing.T, data string, caps map[string][]index.Capture) {
	t.Helper()
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	def := schedule.DefaultPolicy().Default
	for u, cs := range caps {
		if urlkey.Host(u) == "" || cs[0].URL != u || isRobots(u) {
			continue
		}
		e, ok, err := recrawl.Get(db, u)
		if err != nil || !ok {
			t.Errorf("%s: no re-crawl entry (%v)", u, err)
			continue
		}
		if wait := time.Until(e.Due); wait < def*8/10 || wait > def*11/10 {
			t.Errorf("%s is due in %v, want about %v", u, wait, def)
		}
	}
}

func isRobots(u string) bool { return len(u) > 11 && u[len(u)-11:] == "/robots.txt" }

// URLs come back as they fall due: a continuous crawl queues them on its
// own, and a URL that is revisited several times without a change is
// given a longer interval.
func TestRecrawlContinuousAdapts(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 9, Hosts: 3, Pages: 20})
	cfg := testConfig(t, srv.URL(), web.Seeds()[0])
	cfg.Scope = ScopeHost
	rule, err := recrawl.ParseRule("1s,1s,1h")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
	cfg.Continuous, cfg.Recrawl = true, true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx); done <- err }()
	seed := web.Seeds()[0]
	var e recrawl.Entry
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var ok bool
		if e, ok, err = recrawl.Get(c.db, seed); err != nil {
			t.Fatal(err)
		}
		if ok && e.State.Visits >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the seed was not revisited: %+v (stats %+v)", e, c.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatal(err)
	}
	s := c.Stats()
	c.Close()
	if s.NotModified == 0 {
		t.Errorf("no 304 in %d revisits", s.RevisitsQueued)
	}
	if e.State.Changes != 0 || e.State.Interval <= time.Second {
		t.Errorf("an unchanged page after %d visits: %d changes, interval %v; want no change and an interval past the first", e.State.Visits, e.State.Changes, e.State.Interval)
	}
}

// URLs that differ by a session ID are one page with one schedule: the
// crawl fetches the variant it meets first, and its revisits go to that
// URL, which replay lists the page under.
func TestRecrawlKeepsFirstURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if notModified(w, r, `"v1"`) {
			return
		}
		io.WriteString(w, "<html><body><p>The same page whatever the session.</p></body></html>")
	}))
	defer srv.Close()
	plain := srv.URL + "/"
	variant := srv.URL + "/;jsessionid=0123456789ABCDEF0123456789ABCDEF"
	cfg := directConfig(t, plain, variant)
	runCrawl(t, cfg)
	all := cfg
	all.RecrawlAll = true
	if s := runCrawl(t, all); s.RevisitsQueued != 1 || s.NotModified != 1 {
		t.Errorf("the re-crawl queued %d URLs and got %d 304s; want one page, revisited once", s.RevisitsQueued, s.NotModified)
	}
	caps := archived(t, cfg.Data)
	if len(caps[plain]) != 2 || len(caps[variant]) != 0 {
		t.Errorf("captures: %d of %s, %d of %s; want a capture and its revisit under the first URL", len(caps[plain]), plain, len(caps[variant]), variant)
	}
}

// Only a 2xx capture as whole as the crawl's size limit allows makes a
// later fetch conditional: one cut at a lower limit would otherwise be kept
// for good by a 304, and an error page's validators say nothing of the
// page. A 304 to a request without
// validators is a failed fetch, not a capture.
func TestRecrawlTrustsOnlyWholeCaptures(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{} // path → If-None-Match of each request
	served := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-None-Match"))
		served[r.URL.Path]++
		n := served[r.URL.Path]
		mu.Unlock()
		switch r.URL.Path {
		case "/long":
			if notModified(w, r, `"t1"`) {
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("0123456789", 1000))
		case "/error":
			if notModified(w, r, `"e1"`) {
				return
			}
			http.Error(w, "try later", http.StatusServiceUnavailable)
		case "/always304":
			if n > 1 {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><a href="/long">long</a></body></html>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/long", srv.URL+"/error", srv.URL+"/always304")
	cfg.MaxBodySize = 2000
	runCrawl(t, cfg)
	before := archived(t, cfg.Data)
	truncated := func(c index.Capture) bool {
		rec, err := warc.ReadAt(filepath.Join(cfg.Data, "warc"), warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Header.Get("WARC-Truncated") != ""
	}
	if c := before[srv.URL+"/long"]; len(c) != 1 || !truncated(c[0]) {
		t.Fatalf("first crawl of /long: %+v; want one truncated capture", c)
	}

	all := cfg
	all.RecrawlAll = true
	all.MaxBodySize = 1 << 20
	s := runCrawl(t, all)
	mu.Lock()
	for _, p := range []string{"/long", "/error", "/always304"} {
		if got := asked[p]; len(got) != 2 || got[1] != "" {
			t.Errorf("%s: If-None-Match of each request %q; want none on the re-crawl", p, got)
		}
	}
	mu.Unlock()
	caps := archived(t, cfg.Data)
	if c := caps[srv.URL+"/long"]; len(c) != 2 || c[1].Type != warc.TypeResponse || truncated(c[1]) {
		t.Errorf("re-crawl of a truncated capture: %+v; want a whole response", c)
	}
	if c := caps[srv.URL+"/always304"]; len(c) != 1 || s.Errors != 1 {
		t.Errorf("/always304 has %d captures and the re-crawl %d errors; want its 304 counted as an error, not archived", len(c), s.Errors)
	}
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, srv.URL+"/always304")
	if err != nil || !ok || e.Digest != before[srv.URL+"/always304"][0].Digest || !e.HasLink(recrawl.LinkHash(srv.URL+"/long")) {
		t.Errorf("/always304's entry after an unsolicited 304: %+v (%v); want the first capture's digest and links", e, err)
	}
}

// A 304 describes no bytes of its own: a wrong Content-Type sent with it
// (as some servers do) is not the revisit's type, which is its original's.
func TestNotModifiedTakesItsOriginalsType(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"p1"` {
			// Written raw: net/http drops a 304's Content-Type.
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 304 Not Modified\r\nETag: \"p1\"\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
			buf.Flush()
			return
		}
		w.Header().Set("ETag", `"p1"`)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>steady</body></html>")
	}))
	defer srv.Close()
	u := srv.URL + "/p"
	cfg := directConfig(t, u)
	runCrawl(t, cfg)
	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	if s := runCrawl(t, again); s.NotModified != 1 {
		t.Fatalf("re-crawl: %d not-modified; want 1", s.NotModified)
	}
	if c := archived(t, cfg.Data)[u]; len(c) != 2 || c[1].Status != http.StatusNotModified || c[1].MIME != "text/html" {
		t.Errorf("captures %+v; want the 304 revisit indexed as text/html", c)
	}
}

// elsewhere says another node owns every site, and records what is
// handed over to it.
type elsewhere struct{ halfRouter }

func (r *elsewhere) Owner(string) string { return "peer" }

// A URL whose visit here captured nothing (refused by robots.txt) and
// whose site another node holds now is handed over to that node when it
// falls due: no copy of a capture brings the URL there, and its links are
// routed only once new. Captured URLs are not: their copies do.
func TestUncapturedURLOfAnotherNodesSiteIsHandedOver(t *testing.T) {
	var mu sync.Mutex
	fetched := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetched[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case "/":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><a href="/private">p</a> <a href="/a">a</a></body></html>`)
		default:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<html><body>a page</body></html>")
		}
	}))
	defer srv.Close()
	cfg := testConfig(t, "", srv.URL+"/")
	if s := runCrawl(t, cfg); s.Robots != 1 {
		t.Fatalf("first crawl: %d URLs refused by robots.txt; want /private", s.Robots)
	}
	mu.Lock()
	before := maps.Clone(fetched)
	mu.Unlock()

	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	router := &elsewhere{halfRouter{routed: map[string]int{}}}
	again.Router = router
	runCrawl(t, again)
	if got := router.take(); len(got) != 1 || got[srv.URL+"/private"] != 1 {
		t.Errorf("handed over %v; want /private alone", got)
	}
	mu.Lock()
	if !maps.Equal(fetched, before) {
		t.Errorf("requests %v after the re-crawl, %v before; want none to a site another node holds", fetched, before)
	}
	mu.Unlock()
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, srv.URL+"/private")
	if err != nil || !ok || e.Due.IsZero() || e.Captured() {
		t.Errorf("/private's entry after the hand-over: %+v (%v); want it due again, capture-less", e, err)
	}
}

// A node leaving hands over each URL whose visit left no capture once,
// whatever their number: the crawler puts those it has handed over back in
// the due queue while the rest are queued, and captured entries are left
// as they are.
func TestHandOverUncapturedHandsEachOverOnce(t *testing.T) {
	const captured, uncaptured = 3000, 2*recrawlBatch + 100
	cfg := directConfig(t)
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	b := db.NewIndexedBatch()
	for i := range captured + uncaptured {
		u := fmt.Sprintf("http://h%d.test/p%d", i%50, i)
		e := recrawl.Entry{URL: u, Due: base.Add(time.Duration(i) * time.Second)}
		if i%3 == 0 && i/3 < captured {
			e.Payload = recrawl.Ref{URL: u, Time: base, RecordID: fmt.Sprintf("<urn:uuid:%d>", i)}
			e.Digest = "sha1:X"
		}
		if err := recrawl.Put(b, nil, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	db.Close()

	router := &elsewhere{halfRouter{routed: map[string]int{}}}
	cfg.Router = router
	c, stop := running(t, cfg)
	n, err := c.HandOverUncaptured(context.Background())
	if err != nil || n != uncaptured {
		t.Fatalf("HandOverUncaptured queued %d (%v); want %d", n, err, uncaptured)
	}
	for deadline := time.Now().Add(time.Minute); c.Stats().Queued > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	routed := router.take()
	more := 0
	for _, k := range routed {
		if k != 1 {
			more++
		}
	}
	if len(routed) != uncaptured || more != 0 {
		t.Errorf("%d URLs handed over, %d of them more than once; want each of the %d once", len(routed), more, uncaptured)
	}
	if s := c.Stats(); s.RevisitsQueued != 0 {
		t.Errorf("%d revisits counted queued; want none: the URLs were handed over, not revisited", s.RevisitsQueued)
	}
}

// A capture cut at the size limit is as much of the page as a crawl under
// that limit keeps: its revisits are conditional, and an unchanged body
// becomes a revisit record, not another cut copy at every visit (a large
// video, daily). A crawl under a higher limit fetches as far as that goes;
// a body cut short by a dropped connection is fetched again in full.
// A node that holds a copy of the cut capture revisits it the same way.
func TestRecrawlOfCaptureCutAtTheSizeLimit(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{} // path → If-None-Match of each request
	body := strings.Repeat("0123456789", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Content-Type", "video/mp4")
		switch r.URL.Path {
		case "/video":
			if notModified(w, r, `"v1"`) {
				return
			}
			io.WriteString(w, body)
		case "/no-validators":
			io.WriteString(w, strings.Repeat("abcdefghij", 1000)) // not the video's payload
		case "/dropped":
			if notModified(w, r, `"d1"`) {
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, body[:500])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	video, plain, dropped := srv.URL+"/video", srv.URL+"/no-validators", srv.URL+"/dropped"
	cfg := directConfig(t, video, plain, dropped)
	cfg.MaxBodySize = 2000
	runCrawl(t, cfg)
	first := archived(t, cfg.Data)
	truncation := func(data string, c index.Capture) string {
		rec, err := warc.ReadAt(filepath.Join(data, "warc"), warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Header.Get("WARC-Truncated")
	}
	for u, why := range map[string]string{video: "length", plain: "length", dropped: "disconnect"} {
		if c := first[u]; len(c) != 1 || truncation(cfg.Data, c[0]) != why {
			t.Fatalf("first crawl of %s: %+v; want one capture cut for %q", u, c, why)
		}
	}

	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	s := runCrawl(t, again)
	caps := archived(t, cfg.Data)
	if c := caps[video]; len(c) != 2 || c[1].Type != warc.TypeRevisit || c[1].Digest != c[0].Digest {
		t.Errorf("re-crawl of the cut video under the same limit: %+v; want a revisit of the first capture", c)
	}
	if c := caps[plain]; len(c) != 2 || c[1].Type != warc.TypeRevisit || c[1].Digest != c[0].Digest {
		t.Errorf("re-crawl of the same cut body without validators: %+v; want an identical-payload revisit", c)
	}
	if s.NotModified != 1 || s.Unchanged != 1 {
		t.Errorf("re-crawl counted %d not-modified, %d unchanged; want 1 and 1", s.NotModified, s.Unchanged)
	}
	mu.Lock()
	if got := asked["/video"]; len(got) != 2 || got[1] != `"v1"` {
		t.Errorf("/video: If-None-Match of each request %q; want the first capture's on the re-crawl", got)
	}
	if got := asked["/dropped"]; len(got) < 2 || got[len(got)-1] != "" {
		t.Errorf("/dropped: If-None-Match of each request %q; want none for a body cut short by the server", got)
	}
	mu.Unlock()

	// A node holding copies of the cut capture and of its 304 revisit
	// revisits it conditionally under the same limit.
	other := directConfig(t)
	other.MaxBodySize = cfg.MaxBodySize
	storeCopies(t, other, captureCopy(t, filepath.Join(cfg.Data, "warc"), caps[video][0]), captureCopy(t, filepath.Join(cfg.Data, "warc"), caps[video][1]))
	db, err := OpenDB(other.Data)
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := recrawl.Get(db, video)
	db.Close()
	if err != nil || !ok || e.ETag != `"v1"` || e.Cut != cfg.MaxBodySize {
		t.Fatalf("the copy's entry: %+v (%v); want the cut capture's ETag and its %d bytes kept", e, err, cfg.MaxBodySize)
	}

	// A higher limit fetches the video whole, from the 304's entry.
	higher := again
	higher.MaxBodySize = 1 << 20
	runCrawl(t, higher)
	caps = archived(t, cfg.Data)
	if c := caps[video]; len(c) != 3 || c[2].Type != warc.TypeResponse || truncation(cfg.Data, c[2]) != "" {
		t.Errorf("re-crawl of the cut video under a higher limit: %+v; want a whole response", c)
	}
	mu.Lock()
	if got := asked["/video"]; len(got) != 3 || got[2] != "" {
		t.Errorf("/video: If-None-Match of each request %q; want none under a higher limit", got)
	}
	mu.Unlock()
}

// Page recovery (Config.Recover) is asked about a revisit with the last
// visit the node knows of: a previous holder's older capture of the URL
// is no reason to skip the revisit, only a newer one is.
func TestRevisitAsksRecoveryForNewerCaptures(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 2, Pages: 20})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	heldSince := time.Now().Add(-time.Hour) // a previous holder's captures are this old
	first := runCrawl(t, cfg)

	var mu sync.Mutex
	var asked, zero int
	all := cfg
	all.RecrawlAll = true
	all.Recover = func(_ context.Context, _ string, since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if since.IsZero() {
			zero++
		}
		return heldSince.After(since)
	}
	s := runCrawl(t, all)
	if asked == 0 || zero != 0 {
		t.Errorf("recovery asked %d times, %d without the last visit", asked, zero)
	}
	if s.Recovered != 0 || s.NotModified == 0 || s.RevisitsQueued < first.New/2 {
		t.Errorf("re-crawl: %d queued, %d recovered, %d 304s; want every revisit fetched", s.RevisitsQueued, s.Recovered, s.NotModified)
	}
}

// URLs whose last capture pointed at another URL's identical payload are
// counted by what their revisit found: a 304 as not modified, the same
// payload fetched whole (no validators) as unchanged, not as a duplicate.
func TestRevisitCountsOfDuplicates(t *testing.T) {
	const body = "function shared() { return 'the same bytes under three URLs'; }\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/missing.js":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, body)
		case "/x.js":
			if notModified(w, r, `"e1"`) {
				return
			}
			w.Header().Set("Content-Type", "application/javascript")
			io.WriteString(w, body)
		case "/noetag.js":
			w.Header().Set("Content-Type", "application/javascript")
			io.WriteString(w, body)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/missing.js")
	runCrawl(t, cfg)
	cfg.Seeds = []string{srv.URL + "/x.js", srv.URL + "/noetag.js"}
	if s := runCrawl(t, cfg); s.Duplicates != 2 {
		t.Fatalf("x.js and noetag.js: %d duplicates; want revisits of missing.js's payload", s.Duplicates)
	}
	all := cfg
	all.Seeds = nil
	all.RecrawlAll = true
	s := runCrawl(t, all)
	if s.Unchanged != 2 || s.Duplicates != 0 || s.NotModified != 1 {
		t.Errorf("re-crawl revisits: %d unchanged, %d duplicates, %d not modified; want 2, 0, 1", s.Unchanged, s.Duplicates, s.NotModified)
	}
}

// notModified sets the ETag of a test server's response and answers 304
// when the request's If-None-Match names it.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") != etag {
		return false
	}
	w.WriteHeader(http.StatusNotModified)
	return true
}

// Narrower re-crawl rules take effect on the next run for URLs scheduled
// under the old ones, not after visits timed by those, which could be a
// month away; a wider rule leaves intervals that fit it alone.
func TestChangedRulesReschedule(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 9, Hosts: 3, Pages: 20})
	cfg := testConfig(t, srv.URL(), web.Seeds()[0])
	cfg.Scope = ScopeHost
	runCrawl(t, cfg) // under the default rules: due in a day

	entries := func() []recrawl.Entry {
		t.Helper()
		db, err := OpenDB(cfg.Data)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		es, err := recrawl.Entries(db, "", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) < 5 {
			t.Fatalf("fixture: %d re-crawl entries", len(es))
		}
		return es
	}
	before := entries()
	rerun := func(spec string) {
		t.Helper()
		rule, err := recrawl.ParseRule(spec)
		if err != nil {
			t.Fatal(err)
		}
		again := cfg
		again.Recrawl = true
		again.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
		if s := runCrawl(t, again); s.RevisitsQueued != 0 {
			t.Errorf("rules %s: %d URLs revisited; none was due", spec, s.RevisitsQueued)
		}
	}

	rerun("30m,10m,2h")
	for i, e := range entries() {
		if e.Due.IsZero() {
			continue
		}
		b := before[i]
		rule := schedule.Policy{Default: 30 * time.Minute, Min: 10 * time.Minute, Max: 2 * time.Hour}
		limit := e.State.LastVisit.Add(rule.Jitter(e.URL, 2*time.Hour)) // within the rule's maximum
		if e.Key != b.Key || e.State.Interval != 2*time.Hour || e.Due.Unix() != limit.Unix() {
			t.Errorf("%s under a 2h maximum: interval %v, due %v; want 2h, due %v (it was %v)", e.URL, e.State.Interval, e.Due, limit, b.Due)
		}
	}
	rerun("48h")
	for _, e := range entries() {
		if !e.Due.IsZero() && e.State.Interval != 2*time.Hour {
			t.Errorf("%s under a 2h–60d rule: interval %v, want the 2h it had", e.URL, e.State.Interval)
		}
	}
}

// An imported archive's first re-crawl is conditional: the validators of
// each URL's last capture come from its record, as a crawl's own would,
// a revisit's included.
func TestRecrawlOfImportIsConditional(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{} // path → the validators of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("If-None-Match")+"|"+r.Header.Get("If-Modified-Since"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/":
			if notModified(w, r, `"home-1"`) {
				return
			}
			io.WriteString(w, `<html><body><a href="/dated">dated</a></body></html>`)
		case "/dated":
			const lm = "Tue, 03 Nov 2026 10:00:00 GMT"
			w.Header().Set("Last-Modified", lm)
			if r.Header.Get("If-Modified-Since") == lm {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			io.WriteString(w, "<html><body><p>Dated.</p></body></html>")
		case "/robots.txt":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "User-agent: *\nDisallow: /private/\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := testConfig(t, "", srv.URL+"/")
	runCrawl(t, cfg)
	all := cfg
	all.RecrawlAll = true
	runCrawl(t, all) // the home page's last capture is now a revisit

	imported := cfg
	imported.Data = t.TempDir()
	files := segments(t, cfg.Data)
	importFiles(t, imported.Data, files...)
	mu.Lock()
	clear(asked)
	mu.Unlock()
	imported.Recrawl, imported.Seeds = true, nil
	s := runCrawl(t, imported)
	if s.NotModified != 2 {
		t.Errorf("the imported archive's re-crawl: %d answered 304, want both pages; requests %v", s.NotModified, asked)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := asked["/"]; len(got) != 1 || got[0] != `"home-1"|` {
		t.Errorf("home page asked with %q, want its ETag", got)
	}
	if got := asked["/dated"]; len(got) != 1 || got[0] != "|Tue, 03 Nov 2026 10:00:00 GMT" {
		t.Errorf("dated page asked with %q, want its Last-Modified", got)
	}
	// The imported robots.txt capture is the robots cache's business, not
	// a page to revisit: fetched once, for the robots check.
	if got := asked["/robots.txt"]; len(got) != 1 {
		t.Errorf("robots.txt fetched %d times by the imported archive's re-crawl, want once", len(got))
	}
}

// An imported archive has every URL scheduled, though the index's URL
// keys are coarser than the re-crawl's (/dir and /dir/ share one), and a
// page archived as a resource record (by a tool that writes no HTTP
// headers) is revisited as well, its unchanged payload pointing at the
// resource.
func TestRecrawlOfImportSchedulesEveryURL(t *testing.T) {
	const block = "<html><body>hello</body></html>"
	const dir, index = "<html><body><p>the page without slash</p></body></html>", "<html><body><p>the directory index</p></body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/":
			io.WriteString(w, `<html><body><a href="/dir">a</a> <a href="/dir/">b</a></body></html>`)
		case "/dir":
			io.WriteString(w, dir)
		case "/dir/":
			io.WriteString(w, index)
		case "/file.html":
			io.WriteString(w, block)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/")
	runCrawl(t, cfg)
	files := segments(t, cfg.Data)
	resource := "WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:uuid:11111111-2222-3333-4444-555555555555>\r\n" +
		"WARC-Target-URI: " + srv.URL + "/file.html\r\nWARC-Date: 2024-01-02T03:04:05Z\r\nContent-Type: text/html\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s\r\n\r\n", len(block), block)
	f := filepath.Join(t.TempDir(), "resource.warc")
	if err := os.WriteFile(f, []byte(resource), 0o644); err != nil {
		t.Fatal(err)
	}

	imported := cfg
	imported.Data = t.TempDir()
	importFiles(t, imported.Data, append(files, f)...)
	imported.Recrawl, imported.Seeds = true, nil
	s := runCrawl(t, imported)
	if s.RevisitsQueued != 4 || s.Unchanged != 4 {
		t.Errorf("the imported archive's re-crawl queued %d URLs, %d unchanged; want 4 of 4", s.RevisitsQueued, s.Unchanged)
	}
	caps := archived(t, imported.Data)
	for _, u := range []string{"/", "/dir", "/dir/", "/file.html"} {
		if cs := caps[srv.URL+u]; len(cs) != 2 || cs[1].Type != warc.TypeRevisit {
			t.Errorf("%s: captures %v, want the import's and a revisit", u, cs)
		}
	}
	// The schedule counts from each capture's time: a page found
	// unchanged since 2024 comes back later than one captured moments
	// before its revisit.
	db, err := OpenDB(imported.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	def := imported.Schedules.For(srv.URL + "/").Default
	for u, longer := range map[string]bool{"/": false, "/file.html": true} {
		e, ok, err := recrawl.Get(db, srv.URL+u)
		if err != nil || !ok || (e.State.Interval > def) != longer {
			t.Errorf("%s: after its first revisit, interval %v (%v %v); want it over %v: %v", u, e.State.Interval, ok, err, def, longer)
		}
	}
}

// A re-crawl of an imported archive fetches each URL once, as one of a
// crawled archive does: a link to a URL whose revisit is queued, or the
// seed given again, is that revisit, not a second fetch in full.
func TestRecrawlOfImportFetchesEachURLOnce(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/":
			io.WriteString(w, `<html><body><a href="/a">a</a> <a href="/b">b</a></body></html>`)
		case "/a", "/b":
			if notModified(w, r, `"`+r.URL.Path+`"`) {
				return
			}
			io.WriteString(w, `<html><body><a href="/">home</a> <a href="/a">a</a></body></html>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/")
	runCrawl(t, cfg)
	files := segments(t, cfg.Data)
	imported := cfg
	imported.Data = t.TempDir()
	importFiles(t, imported.Data, files...)
	mu.Lock()
	clear(asked)
	mu.Unlock()
	imported.RecrawlAll = true
	s := runCrawl(t, imported)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/", "/a", "/b"} {
		if asked[p] != 1 {
			t.Errorf("%s fetched %d times by the imported archive's re-crawl, want once (all: %v)", p, asked[p], asked)
		}
	}
	// Without seeds an imported archive's scope holds no site, which the
	// CLI tells; with one, or with ScopeAny, it does.
	for _, c := range []struct {
		seeds []string
		scope Scope
		empty bool
	}{{nil, ScopeHost, true}, {nil, ScopeAny, false}, {[]string{srv.URL + "/"}, ScopeHost, false}} {
		cfg := imported
		cfg.Data = t.TempDir()
		importFiles(t, cfg.Data, files...)
		cfg.Seeds, cfg.Scope = c.seeds, c.scope
		cr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := cr.ScopeIsEmpty(); got != c.empty {
			t.Errorf("seeds %v, scope %s: ScopeIsEmpty %v, want %v", c.seeds, c.scope, got, c.empty)
		}
		cr.Close()
	}
	if s.NotModified != 2 {
		t.Errorf("%d answered 304, want /a and /b", s.NotModified)
	}
}

// A re-crawl queues its seeds after its revisits; one that stops before
// (opened and closed, its listener failing; interrupted) leaves them
// recorded, and the next run queues them.
func TestRecrawlSeedQueuedByALaterRun(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>hi</body></html>")
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/new")
	cfg.Recrawl = true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	resume := cfg
	resume.Seeds, resume.Recrawl = nil, false
	runCrawl(t, resume)
	runCrawl(t, resume)
	mu.Lock()
	defer mu.Unlock()
	if asked["/new"] != 1 {
		t.Errorf("the seed fetched %d times by the runs after, want once", asked["/new"])
	}
}

// A trap chain of hosts that name a fresh URL on every visit (a redirect
// with a cache-busting token, an import of a new stylesheet) stays within
// the hop limits through re-crawls: a revisit is queued with the hops that
// first led to its URL, not afresh at 0.
func TestChainsStayBoundedThroughRecrawls(t *testing.T) {
	var visit atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, path := r.URL.Hostname(), r.URL.Path
		v := visit.Add(1)
		var n int
		is := func(format string) bool { _, err := fmt.Sscanf(host, format, &n); return err == nil }
		switch {
		case path == "/robots.txt":
			http.NotFound(w, r)
		case host == "seed.test":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><img src="http://r0.trap.test/i.png">
<link rel=stylesheet href="http://c0.trap.test/s.css"></body></html>`)
		case is("r%d.trap.test"):
			w.Header().Set("Location", fmt.Sprintf("http://r%d.trap.test/i%d.png", n+1, v))
			w.WriteHeader(http.StatusFound)
			fmt.Fprintf(w, "moved, visit %d", v) // a payload that changes
		case is("c%d.trap.test"):
			w.Header().Set("Content-Type", "text/css")
			fmt.Fprintf(w, "@import url(http://c%d.trap.test/s%d.css);", n+1, v)
		default:
			http.NotFound(w, r)
		}
	}))
	defer proxy.Close()
	cfg := testConfig(t, proxy.URL, "http://seed.test/")
	cfg.Scope = ScopeHost
	cfg.MaxDepth = 1
	runCrawl(t, cfg)
	all := cfg
	all.RecrawlAll = true
	for range 3 {
		runCrawl(t, all)
	}
	within := map[string]bool{"seed.test": true}
	for i := range 3 {
		within[fmt.Sprintf("r%d.trap.test", i)] = true
		within[fmt.Sprintf("c%d.trap.test", i)] = true
	}
	for u := range archived(t, cfg.Data) {
		if h := urlkey.Host(u); !within[h] {
			t.Errorf("after three re-crawls, %s was archived: more than 3 hops off the scope", u)
		}
	}
}

// servedPage serves one page whose answer the test sets: status, media
// type, Location and body.
// servedPage serves /page as set: with status 0, an answer that is not
// HTTP.
type servedPage struct {
	mu                   sync.Mutex
	status               int
	mime, location, body string
}

func (p *servedPage) set(status int, mime, location, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status, p.mime, p.location, p.body = status, mime, location, body
}

func (p *servedPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/page" {
		io.WriteString(w, "elsewhere")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == -1 {
		// The host resets the connection: a failure that may pass.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
		return
	}
	if p.status == 0 {
		// Not HTTP: an answer that cannot be archived.
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err == nil {
			buf.WriteString("SSH-2.0-OpenSSH_9.6\r\n\r\n")
			buf.Flush()
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", p.mime)
	if p.location != "" {
		w.Header().Set("Location", p.location)
	}
	w.WriteHeader(p.status)
	io.WriteString(w, p.body)
}

// recrawlPage crawls p's /page once, then revisits it after each of
// answers, as it falls due, and returns the captures by path, the page's
// entry and the data directory.
func recrawlPage(t *testing.T, p http.Handler, answers ...func()) (map[string][]index.Capture, recrawl.Entry, string) {
	t.Helper()
	srv := httptest.NewServer(p)
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/page")
	runCrawl(t, cfg)
	all := cfg
	all.Seeds, all.RecrawlAll = nil, true
	for _, answer := range answers {
		answer()
		lastVisitAnIntervalAgo(t, cfg.Data, srv.URL+"/page")
		runCrawl(t, all)
	}
	caps := map[string][]index.Capture{}
	for u, cs := range archived(t, cfg.Data) {
		caps[strings.TrimPrefix(u, srv.URL)] = cs
	}
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, srv.URL+"/page")
	if err != nil || !ok {
		t.Fatalf("entry: %v %v", ok, err)
	}
	return caps, e, cfg.Data
}

// lastVisitAnIntervalAgo moves the last visit of u's entry back by its
// interval: a revisit now comes when it is due, and its schedule counts
// it as such, not as one made seconds after the last.
func lastVisitAnIntervalAgo(t *testing.T, data, u string) {
	t.Helper()
	editEntry(t, data, u, func(e *recrawl.Entry) { e.State.LastVisit = e.State.LastVisit.Add(-e.State.Interval) })
}

// dueNow makes u's re-crawl entry due a minute ago.
func dueNow(t *testing.T, data, u string) {
	t.Helper()
	editEntry(t, data, u, func(e *recrawl.Entry) { e.Due = time.Now().Add(-time.Minute) })
}

// editEntry changes u's re-crawl entry in the archive in data with edit.
func editEntry(t *testing.T, data, u string, edit func(*recrawl.Entry)) {
	t.Helper()
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewIndexedBatch()
	e, ok, err := recrawl.Get(b, u)
	if err != nil || !ok {
		t.Fatalf("%s: no entry (%v)", u, err)
	}
	old := e
	edit(&e)
	if err := errors.Join(recrawl.Put(b, &old, e), b.Commit(pebble.Sync)); err != nil {
		t.Fatal(err)
	}
}

const linkingPage = `<html><body><p>A page with enough words in it to be worth comparing.</p><a href="/x">x</a></body></html>`

// A server error between two visits of an unchanged page is archived,
// but does not stand for the page: the page has not changed twice, and
// keeps its links and validators.
func TestRecrawlPassesOverServerErrors(t *testing.T) {
	p := &servedPage{}
	p.set(200, "text/html", "", linkingPage)
	all, e, _ := recrawlPage(t, p,
		func() { p.set(503, "text/plain", "", "maintenance, back soon") },
		func() { p.set(200, "text/html", "", linkingPage) })
	caps := all["/page"]
	if len(caps) != 3 || caps[1].Status != 503 || caps[2].Type != warc.TypeRevisit {
		t.Fatalf("captures %v, want the page, the 503, and a revisit of the page", caps)
	}
	if e.State.Changes != 0 || !e.HasLink(recrawl.LinkHash(strings.TrimSuffix(caps[0].URL, "/page")+"/x")) {
		t.Errorf("after a 503 between two equal visits: %d changes, links %v; want none and the page's link", e.State.Changes, e.Links)
	}
}

// A redirect whose target differs only by the session ID it hands out
// has not changed.
func TestRecrawlRedirectWithAFreshSessionIDIsNoChange(t *testing.T) {
	p := &servedPage{}
	to := func(sid string) func() {
		return func() { p.set(302, "text/html", "/x;jsessionid="+sid, "<html><body>302 Found</body></html>") }
	}
	to("0123456789ABCDEF0123456789abcdef")()
	_, e, _ := recrawlPage(t, p, to("FEDCBA9876543210fedcba9876543210"), to("00112233445566778899aabbccddeeff"))
	if e.State.Visits != 2 || e.State.Changes != 0 {
		t.Errorf("state %+v; want 2 visits and no change", e.State)
	}
}

// A page that stays down is visited less and less often, as one that
// does not change: each error, archived (a 503) or not (an answer that
// is not HTTP), is a visit that found no change, and the page is still
// what its last capture was.
func TestRecrawlBacksOffAPageThatStaysDown(t *testing.T) {
	for _, c := range []struct {
		name     string
		status   int // 0: not HTTP, -1: the connection reset
		captures int
	}{{"503", 503, 4}, {"not HTTP", 0, 1}, {"connection reset", -1, 1}} {
		t.Run(c.name, func(t *testing.T) {
			p := &servedPage{}
			p.set(200, "text/html", "", linkingPage)
			down := func() { p.set(c.status, "text/plain", "", "down") }
			all, e, _ := recrawlPage(t, p, down, down, down)
			first, _ := schedule.DefaultPolicy().First(time.Now())
			caps := all["/page"]
			if len(caps) != c.captures || e.State.Visits != 3 || e.State.Changes != 0 || e.State.Interval <= first.Interval {
				t.Errorf("after three: %d captures, state %+v; want %d, 3 visits, no change, an interval over %v",
					len(caps), e.State, c.captures, first.Interval)
			}
			if e.Digest != caps[0].Digest || !e.HasLink(recrawl.LinkHash(strings.TrimSuffix(caps[0].URL, "/page")+"/x")) {
				t.Errorf("the entry compares with digest %s and links %v; want the page's first capture, %s with its link", e.Digest, e.Links, caps[0].Digest)
			}
		})
	}
}

// A page whose bytes differ at every visit by a number only (a request ID,
// a visitor count), or an error page still answering so, is stored again
// at each visit, but its schedule counts no change and backs it off. A
// change of its text is a change.
func TestRecrawlTextUnchangedIsNoChangeForTheSchedule(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		words   bool // the text changes too
		changes int
	}{
		{"a number changes", 200, false, 0},
		{"a 404 page's body changes", 404, true, 1}, // 200 → 404 is a change; the 404s after are not
		{"the text changes", 200, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &servedPage{}
			n := 1000
			words := []string{"apples", "pears", "plums", "cherries", "quinces"}
			body := func() string {
				n++
				w := words[0]
				if c.words {
					w = words[n%len(words)]
				}
				return fmt.Sprintf(`<html><body><p>A page about %s, whose request id %d is shown at the bottom.</p></body></html>`, w, n)
			}
			p.set(200, "text/html", "", body())
			next := func() {
				// A second apart: a copy of the same second as the last
				// one its holder knows of is not a later visit.
				time.Sleep(1100 * time.Millisecond)
				p.set(c.status, "text/html", "", body())
			}
			all, e, data := recrawlPage(t, p, next, next, next)
			responses := 0
			for _, cp := range all["/page"] {
				if cp.Type == warc.TypeResponse {
					responses++
				}
			}
			if responses != 4 {
				t.Errorf("%d responses stored of 4 visits, want every new payload stored", responses)
			}
			if e.State.Visits != 3 || int(e.State.Changes) != c.changes {
				t.Errorf("%d visits, %d changes; want 3 and %d", e.State.Visits, e.State.Changes, c.changes)
			}
			// A node holding copies of the captures counts as this one.
			held := directConfig(t)
			for _, cp := range all["/page"] {
				storeCopies(t, held, captureCopy(t, filepath.Join(data, "warc"), cp))
			}
			db, err := OpenDB(held.Data)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if he, ok, err := recrawl.Get(db, e.URL); err != nil || !ok || he.State.Changes != e.State.Changes {
				t.Errorf("the copies' holder counts %d changes (%v, %v); want %d, as the fetching node", he.State.Changes, ok, err, e.State.Changes)
			}
		})
	}
}

// A page whose bytes alternate between two versions of the same text (two
// servers behind one name) has not changed for its schedule, though the
// bytes of a visit are those of a capture before it, stored as a revisit.
func TestRecrawlAlternatingBytesOfOneTextIsNoChange(t *testing.T) {
	p := &servedPage{}
	body := func(id int) string {
		return fmt.Sprintf(`<html><body><p>A page about apples, served by backend %d of the cluster.</p></body></html>`, id)
	}
	p.set(200, "text/html", "", body(1))
	serve := func(id int) func() { return func() { p.set(200, "text/html", "", body(id)) } }
	all, e, _ := recrawlPage(t, p, serve(2), serve(1), serve(2))
	revisits := 0
	for _, cp := range all["/page"] {
		if cp.Type == warc.TypeRevisit {
			revisits++
		}
	}
	if revisits != 2 || e.State.Visits != 3 || e.State.Changes != 0 {
		t.Errorf("%d revisits, %d visits, %d changes; want the last two visits revisits of earlier bytes, and no change", revisits, e.State.Visits, e.State.Changes)
	}
}

// A revisit that fails for a reason that may pass (the host down) is not
// kept aside for every later run to try again, as a URL never archived
// is: its schedule backs it off, and a run that revisits what is due
// leaves it alone until it is.
func TestFailedRevisitWaitsForItsSchedule(t *testing.T) {
	p := &servedPage{}
	p.set(200, "text/html", "", linkingPage)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/page" {
			requests.Add(1)
		}
		p.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u := srv.URL + "/page"
	cfg := directConfig(t, u)
	runCrawl(t, cfg)
	p.set(-1, "", "", "")
	lastVisitAnIntervalAgo(t, cfg.Data, u)
	dueNow(t, cfg.Data, u)
	due := cfg
	due.Seeds, due.Recrawl = nil, true
	for range 3 {
		runCrawl(t, due)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests of the page: want the first crawl's and one revisit, the one due", n)
	}
}

// The same bytes under another status, media type or redirect target are
// a change of the page, looked into for links and counted by its
// schedule, not a revisit of what the page was. (The payload itself is
// stored once: the second capture is a revisit of the first's payload
// under its own status and headers.)
func TestRecrawlComparesMoreThanThePayload(t *testing.T) {
	for _, c := range []struct {
		name          string
		before, after func(p *servedPage)
		link          string // followed once the page changed
	}{
		{"404 then 200",
			func(p *servedPage) { p.set(404, "text/html", "", linkingPage) },
			func(p *servedPage) { p.set(200, "text/html", "", linkingPage) }, "/x"},
		{"text/plain then text/html",
			func(p *servedPage) { p.set(200, "text/plain", "", linkingPage) },
			func(p *servedPage) { p.set(200, "text/html", "", linkingPage) }, "/x"},
		{"another redirect target",
			func(p *servedPage) { p.set(302, "text/html", "/x?1", "<html><body>302 Found</body></html>") },
			func(p *servedPage) { p.set(302, "text/html", "/x?2", "<html><body>302 Found</body></html>") }, "/x?2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &servedPage{}
			c.before(p)
			all, e, _ := recrawlPage(t, p, func() { c.after(p) })
			caps := all["/page"]
			if len(caps) != 2 || caps[1].Digest != caps[0].Digest {
				t.Fatalf("captures %v, want two of the same payload", caps)
			}
			if len(all[c.link]) != 1 {
				t.Errorf("%s, linked by the changed page, captured %d times, want once", c.link, len(all[c.link]))
			}
			if e.State.Changes != 1 {
				t.Errorf("the page changed once; its schedule counted %d changes", e.State.Changes)
			}
			if caps[1].MIME == "text/html" && caps[1].Status == 200 && caps[1].SimHash == 0 {
				t.Error("the HTML page's capture has no SimHash")
			}
		})
	}
}

// segments returns the WARC files of a data directory, which has some.
func segments(t *testing.T, data string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(data, "warc", "*.warc.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("segments: %v %v", files, err)
	}
	return files
}

// A revisit this crawl's own rules refused (a private address, the flag
// allowing it forgotten) learnt nothing of the page: the URL stays due,
// and the next run, given the flag, visits it.
func TestRevisitRefusedStaysDue(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "<p>a page on a private address</p>")
	}))
	defer srv.Close()
	u := srv.URL + "/page"
	cfg := directConfig(t, u)
	runCrawl(t, cfg)

	refused := cfg
	refused.Seeds, refused.RecrawlAll, refused.AllowPrivate = nil, true, false
	if s := runCrawl(t, refused); s.Forbidden != 1 {
		t.Fatalf("a re-crawl without AllowPrivate: %d refused, want 1", s.Forbidden)
	}
	before := requests.Load()

	again := cfg
	again.Seeds, again.Recrawl = nil, true
	runCrawl(t, again)
	if n := requests.Load() - before; n != 1 {
		t.Fatalf("the next --recrawl, allowed again, sent %d requests; want the refused revisit made", n)
	}
	if caps := archived(t, cfg.Data)[u]; len(caps) != 2 || caps[1].Type != warc.TypeRevisit {
		t.Errorf("captures of %s: %+v; want the first and a revisit", u, caps)
	}
}

// The re-crawl rules given are kept in the data directory, as the scope
// is: a later run without them (from cron, say) crawls with the same
// schedule, and rules given again replace them.
func TestSchedulesKept(t *testing.T) {
	db, err := OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	parse := func(specs ...string) recrawl.Rules {
		t.Helper()
		rules, err := recrawl.ParseRules(specs)
		if err != nil {
			t.Fatal(err)
		}
		return rules
	}
	settle := func(given recrawl.Rules) recrawl.Rules {
		t.Helper()
		got, err := settleSchedules(db, given)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := settle(recrawl.Rules{}); got.String() != (recrawl.Rules{}).String() {
		t.Errorf("a new data directory without rules: %s, want the defaults", got)
	}
	news := parse("https://news.example.org/=1h,10m,24h", "168h")
	if got := settle(news); got.String() != news.String() {
		t.Errorf("rules given: %s, want %s", got, news)
	}
	if got := settle(recrawl.Rules{}); got.String() != news.String() || got.For("https://news.example.org/a").Default != time.Hour {
		t.Errorf("a run without rules after one with them: %s, want the rules kept, %s", got, news)
	}
	daily := parse("24h")
	settle(daily)
	if got := settle(recrawl.Rules{}); got.String() != daily.String() {
		t.Errorf("after rules given again: %s, want them, %s", got, daily)
	}
	if err := db.Set([]byte(revisitKey), []byte("not a rule"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := settleSchedules(db, recrawl.Rules{}); err == nil {
		t.Error("unreadable rules kept in the data directory were taken for none")
	}
	if got := settle(news); got.String() != news.String() {
		t.Errorf("rules given over unreadable ones: %s, want %s", got, news)
	}
	// Rules made in code, which no --revisit spec gives, are used as
	// given, not replaced by the kept ones.
	custom := recrawl.NewRules(schedule.Policy{Default: time.Hour, Min: time.Minute, Max: 48 * time.Hour})
	if got := settle(custom); got.String() != custom.String() {
		t.Errorf("rules made in code: %s, want them, %s", got, custom)
	}
}

// A URL this run's own rules refused (a private address, the flag
// allowing it forgotten) is taken up by the next run, given the flag: the
// seed of a first crawl too, which has no re-crawl entry to keep it due.
func TestRefusedURLTakenUpByTheNextRun(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<p>a page on a private address</p>")
	})
	u := srv.URL + "/page"
	refused := directConfig(t, u)
	refused.AllowPrivate = false
	if s := runCrawl(t, refused); s.Forbidden != 1 || s.Deferred != 0 {
		t.Fatalf("a crawl without AllowPrivate: %d refused, %d deferred; want 1 refused and no retry of it", s.Forbidden, s.Deferred)
	}
	allowed := refused
	allowed.Seeds, allowed.AllowPrivate = nil, true
	if s := runCrawl(t, allowed); s.New != 1 || hits()["/page"] != 1 {
		t.Fatalf("the next run, allowed: %d captures, %d requests; want the refused seed fetched", s.New, hits()["/page"])
	}
	if s := runCrawl(t, allowed); s.New != 0 || hits()["/page"] != 1 {
		t.Errorf("the run after: %d captures, %d requests; want nothing more", s.New, hits()["/page"])
	}
}

// A node (a continuous crawl) refused a seed for its private address: its
// rules do not change while it runs, but restarted with other rules and
// given the seed again, it fetches it.
func TestNodeRefusedSeedTakenWhenGivenAgain(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<p>a page on a private address</p>")
	})
	node := directConfig(t, srv.URL+"/page")
	node.AllowPrivate = false
	c, stop := running(t, node)
	for deadline := time.Now().Add(time.Minute); c.Stats().Forbidden == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node did not take up its seed in a minute")
		}
	}
	stop()
	restarted := node
	restarted.AllowPrivate = true
	if s := runCrawl(t, restarted); s.New != 1 || hits()["/page"] != 1 {
		t.Errorf("restarted with AllowPrivate and the seed given again: %d captures, %d requests; want the seed fetched", s.New, hits()["/page"])
	}
}

// A capture found damaged (waggle index verify; a node's scrub, when no
// other node holds a good copy) is no longer compared with: the next visit
// of its page fetches it whole, with no condition a 304 could answer, and
// stores it, rather than making one more revisit of bytes that cannot be
// read.
func TestDamagedCaptureIsFetchedWholeAgain(t *testing.T) {
	var conditional []bool
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/page" {
			mu.Lock()
			conditional = append(conditional, r.Header.Get("If-None-Match") != "")
			mu.Unlock()
		}
		if notModified(w, r, `"v1"`) {
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, linkingPage)
	}))
	defer srv.Close()
	page := srv.URL + "/page"
	cfg := directConfig(t, page)
	runCrawl(t, cfg)
	first := archived(t, cfg.Data)[page][0]
	path := filepath.Join(cfg.Data, "warc", first.Segment)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := first.Offset + first.Length/2
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()

	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	var damaged []index.Capture
	if _, err := archive.NewLocal(index.New(db), filepath.Join(cfg.Data, "warc")).Verify(context.Background(), func(c index.Capture, _ error) error {
		damaged = append(damaged, c)
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if len(damaged) != 1 || damaged[0].RecordID != first.RecordID {
		t.Fatalf("verify found %v damaged, want the page's capture", damaged)
	}
	if err := ForgetDamagedPayloads(db, damaged); err != nil {
		t.Fatal(err)
	}
	db.Close()

	all := cfg
	all.Seeds, all.RecrawlAll = nil, true
	for range 2 {
		lastVisitAnIntervalAgo(t, cfg.Data, page)
		runCrawl(t, all)
	}
	caps := archived(t, cfg.Data)[page]
	if len(caps) != 3 || caps[1].Type != warc.TypeResponse || caps[2].Type != warc.TypeRevisit {
		t.Fatalf("captures %v: want the damaged one, the page stored whole again, and a revisit of that", caps)
	}
	rec, err := warc.ReadAt(filepath.Join(cfg.Data, "warc"), warc.Location{Segment: caps[2].Segment, Offset: caps[2].Offset, Length: caps[2].Length})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Header.Get("WARC-Refers-To"); got != caps[1].RecordID {
		t.Errorf("the revisit after refers to %s, want the capture stored again, %s", got, caps[1].RecordID)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{false, false, true}; !slices.Equal(conditional, want) {
		t.Errorf("requests conditional: %v, want %v", conditional, want)
	}
}

// An imported revisit of a capture cut at the size limit (the archive
// holds both) makes no revisit conditional: the import keeps no Cut, and
// under a higher limit a 304 would keep the cut copy for good.
func TestImportedRevisitOfACutCaptureIsNotConditional(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Content-Type", "video/mp4")
		if notModified(w, r, `"v1"`) {
			return
		}
		io.WriteString(w, strings.Repeat("0123456789", 1000))
	}))
	defer srv.Close()
	video := srv.URL + "/video"
	cfg := directConfig(t, video)
	cfg.MaxBodySize = 2000
	runCrawl(t, cfg)
	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	runCrawl(t, again) // a 304 revisit of the cut capture
	files, err := filepath.Glob(filepath.Join(cfg.Data, "warc", "*.warc.gz"))
	if err != nil {
		t.Fatal(err)
	}
	other := directConfig(t)
	if _, err := Import(context.Background(), other.Data, files, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(asked)
	mu.Unlock()
	other.Seeds, other.Recrawl = nil, true
	runCrawl(t, other)
	mu.Lock()
	defer mu.Unlock()
	if got := asked[before:]; len(got) != 1 || got[0] != "" {
		t.Errorf("If-None-Match of the revisit after the import: %q; want one request, unconditional", got)
	}
}
