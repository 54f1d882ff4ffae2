package wacz_test

import (
	"archive/zip"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
)

// importChain imports into a new data directory a response of url at
// at(0) (left out without withOriginal), then n server-not-modified
// revisits at at(1)…at(n), each naming the one before and no payload
// digest, and returns the directory.
func importChain(t *testing.T, url string, at func(int) time.Time, n int, withOriginal bool) string {
	t.Helper()
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := "<html><body><p>steady</p></body></html>"
	raw := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"s\"\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	prev, err := warc.NewResponse(url, at(0), []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if withOriginal {
		if _, err := w.Write(prev); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		rec := warc.NewRevisit(url, at(i), warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\nETag: \"s\"\r\n\r\n"), "",
			warc.RefersTo{ID: prev.ID(), URI: url, Date: at(i - 1)})
		if _, err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		prev = rec
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("segments: %v %v", files, err)
	}
	data := t.TempDir()
	if _, err := crawl.Import(context.Background(), data, files, nil); err != nil {
		t.Fatal(err)
	}
	return data
}

// countingRecords counts the records read through Record: the steps of
// revisit chains.
type countingRecords struct {
	wacz.Archive
	n *atomic.Int64
}

func (a countingRecords) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	a.n.Add(1)
	return a.Archive.Record(ctx, c)
}

// Exporting every revisit of a long chain walks the chain once, not once
// per revisit: when it ends in the original, and when the original is not
// in the archive.
func TestExportWalksAChainOnce(t *testing.T) {
	const n = 200
	day := func(i int) time.Time { return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i) }
	for _, withOriginal := range []bool{true, false} {
		data := importChain(t, "http://steady.example/", day, n, withOriginal)
		db, err := crawl.OpenDB(data)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(t.TempDir(), "out.wacz"))
		if err != nil {
			t.Fatal(err)
		}
		var steps atomic.Int64
		src := countingRecords{archive.NewLocal(index.New(db), filepath.Join(data, "warc")), &steps}
		s, err := wacz.Export(context.Background(), out, wacz.Source{Archive: src, TempDir: t.TempDir()}, wacz.Selection{})
		out.Close()
		db.Close()
		captures, missing := n+1, 0
		if !withOriginal {
			captures, missing = n, n
		}
		if err != nil || s.Captures != captures || s.Missing != missing || s.Unresolved != 0 {
			t.Fatalf("export of a chain of %d revisits (original held: %v): %+v, %v", n, withOriginal, s, err)
		}
		// Each revisit's resolution reads the revisit it names, unless that
		// one has resolved already; prefetching resolves a few at once.
		if got := steps.Load(); got > 4*n {
			t.Errorf("%d records read to resolve a chain of %d revisits (original held: %v); walked once, it takes about %d", got, n, withOriginal, n)
		}
	}
}

// A selection whose revisits name, without a payload digest, revisits
// before it (each server-not-modified visit written against the last, as
// some tools do) takes the whole chain along: the WACZ, imported, replays
// every revisit it was made for.
func TestExportTakesRevisitChains(t *testing.T) {
	const url = "http://steady.example/"
	month := func(i int) time.Time { return time.Date(2024, time.Month(1+i), 1, 0, 0, 0, 0, time.UTC) }
	data := importChain(t, url, month, 3, true)

	path, s := export(t, data, wacz.Selection{From: month(2)})
	if s.Captures != 2 || s.Originals != 2 || s.Missing != 0 {
		t.Errorf("export of the last two revisits: %+v; want them and the two captures before them", s)
	}
	a := importedArchive(t, path)
	for _, i := range []int{2, 3} {
		var c index.Capture
		a.Captures(context.Background(), "example,steady)/", false, func(x index.Capture) (bool, error) {
			if x.Time.Equal(month(i)) {
				c = x
			}
			return true, nil
		})
		rec, err := a.Record(context.Background(), c)
		if err != nil {
			t.Fatalf("the revisit of %s in the imported WACZ: %v", month(i).Format("2006-01"), err)
		}
		o, _, err := archive.Original(context.Background(), a, c, rec.Header)
		if err != nil || !o.Time.Equal(month(0)) || o.Type != warc.TypeResponse || o.Status != http.StatusOK {
			t.Errorf("the revisit of %s in the imported WACZ resolves to %+v, %v; want the response of %s", month(i).Format("2006-01"), o, err, month(0).Format("2006-01"))
		}
	}
}

