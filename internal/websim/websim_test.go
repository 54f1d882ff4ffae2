package websim

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/robots"
	"golang.org/x/net/html"
)

// get serves one request for rawURL (absolute form) with optional header
// name/value pairs.
func get(w *Web, rawURL string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, rawURL, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	return rec
}

// outcome follows redirects from u and reports the final status and URL,
// or loop if the redirects go round.
func outcome(t *testing.T, w *Web, u string) (status int, final string, codes []int, loop bool) {
	t.Helper()
	seen := map[string]bool{}
	for !seen[u] && len(seen) < 10 {
		seen[u] = true
		rec := get(w, u)
		if rec.Code < 300 || rec.Code > 399 {
			return rec.Code, u, codes, false
		}
		codes = append(codes, rec.Code)
		base, _ := url.Parse(u)
		next, err := base.Parse(rec.Header().Get("Location"))
		if err != nil {
			t.Fatalf("%s: bad Location %q: %v", u, rec.Header().Get("Location"), err)
		}
		u = next.String()
	}
	return 0, u, codes, true
}

var cssURL = regexp.MustCompile(`url\(\s*['"]?([^'")\s]+)['"]?\s*\)`)

// links returns the references in an HTML document as written, with the
// document's base URL, and counts what kinds of reference it saw.
func links(t *testing.T, pageURL string, body []byte, seen map[string]int) (base *url.URL, refs []string) {
	t.Helper()
	base, err := url.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	z := html.NewTokenizer(bytes.NewReader(body))
	inStyle := false
	for {
		switch z.Next() {
		case html.ErrorToken:
			if z.Err() != io.EOF {
				t.Fatalf("%s: %v", pageURL, z.Err())
			}
			return base, refs
		case html.TextToken:
			if inStyle {
				for _, m := range cssURL.FindAllStringSubmatch(string(z.Text()), -1) {
					refs = append(refs, m[1])
					seen["style-element"]++
				}
			}
		case html.EndTagToken:
			inStyle = false
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			inStyle = tok.Data == "style"
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Key] = a.Val
			}
			for _, k := range []string{"href", "src"} {
				if v, ok := attr[k]; ok {
					if tok.Data == "base" {
						b, err := base.Parse(v)
						if err != nil {
							t.Fatalf("%s: bad base %q", pageURL, v)
						}
						base = b
						seen["base"]++
						continue
					}
					refs = append(refs, v)
					seen[tok.Data]++
				}
			}
			if v, ok := attr["srcset"]; ok {
				for _, c := range strings.Split(v, ",") {
					refs = append(refs, strings.Fields(c)[0])
				}
				seen["srcset"]++
			}
			if strings.EqualFold(attr["http-equiv"], "refresh") {
				_, u, ok := strings.Cut(attr["content"], "url=")
				if ok {
					refs = append(refs, u)
					seen["meta-refresh"]++
				}
			}
			for _, m := range cssURL.FindAllStringSubmatch(attr["style"], -1) {
				refs = append(refs, m[1])
				seen["style-attribute"]++
			}
		}
	}
}

// intended returns what each purposely broken URL answers: 404, 500 or -1
// for a redirect loop.
func intended(w *Web) map[string]int {
	m := map[string]int{}
	for _, h := range w.hosts {
		for _, p := range h.dead {
			m["http://"+h.name+p] = 404
		}
		for _, p := range h.failing {
			m["http://"+h.name+p] = 500
		}
		for _, p := range h.loop {
			m["http://"+h.name+p] = -1
		}
	}
	return m
}

