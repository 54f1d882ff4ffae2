package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

const (
	newsPage = `<!doctype html><html><head><title>News</title></head><body><a href="/a">A</a><img src="/logo.png"></body></html>`
	vendorJS = `/*! vendor v1 */ function v(){return 1}`
)

// revisitArchive holds the three kinds of revisit record the crawler
// writes, and revisits that cannot be replayed.
func revisitArchive(t *testing.T) *testArchive {
	t.Helper()
	html := "Content-Type: text/html; charset=utf-8\r\n"
	js := "Content-Type: application/javascript\r\n"
	return newTestArchive(t, []fixture{
		{url: "http://news.example/", at: "20240101000000", body: newsPage,
			header: html + "Date: Mon, 01 Jan 2024 00:00:00 GMT\r\nETag: \"v1\"\r\nLast-Modified: Sun, 31 Dec 2023 00:00:00 GMT\r\nCache-Control: max-age=60\r\n"},
		// (a) The server answered the conditional GET with 304: new Date and
		// Cache-Control, a wrong Content-Type, no body.
		{url: "http://news.example/", at: "20240201000000", body: newsPage, revisit: true, notModified: true,
			header: "Date: Thu, 01 Feb 2024 00:00:00 GMT\r\nETag: \"v1\"\r\nCache-Control: max-age=120\r\nContent-Type: text/plain\r\n"},
		// (b) A 200 with the same payload.
		{url: "http://news.example/", at: "20240301000000", body: newsPage, revisit: true,
			header: html + "Date: Fri, 01 Mar 2024 00:00:00 GMT\r\nX-Served-By: march\r\n"},

		// (c) The same script archived first under another host, referred
		// to by URI and date, and (cdn-c) by payload digest alone.
		{url: "http://cdn-a.example/vendor.js", at: "20240110000000", header: js, body: vendorJS},
		{url: "http://cdn-b.example/vendor.js", at: "20240115000000", header: js + "X-Served-By: b\r\n", body: vendorJS, revisit: true},
		{url: "http://cdn-c.example/lib/vendor.js", at: "20240116000000", header: js, body: vendorJS, revisit: true, byDigest: true},

		// A revisit of a capture that is not in the archive.
		{url: "http://gone.example/", at: "20240201000000", header: html, body: "<p>lost</p>", revisit: true,
			refersTo: "http://gone.example/ 20240101000000"},
		// A revisit of a revisit whose payload is nowhere.
		{url: "http://chain.example/", at: "20240201000000", header: html, body: "<p>chained</p>", revisit: true,
			refersTo: "http://chain.example/ 20240101000000"},
		{url: "http://chain.example/", at: "20240301000000", header: html, body: "<p>chained</p>", revisit: true,
			refersTo: "http://chain.example/ 20240201000000"},
	})
}

func TestRevisitIdentityIsTheOriginalPayloadAtItsOwnDate(t *testing.T) {
	a := revisitArchive(t)
	for _, tc := range []struct {
		name, path, body, date, ctype string
	}{
		{"server-not-modified", "20240201000000id_/http://news.example/", newsPage, "Thu, 01 Feb 2024 00:00:00 GMT", "text/html; charset=utf-8"},
		{"identical-payload", "20240301000000id_/http://news.example/", newsPage, "Fri, 01 Mar 2024 00:00:00 GMT", "text/html; charset=utf-8"},
		{"other URL", "20240115000000id_/http://cdn-b.example/vendor.js", vendorJS, "Mon, 15 Jan 2024 00:00:00 GMT", "application/javascript"},
		{"other URL by digest", "20240116000000id_/http://cdn-c.example/lib/vendor.js", vendorJS, "Tue, 16 Jan 2024 00:00:00 GMT", "application/javascript"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, a.content.URL+"/web/"+tc.path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200: %q", resp.StatusCode, body)
			}
			if body != tc.body {
				t.Errorf("payload %q, want %q", body, tc.body)
			}
			if got := resp.Header.Get("Content-Length"); got != fmt.Sprint(len(tc.body)) {
				t.Errorf("Content-Length %q, want %d", got, len(tc.body))
			}
			if got := resp.Header.Get("Memento-Datetime"); got != tc.date {
				t.Errorf("Memento-Datetime %q, want the revisit's own %q", got, tc.date)
			}
			if got := resp.Header.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			// The record replayed is the revisit, not its original.
			c := a.caps[strings.SplitN(tc.path, "/", 2)[1]+" "+tc.path[:14]]
			if want := fmt.Sprintf("%s:%d", c.Segment, c.Offset); resp.Header.Get("X-Archive-Src") != want {
				t.Errorf("X-Archive-Src %q, want the revisit's %q", resp.Header.Get("X-Archive-Src"), want)
			}
		})
	}
}

