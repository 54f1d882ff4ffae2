package replay

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/websim"
)

// chromium finds Debian's chromium. CI installs it (.ci/run); elsewhere the
// browser test is skipped when it is missing.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("WAGGLE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs it")
	}
	t.Skip("chromium not installed (apt-get install chromium)")
	return ""
}

// artifactDir is where the browser test leaves its screenshots.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("WAGGLE_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "waggle-test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// request is one request the browser made, as the DevTools protocol saw it.
type request struct {
	url    string
	kind   network.ResourceType
	status int64
	mime   string
}

// TestBrowserReplay crawls the synthetic web, then replays it in a real
// browser: the page's images and CSS come from the archive, a click on a
// link stays in the archive at the same date, and no request leaves the
// node — the browser's proxy is a trap that records anything sent to a host
// other than loopback.
func TestBrowserReplay(t *testing.T) {
	exe := chromium(t)
	if testing.Short() {
		t.Skip("browser test in -short mode")
	}

	// An archive of one simulated site, with its page requisites.
	web := websim.New(websim.Config{Seed: 7, Hosts: 12, Pages: 120})
	sim, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	data := t.TempDir()
	seed := web.Seeds()[0]
	c, err := crawl.Open(crawl.Config{Data: data, Seeds: []string{seed}, Scope: crawl.ScopeHost, MaxPages: 120,
		NoDelay: true, Proxy: sim.URL(), AllowPrivate: true, MaxCrawlDelay: time.Millisecond, Workers: 8, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sim.Close() // from here on the simulated web is gone: only the archive can answer

	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	idx := index.New(db)
	uiLn, contentLn, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Archive: archive.NewLocal(idx, filepath.Join(data, "warc")), UIAddr: uiLn.Addr().String(), ContentAddr: contentLn.Addr().String()})
	go Serve(ctx, srv, uiLn, contentLn)
	ui, content := "http://"+uiLn.Addr().String(), "http://"+contentLn.Addr().String()

	// The trap: any request for a host that is not loopback goes to this
	// proxy and is recorded.
	var trapMu sync.Mutex
	var escaped []string
	trapLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trap := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if browserService(r.Host) {
			t.Logf("chromium's own background request (not the page's): %s %s", r.Method, r.Host)
		} else {
			trapMu.Lock()
			escaped = append(escaped, r.Method+" "+r.RequestURI)
			trapMu.Unlock()
		}
		http.Error(w, "the replayed page tried to reach the live web", http.StatusForbidden)
	})}
	go trap.Serve(trapLn)
	defer trap.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-features", "NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter,AutofillServerCommunication"),
		chromedp.Flag("disable-site-isolation-trials", true), // keep the replay iframe in the page's process, for DevTools' node queries
		chromedp.ProxyServer("http://"+trapLn.Addr().String()),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	var mu sync.Mutex
	reqs := map[network.RequestID]*request{}
	if err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			reqs[e.RequestID] = &request{url: e.Request.URL, kind: e.Type}
		case *network.EventResponseReceived:
			if r := reqs[e.RequestID]; r != nil {
				r.status, r.mime = e.Response.Status, e.Response.MimeType
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() []request {
		mu.Lock()
		defer mu.Unlock()
		var out []request
		for _, r := range reqs {
			out = append(out, *r)
		}
		return out
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	dir := artifactDir(t)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ui+"/web/*/"+seed),
		chromedp.WaitVisible(chromedp.CSS("#calendar")),
	); err != nil {
		t.Fatal(err)
	}
	calendarPNG, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	must(err)
	start := ui + "/web/2/" + seed // the oldest capture, by a partial timestamp
	must(chromedp.Do(bctx, chromedp.Navigate(start), chromedp.WaitVisible(chromedp.CSS("#wb-frame"))))
	frames, err := chromedp.Run(bctx, chromedp.Nodes(chromedp.CSS("#wb-frame")))
	must(err)
	inFrame := chromedp.FromNode(frames[0])
	// Wait for the framed page's header image (the site logo) and the banner.
	must(chromedp.Do(bctx,
		chromedp.WaitVisible(chromedp.CSS("header img"), inFrame),
		chromedp.Sleep(time.Second), // let late subresources finish; the assertions below do not depend on it
	))
	pagePNG, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	must(err)
	topURL, err := chromedp.Run(bctx, chromedp.Location())
	must(err)
	pageTS := strings.SplitN(strings.TrimPrefix(topURL, ui+"/web/"), "/", 2)[0]
	if len(pageTS) != 14 {
		t.Fatalf("the banner frame is at %s; want /web/<14-digit timestamp>/…", topURL)
	}

	// The page's images and stylesheet were loaded, from the archive.
	var images, styles int
	for _, r := range snapshot() {
		if !strings.HasPrefix(r.url, content+"/web/") {
			continue
		}
		switch {
		case r.kind == network.ResourceTypeImage && strings.Contains(r.url, "im_/") && r.status == 200:
			images++
		case r.kind == network.ResourceTypeStylesheet && strings.Contains(r.url, "cs_/") && r.status == 200 && r.mime == "text/css":
			styles++
		}
	}
	if images == 0 || styles == 0 {
		t.Errorf("replayed page loaded %d images and %d stylesheets from the archive; want both: %+v", images, styles, snapshot())
	}

	// Click the first navigation link inside the archived page.
	attr, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS("header nav a"), "href", inFrame))
	must(err)
	href := attr.Value
	if !strings.HasPrefix(href, "/web/"+pageTS+"mp_/http://") {
		t.Errorf("link in the replayed page is %q; want it rewritten to /web/%smp_/…", href, pageTS)
	}
	target := strings.TrimPrefix(href, "/web/"+pageTS+"mp_/")
	must(chromedp.Do(bctx, chromedp.Click(chromedp.CSS("header nav a"), inFrame)))
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`location.pathname.indexOf(`+jsString("/"+target)+`) > 0`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		loc, _ := chromedp.Run(bctx, chromedp.Location())
		t.Fatalf("after the click the banner did not follow to %s (it is at %s): %v", target, loc, err)
	}
	must(chromedp.Do(bctx, chromedp.Sleep(time.Second)))
	clickedPNG, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	must(err)
	topURL, err = chromedp.Run(bctx, chromedp.Location())
	must(err)
	clickedTS := strings.SplitN(strings.TrimPrefix(topURL, ui+"/web/"), "/", 2)[0]
	if d := tsDistance(t, pageTS, clickedTS); d > time.Hour {
		t.Errorf("clicked from a page of %s to one of %s: the archive should stay at the same date", pageTS, clickedTS)
	}

	for _, r := range snapshot() {
		if !strings.HasPrefix(r.url, ui+"/") && !strings.HasPrefix(r.url, content+"/") && !strings.HasPrefix(r.url, "data:") {
			t.Errorf("the browser requested %s (%s), outside the node", r.url, r.kind)
		}
	}
	trapMu.Lock()
	if len(escaped) > 0 {
		t.Errorf("requests reached for the live web: %v", escaped)
	}
	trapMu.Unlock()

	for name, png := range map[string][]byte{"calendar.png": calendarPNG, "replayed-page.png": pagePNG, "after-click.png": clickedPNG} {
		if len(png) == 0 {
			t.Errorf("no screenshot %s", name)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// browserService reports the hosts Chromium itself calls home to (component
// updates, network time, account checks) whatever page it shows; the flags
// above silence most of it, and what is left is not the replayed page's doing.
func browserService(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	for _, d := range []string{"google.com", "googleapis.com", "gvt1.com", "gstatic.com"} {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

func tsDistance(t *testing.T, a, b string) time.Duration {
	ta, err1 := index.ParseTimestamp(a, false)
	tb, err2 := index.ParseTimestamp(b, false)
	if err1 != nil || err2 != nil {
		t.Fatalf("timestamps %q %q", a, b)
	}
	d := ta.Sub(tb)
	if d < 0 {
		d = -d
	}
	return d
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
