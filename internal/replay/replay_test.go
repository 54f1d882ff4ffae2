package replay

import (
	"crypto/sha1"
	"encoding/base32"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

const page1 = `<!doctype html><html><head><title>Example</title><link rel="stylesheet" href="/style.css"></head>
<body style="background:url('/bg.png')"><a href="/about">About</a> <a href="http://other.example/x">Other</a>
<img src="logo.png" srcset="logo.png 1x, /logo2.png 2x"><script src="app.js"></script></body></html>`

const page2 = `<!doctype html><html><head><title>Example, March</title></head><body><img src="/logo.png"><a href="/about#team">About</a></body></html>`

func exampleArchive(t *testing.T) *testArchive {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	return newTestArchive(t, []fixture{
		{url: "http://example.com/logo.png", at: "20231201000000", header: "Content-Type: image/png\r\n", body: "PNG-december"},
		{url: "http://example.com/", at: "20240101120000", header: html, body: page1},
		{url: "http://example.com/style.css", at: "20240101120001", header: "Content-Type: text/css\r\n", body: `body{background:url(/bg.png)} @import "print.css";`},
		{url: "http://example.com/redirect", at: "20240101120000", status: 301, header: "Location: /about\r\n"},
		{url: "http://example.com/about", at: "20240102000000", header: html, body: "<p>about us</p>"},
		{url: "http://example.com/logo.png", at: "20240201000000", header: "Content-Type: image/png\r\n", body: "PNG-february"},
		{url: "http://example.com/", at: "20240301120000", header: html + "Set-Cookie: session=1\r\nContent-Security-Policy: default-src *\r\n", body: page2},
		{url: "http://example.com/", at: "20240601120000", header: html + "X-Served-By: june\r\n", body: page2, revisit: true},
		{url: "http://example.com/zipped", at: "20240101120000", header: html, body: "<p>compressed <a href='/about'>a</a></p>", gzip: true},
	})
}

func TestFrameRedirectsToExactCapture(t *testing.T) {
	a := exampleArchive(t)
	for _, tc := range []struct{ ts, want string }{
		{"2024", "/web/20240101120000/http://example.com/"},
		{"202402", "/web/20240301120000/http://example.com/"}, // Feb 1 is nearer Mar 1 than Jan 1
		{"20240301120000", ""},
		{"19990101", "/web/20240101120000/http://example.com/"},
		{"20991231", "/web/20240601120000/http://example.com/"},
	} {
		resp, body := get(t, a.ui.URL+"/web/"+tc.ts+"/http://example.com/")
		if tc.want != "" {
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != tc.want {
				t.Errorf("/web/%s: %d Location %q, want 302 to %s", tc.ts, resp.StatusCode, resp.Header.Get("Location"), tc.want)
			}
			continue
		}
		if resp.StatusCode != 200 {
			t.Fatalf("/web/%s: %d", tc.ts, resp.StatusCode)
		}
		src := a.content.URL + "/web/20240301120000mp_/http://example.com/"
		if !strings.Contains(body, `src="`+src+`"`) {
			t.Errorf("frame does not load %s:\n%s", src, body)
		}
		for _, want := range []string{"1 Mar 2024 12:00:00 UTC", `/web/20240101120000/http://example.com/`, `/web/20240601120000/http://example.com/`, `/web/*/http://example.com/`} {
			if !strings.Contains(body, want) {
				t.Errorf("banner lacks %q", want)
			}
		}
		if got := resp.Header.Get("Memento-Datetime"); got != "Fri, 01 Mar 2024 12:00:00 GMT" {
			t.Errorf("Memento-Datetime %q", got)
		}
	}
}

// A 14-digit timestamp names the capture of that second, even when a
// capture of the second before is nearer in nanoseconds: otherwise the
// capture could never be shown (re-crawls make captures a second apart).
func TestClosestIsBySecond(t *testing.T) {
	at := func(ts string, ms int) index.Capture {
		tm, err := index.ParseTimestamp(ts, false)
		if err != nil {
			t.Fatal(err)
		}
		return index.Capture{Time: tm.Add(time.Duration(ms) * time.Millisecond)}
	}
	caps := []index.Capture{at("20261123091622", 627), at("20261123091623", 852), at("20261123091625", 76)}
	for _, tc := range []struct{ ask, want string }{
		{"20261123091622", "20261123091622"},
		{"20261123091623", "20261123091623"},
		{"20261123091624", "20261123091623"}, // a tie: the earlier
		{"20261123091625", "20261123091625"},
		{"2026", "20261123091622"},
	} {
		when, err := index.ParseTimestamp(tc.ask, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := caps[closest(caps, when)].Timestamp14(); got != tc.want {
			t.Errorf("closest to %s is %s, want %s", tc.ask, got, tc.want)
		}
	}
}

func TestRewrittenPage(t *testing.T) {
	a := exampleArchive(t)
	resp, body := get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`href="/web/20240101120000cs_/http://example.com/style.css"`,
		`href="/web/20240101120000mp_/http://example.com/about"`,
		`href="/web/20240101120000mp_/http://other.example/x"`,
		`src="/web/20240101120000im_/http://example.com/logo.png"`,
		`/web/20240101120000im_/http://example.com/logo2.png 2x`,
		`src="/web/20240101120000js_/http://example.com/app.js"`,
		`/web/20240101120000im_/http://example.com/bg.png`,
		`window.__wb=`, `/_waggle/inject.js`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("rewritten page lacks %q:\n%s", want, body)
		}
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'self' "+a.ui.URL) {
		t.Errorf("content policy %q", csp)
	}
	if resp.Header.Get("Memento-Datetime") == "" || !strings.Contains(resp.Header.Get("Link"), `rel="original"`) {
		t.Errorf("memento headers missing: %v", resp.Header)
	}
	// The fragment of a page link survives.
	_, body = get(t, a.content.URL+"/web/20240301120000mp_/http://example.com/")
	if !strings.Contains(body, `href="/web/20240301120000mp_/http://example.com/about#team"`) {
		t.Errorf("fragment lost:\n%s", body)
	}
}

