package crawl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// startWeb serves a small synthetic web on loopback for the crawler to reach
// through it as a proxy.
func startWeb(t *testing.T, cfg websim.Config) (*websim.Web, *websim.Server) {
	t.Helper()
	web := websim.New(cfg)
	srv, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return web, srv
}

func testConfig(t *testing.T, proxy string, seeds ...string) Config {
	return Config{
		Data:            t.TempDir(),
		Seeds:           seeds,
		Scope:           ScopeAny,
		NoDelay:         true,
		Proxy:           proxy,
		AllowPrivate:    true,
		MaxPagesPerHost: 300,
		MaxCrawlDelay:   time.Millisecond, // websim asks some hosts for Crawl-delay: 1
		Workers:         16,
		Timeout:         10 * time.Second,
	}
}

// directConfig is testConfig for a crawl straight to an httptest server,
// which serves no robots.txt worth asking for.
func directConfig(t *testing.T, seeds ...string) Config {
	cfg := testConfig(t, "", seeds...)
	cfg.IgnoreRobots = true
	return cfg
}

func runCrawl(t *testing.T, cfg Config) Stats {
	t.Helper()
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := c.Run(ctx)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("crawl: %v (stats %+v)", err, s)
	}
	return s
}

// archived reads the capture index of a data directory: URL → captures.
func archived(t *testing.T, data string) map[string][]index.Capture {
	t.Helper()
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[string][]index.Capture{}
	err = index.New(db).Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		got[c.URL] = append(got[c.URL], c)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// eachRecord calls fn with every record of data's segments, in order,
// each with its location; first marks the first record of a segment.
func eachRecord(t *testing.T, data string, fn func(rec *warc.Record, l warc.Location, first bool)) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(data, "warc", "*.warc.gz"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := warc.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		for first := true; ; first = false {
			rec, l, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			l.Segment = filepath.Base(f)
			fn(rec, l, first)
		}
		fh.Close()
	}
}