// A 304 says what changed: its own headers replace the original's, and
// the original's describe the payload the 304 has not got, its type too.
func TestNotModifiedRevisitMergesHeaders(t *testing.T) {
	a := revisitArchive(t)
	resp, _ := get(t, a.content.URL+"/web/20240201000000id_/http://news.example/")
	for k, want := range map[string]string{
		"X-Archive-Orig-Date":          "Thu, 01 Feb 2024 00:00:00 GMT", // the 304's, not January's
		"X-Archive-Orig-Cache-Control": "max-age=120",
		"X-Archive-Orig-Etag":          `"v1"`,
		"Last-Modified":                "Sun, 31 Dec 2023 00:00:00 GMT", // only the original had it
		"Content-Type":                 "text/html; charset=utf-8",
	} {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
}

// An identical-payload revisit of another URL replays its own headers, not
// those of the URL the bytes were first archived under.
func TestIdenticalPayloadRevisitKeepsItsOwnHeaders(t *testing.T) {
	a := revisitArchive(t)
	resp, _ := get(t, a.content.URL+"/web/20240115000000id_/http://cdn-b.example/vendor.js")
	if resp.Header.Get("X-Archive-Orig-X-Served-By") != "b" {
		t.Errorf("revisit should carry its own headers: %v", resp.Header)
	}
}

func TestRevisitPageIsRewrittenAtItsOwnDate(t *testing.T) {
	a := revisitArchive(t)
	for _, ts := range []string{"20240201000000", "20240301000000"} {
		resp, body := get(t, a.content.URL+"/web/"+ts+"mp_/http://news.example/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s mp_: %d %q", ts, resp.StatusCode, body)
		}
		for _, want := range []string{
			`<title>News</title>`,
			`href="/web/` + ts + `mp_/http://news.example/a"`,
			`"ts":"` + ts + `"`, // the injected script knows which capture it is in
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s mp_ lacks %q:\n%s", ts, want, body)
			}
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%s mp_ Content-Type %q", ts, resp.Header.Get("Content-Type"))
		}
	}

	resp, body := get(t, a.ui.URL+"/web/20240201000000/http://news.example/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("banner: %d %q", resp.StatusCode, body)
	}
	for _, want := range []string{"1 Feb 2024 00:00:00 UTC", a.content.URL + "/web/20240201000000mp_/http://news.example/"} {
		if !strings.Contains(body, want) {
			t.Errorf("banner lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "1 Jan 2024 00:00:00 UTC") {
		t.Errorf("banner shows the original's date:\n%s", body)
	}
	if got := resp.Header.Get("Memento-Datetime"); got != "Thu, 01 Feb 2024 00:00:00 GMT" {
		t.Errorf("banner Memento-Datetime %q", got)
	}
}

// A revisit that cannot be resolved is an error that says why, never an
// empty 200 or a 304. An original missing is not damage (on a network the
// node holding it may be away): 503, not "damaged".
func TestUnresolvableRevisitIsAClearError(t *testing.T) {
	a := revisitArchive(t)
	for _, tc := range []struct{ path, want string }{
		{"20240201000000id_/http://gone.example/", "not in the archive"},
		{"20240201000000mp_/http://gone.example/", "not in the archive"},
		// Followed to the capture its revisit names, which is not there.
		{"20240301000000id_/http://chain.example/", "not in the archive"},
		{"20240301000000mp_/http://chain.example/", "not in the archive"},
	} {
		resp, body := get(t, a.content.URL+"/web/"+tc.path)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: %d, want 503", tc.path, resp.StatusCode)
		}
		if !strings.Contains(body, "may be away") || !strings.Contains(body, tc.want) || strings.Contains(body, "damaged") {
			t.Errorf("%s: %q, want an explanation containing %q, not damage", tc.path, body, tc.want)
		}
	}
}

// Two 304 revisits without payload digests naming each other are a loop:
// no node coming back makes them replay, so the answer is a 500 that says
// so, not a 503 that asks to wait for a node that may be away.
func TestRevisitLoopIsNotReportedAsTransient(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://loop.example/", at: "20240201000000", header: html, body: "<p>x</p>", revisit: true, notModified: true, noDigest: true,
			refersTo: "http://loop.example/ 20240301000000"},
		{url: "http://loop.example/", at: "20240301000000", header: html, body: "<p>x</p>", revisit: true, notModified: true, noDigest: true,
			refersTo: "http://loop.example/ 20240201000000"},
	})
	for _, at := range []string{"20240201000000", "20240301000000"} {
		resp, body := get(t, a.content.URL+"/web/"+at+"id_/http://loop.example/")
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "in a loop") || strings.Contains(body, "may be away") {
			t.Errorf("%s: %d %q; want 500 naming the loop", at, resp.StatusCode, body)
		}
	}
}