// TestEveryLinkResolves checks every reference on every page, on the pages
// and style sheets they lead to, and on the pages those lead to: each is
// served by a known host and answers 200 (after redirects), except the
// purposely broken ones, which answer as intended.
func TestEveryLinkResolves(t *testing.T) {
	w := New(Config{Seed: 2, Hosts: 80, Pages: 1200, SlowDelay: time.Millisecond})
	want := intended(w)
	got := map[string]int{}
	seen := map[string]int{}
	type item struct {
		url   string
		depth int
	}
	var queue []item
	visited := map[string]bool{}  // link targets checked
	expanded := map[string]bool{} // documents whose links are checked
	for _, p := range w.Pages() {
		queue = append(queue, item{p, 0})
		visited[p], expanded[p] = true, true
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		rec := get(w, it.url)
		if rec.Code != 200 {
			t.Fatalf("%s: status %d", it.url, rec.Code)
		}
		var base *url.URL
		var refs []string
		switch ct := rec.Header().Get("Content-Type"); {
		case strings.HasPrefix(ct, "text/html"):
			base, refs = links(t, it.url, rec.Body.Bytes(), seen)
		case strings.HasPrefix(ct, "text/css"):
			base, _ = url.Parse(it.url)
			for _, m := range cssURL.FindAllStringSubmatch(rec.Body.String(), -1) {
				refs = append(refs, m[1])
				seen["css-url"]++
			}
		default:
			continue
		}
		for _, ref := range refs {
			switch {
			case strings.HasPrefix(ref, "//"):
				seen["scheme-relative"]++
			case strings.HasPrefix(ref, "http://"):
				seen["absolute"]++
			case strings.HasPrefix(ref, "/"):
				seen["root-relative"]++
			case strings.HasPrefix(ref, "#"):
				seen["fragment-only"]++
			default:
				seen["relative"]++
			}
			u, err := base.Parse(ref)
			if err != nil {
				t.Fatalf("%s: bad reference %q: %v", it.url, ref, err)
			}
			if u.Fragment != "" {
				seen["fragment"]++
			}
			if u.RawQuery != "" {
				seen["query"]++
			}
			u.Fragment = ""
			target := u.String()
			if u.Hostname() != base.Hostname() {
				seen["cross-host"]++
			}
			if w.byHost[u.Hostname()] == nil {
				t.Fatalf("%s links to unknown host: %s", it.url, target)
			}
			if visited[target] {
				continue
			}
			visited[target] = true
			status, final, codes, loop := outcome(t, w, target)
			for _, c := range codes {
				seen["redirect-"+http.StatusText(c)]++
			}
			switch {
			case loop:
				got[target] = -1
			case status != 200:
				got[target] = status
			case it.depth < 2 && !expanded[final]:
				expanded[final] = true
				queue = append(queue, item{final, it.depth + 1})
			}
			if !loop && status != 200 && status != want[target] {
				t.Errorf("%s links to %s: status %d", it.url, target, status)
			}
			if loop && want[target] != -1 {
				t.Errorf("%s links to %s: unintended redirect loop", it.url, target)
			}
		}
	}
	for u, status := range want {
		if got[u] != status {
			t.Errorf("%s: want %d, got %d (or not linked)", u, status, got[u])
		}
	}
	for _, k := range []string{
		"a", "img", "link", "script", "iframe", "base", "srcset", "meta-refresh", "style-element",
		"style-attribute", "css-url", "scheme-relative", "absolute", "root-relative", "relative",
		"fragment", "fragment-only", "query", "cross-host",
		"redirect-Moved Permanently", "redirect-Found", "redirect-Temporary Redirect", "redirect-Permanent Redirect",
	} {
		if seen[k] == 0 {
			t.Errorf("no %s reference anywhere in the web", k)
		}
	}
	t.Logf("references seen: %v", seen)
}

// robotsFetch serves w's robots.txt files to a robots.Cache, which
// follows their redirects itself.
func robotsFetch(w *Web) robots.FetchFunc {
	return func(_ context.Context, u string) (int, []byte, string, error) {
		rec := get(w, u)
		loc := ""
		if l := rec.Header().Get("Location"); l != "" {
			base, _ := url.Parse(u)
			if next, err := base.Parse(l); err == nil {
				loc = next.String()
			}
		}
		return rec.Code, rec.Body.Bytes(), loc, nil
	}
}

// canonical is what a careful crawler does to a URL before queueing it: it
// drops the fragment and the session ids.
func canonical(u *url.URL) string {
	c := *u
	c.Fragment = ""
	c.Path = stripSession(c.Path)
	c.RawPath = ""
	c.RawQuery = filterQuery(c.RawQuery)
	return c.String()
}