func TestEmbedsAreNewestNotNewerThanThePage(t *testing.T) {
	a := exampleArchive(t)
	for _, tc := range []struct{ ts, url, want string }{
		{"20240101120000", "http://example.com/logo.png", "PNG-december"},
		{"20240301120000", "http://example.com/logo.png", "PNG-february"},
		{"20230101000000", "http://example.com/logo.png", "PNG-december"},                                      // none before: the nearest after
		{"20240101120000", "http://example.com/style.css", "/web/20240101120000im_/http://example.com/bg.png"}, // one second later: still found
	} {
		mod := "im_"
		if strings.HasSuffix(tc.url, ".css") {
			mod = "cs_"
		}
		resp, body := get(t, a.content.URL+"/web/"+tc.ts+mod+"/"+tc.url)
		if resp.StatusCode != 200 || !strings.Contains(body, tc.want) {
			t.Errorf("%s at %s: %d %q, want %q", tc.url, tc.ts, resp.StatusCode, body, tc.want)
		}
	}
	_, css := get(t, a.content.URL+"/web/20240101120000cs_/http://example.com/style.css")
	if !strings.Contains(css, `@import "/web/20240101120000cs_/http://example.com/print.css"`) {
		t.Errorf("@import not rewritten: %s", css)
	}
}

func TestIdentityIsTheArchivedPayload(t *testing.T) {
	a := exampleArchive(t)
	for _, u := range []string{"http://example.com/", "http://example.com/zipped", "http://example.com/logo.png"} {
		var c = a.caps[u+" 20240101120000"]
		if c.URL == "" {
			c = a.caps[u+" 20240201000000"]
		}
		req, _ := http.NewRequest("GET", a.content.URL+"/web/"+c.Timestamp14()+"id_/"+u, nil)
		req.Header.Set("Accept-Encoding", "gzip") // keep Go's client from decoding for us
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var raw strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			raw.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		sum := sha1.Sum([]byte(raw.String()))
		if got := "sha1:" + base32.StdEncoding.EncodeToString(sum[:]); resp.StatusCode != 200 || got != c.Digest {
			t.Errorf("%s id_: status %d, digest %s, want %s", u, resp.StatusCode, got, c.Digest)
		}
		if strings.HasSuffix(u, "zipped") && resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("id_ of a gzip payload lost its Content-Encoding: %v", resp.Header)
		}
	}
}

