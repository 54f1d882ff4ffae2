package replay

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// importedArchive writes responses for rawURLs (as another tool may write
// WARC-Target-URI: unescaped) into a WARC file, imports it with waggle
// import's code and serves the result.
func importedArchive(t *testing.T, rawURLs ...string) (ui string) {
	t.Helper()
	src := t.TempDir()
	w, err := warc.NewWriter(src, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range rawURLs {
		for _, at := range []string{"20240101000000", "20240601000000"} {
			body := "<html><title>" + at + "</title></html>"
			raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			rec, err := warc.NewResponse(u, ts(at).Add(time.Duration(i)*time.Second), raw)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(src, "*.warc.gz"))
	data := t.TempDir()
	if _, err := crawl.Import(context.Background(), data, files, nil); err != nil {
		t.Fatal(err)
	}
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	uiS, contentS := httptest.NewUnstartedServer(nil), httptest.NewUnstartedServer(nil)
	srv := New(Config{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc")), UIAddr: uiS.Listener.Addr().String(), ContentAddr: contentS.Listener.Addr().String()})
	uiS.Config.Handler, contentS.Config.Handler = srv.UI(), srv.Content()
	uiS.Start()
	contentS.Start()
	t.Cleanup(uiS.Close)
	t.Cleanup(contentS.Close)
	return uiS.URL
}

// Memento Link headers and link-format TimeMaps put each target between
// <...> as a URI-Reference (RFC 8288 §3): a capture's URL keeps its '<',
// '>', spaces and non-ASCII characters percent-encoded there, so a client
// reading the header does not split a link at a '>' inside a URL, and the
// header carries no raw UTF-8. Imported WARCs keep WARC-Target-URI as
// written, so such URLs do reach these headers.
func TestMementoLinksAreURIReferences(t *testing.T) {
	ui := importedArchive(t, "http://sp.example/p?a=1&b=<2>", "http://sp.example/café")
	bad := regexp.MustCompile(`<[^>]*[^\x21-\x7e][^>]*>|<[^>]*<`)
	for _, path := range []string{
		"/web/20240601000000/http://sp.example/p?a=1&b=%3C2%3E",
		"/web/20240601000001/http://sp.example/caf%C3%A9",
	} {
		resp, _ := get(t, ui+path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		link := resp.Header.Get("Link")
		// Every target must be a URI: no '<' inside <...>, only visible ASCII.
		if bad.MatchString(link) || strings.Contains(link, ">>") {
			t.Errorf("%s: Link header has targets that are not URI-References:\n%s", path, link)
		}
	}
	_, body := get(t, ui+"/web/timemap/link/http://sp.example/p?a=1&b=%3C2%3E")
	if strings.Contains(body, "<2>>") || bad.MatchString(strings.ReplaceAll(body, "\n", "")) {
		t.Errorf("TimeMap has targets that are not URI-References:\n%s", body)
	}
	// The TimeGate redirects to the memento its Link header names.
	resp, _ := get(t, ui+"/web/http://sp.example/caf%C3%A9")
	if loc := resp.Header.Get("Location"); !strings.HasSuffix(loc, "/web/20240601000001/http://sp.example/caf%C3%A9") {
		t.Errorf("TimeGate redirects to %q", loc)
	}
}

// Captures in one second (a re-crawl right after a crawl) share a memento
// URI, whose timestamp has 14 digits, and replay as the first of them: a
// Link header or TimeMap lists that URI once, with every relation it has,
// never once as "first" and again as "next" with contradicting rels.
func TestCapturesInOneSecondAreOneMemento(t *testing.T) {
	html := "Content-Type: text/html; charset=utf-8\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://same.example/", at: "20240101000000", header: html, body: "<p>x</p>"},
		{url: "http://same.example/", at: "20240101000000.5", header: html, body: "<p>x</p>", revisit: true},
		{url: "http://same.example/", at: "20240102000000", header: html, body: "<p>x</p>", revisit: true},
		{url: "http://same.example/", at: "20240102000000.5", header: html, body: "<p>x</p>", revisit: true},
	})
	first := a.ui.URL + "/web/20240101000000/http://same.example/"
	second := a.ui.URL + "/web/20240102000000/http://same.example/"
	entry := regexp.MustCompile(`<([^>]*)>; rel="([^"]*)"`)
	// mementos maps each memento URI listed to its rel, failing on one
	// listed twice.
	mementos := func(what, links string) map[string]string {
		m := map[string]string{}
		for _, e := range entry.FindAllStringSubmatch(links, -1) {
			if !strings.HasSuffix(e[2], "memento") {
				continue
			}
			if old, ok := m[e[1]]; ok {
				t.Errorf("%s lists %s twice: %q and %q", what, e[1], old, e[2])
			}
			m[e[1]] = e[2]
		}
		return m
	}
	for _, tc := range []struct {
		path string
		want map[string]string
	}{
		{"/web/20240101000000/http://same.example/", map[string]string{first: "first memento", second: "next last memento"}},
		{"id_/http://same.example/", map[string]string{first: "first memento", second: "next last memento"}},
		{"/web/20240102000000/http://same.example/", map[string]string{first: "first prev memento", second: "last memento"}},
		// The TimeGate names its target's neighbours, not itself.
		{"/web/http://same.example/", map[string]string{first: "first prev memento", second: "last memento"}},
	} {
		u := a.ui.URL + tc.path
		if strings.HasPrefix(tc.path, "id_") {
			u = a.content.URL + "/web/20240101000000" + tc.path // a content response names them too
		}
		resp, _ := get(t, u)
		if got := mementos(tc.path, resp.Header.Get("Link")); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Link mementos %v, want %v", tc.path, got, tc.want)
		}
	}
	_, body := get(t, a.ui.URL+"/web/timemap/link/http://same.example/")
	if got, want := mementos("TimeMap", body), map[string]string{first: "first memento", second: "last memento"}; !reflect.DeepEqual(got, want) {
		t.Errorf("TimeMap mementos %v, want %v:\n%s", got, want, body)
	}
}