// Server-not-modified revisits imported from other tools name no media
// type (a 304 has none): each replays as its original, a page, and is
// listed as one.
func TestPagesListImportedNotModifiedRevisits(t *testing.T) {
	const url = "http://steady.example/"
	day := func(i int) time.Time { return time.Date(2024, 1, 1+i, 0, 0, 0, 0, time.UTC) }
	path, s := export(t, importChain(t, url, day, 3, true), wacz.Selection{})
	var ts []string
	for _, p := range pagesOf(t, path) {
		if p["url"] != url || p["title"] != "" {
			t.Errorf("page %v", p)
		}
		ts = append(ts, p["ts"])
	}
	if len(ts) != 4 || s.Pages != 4 {
		t.Errorf("the original and its three 304 revisits are listed at %v (stats: %d pages); want four pages", ts, s.Pages)
	}
}

// pagesOf returns the page lines of a WACZ's pages.jsonl, without its
// header.
func pagesOf(t *testing.T, path string) []map[string]string {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := zr.Open("pages/pages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pages []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("pages line %q: %v", sc.Text(), err)
		}
		if m["format"] == "" {
			pages = append(pages, m)
		}
	}
	return pages
}

// A 304 that names by URL and date a revisit whose own original was never
// imported, and holds a payload digest the archive has, replays that
// payload, as a digest index would find it; the revisit it names, with no
// digest, leads to none.
func TestRevisitFallsBackToItsDigestPastABrokenChain(t *testing.T) {
	const url = "http://steady.example/"
	day := func(i int) time.Time { return time.Date(2024, 1, i, 0, 0, 0, 0, time.UTC) }
	body := "<html><title>x</title>steady</html>"
	r0, err := warc.NewResponse(url, day(1), []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"s\"\r\nContent-Length: %d\r\n\r\n%s", len(body), body)))
	if err != nil {
		t.Fatal(err)
	}
	head := []byte("HTTP/1.1 304 Not Modified\r\nETag: \"s\"\r\n\r\n")
	broken := warc.NewRevisit(url, day(3), warc.ProfileServerNotModified, head, "", warc.RefersTo{URI: url, Date: day(2)}) // day 2 not imported
	withDigest := warc.NewRevisit(url, day(4), warc.ProfileServerNotModified, head, r0.Header.Get("WARC-Payload-Digest"), warc.RefersTo{URI: url, Date: day(3)})
	data := importRecords(t, r0, broken, withDigest)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var none []string
	st, err := archive.NewLocal(index.New(db), filepath.Join(data, "warc")).Verify(context.Background(), func(c index.Capture, err error) error {
		t.Errorf("%s %s damaged: %v", c.URL, c.Timestamp14(), err)
		return nil
	}, func(c index.Capture, err error) error {
		none = append(none, c.Timestamp14())
		return nil
	})
	if err != nil || st.Revisits != 2 {
		t.Fatalf("%d revisits followed (%v); want 2", st.Revisits, err)
	}
	if len(none) != 1 || none[0] != "20240103000000" {
		t.Errorf("revisits leading to no payload: %v; want the one of 3 January alone", none)
	}
}