// Archived bytes served as they are answer range requests, as a video
// player seeking, or a PDF viewer, sends them; a rewritten page does not,
// and neither does an archived status other than 200.
func TestRangesOfArchivedBytes(t *testing.T) {
	a := exampleArchive(t)
	logo := a.content.URL + "/web/20240201000000im_/http://example.com/logo.png" // "PNG-february"
	for _, tc := range []struct {
		url, rng string
		status   int
		body     string
		crange   string
	}{
		{logo, "bytes=4-7", 206, "febr", "bytes 4-7/12"},
		{logo, "bytes=-4", 206, "uary", "bytes 8-11/12"},
		{logo, "bytes=100-", 416, "", "bytes */12"},
		{logo, "", 200, "PNG-february", ""},
		{a.content.URL + "/web/20240201000000id_/http://example.com/logo.png", "bytes=0-2", 206, "PNG", "bytes 0-2/12"},
	} {
		var hdr []string
		if tc.rng != "" {
			hdr = []string{"Range", tc.rng}
		}
		resp, body := get(t, tc.url, hdr...)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Range") != tc.crange || tc.status != 416 && body != tc.body {
			t.Errorf("%s, Range %q: %d %q, Content-Range %q; want %d %q, %q", tc.url, tc.rng, resp.StatusCode, body, resp.Header.Get("Content-Range"), tc.status, tc.body, tc.crange)
		}
		if tc.status != 416 && (resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("Link") == "") {
			t.Errorf("%s, Range %q: the archived type and the Memento headers are lost: %v", tc.url, tc.rng, resp.Header)
		}
	}
	// A rewritten page, and an archived redirect, are whole whatever is asked.
	if resp, body := get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/", "Range", "bytes=0-9"); resp.StatusCode != 200 || len(body) < 100 {
		t.Errorf("a rewritten page asked in a range: %d, %d bytes; want 200 and the whole page", resp.StatusCode, len(body))
	}
	if resp, _ := get(t, a.content.URL+"/web/20240101120000id_/http://example.com/redirect", "Range", "bytes=0-0"); resp.StatusCode != 301 {
		t.Errorf("an archived 301 asked in a range: %d", resp.StatusCode)
	}
}