// revisitByDigest is an archive whose digest lookup names a revisit, as an
// index written by another tool might.
type revisitByDigest struct {
	*archive.Local
	revisit index.Capture
}

func (r revisitByDigest) ByDigest(context.Context, index.Capture, string) (index.Capture, bool, error) {
	return r.revisit, true, nil
}

// mislabelled is an archive whose index calls every capture a response,
// so that a revisit's original may turn out to be a revisit only once read.
type mislabelled struct{ *archive.Local }

func (m mislabelled) Captures(ctx context.Context, key string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return m.Local.Captures(ctx, key, reverse, func(c index.Capture) (bool, error) {
		c.Type = warc.TypeResponse
		return fn(c)
	})
}

func (m mislabelled) CapturesBetween(ctx context.Context, key string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	return m.Local.CapturesBetween(ctx, key, from, to, reverse, func(c index.Capture) (bool, error) {
		c.Type = warc.TypeResponse
		return fn(c)
	})
}

// A chain of server-not-modified revisits, each naming the visit before
// and none with a payload digest (as some tools write them), replays the
// payload at its end, with each revisit's own date.
func TestRevisitChainIsFollowed(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	page := "<p>steady</p>"
	day := func(i int) string {
		return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("20060102150405")
	}
	fixtures := []fixture{{url: "http://steady.example/", at: day(0), header: html + "ETag: \"s\"\r\n", body: page}}
	const visits = 40 // daily, each a 304 naming the one before
	for i := 1; i <= visits; i++ {
		fixtures = append(fixtures, fixture{url: "http://steady.example/", at: day(i), header: "ETag: \"s\"\r\n", body: page,
			revisit: true, notModified: true, noDigest: true, refersTo: "http://steady.example/ " + day(i-1)})
	}
	a := newTestArchive(t, fixtures)
	for _, i := range []int{1, 2, visits} {
		at := day(i)
		resp, body := get(t, a.content.URL+"/web/"+at+"id_/http://steady.example/")
		if resp.StatusCode != http.StatusOK || body != page || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("%s: %d %q (%s), want the original page", at, resp.StatusCode, body, resp.Header.Get("Content-Type"))
		}
		if got, want := resp.Header.Get("Memento-Datetime"), ts(at).Format(http.TimeFormat); got != want {
			t.Errorf("%s: Memento-Datetime %q, want the revisit's own %q", at, got, want)
		}
	}

	// A revisit halfway along the chain damaged on disk: the captures
	// after it cannot be replayed, and say why.
	mid := a.caps["http://steady.example/ "+day(visits/2)]
	flipMiddleByte(t, a, mid)
	resp, body := get(t, a.content.URL+"/web/"+day(visits)+"id_/http://steady.example/")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "damaged") {
		t.Errorf("past a damaged revisit: %d %q, want 500 saying it is damaged", resp.StatusCode, body)
	}
}

// BenchmarkRevisitChain replays the newest of a year of daily revisits,
// each a 304 naming the day before with no payload digest: the longest
// chain replay walks, one step per revisit.
func BenchmarkRevisitChain(b *testing.B) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	page := "<p>steady</p>"
	day := func(i int) string {
		return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("20060102150405")
	}
	const visits = 365
	fixtures := []fixture{{url: "http://steady.example/", at: day(0), header: html, body: page}}
	for i := 1; i <= visits; i++ {
		fixtures = append(fixtures, fixture{url: "http://steady.example/", at: day(i), body: page,
			revisit: true, notModified: true, noDigest: true, refersTo: "http://steady.example/ " + day(i-1)})
	}
	a := newTestArchive(b, fixtures)
	url := a.content.URL + "/web/" + day(visits) + "id_/http://steady.example/"
	b.ResetTimer()
	for range b.N {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/visits, "µs/step")
}