// A 304 naming its original by URL and a date to the second, with no
// digest (as Heritrix writes them), while the http URL's redirect and the
// https page, one URL key, were fetched in that second: it is the page's,
// though the redirect sits on the second itself.
func TestRevisitNamedToTheSecondIsItsURLsCapture(t *testing.T) {
	s := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	redirect, err := warc.NewResponse("http://site.example/", s, []byte("HTTP/1.1 301 Moved Permanently\r\nLocation: https://site.example/\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	body := "<html><title>Real page</title>hello</html>"
	page, err := warc.NewResponse("https://site.example/", s, []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body)))
	if err != nil {
		t.Fatal(err)
	}
	notModified := warc.NewRevisit("https://site.example/", s.AddDate(0, 1, 0), warc.ProfileServerNotModified,
		[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{URI: "https://site.example/", Date: s})
	data := importRecords(t, redirect, page, notModified)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := archive.NewLocal(index.New(db), filepath.Join(data, "warc"))
	resolved := 0
	l.Captures(context.Background(), "example,site)/", false, func(c index.Capture) (bool, error) {
		if c.Type != warc.TypeRevisit {
			return true, nil
		}
		rec, err := l.Record(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := archive.Original(context.Background(), l, c, rec.Header)
		if err != nil || o.URL != "https://site.example/" || o.Status != 200 || c.Digest != page.Header.Get("WARC-Payload-Digest") {
			t.Errorf("the 304 of https://site.example/ (indexed with digest %s) resolves to %s (status %d), %v; want the page", c.Digest, o.URL, o.Status, err)
		}
		resolved++
		return true, nil
	})
	if resolved != 1 {
		t.Errorf("%d revisits found; want 1", resolved)
	}
}

// A page whose bytes were first archived as its 404 (a single-page app's
// shell) and later answered 200 with them, an identical-payload revisit,
// is listed as a page at that revisit: by its own status and type.
func TestPagesListA200RevisitOfA404sBytes(t *testing.T) {
	const url = "http://spa.example/route"
	shell := `<!doctype html><html><head><title>App</title></head><body><div id="app"></div></body></html>`
	day := func(i int) time.Time { return time.Date(2024, 1, i, 0, 0, 0, 0, time.UTC) }
	notFound, err := warc.NewResponse(url, day(1), []byte(fmt.Sprintf("HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(shell), shell)))
	if err != nil {
		t.Fatal(err)
	}
	found := warc.NewRevisit(url, day(2), warc.ProfileIdenticalPayload,
		[]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n", len(shell))),
		notFound.Header.Get("WARC-Payload-Digest"), warc.RefersTo{ID: notFound.ID(), URI: url, Date: day(1)})
	data := importRecords(t, notFound, found)
	path, _ := export(t, data, wacz.Selection{})
	pages := pagesOf(t, path)
	if len(pages) != 1 || pages[0]["ts"] != "2024-01-02T00:00:00Z" || pages[0]["title"] != "App" {
		t.Errorf("pages %v; want the 200 of 2 January alone, titled App", pages)
	}
}

// An export of a 304 takes along the capture whose status and headers it
// says still stand, besides the one holding its payload: a page first
// archived as a 404 with the same bytes replays, once imported elsewhere,
// as the 200 it was, not as that 404, and pages.jsonl lists it.
func TestExportOfANotModifiedTakesWhatStands(t *testing.T) {
	const url = "http://spa.example/route"
	day := func(i int) time.Time { return time.Date(2024, 1, i, 0, 0, 0, 0, time.UTC) }
	shell := "<!doctype html><html><head><title>App</title></head><body><div id=app></div></body></html>"
	notFound, err := warc.NewResponse(url, day(1), []byte(fmt.Sprintf("HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(shell), shell)))
	if err != nil {
		t.Fatal(err)
	}
	digest := notFound.Header.Get("WARC-Payload-Digest")
	ref := warc.RefersTo{ID: notFound.ID(), URI: url, Date: day(1)}
	found := warc.NewRevisit(url, day(2), warc.ProfileIdenticalPayload,
		[]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"e2\"\r\nContent-Length: %d\r\n\r\n", len(shell))), digest, ref)
	notModified := warc.NewRevisit(url, day(3), warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\nETag: \"e2\"\r\n\r\n"), digest, ref)
	data := importRecords(t, notFound, found, notModified)
	path, s := export(t, data, wacz.Selection{From: day(3)})
	if s.Captures != 1 || s.Originals != 2 {
		t.Errorf("export of the 304: %+v; want it, the 404 holding its bytes and the 200 that stands", s)
	}
	// Listed as a page, judged by the 200 that stands, not by the 404.
	if pages := pagesOf(t, path); len(pages) != 1 {
		t.Errorf("pages %v; want the 304 of 3 January", pages)
	}
	a := importedArchive(t, path)
	var last index.Capture
	a.Captures(context.Background(), "example,spa)/route", false, func(c index.Capture) (bool, error) {
		last = c
		return true, nil
	})
	rec, err := a.Record(context.Background(), last)
	if err != nil {
		t.Fatal(err)
	}
	_, via, err := archive.NewChains().Resolve(context.Background(), a, last, rec.Header)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok, err := archive.Standing(context.Background(), a, last, via); err != nil || !ok || st.Status != 200 || !st.Time.Equal(day(2)) {
		t.Errorf("imported, the 304 of %s stands for %+v (%v, %v); want the 200 of 2 January", last.Timestamp14(), st, ok, err)
	}
}

// importRecords writes recs, in order, into a WARC file and imports it
// into a new data directory, which it returns.
func importRecords(t *testing.T, recs ...*warc.Record) string {
	t.Helper()
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) != 1 {
		t.Fatalf("segments %v, %v", files, err)
	}
	data := t.TempDir()
	if _, err := crawl.Import(context.Background(), data, files, nil); err != nil {
		t.Fatal(err)
	}
	return data
}

// importedArchive imports the file at path into a new data directory and
// returns its archive, open until the test ends.
func importedArchive(t *testing.T, path string) *archive.Local {
	t.Helper()
	data := t.TempDir()
	if _, err := crawl.Import(context.Background(), data, []string{path}, nil); err != nil {
		t.Fatal(err)
	}
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return archive.NewLocal(index.New(db), filepath.Join(data, "warc"))
}

// A revisit that names its original by record ID alone, which the archive
// never held, is counted missing by an export, as verify reports it.
func TestExportCountsARevisitNamedByIDAloneMissing(t *testing.T) {
	rec := warc.NewRevisit("http://steady.example/", time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), warc.ProfileServerNotModified,
		[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{ID: "<urn:uuid:0c4f6a1e-0000-4000-8000-000000000009>"})
	if _, s := export(t, importRecords(t, rec), wacz.Selection{}); s.Captures != 1 || s.Missing != 1 {
		t.Errorf("export: %+v; want the revisit, its original missing", s)
	}
}