// TestPagesReachableFromSeeds crawls the web from Seeds as a polite crawler
// would, obeying robots.txt and bounding each host, and checks that it
// finds every page of Pages, that Pages holds only 200 HTML pages robots.txt
// allows, and that robots.txt did keep it out of some linked pages.
func TestPagesReachableFromSeeds(t *testing.T) {
	w := New(Config{Seed: 3, Hosts: 60, Pages: 900, SlowDelay: time.Millisecond})
	rules := robots.New(robotsFetch(w), robots.Options{UserAgent: "waggle"})
	allowed := func(u *url.URL) bool {
		d, err := rules.Check(context.Background(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	budget := map[string]int{}
	for _, h := range w.hosts {
		budget[h.name] = 2*len(h.pages) + 100
	}
	fetched := map[string]bool{}
	queued := map[string]bool{}
	queue := w.Seeds()
	blocked := 0
	for _, s := range queue {
		queued[s] = true
	}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		pu, _ := url.Parse(u)
		if budget[pu.Host] <= 0 {
			continue
		}
		budget[pu.Host]--
		if !allowed(pu) {
			blocked++
			continue
		}
		rec := get(w, u)
		fetched[u] = true
		if strings.Contains(u, "/private/") {
			t.Errorf("fetched %s, which robots.txt disallows", u)
		}
		var refs []string
		base := pu
		switch {
		case rec.Code >= 300 && rec.Code < 400:
			refs = []string{rec.Header().Get("Location")}
		case rec.Code == 200 && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html"):
			base, refs = links(t, u, rec.Body.Bytes(), map[string]int{})
		}
		for _, ref := range refs {
			v, err := base.Parse(ref)
			if err != nil {
				t.Fatalf("%s: bad reference %q", u, ref)
			}
			c := canonical(v)
			if !queued[c] && strings.Count(v.Path, "/") < 12 {
				queued[c] = true
				queue = append(queue, c)
			}
		}
	}
	for _, p := range w.Pages() {
		pu, _ := url.Parse(p)
		if !fetched[p] {
			t.Errorf("page %s not reached from the seeds", p)
		}
		if !allowed(pu) {
			t.Errorf("page %s is disallowed by robots.txt", p)
		}
		rec := get(w, p)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("page %s: status %d, type %q", p, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	if blocked == 0 {
		t.Error("robots.txt blocked nothing, but some hosts disallow /private/ and link to it")
	}
}

func TestShape(t *testing.T) {
	w := New(Config{Seed: 1})
	hosts, pages := w.Hosts(), w.Pages()
	if len(hosts) != 300 || len(pages) != 6000 {
		t.Fatalf("%d hosts, %d pages; want the defaults 300 and 6000", len(hosts), len(pages))
	}
	domains := map[string][]string{}
	for _, h := range hosts {
		if !strings.HasSuffix(h, ".test") {
			t.Errorf("host %s is not under .test", h)
		}
		parts := strings.Split(h, ".")
		d := strings.Join(parts[len(parts)-2:], ".")
		domains[d] = append(domains[d], h)
	}
	shared := 0
	for _, hs := range domains {
		if len(hs) > 1 {
			shared++
		}
	}
	if shared < 10 {
		t.Errorf("only %d registrable domains have more than one host", shared)
	}
	if len(w.Seeds()) != 5 {
		t.Errorf("seeds: %v", w.Seeds())
	}

	// Zipf: the biggest host has many times the pages of the median one.
	perHost := map[string]int{}
	for _, p := range pages {
		u, _ := url.Parse(p)
		perHost[u.Host]++
	}
	var counts []int
	for _, n := range perHost {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	biggest, median := counts[len(counts)-1], counts[len(counts)/2]
	t.Logf("pages per host: biggest %d, median %d, over %d hosts", biggest, median, len(counts))
	if biggest < 20*median {
		t.Errorf("biggest host has %d pages, median %d: not skewed", biggest, median)
	}
	if seed := w.Seeds()[0]; perHost[strings.TrimSuffix(strings.TrimPrefix(seed, "http://"), "/")] != biggest {
		t.Errorf("first seed %s is not the biggest host", seed)
	}
}

func TestSmallConfigs(t *testing.T) {
	for _, cfg := range []Config{{Hosts: 1, Pages: 1}, {Hosts: 3, Pages: 10}, {Hosts: 10, Pages: 5}} {
		w := New(cfg)
		if len(w.Hosts()) != cfg.Hosts {
			t.Errorf("%+v: %d hosts", cfg, len(w.Hosts()))
		}
		if len(w.Seeds()) == 0 || len(w.Pages()) == 0 {
			t.Fatalf("%+v: seeds %v, pages %v", cfg, w.Seeds(), w.Pages())
		}
		for _, p := range w.Pages() {
			if rec := get(w, p); rec.Code != 200 {
				t.Errorf("%+v: %s: %d", cfg, p, rec.Code)
			}
		}
	}
}

// snapshot fetches every page and returns body, ETag and Last-Modified.
func snapshot(w *Web) map[string][3]string {
	m := map[string][3]string{}
	for _, p := range w.Pages() {
		rec := get(w, p)
		m[p] = [3]string{rec.Body.String(), rec.Header().Get("ETag"), rec.Header().Get("Last-Modified")}
	}
	return m
}

func TestDeterminism(t *testing.T) {
	cfg := Config{Seed: 42, Hosts: 40, Pages: 400, SlowDelay: time.Millisecond}
	a, b := New(cfg), New(cfg)
	if !slices.Equal(a.Hosts(), b.Hosts()) || !slices.Equal(a.Pages(), b.Pages()) || !slices.Equal(a.Seeds(), b.Seeds()) {
		t.Fatal("same config, different structure")
	}
	// Every resource of every host, including media, files and robots.txt,
	// with and without gzip.
	n := 0
	for _, h := range a.hosts {
		for key := range h.res {
			u := "http://" + h.name + key
			for _, enc := range []string{"", "gzip"} {
				ra, rb := get(a, u, "Accept-Encoding", enc), get(b, u, "Accept-Encoding", enc)
				if ra.Code != rb.Code || !bytes.Equal(ra.Body.Bytes(), rb.Body.Bytes()) || ra.Header().Get("ETag") != rb.Header().Get("ETag") ||
					ra.Header().Get("Last-Modified") != rb.Header().Get("Last-Modified") {
					t.Fatalf("%s (encoding %q) differs between two Webs of the same config", u, enc)
				}
				n++
			}
		}
	}
	// Traps too, given the same requests in the same order.
	for _, h := range a.hosts {
		for _, path := range []string{"/shop/", "/store", "/calendar/2026/11", "/a/a/"} {
			ra, rb := get(a, "http://"+h.name+path), get(b, "http://"+h.name+path)
			if ra.Code != rb.Code || !bytes.Equal(ra.Body.Bytes(), rb.Body.Bytes()) {
				t.Fatalf("%s%s differs", h.name, path)
			}
		}
	}
	t.Logf("%d responses compared", n)

	c := New(Config{Seed: 43, Hosts: 40, Pages: 400})
	if slices.Equal(a.Hosts(), c.Hosts()) {
		t.Error("seeds 42 and 43 give the same host names")
	}
	if bytes.Equal(get(a, a.Seeds()[0]).Body.Bytes(), get(c, c.Seeds()[0]).Body.Bytes()) {
		t.Error("seeds 42 and 43 give the same home page")
	}
}

func TestVersion(t *testing.T) {
	w := New(Config{Seed: 5, Hosts: 50, Pages: 3000})
	v0 := snapshot(w)
	w.SetVersion(1)
	v1 := snapshot(w)
	changed := map[string]bool{}
	for p, a := range v0 {
		b := v1[p]
		if a[0] == b[0] {
			if a[1] != b[1] || a[2] != b[2] {
				t.Errorf("%s: same body, new validators", p)
			}
			// Both validators still match: 304.
			if rec := get(w, p, "If-None-Match", a[1]); rec.Code != 304 || rec.Body.Len() != 0 {
				t.Errorf("%s unchanged, If-None-Match: %d", p, rec.Code)
			}
			if rec := get(w, p, "If-Modified-Since", a[2]); rec.Code != 304 {
				t.Errorf("%s unchanged, If-Modified-Since: %d", p, rec.Code)
			}
			continue
		}
		changed[p] = true
		if a[1] == b[1] {
			t.Errorf("%s changed but kept its ETag", p)
		}
		t0, _ := http.ParseTime(a[2])
		t1, _ := http.ParseTime(b[2])
		if !t1.After(t0) {
			t.Errorf("%s changed but Last-Modified went from %s to %s", p, a[2], b[2])
		}
		if rec := get(w, p, "If-None-Match", a[1]); rec.Code != 200 {
			t.Errorf("%s changed, If-None-Match with the old ETag: %d", p, rec.Code)
		}
		if rec := get(w, p, "If-Modified-Since", a[2]); rec.Code != 200 {
			t.Errorf("%s changed, If-Modified-Since the old date: %d", p, rec.Code)
		}
	}
	t.Logf("version 0→1 changed %d of %d pages", len(changed), len(v0))
	if n := len(changed); n < len(v0)/300 || n > len(v0)/30 {
		t.Errorf("version 0→1 changed %d of %d pages, want about 1%%", n, len(v0))
	}

	// The next step changes a different ~1%.
	w.SetVersion(2)
	again := 0
	for p, b := range snapshot(w) {
		if b[0] != v1[p][0] && changed[p] {
			again++
		}
	}
	if again == len(changed) {
		t.Error("version 1→2 changed exactly the pages 0→1 did")
	}
	// Going back gives back the same bytes.
	w.SetVersion(0)
	for p, b := range snapshot(w) {
		if b != v0[p] {
			t.Fatalf("%s differs after going back to version 0", p)
		}
	}
	// The gzip form has a weak ETag that conditional requests also match.
	p := w.Pages()[0]
	rec := get(w, p, "Accept-Encoding", "gzip")
	if rec.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(rec.Header().Get("ETag"), `W/"`) {
		t.Fatalf("gzip response: %v", rec.Header())
	}
	if rec := get(w, p, "Accept-Encoding", "gzip", "If-None-Match", rec.Header().Get("ETag")); rec.Code != 304 {
		t.Errorf("If-None-Match with the weak ETag: %d", rec.Code)
	}
}

func TestHeadAndGzip(t *testing.T) {
	w := New(Config{Seed: 6, Hosts: 10, Pages: 50})
	p := w.Pages()[0]
	before := w.Requests()
	full := get(w, p)
	if n := w.Requests() - before; n != 1 {
		t.Errorf("one request counted as %d", n)
	}
	req := httptest.NewRequest(http.MethodHead, p, nil)
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != full.Header().Get("Content-Length") {
		t.Errorf("HEAD: %d, %d body bytes, length %q (GET: %q)", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"), full.Header().Get("Content-Length"))
	}
	gz := get(w, p, "Accept-Encoding", "deflate, gzip;q=0.8")
	if gz.Header().Get("Content-Encoding") != "gzip" || gz.Body.Len() >= full.Body.Len() {
		t.Fatalf("gzip: encoding %q, %d bytes vs %d", gz.Header().Get("Content-Encoding"), gz.Body.Len(), full.Body.Len())
	}
	if get(w, p, "Accept-Encoding", "gzip;q=0").Header().Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 was answered with gzip")
	}
	// Images are not compressed.
	img := get(w, "http://"+w.hosts[1].name+"/img/logo.png", "Accept-Encoding", "gzip")
	if img.Code != 200 || img.Header().Get("Content-Type") != "image/png" || img.Header().Get("Content-Encoding") != "" {
		t.Errorf("logo: %d %v", img.Code, img.Header())
	}
	if rec := get(w, p, "Range", "bytes=0-9"); rec.Code != http.StatusPartialContent || rec.Body.String() != full.Body.String()[:10] {
		t.Errorf("range: %d %q", rec.Code, rec.Body.String())
	}
	post := httptest.NewRecorder()
	w.ServeHTTP(post, httptest.NewRequest(http.MethodPost, p, nil))
	if post.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", post.Code)
	}
}

func TestTraps(t *testing.T) {
	w := New(Config{Seed: 7, Hosts: 120, Pages: 600})
	find := func(f feature) *host {
		for _, h := range w.hosts {
			if h.feat&f != 0 {
				return h
			}
		}
		t.Fatalf("no host with feature %b", f)
		return nil
	}
	// follow takes the first link whose text contains text, n times, and
	// returns the distinct URLs it went through.
	follow := func(start, text string, n int) map[string]bool {
		seen := map[string]bool{}
		u := start
		for range n {
			rec := get(w, u)
			if rec.Code != 200 {
				t.Fatalf("%s: %d", u, rec.Code)
			}
			seen[u] = true
			base, _ := url.Parse(u)
			z := html.NewTokenizer(rec.Body)
			next := ""
			for next == "" {
				tt := z.Next()
				if tt == html.ErrorToken {
					t.Fatalf("%s: no link %q", u, text)
				}
				if tok := z.Token(); tt == html.StartTagToken && tok.Data == "a" {
					href := tok.Attr[0].Val
					if z.Next() == html.TextToken && strings.Contains(string(z.Text()), text) {
						v, _ := base.Parse(href)
						next = v.String()
					}
				}
			}
			u = next
		}
		return seen
	}
	cal := find(featCalendar)
	if got := follow("http://"+cal.name+"/calendar/2026/11", "→", 60); len(got) != 60 || !got["http://"+cal.name+"/calendar/2031/10"] {
		t.Errorf("calendar: %d distinct months, want 60 through October 2031", len(got))
	}
	if get(w, "http://"+cal.name+"/calendar/2026/13").Code != 404 || get(w, "http://"+cal.name+"/calendar/26/1").Code != 404 {
		t.Error("calendar serves invalid months")
	}
	deep := find(featDeep)
	if got := follow("http://"+deep.name+"/a/", "Older", 50); len(got) != 50 || !got["http://"+deep.name+strings.Repeat("/a", 50)+"/"] {
		t.Errorf("deep path: %d distinct levels", len(got))
	}
	// Session ids: every response hands out a new one, and every link
	// carrying one works.
	for _, tc := range []struct {
		f     feature
		start string
		sid   *regexp.Regexp
	}{
		{featJSession, "/shop/", regexp.MustCompile(`;jsessionid=([0-9A-F]{32})`)},
		{featSID, "/store", regexp.MustCompile(`sid=([0-9A-F]{32})`)},
	} {
		h := find(tc.f)
		u := "http://" + h.name + tc.start
		a, b := get(w, u), get(w, u)
		sa, sb := tc.sid.FindStringSubmatch(a.Body.String()), tc.sid.FindStringSubmatch(b.Body.String())
		if sa == nil || sb == nil || sa[1] == sb[1] {
			t.Fatalf("%s: session ids %v and %v", u, sa, sb)
		}
		if got := follow(u, "Item", 20); len(got) != 20 {
			t.Errorf("%s: %d distinct URLs in 20 steps", u, len(got))
		}
		base, refs := links(t, u, a.Body.Bytes(), map[string]int{})
		for _, ref := range refs {
			v, _ := base.Parse(ref)
			if !tc.sid.MatchString(ref) {
				t.Errorf("%s: link %s has no session id", u, ref)
			}
			if rec := get(w, v.String()); rec.Code != 200 {
				t.Errorf("%s: %d", v, rec.Code)
			}
		}
	}
	// The session-id trap leads back into the site under the session id:
	// the same page, at another URL.
	h := find(featJSession)
	if a, b := get(w, "http://"+h.name+"/"), get(w, "http://"+h.name+"/;jsessionid=0123"); b.Code != 200 || a.Body.String() != b.Body.String() {
		t.Errorf("home page under a session id: %d", b.Code)
	}
}

func TestSlowURLs(t *testing.T) {
	w := New(Config{Seed: 8, Hosts: 120, Pages: 600, SlowDelay: time.Hour})
	var slow string
	for _, h := range w.hosts {
		if len(h.slow) > 0 {
			if h.rank < len(w.Seeds()) {
				t.Errorf("slow URL on big host %s", h.name)
			}
			slow = "http://" + h.name + h.slow[0]
		}
	}
	if slow == "" {
		t.Fatal("no slow URL")
	}
	if slices.Contains(w.Pages(), slow) {
		t.Errorf("slow URL %s in Pages", slow)
	}
	// A client that gives up makes the handler return at once, long before
	// the hour is up.
	req := httptest.NewRequest(http.MethodGet, slow, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req.WithContext(ctx))
		done <- rec.Body.Len()
	}()
	cancel()
	if n := <-done; n != 0 {
		t.Errorf("slow URL sent %d bytes to a client that had gone", n)
	}
	w2 := New(Config{Seed: 8, Hosts: 120, Pages: 600, SlowDelay: time.Millisecond})
	if rec := get(w2, slow); rec.Code != 200 {
		t.Errorf("slow URL: %d", rec.Code)
	}
}

func TestUnknownHostAndConnect(t *testing.T) {
	w := New(Config{Seed: 9, Hosts: 5, Pages: 20})
	if rec := get(w, "http://example.com/"); rec.Code != http.StatusBadGateway {
		t.Errorf("unknown host: %d", rec.Code)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host = strings.ToUpper(w.Hosts()[0]) + ":80"
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("origin-form request with Host %s: %d", req.Host, rec.Code)
	}
	req = httptest.NewRequest(http.MethodConnect, "http://"+w.Hosts()[0]+":443", nil)
	rec = httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(rec.Body.String(), "http") {
		t.Errorf("CONNECT: %d %q", rec.Code, rec.Body.String())
	}
}

func TestQueryFiltering(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"id=5":                           "id=5",
		"sid=AB&item=3":                  "item=3",
		"item=3&sid=AB":                  "item=3",
		"utm_source=x.test&utm_medium=r": "",
		"id=5&utm_source=x":              "id=5",
		"consider=1":                     "consider=1",
	} {
		if got := filterQuery(in); got != want {
			t.Errorf("filterQuery(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"/":                          "/",
		"/;jsessionid=AB":            "/",
		"/shop/;jsessionid=AB":       "/shop/",
		"/shop/item-3;jsessionid=AB": "/shop/item-3",
		"/a;jsessionid=AB/b":         "/a/b",
	} {
		if got := stripSession(in); got != want {
			t.Errorf("stripSession(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{
		"gzip": true, "deflate, gzip": true, "GZIP;q=0.5": true, "gzip;q=0": false, "gzip; q=0.000": false,
		"": false, "br": false, "x-gzip": false, "gzip;q=1.0": true,
	} {
		if got := acceptsGzip(in); got != want {
			t.Errorf("acceptsGzip(%q) = %v", in, got)
		}
	}
}

func TestRelative(t *testing.T) {
	for _, tc := range []struct{ dir, target, want string }{
		{"/", "/", "./"},
		{"/news/", "/", "../"},
		{"/news/", "/news/a.html", "a.html"},
		{"/news/2019/03/", "/people/x/", "../../../people/x/"},
		{"/news/", "/news/item?id=5", "item?id=5"},
		{"/news/", "/newsletter/", "../newsletter/"},
	} {
		got := relative(tc.dir, tc.target)
		if got != tc.want {
			t.Errorf("relative(%q, %q) = %q, want %q", tc.dir, tc.target, got, tc.want)
		}
		base, _ := url.Parse("http://h.test" + tc.dir)
		if r, _ := base.Parse(got); r.RequestURI() != tc.target {
			t.Errorf("%q from %q resolves to %q", got, tc.dir, r.RequestURI())
		}
	}
}

// TestConcurrentVersion serves pages while the version flips: every
// response is whole and belongs to one of the two versions.
func TestConcurrentVersion(t *testing.T) {
	w := New(Config{Seed: 10, Hosts: 20, Pages: 400})
	v0 := snapshot(w)
	w.SetVersion(1)
	v1 := snapshot(w)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			w.SetVersion(i % 2)
		}
	}()
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			for _, p := range w.Pages() {
				rec := get(w, p)
				got := [3]string{rec.Body.String(), rec.Header().Get("ETag"), rec.Header().Get("Last-Modified")}
				if got != v0[p] && got != v1[p] {
					errs <- p
					return
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if p := <-errs; p != "" {
			t.Errorf("%s: response matches neither version", p)
		}
	}
	<-done
}