func TestRevisitOfARevisitIsRefused(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	fixtures := []fixture{
		{url: "http://chain.example/", at: "20240201000000", header: html, body: "<p>chained</p>", revisit: true,
			refersTo: "http://chain.example/ 20240101000000"},
		{url: "http://chain.example/", at: "20240301000000", header: html, body: "<p>chained</p>", revisit: true, byDigest: true,
			refersTo: "http://chain.example/ 20240201000000"},
		{url: "http://chain.example/", at: "20240401000000", header: html, body: "<p>chained</p>", revisit: true,
			refersTo: "http://chain.example/ 20240201000000"},
	}
	for _, tc := range []struct {
		name   string
		via    func(*archive.Local) archive.Archive
		ts     []string
		status int
	}{
		// The 0301 revisit is resolved by digest to the 0201 revisit; the
		// 0401 one names 0201 itself, and then its digest.
		{"digest names a revisit", func(l *archive.Local) archive.Archive {
			var first index.Capture
			l.Captures(context.Background(), "example,chain)/", false, func(c index.Capture) (bool, error) {
				first = c
				return false, nil
			})
			return revisitByDigest{l, first}
			// No capture holds the payload: as a missing original, 503.
		}, []string{"20240301000000", "20240401000000"}, http.StatusServiceUnavailable},
		// The 0401 revisit names 0201, which the index calls a response:
		// a record that is not what the index says is damage, 500.
		{"index says response", func(l *archive.Local) archive.Archive { return mislabelled{l} }, []string{"20240401000000"}, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestArchiveVia(t, fixtures, tc.via)
			for _, ts := range tc.ts {
				resp, body := get(t, a.content.URL+"/web/"+ts+"id_/http://chain.example/")
				if resp.StatusCode != tc.status || !strings.Contains(body, "another revisit") {
					t.Errorf("%s: %d %q, want %d naming the revisit chain", ts, resp.StatusCode, body, tc.status)
				}
			}
		})
	}
}

// A site that redirects http to https is captured twice in one second
// under one URL key: a revisit names the capture that holds its payload.
func TestRevisitFindsItsOriginalAmongCapturesOfOneSecond(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	for _, byDigest := range []bool{false, true} {
		a := newTestArchive(t, []fixture{
			{url: "http://site.example/", at: "20240101000000.1", status: 301, header: "Location: https://site.example/\r\n"},
			{url: "https://site.example/", at: "20240101000000.4", header: html, body: newsPage},
			{url: "https://site.example/", at: "20240101000000.7", header: html, body: "<p>changed within the second</p>"},
			{url: "https://site.example/", at: "20240201000000", header: html, body: newsPage, revisit: true, byDigest: byDigest},
		})
		resp, body := get(t, a.content.URL+"/web/20240201000000id_/https://site.example/")
		if resp.StatusCode != http.StatusOK || body != newsPage {
			t.Errorf("byDigest %v: %d %q, want 200 and the https capture's payload", byDigest, resp.StatusCode, body)
		}
	}
}