// verifyWARCs checks that every segment reads cleanly end to end, that
// every index entry points at a record of the right URL, type and record
// ID whose digest verifies, and that every record concurrent to another
// (a capture's request and metadata records) names one that was written.
func verifyWARCs(t *testing.T, data string, caps map[string][]index.Capture) (records map[string]int) {
	t.Helper()
	dir := filepath.Join(data, "warc")
	files, _ := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if len(files) == 0 {
		t.Fatal("no WARC segments")
	}
	records = map[string]int{}
	ids := map[string]bool{}
	var concurrent []string
	eachRecord(t, data, func(rec *warc.Record, _ warc.Location, _ bool) {
		records[rec.Type()]++
		ids[rec.ID()] = true
		if to := rec.Header.Get("WARC-Concurrent-To"); to != "" {
			concurrent = append(concurrent, to)
		}
	})
	for _, to := range concurrent {
		if !ids[to] {
			t.Fatalf("a record is concurrent to %s, which no segment holds", to)
		}
	}
	for u, cs := range caps {
		for _, c := range cs {
			rec, err := warc.ReadAt(dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
			if err != nil {
				t.Fatalf("index entry for %s: %v", u, err)
			}
			if rec.TargetURI() != u || rec.Type() != c.Type || rec.ID() != c.RecordID {
				t.Fatalf("index entry for %s (%s) points at %s record %s of %s", u, c.RecordID, rec.Type(), rec.ID(), rec.TargetURI())
			}
		}
	}
	return records
}

func TestCrawlWebsimCompletely(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	s := runCrawl(t, cfg)
	caps := archived(t, cfg.Data)

	// Coverage: every ordinary page of the web is archived, exactly once.
	for _, p := range web.Pages() {
		cs := caps[p]
		if len(cs) != 1 {
			t.Errorf("page %s archived %d times, want 1", p, len(cs))
			continue
		}
		if cs[0].Status != 200 || cs[0].MIME != "text/html" {
			t.Errorf("page %s: status %d mime %q", p, cs[0].Status, cs[0].MIME)
		}
	}
	// Politeness: nothing robots.txt disallows was fetched, and robots.txt was.
	robotsSeen := 0
	for u, cs := range caps {
		if strings.Contains(u, "/private/") {
			t.Errorf("robots.txt-disallowed URL %s was fetched", u)
		}
		if strings.HasSuffix(u, "/robots.txt") {
			robotsSeen++
		}
		// robots.txt too: a host and its www. name, one redirecting to the
		// other's, share one fetch of the file.
		if len(cs) > 1 {
			t.Errorf("%s captured %d times", u, len(cs))
		}
	}
	if robotsSeen == 0 {
		t.Error("no robots.txt was archived")
	}
	if s.Robots == 0 {
		t.Error("no URL was blocked by robots.txt, but websim disallows /private/ on some hosts")
	}
	if s.New != s.Captures || s.New < int64(len(web.Pages())) {
		t.Errorf("stats: %+v, want at least %d new captures", s, len(web.Pages()))
	}
	recs := verifyWARCs(t, cfg.Data, caps)
	if recs[warc.TypeRequest] == 0 || recs[warc.TypeMetadata] == 0 || recs[warc.TypeWarcinfo] == 0 {
		t.Errorf("record types written: %v", recs)
	}
	if recs[warc.TypeResponse]+recs[warc.TypeRevisit] != recs[warc.TypeRequest] {
		t.Errorf("records: %v: every response or revisit needs its request", recs)
	}

	// Running again on the same data finds nothing new to fetch.
	before := web.Requests()
	s2 := runCrawl(t, cfg)
	if s2.New != 0 {
		t.Errorf("second run made %d new captures, want 0", s2.New)
	}
	if d := web.Requests() - before; d != 0 {
		t.Errorf("second run sent %d requests, want 0", d)
	}
}

func TestScopeAndRequisites(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 30, Pages: 300})
	seed := web.Seeds()[0]
	host := urlkey.Host(seed)
	cfg := testConfig(t, srv.URL(), seed)
	cfg.Scope = ScopeHost
	runCrawl(t, cfg)
	caps := archived(t, cfg.Data)
	offScopeHTML, offScopeEmbeds := 0, 0
	for u, cs := range caps {
		if urlkey.Host(u) == host || strings.HasSuffix(u, "/robots.txt") {
			continue
		}
		if cs[0].MIME == "text/html" && cs[0].Status == 200 {
			offScopeHTML++
			t.Errorf("off-scope page %s was crawled with --scope host", u)
		} else {
			offScopeEmbeds++
		}
	}
	if offScopeEmbeds == 0 {
		t.Error("no off-scope page requisites were fetched; websim serves images and CSS from sibling hosts")
	}
	for _, p := range web.Pages() {
		if urlkey.Host(p) == host && len(caps[p]) == 0 {
			t.Errorf("in-scope page %s not archived", p)
		}
	}

	// With requisites off, nothing off the seed's host is fetched at all.
	cfg2 := testConfig(t, srv.URL(), seed)
	cfg2.Scope, cfg2.NoRequisites = ScopeHost, true
	runCrawl(t, cfg2)
	for u := range archived(t, cfg2.Data) {
		if h := urlkey.Host(u); h != host && h != "www."+host && "www."+h != host {
			t.Errorf("--no-page-requisites fetched %s", u)
		}
	}
}

