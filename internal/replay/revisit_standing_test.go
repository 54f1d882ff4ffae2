package replay

import (
	"net/http"
	"testing"
)

// A URL first archived as a 404 with payload P, then a 200 with the same
// payload (an identical-payload revisit the crawler points at the 404, the
// digest's first capture), then a 304 to the conditional GET made with the
// 200's validators: the response that still stands is the 200.
func TestNotModifiedStandsForTheLastResponseNotTheFirstWithItsBytes(t *testing.T) {
	const shell = `<!doctype html><html><body><div id="app"></div></body></html>`
	html := "Content-Type: text/html\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://spa.example/route", at: "20240101000000", status: http.StatusNotFound,
			header: html + "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n", body: shell},
		{url: "http://spa.example/route", at: "20240102000000", revisit: true,
			header: html + "ETag: \"e2\"\r\nLast-Modified: Tue, 02 Jan 2024 00:00:00 GMT\r\n", body: shell},
		{url: "http://spa.example/route", at: "20240103000000", revisit: true, notModified: true,
			refersTo: "http://spa.example/route 20240101000000",
			header:   "Date: Wed, 03 Jan 2024 00:00:00 GMT\r\nETag: \"e2\"\r\n", body: shell},
	})
	resp, body := get(t, a.content.URL+"/web/20240103000000id_/http://spa.example/route")
	if resp.StatusCode != http.StatusOK || body != shell {
		t.Errorf("304 revisit replays %d, want 200 (the 200 of 20240102 still stands)", resp.StatusCode)
	}
	if got := resp.Header.Get("Last-Modified"); got != "Tue, 02 Jan 2024 00:00:00 GMT" {
		t.Errorf("Last-Modified %q, want the standing 200's", got)
	}
}

// A 304 revisit that names (by URI and date, no payload digest, as WARC
// 1.1 §6.7.3 allows) the URL's previous capture, itself an
// identical-payload revisit of another URL's 404: the response that still
// stands is the one named, x.js's 200.
func TestNotModifiedStandsForTheCaptureItNames(t *testing.T) {
	a := newTestArchive(t, []fixture{
		{url: "http://cdn.example/missing.js", at: "20240101000000", status: http.StatusNotFound,
			header: "Content-Type: text/plain\r\nX-Which: missing\r\n", body: vendorJS},
		{url: "http://www.example/x.js", at: "20240102000000", revisit: true,
			header: "Content-Type: application/javascript\r\nX-Which: x\r\nETag: \"e1\"\r\n", body: vendorJS},
		{url: "http://www.example/x.js", at: "20240103000000", revisit: true, notModified: true, noDigest: true,
			refersTo: "http://www.example/x.js 20240102000000",
			header:   "Date: Wed, 03 Jan 2024 00:00:00 GMT\r\nETag: \"e1\"\r\n", body: vendorJS},
	})
	resp, body := get(t, a.content.URL+"/web/20240103000000id_/http://www.example/x.js")
	if resp.StatusCode != http.StatusOK || body != vendorJS {
		t.Errorf("status %d, body %q; want x.js's 200 and the payload", resp.StatusCode, body)
	}
	for k, want := range map[string]string{"Content-Type": "application/javascript", "X-Archive-Orig-X-Which": "x"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
}

// A chain of 304s without payload digests (each naming the visit before
// by URI and date), on a site whose http URL redirects to https within the
// same second at each visit: the last 304 names the https revisit of the
// second visit, not the http 301 captured in that second.
func TestChainNamedByDateIsNotAnotherURLOfTheSecond(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	mv := "Location: https://site.example/\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://site.example/", at: "20240101000000.1", status: 301, header: mv},
		{url: "https://site.example/", at: "20240101000000.4", header: html + "ETag: \"a\"\r\n", body: newsPage},
		{url: "http://site.example/", at: "20240102000000.1", status: 301, header: mv},
		{url: "https://site.example/", at: "20240102000000.4", revisit: true, notModified: true, noDigest: true,
			refersTo: "https://site.example/ 20240101000000.4", header: "ETag: \"a\"\r\n", body: newsPage},
		{url: "http://site.example/", at: "20240103000000.1", status: 301, header: mv},
		{url: "https://site.example/", at: "20240103000000.4", revisit: true, notModified: true, noDigest: true,
			refersTo: "https://site.example/ 20240102000000.4", header: "ETag: \"a\"\r\n", body: newsPage},
	})
	for _, at := range []string{"20240102000000", "20240103000000"} {
		resp, body := get(t, a.content.URL+"/web/"+at+"id_/https://site.example/")
		if resp.StatusCode != http.StatusOK || body != newsPage {
			t.Errorf("%s: %d Location %q body %q; want 200 and the page", at, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
}

// A single-page app serves one shell for every route: 200 for a route it
// knows, 404 for one it does not. SURT keys lowercase paths, so /route and
// /Route share a key. A 304 of /route (naming /route's own 200, as the
// crawler names the capture holding the payload) must replay /route's 200,
// not /Route's 404 captured in between.
func TestNotModifiedStandsForItsOwnURLNotAnotherOfItsKey(t *testing.T) {
	const shell = `<!doctype html><html><body><div id="app"></div></body></html>`
	html := "Content-Type: text/html\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://spa.example/route", at: "20240101000000",
			header: html + "ETag: \"e1\"\r\n", body: shell},
		{url: "http://spa.example/Route", at: "20240102000000", status: http.StatusNotFound,
			header: html, body: shell},
		{url: "http://spa.example/route", at: "20240103000000", revisit: true, notModified: true,
			refersTo: "http://spa.example/route 20240101000000",
			header:   "ETag: \"e1\"\r\n", body: shell},
	})
	resp, _ := get(t, a.content.URL+"/web/20240103000000id_/http://spa.example/route")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("304 of /route replays %d (another URL's capture), want 200", resp.StatusCode)
	}
}