func TestCDXAndTimeMapListRevisits(t *testing.T) {
	a := revisitArchive(t)
	resp, body := get(t, a.ui.URL+"/cdx?url=http://news.example/&output=json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cdx: %d %q", resp.StatusCode, body)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("cdx line %q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%v %v %v", m["timestamp"], m["mime"], m["status"]))
	}
	want := []string{
		"20240101000000 text/html 200",
		"20240201000000 warc/revisit 304",
		"20240301000000 warc/revisit 200",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cdx lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	resp, body = get(t, a.ui.URL+"/cdx?url=http://cdn-b.example/vendor.js&output=json")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"warc/revisit"`) || !strings.Contains(body, `"http://cdn-b.example/vendor.js"`) {
		t.Errorf("cdx of a revisit of another URL: %d %q", resp.StatusCode, body)
	}

	_, body = get(t, a.ui.URL+"/web/timemap/link/http://news.example/")
	for _, want := range []string{
		`<` + a.ui.URL + `/web/20240101000000/http://news.example/>; rel="first memento"; datetime="Mon, 01 Jan 2024 00:00:00 GMT"`,
		`<` + a.ui.URL + `/web/20240201000000/http://news.example/>; rel="memento"; datetime="Thu, 01 Feb 2024 00:00:00 GMT"`,
		`<` + a.ui.URL + `/web/20240301000000/http://news.example/>; rel="last memento"; datetime="Fri, 01 Mar 2024 00:00:00 GMT"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("TimeMap lacks %q:\n%s", want, body)
		}
	}
}

// A 304 revisit of a URL whose payload was first archived under another
// URL replays with the status and headers of the URL's own last capture,
// not the other URL's (here a 404 with the same bytes).
func TestNotModifiedRevisitOfADuplicateKeepsItsOwnHeaders(t *testing.T) {
	a := newTestArchive(t, []fixture{
		{url: "http://cdn.example/missing.js", at: "20240101000000", status: http.StatusNotFound,
			header: "Content-Type: text/plain\r\nX-Which: missing\r\n", body: vendorJS},
		{url: "http://www.example/x.js", at: "20240102000000", revisit: true,
			header: "Content-Type: application/javascript\r\nX-Which: x\r\nETag: \"e1\"\r\n", body: vendorJS},
		{url: "http://www.example/x.js", at: "20240103000000", revisit: true, notModified: true,
			refersTo: "http://cdn.example/missing.js 20240101000000",
			header:   "Date: Wed, 03 Jan 2024 00:00:00 GMT\r\nETag: \"e1\"\r\n", body: vendorJS},
	})
	resp, body := get(t, a.content.URL+"/web/20240103000000id_/http://www.example/x.js")
	if resp.StatusCode != http.StatusOK || body != vendorJS {
		t.Fatalf("status %d, body %q; want x.js's 200 and the payload", resp.StatusCode, body)
	}
	for k, want := range map[string]string{
		"Content-Type":           "application/javascript",
		"X-Archive-Orig-X-Which": "x",
		"X-Archive-Orig-Date":    "Wed, 03 Jan 2024 00:00:00 GMT",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
}

// A revisit of a damaged capture says that the capture whose content it
// repeats is damaged, naming it, not that it is damaged itself: its own
// record is whole, and the capture to look at is the other.
func TestRevisitOfADamagedCaptureNamesIt(t *testing.T) {
	a := newTestArchive(t, []fixture{
		{url: "http://orig.example/lib.js", at: "20240101000000", header: "Content-Type: text/javascript\r\n", body: vendorJS},
		{url: "http://copy.example/lib.js", at: "20240201000000", header: "Content-Type: text/javascript\r\n", body: vendorJS, revisit: true},
	})
	flipMiddleByte(t, a, a.caps["http://orig.example/lib.js 20240101000000"])
	resp, body := get(t, a.content.URL+"/web/20240201000000id_/http://copy.example/lib.js")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "damaged") ||
		!strings.Contains(body, "earlier capture http://orig.example/lib.js at 20240101000000") {
		t.Errorf("revisit: %d %q; want 500 naming the damaged capture it repeats", resp.StatusCode, body)
	}
	resp, body = get(t, a.content.URL+"/web/20240101000000id_/http://orig.example/lib.js")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "damaged") || strings.Contains(body, "earlier capture") {
		t.Errorf("the damaged capture: %d %q; want 500 saying it is damaged itself", resp.StatusCode, body)
	}
}

// reblocked is an archive that gives the record of the capture at one
// time another block, as another tool or damage the block digest did not
// catch (an import of records without one) may leave it.
type reblocked struct {
	*archive.Local
	at    time.Time
	block string
}

func (r reblocked) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	rec, err := r.Local.Record(ctx, c)
	if err == nil && c.Time.Equal(r.at) {
		rec.Block = []byte(r.block)
	}
	return rec, err
}

// A revisit with no head of its own replays the original's status and
// headers; one whose head is there but cannot be read is damaged, never
// replayed as the original's response, which is not what it captured
// (here a 404 the CDX API lists as such).
func TestRevisitWhoseOwnHeadCannotBeReadIsDamaged(t *testing.T) {
	const page = "<p>soft</p>"
	fixtures := []fixture{
		{url: "http://soft.example/", at: "20240101000000", header: "Content-Type: text/html\r\n", body: page},
		{url: "http://soft.example/", at: "20240201000000", status: http.StatusNotFound, revisit: true, header: "Content-Type: text/html\r\n", body: page},
	}
	for _, tc := range []struct {
		block, want string
		status      int
	}{
		{"", page, http.StatusOK},
		{"\r\n", page, http.StatusOK},
		{"HTPP/1.1 4O4 Not Found\r\nContent-Type: text/html\r\n\r\n", "own HTTP head", http.StatusInternalServerError},
	} {
		a := newTestArchiveVia(t, fixtures, func(l *archive.Local) archive.Archive {
			return reblocked{l, ts("20240201000000"), tc.block}
		})
		resp, body := get(t, a.content.URL+"/web/20240201000000id_/http://soft.example/")
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) ||
			tc.status != http.StatusOK && !strings.Contains(body, "damaged") {
			t.Errorf("block %q: %d %q; want %d and %q", tc.block, resp.StatusCode, body, tc.status, tc.want)
		}
	}
}