func TestGzipPageIsDecodedAndRewritten(t *testing.T) {
	a := exampleArchive(t)
	resp, body := get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/zipped")
	if resp.StatusCode != 200 || !strings.Contains(body, `href='/web/20240101120000mp_/http://example.com/about'`) && !strings.Contains(body, `href="/web/20240101120000mp_/http://example.com/about"`) {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestRevisitReplaysTheOriginalPayloadWithItsOwnDate(t *testing.T) {
	a := exampleArchive(t)
	resp, body := get(t, a.content.URL+"/web/20240601120000mp_/http://example.com/")
	if resp.StatusCode != 200 || !strings.Contains(body, "Example, March") {
		t.Fatalf("revisit: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Memento-Datetime"); got != "Sat, 01 Jun 2024 12:00:00 GMT" {
		t.Errorf("revisit Memento-Datetime %q", got)
	}
	if resp.Header.Get("X-Archive-Orig-X-Served-By") != "june" {
		t.Errorf("revisit should carry its own headers: %v", resp.Header)
	}
}

func TestArchivedHeadersCannotActOnTheNode(t *testing.T) {
	a := exampleArchive(t)
	resp, _ := get(t, a.content.URL+"/web/20240301120000mp_/http://example.com/")
	if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("X-Archive-Orig-Set-Cookie") != "session=1" {
		t.Errorf("Set-Cookie must be renamed: %v", resp.Header)
	}
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || strings.Contains(csp[0], "default-src *") {
		t.Errorf("archived CSP must not replace ours: %v", csp)
	}
}

func TestArchivedRedirectStaysInTheArchive(t *testing.T) {
	a := exampleArchive(t)
	resp, _ := get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/redirect")
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "/web/20240101120000mp_/http://example.com/about" {
		t.Errorf("archived redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestUIRedirectsArchivedBytesToTheContentOrigin(t *testing.T) {
	a := exampleArchive(t)
	resp, _ := get(t, a.ui.URL+"/web/20240101120000id_/http://example.com/")
	if want := a.content.URL + "/web/20240101120000id_/http://example.com/"; resp.StatusCode != 302 || resp.Header.Get("Location") != want {
		t.Errorf("UI served archived bytes itself: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestMemento(t *testing.T) {
	a := exampleArchive(t)
	resp, _ := get(t, a.ui.URL+"/web/http://example.com/", "Accept-Datetime", "Mon, 15 Jan 2024 00:00:00 GMT")
	if resp.StatusCode != 302 || resp.Header.Get("Location") != a.ui.URL+"/web/20240101120000/http://example.com/" {
		t.Errorf("TimeGate: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp.Header.Get("Vary") != "accept-datetime" || !strings.Contains(resp.Header.Get("Link"), `rel="timemap"`) {
		t.Errorf("TimeGate headers: %v", resp.Header)
	}
	resp, _ = get(t, a.ui.URL+"/web/http://example.com/")
	if !strings.HasSuffix(resp.Header.Get("Location"), "/web/20240601120000/http://example.com/") {
		t.Errorf("TimeGate without Accept-Datetime should give the latest: %q", resp.Header.Get("Location"))
	}
	resp, _ = get(t, a.ui.URL+"/web/http://example.com/", "Accept-Datetime", "yesterday")
	if resp.StatusCode != 400 {
		t.Errorf("bad Accept-Datetime: %d", resp.StatusCode)
	}

	resp, body := get(t, a.ui.URL+"/web/timemap/link/http://example.com/")
	if resp.Header.Get("Content-Type") != "application/link-format" {
		t.Errorf("TimeMap type %q", resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<http://example.com/>; rel="original"`,
		`rel="self"; type="application/link-format"`,
		`<` + a.ui.URL + `/web/20240101120000/http://example.com/>; rel="first memento"; datetime="Mon, 01 Jan 2024 12:00:00 GMT"`,
		`<` + a.ui.URL + `/web/20240301120000/http://example.com/>; rel="memento"`,
		`<` + a.ui.URL + `/web/20240601120000/http://example.com/>; rel="last memento"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("TimeMap lacks %q:\n%s", want, body)
		}
	}
	if n := strings.Count(body, "memento\""); n != 3 {
		t.Errorf("TimeMap lists %d mementos, want 3", n)
	}

	// Link on a memento names its neighbours.
	resp, _ = get(t, a.ui.URL+"/web/20240301120000/http://example.com/")
	link := resp.Header.Get("Link")
	for _, want := range []string{`20240101120000/http://example.com/>; rel="first prev memento"`, `20240301120000/http://example.com/>; rel="memento"`, `20240601120000/http://example.com/>; rel="next last memento"`} {
		if !strings.Contains(link, want) {
			t.Errorf("Link lacks %q: %s", want, link)
		}
	}

	resp, body = get(t, a.ui.URL+"/web/timemap/json/http://example.com/")
	if resp.StatusCode != 200 || strings.Count(body, `"urlkey"`) != 3 {
		t.Errorf("JSON TimeMap: %d\n%s", resp.StatusCode, body)
	}
}

func TestCaptureListsAndHome(t *testing.T) {
	a := exampleArchive(t)
	resp, body := get(t, a.ui.URL+"/web/*/example.com/")
	if resp.StatusCode != 200 {
		t.Fatalf("calendar: %d", resp.StatusCode)
	}
	for _, want := range []string{"Captured <b>3</b> times", `href="/web/20240101120000/http://example.com/"`, `href="/web/20240601120000/http://example.com/"`, "revisit", "March"} {
		if !strings.Contains(body, want) {
			t.Errorf("calendar lacks %q", want)
		}
	}
	resp, body = get(t, a.ui.URL+"/web/*/http://example.com/*")
	if resp.StatusCode != 200 {
		t.Fatalf("URL list: %d", resp.StatusCode)
	}
	for _, u := range []string{"http://example.com/about", "http://example.com/logo.png", "http://example.com/style.css", "http://example.com/zipped"} {
		if !strings.Contains(body, `href="/web/*/`+u+`"`) {
			t.Errorf("URL list lacks %s", u)
		}
	}
	// A timestamp prefix before '*' picks the calendar's year.
	_, body = get(t, a.ui.URL+"/web/2023*/http://example.com/logo.png")
	if !strings.Contains(body, "Captures in 2023") || !strings.Contains(body, "/web/20231201000000/http://example.com/logo.png") || strings.Contains(body, "<td><a href=\"/web/20240201000000/") {
		t.Errorf("calendar of 2023:\n%s", body)
	}
	// A page that is not canonical redirects to the canonical URL, once.
	resp, _ = get(t, a.ui.URL+"/web/20240101120000/example.com")
	if loc := resp.Header.Get("Location"); resp.StatusCode != 302 || loc != "/web/20240101120000/http://example.com/" {
		t.Errorf("non-canonical URL: %d %q", resp.StatusCode, loc)
	}
	// The list's own query is not part of the prefix.
	resp, body = get(t, a.ui.URL+"/web/*/http://example.com/*?after="+a.caps["http://example.com/logo.png 20231201000000"].URLKey)
	if resp.StatusCode != 200 || strings.Contains(body, "http://example.com/about\"") || !strings.Contains(body, "http://example.com/style.css") {
		t.Errorf("URL list after logo.png:\n%s", body)
	}
	_, body = get(t, a.ui.URL+"/")
	if !strings.Contains(body, "<b>9</b> captures of <b>1</b> hosts") || !strings.Contains(body, "1 Dec 2023") || !strings.Contains(body, "1 Jun 2024") {
		t.Errorf("home summary:\n%s", body)
	}
}

func TestNotFoundOffersNearbyURLs(t *testing.T) {
	a := exampleArchive(t)
	resp, body := get(t, a.ui.URL+"/web/2024/http://example.com/abouts")
	if resp.StatusCode != 404 || !strings.Contains(body, "Not in the archive") || !strings.Contains(body, "http://example.com/about") {
		t.Errorf("not found: %d\n%s", resp.StatusCode, body)
	}
	resp, body = get(t, a.content.URL+"/web/2024mp_/http://example.com/nothing")
	if resp.StatusCode != 404 || !strings.Contains(body, a.ui.URL+"/web/*/") {
		t.Errorf("not found in the frame should link to the interface: %d\n%s", resp.StatusCode, body)
	}
	resp, _ = get(t, a.content.URL+"/web/2024im_/http://example.com/nothing.png")
	if resp.StatusCode != 404 {
		t.Errorf("missing image: %d", resp.StatusCode)
	}
}

func TestBadRequestsGetClearAnswers(t *testing.T) {
	a := exampleArchive(t)
	long := strings.Repeat("a", 60000)
	for _, tc := range []struct {
		url    string
		status int
		text   string
	}{
		{a.ui.URL + "/web/", 400, "Give a URL"},
		{a.ui.URL + "/web/2024/", 400, "Give a URL"},
		{a.ui.URL + "/web/20240101/javascript:alert(1)", 400, "Not a web address"},
		{a.ui.URL + "/web/2024/http://[::1", 400, "Not a web address"},
		{a.ui.URL + "/web/2024/http://example.com/?q=" + long, 400, "too long"},
		{a.ui.URL + "/web/*/http://example.com/?q=" + long, 400, "too long"},
		{a.ui.URL + "/web/http://example.com/?q=" + long, 400, "too long"},
		{a.content.URL + "/web/2024mp_/http://example.com/?q=" + long, 400, "too long"},
		{a.ui.URL + "/web/2026x/http://example.com/", 400, "not a timestamp"},
		// Digits past the 14th are dropped, and fields out of range clamped,
		// as Wayback machines do: year 1234, redirected to the closest capture.
		{a.ui.URL + "/web/123456789012345/http://example.com/", 302, "/web/20240101120000/http://example.com/"},
		{a.ui.URL + "/nothing-here", 404, "No such page"},
		{a.content.URL + "/web/*/http://example.com/", 404, "not an archived URL"},
		{a.content.URL + "/elsewhere", 404, "not an archived URL"},
	} {
		resp, body := get(t, tc.url)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.text) {
			t.Errorf("%.100s: %d %.300q, want %d with %q", tc.url, resp.StatusCode, body, tc.status, tc.text)
		}
	}
}

func TestDamagedCaptureIsReportedAndTheRestReplays(t *testing.T) {
	a := exampleArchive(t)
	c := a.caps["http://example.com/about 20240102000000"]
	f, err := os.OpenFile(filepath.Join(a.dir, c.Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, c.Length/2)
	for i := range junk {
		junk[i] = 0x5a
	}
	if _, err := f.WriteAt(junk, c.Offset+c.Length/4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	resp, body := get(t, a.content.URL+"/web/20240102000000mp_/http://example.com/about")
	if resp.StatusCode != 500 || !strings.Contains(body, "damaged") {
		t.Errorf("damaged capture: %d %q", resp.StatusCode, body)
	}
	resp, _ = get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/")
	if resp.StatusCode != 200 {
		t.Errorf("an undamaged capture after a damaged one: %d", resp.StatusCode)
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"2014/http://example.com/", "*/example.com*", "20140101id_/http://a/b?c", "http://x/", "timemap/link/x", "*/", "2014mp_/", "99999999999999999/x", "*near_/example.com/", "2024*near_/http://x/?near_", "near_/x", "*near_near_/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := parseTarget(s)
		if err != nil {
			return
		}
		if tg.url == "" || !modifiers[tg.mod] || (tg.near && tg.ts != "*") {
			t.Fatalf("parseTarget(%q) = %+v", s, tg)
		}
		if tg.ts != "" && tg.ts != "*" {
			if _, err := index.ParseTimestamp(tg.ts, false); err != nil {
				t.Fatalf("parseTarget(%q) gave timestamp %q: %v", s, tg.ts, err)
			}
		}
		fixURL(tg.url)
	})
}

// TestRedirectsBetweenVariantsOfOneKeyDoNotLoop: http and https, www. and
// a trailing slash share a SURT key, and sites redirect between them.
func TestRedirectsBetweenVariantsOfOneKeyDoNotLoop(t *testing.T) {
	html := "Content-Type: text/html\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://ex.test/docs", at: "20240101120000", status: 301, header: "Location: /docs/\r\n"},
		{url: "http://ex.test/docs/", at: "20240101120005", header: html, body: "<p>the docs</p>"},
		{url: "http://ex.test/i.png", at: "20240101120000", status: 301, header: "Location: https://ex.test/i.png\r\n"},
	})
	// Follow redirects by hand, at most 5, from the page the redirect leads to.
	follow := func(start string) (int, string, int) {
		u := start
		for hops := 0; hops < 5; hops++ {
			resp, body := get(t, u)
			loc := resp.Header.Get("Location")
			if resp.StatusCode < 300 || resp.StatusCode >= 400 || loc == "" {
				return resp.StatusCode, body, hops
			}
			if strings.HasPrefix(loc, "/") {
				loc = a.content.URL + loc
			}
			u = loc
		}
		t.Fatalf("%s: still redirecting after 5 hops (at %s)", start, u)
		return 0, "", 0
	}
	if code, body, _ := follow(a.content.URL + "/web/20240101120000mp_/http://ex.test/docs"); code != 200 || !strings.Contains(body, "the docs") {
		t.Errorf("/docs → /docs/: %d %q", code, body)
	}
	if code, body, _ := follow(a.content.URL + "/web/20240101120000mp_/http://ex.test/docs/"); code != 200 || !strings.Contains(body, "the docs") {
		t.Errorf("/docs/ asked directly: %d %q", code, body)
	}
	if code, _, hops := follow(a.content.URL + "/web/20240101120000im_/http://ex.test/i.png"); code != 404 || hops != 1 {
		t.Errorf("redirect to an https URL not archived: %d after %d hops, want 404 after 1", code, hops)
	}
}

// TestLoopbackNodeRefusesOtherHostNames: a page elsewhere cannot rebind its
// own name to 127.0.0.1 and read a local archive; localhost works, and the
// frame then comes from localhost too.
func TestLoopbackNodeRefusesOtherHostNames(t *testing.T) {
	a := exampleArchive(t)
	for _, base := range []string{a.ui.URL, a.content.URL} {
		req, _ := http.NewRequest("GET", base+"/web/20240101120000mp_/http://example.com/", nil)
		req.Host = "rebound.attacker.example"
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s with a foreign Host: %d, want 421", base, resp.StatusCode)
		}
	}
	port := a.ui.URL[strings.LastIndexByte(a.ui.URL, ':'):]
	ctPort := a.content.URL[strings.LastIndexByte(a.content.URL, ':'):]
	resp, body := get(t, "http://localhost"+port+"/web/20240301120000/http://example.com/")
	if resp.StatusCode != 200 || !strings.Contains(body, `src="http://localhost`+ctPort+`/web/20240301120000mp_/`) {
		t.Errorf("reached as localhost: %d, the frame should come from localhost%s:\n%s", resp.StatusCode, ctPort, body)
	}
}