// TestChainsAcrossHostsEnd: an in-scope page's requisite on another host
// that redirects to the next host, and a stylesheet that imports the next
// host's, are followed three hops off the scope and no further, whatever
// the depth limit (redirects and requisites keep their page's depth) and
// however many hosts a wildcard DNS name offers; a redirect chain inside
// the scope ends after 20 redirects. Each chain here ends by itself at its
// tenth host or 30th redirect, so that a crawl without the bounds ends too.
func TestChainsAcrossHostsEnd(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, path := r.URL.Hostname(), r.URL.Path
		var n int
		is := func(s, format string) bool { // s is format's, with n below 30
			_, err := fmt.Sscanf(s, format, &n)
			return err == nil && n < 30
		}
		switch {
		case path == "/robots.txt":
			http.NotFound(w, r)
		case host == "seed.test" && path == "/":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><img src="http://r0.trap.test/i.png">
<link rel=stylesheet href="http://c0.trap.test/s.css"><a href="/hop/0">on</a></body></html>`)
		case host == "seed.test" && is(path, "/hop/%d"):
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n+1), http.StatusFound)
		case is(host, "r%d.trap.test") && n < 10:
			http.Redirect(w, r, fmt.Sprintf("http://r%d.trap.test/i.png", n+1), http.StatusFound)
		case is(host, "c%d.trap.test") && n < 10:
			w.Header().Set("Content-Type", "text/css")
			fmt.Fprintf(w, "@import url(http://c%d.trap.test/s.css);", n+1)
		default:
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "the end")
		}
	}))
	defer proxy.Close()
	cfg := testConfig(t, proxy.URL, "http://seed.test/")
	cfg.Scope = ScopeHost
	cfg.MaxDepth = 1
	runCrawl(t, cfg)
	caps := archived(t, cfg.Data)
	var got []string
	for u := range caps {
		if !strings.HasSuffix(u, "/robots.txt") {
			got = append(got, u)
		}
	}
	slices.Sort(got)
	want := []string{"http://c0.trap.test/s.css", "http://c1.trap.test/s.css", "http://c2.trap.test/s.css",
		"http://r0.trap.test/i.png", "http://r1.trap.test/i.png", "http://r2.trap.test/i.png", "http://seed.test/"}
	for n := range 21 {
		want = append(want, fmt.Sprintf("http://seed.test/hop/%d", n))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("archived %d URLs:\n%s\nwant %d:\n%s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
}

// TestExtractionCutIsLogged: a page whose links run past extraction's
// limit has the rest of them left unfollowed, and says so in the log.
func TestExtractionCutIsLogged(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		for n := range 10_001 { // one more than extract's default limit
			fmt.Fprintf(w, `<a href="http://elsewhere.test/%d">`, n)
		}
	}))
	defer proxy.Close()
	var log lockedBuffer
	cfg := testConfig(t, proxy.URL, "http://seed.test/")
	cfg.Scope = ScopeHost
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	runCrawl(t, cfg)
	if got := log.String(); !strings.Contains(got, "html extraction stopped early") || !strings.Contains(got, "links=10000") {
		t.Errorf("log of a page cut at the link limit:\n%s", got)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestMaxPagesAndResume(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 11, Hosts: 8, Pages: 200})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	cfg.MaxPages = 40
	s := runCrawl(t, cfg)
	if s.Captures != 40 {
		t.Fatalf("--max-pages 40 made %d captures", s.Captures)
	}
	cfg.MaxPages = 90
	s = runCrawl(t, cfg)
	if s.Captures != 90 || s.New != 50 {
		t.Fatalf("resume to 90: captures %d new %d", s.Captures, s.New)
	}
	for u, cs := range archived(t, cfg.Data) {
		if len(cs) > 1 && !strings.HasSuffix(u, "/robots.txt") {
			t.Errorf("%s captured %d times across the two runs", u, len(cs))
		}
	}
}

func TestRefusesPrivateAddresses(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 1, Hosts: 3, Pages: 10})
	_ = web
	// No proxy, no --allow-private: the websim listener on 127.0.0.1 is off limits.
	cfg := testConfig(t, "", srv.URL()+"/")
	cfg.AllowPrivate = false
	s := runCrawl(t, cfg)
	if s.New != 0 || s.Errors == 0 {
		t.Fatalf("crawl of a loopback seed without --allow-private: %+v", s)
	}
}

// TestHostileServers crawls every hostile endpoint of websim: each must end
// with a clear outcome — archived (cut and marked if too big) or counted as
// an error — and never hang or crash the crawler.
func TestHostileServers(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 3, Pages: 10, SlowDelay: 50 * time.Millisecond})
	hostile := web.HostileURLs()
	var seeds []string
	for _, u := range hostile {
		seeds = append(seeds, u)
	}
	cfg := testConfig(t, srv.URL(), seeds...)
	cfg.MaxBodySize = 1 << 20
	cfg.Timeout = 3 * time.Second
	cfg.MaxDepth = 2
	s := runCrawl(t, cfg)
	caps := archived(t, cfg.Data)
	verifyWARCs(t, cfg.Data, caps)
	dir := filepath.Join(cfg.Data, "warc")
	truncated := func(u string) string {
		cs := caps[u]
		if len(cs) == 0 {
			return "<not archived>"
		}
		rec, err := warc.ReadAt(dir, warc.Location{Segment: cs[0].Segment, Offset: cs[0].Offset, Length: cs[0].Length})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Header.Get("WARC-Truncated")
	}
	for name, want := range map[string]string{"endless": "length", "giant-attr": "length"} {
		if got := truncated(hostile[name]); got != want {
			t.Errorf("%s: WARC-Truncated %q, want %q", name, got, want)
		}
	}
	// Bombs are archived as sent (small, compressed); only decoding stops.
	for _, name := range []string{"gzip-bomb", "br-bomb", "deep", "bad-utf8", "latin1", "shiftjis", "binary-as-html", "bad-header-lines"} {
		if len(caps[hostile[name]]) != 1 {
			t.Errorf("%s (%s) not archived", name, hostile[name])
		}
	}
	// Header lines that are not fields are passed over: the fields around
	// them still say what the page is.
	if cs := caps[hostile["bad-header-lines"]]; len(cs) == 1 && cs[0].MIME != "text/html" {
		t.Errorf("bad-header-lines archived as %q, want text/html", cs[0].MIME)
	}
	if s.Errors == 0 {
		t.Errorf("no fetch errors counted; slowloris and the redirect loop should give some: %+v", s)
	}
}

// A reopened crawler's digest filter holds every digest of the index, so
// that a payload archived by an earlier run is still found (and stored
// once); one made up is mostly not in it.
func TestDigestFilterReloaded(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 6, Hosts: 3, Pages: 40})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, cfg)
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	if err := index.Digests(c.db, func(d string) {
		n++
		if !c.digests.TestString(d) {
			t.Errorf("digest %s of the index is not in the filter", d)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("only %d digests in the index", n)
	}
	absent := 0
	for i := range 1000 {
		if !c.digests.TestString(fmt.Sprintf("sha1:NOTARCHIVED%d", i)) {
			absent++
		}
	}
	if absent < 950 {
		t.Errorf("only %d of 1000 made-up digests are absent from the filter", absent)
	}
}

// TestMediaType: the media type is mime.ParseMediaType's when it parses,
// and the part before parameters otherwise.
func TestMediaType(t *testing.T) {
	for _, ct := range []string{"text/html", "Text/HTML; charset=UTF-8", " text/css ;charset=x", "text/html; charset=a; charset=b",
		"text/html; =bad", "application/xhtml+xml;", "image/png ", "garbage", "a/b/c; x=1", "text/html;charset=\"utf-8\""} {
		want, _, err := mime.ParseMediaType(ct)
		if err != nil {
			want = strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
		}
		if got := mediaType(http.Header{"Content-Type": {ct}}, nil); got != want {
			t.Errorf("mediaType(%q) = %q, want %q", ct, got, want)
		}
	}
}

// A body size no record could hold is refused up front, not discovered
// when the archive cannot read its own records back.
func TestOpenRefusesUnreadableBodySize(t *testing.T) {
	for _, size := range []int64{warc.MaxBlock, 4 << 30} {
		c, err := Open(Config{Data: t.TempDir(), MaxBodySize: size})
		if err == nil {
			c.Close()
			t.Errorf("Open took MaxBodySize %d", size)
		} else if !strings.Contains(err.Error(), "body size") {
			t.Errorf("MaxBodySize %d: %v", size, err)
		}
	}
	c, err := Open(Config{Data: t.TempDir(), MaxBodySize: 512 << 20})
	if err != nil {
		t.Fatalf("MaxBodySize of 512 MiB: %v", err)
	}
	c.Close()
}
