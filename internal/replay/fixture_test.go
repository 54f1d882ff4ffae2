package replay

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// fixture is one capture to archive for a test.
type fixture struct {
	url      string
	at       string // 14-digit timestamp
	status   int
	header   string // extra header lines, "\r\n"-terminated
	body     string
	revisit  bool // archive as an identical-payload revisit of the first capture of the same body
	byDigest bool // with revisit: name the original by payload digest only, not by URI and date
	gzip     bool // send the body gzip-encoded
	simhash  uint64
	// With revisit: the server answered a conditional request with 304 Not
	// Modified (server-not-modified profile). The record holds header under
	// a 304 status line and no body; body is the unchanged payload.
	notModified bool
	// With revisit: the record names no payload digest (as some tools write
	// server-not-modified revisits), nor does its index entry.
	noDigest bool
	// With revisit: "<url> <timestamp>" of the capture referred to, archived
	// or not, instead of the first capture of the same body.
	refersTo string
}

// testArchive is an archive made of fixtures, served by a Server on two
// loopback listeners.
type testArchive struct {
	idx     *index.Index
	dir     string
	local   *archive.Local           // idx and dir
	caps    map[string]index.Capture // by url + " " + at
	ui      *httptest.Server
	content *httptest.Server
	srv     *Server
}

func ts(s string) time.Time {
	t, err := time.Parse("20060102150405", s)
	if err != nil {
		panic(err)
	}
	return t
}

// newTestArchive archives fixtures and serves them from this node's own
// archive.
func newTestArchive(t testing.TB, fixtures []fixture) *testArchive {
	t.Helper()
	return newTestArchiveVia(t, fixtures, nil)
}

// newTestArchiveVia archives fixtures and serves them through via(local
// archive), which stands for an archive spanning nodes; nil via serves the
// local archive itself.
func newTestArchiveVia(t testing.TB, fixtures []fixture, via func(*archive.Local) archive.Archive) *testArchive {
	t.Helper()
	data := t.TempDir()
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	warcDir := filepath.Join(data, "warc")
	if err := os.MkdirAll(warcDir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := warc.NewWriter(warcDir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := &testArchive{idx: index.New(db), dir: warcDir, caps: map[string]index.Capture{}}
	a.local = archive.NewLocal(a.idx, warcDir)
	b := db.NewIndexedBatch()
	first := map[string]index.Capture{}
	for _, f := range fixtures {
		if f.status == 0 {
			f.status = 200
		}
		body := []byte(f.body)
		enc := ""
		if f.gzip {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(body)
			zw.Close()
			body, enc = zb.Bytes(), "Content-Encoding: gzip\r\n"
		}
		head := fmt.Sprintf("HTTP/1.1 %d %s\r\n%s%sContent-Length: %d\r\n\r\n", f.status, http.StatusText(f.status), f.header, enc, len(body))
		raw := append([]byte(head), body...)
		when := ts(f.at)
		rec, err := responseRecord(f.url, when, raw)
		if err != nil {
			t.Fatal(err)
		}
		digest := rec.Header.Get("WARC-Payload-Digest")
		typ := warc.TypeResponse
		var orig index.Capture // with revisit: the capture referred to
		if f.revisit {
			o, ok := first[digest]
			if f.refersTo != "" {
				ru, rat, _ := strings.Cut(f.refersTo, " ")
				cu, err := urlkey.Canonical("", ru)
				if err != nil {
					t.Fatal(err)
				}
				if o, ok = a.caps[cu+" "+rat]; !ok {
					o, ok = index.Capture{URL: cu, Time: ts(rat), RecordID: "<urn:uuid:00000000-0000-4000-8000-000000000000>"}, true
				}
			}
			if !ok {
				t.Fatalf("fixture %s %s: revisit of a payload not archived before", f.url, f.at)
			}
			orig = o
			ref := warc.RefersTo{ID: o.RecordID, URI: o.URL, Date: o.Time}
			if f.byDigest {
				ref = warc.RefersTo{}
			}
			profile, block := warc.ProfileIdenticalPayload, []byte(head)
			if f.notModified {
				f.status = http.StatusNotModified
				profile, block = warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\n"+f.header+"\r\n")
			}
			if f.noDigest {
				digest = ""
			}
			rec = warc.NewRevisit(f.url, when, profile, block, digest, ref)
			typ = warc.TypeRevisit
		}
		loc, err := w.Write(rec)
		if err != nil {
			t.Fatal(err)
		}
		u, err := urlkey.Canonical("", f.url)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := urlkey.SURT(u)
		c := index.Capture{URLKey: key, Time: when, URL: u, Type: typ, Status: f.status, Digest: digest,
			Segment: loc.Segment, Offset: loc.Offset, Length: loc.Length, RecordID: rec.ID(), SimHash: f.simhash}
		if loc := http.Header(parseHeaderLines(f.header)).Get("Location"); loc != "" {
			c.Redirect, _ = urlkey.Canonical(u, loc) // as the crawler and import index it
		}
		if f.notModified {
			c.MIME = orig.MIME // as the crawler indexes a 304: the original's type, whatever it sent
		} else if ct := http.Header(parseHeaderLines(f.header)).Get("Content-Type"); ct != "" {
			c.MIME = strings.TrimSpace(strings.Split(ct, ";")[0])
		}
		if err := index.Put(b, c); err != nil {
			t.Fatal(err)
		}
		if _, ok := first[digest]; !ok && !f.revisit {
			first[digest] = c
			index.PutDigest(b, c)
		}
		a.caps[u+" "+f.at] = c
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	a.ui = httptest.NewUnstartedServer(nil)
	a.content = httptest.NewUnstartedServer(nil)
	var arc archive.Archive = a.local
	if via != nil {
		arc = via(a.local)
	}
	a.srv = New(Config{Archive: arc, UIAddr: a.ui.Listener.Addr().String(), ContentAddr: a.content.Listener.Addr().String()})
	a.ui.Config.Handler = a.srv.UI()
	a.content.Config.Handler = a.srv.Content()
	a.ui.Start()
	a.content.Start()
	t.Cleanup(a.ui.Close)
	t.Cleanup(a.content.Close)
	return a
}

// responseRecord is warc.NewResponse for a fixture's raw response, which
// may hold a header line that is not a field ("X-Powered-By PHP/5.2"):
// warc.NewResponse reads the head strictly and refuses it, but an imported
// WARC can hold one. The payload is then the bytes after the head.
func responseRecord(uri string, when time.Time, raw []byte) (*warc.Record, error) {
	rec, err := warc.NewResponse(uri, when, raw)
	if err == nil {
		return rec, nil
	}
	end := warc.HTTPHeaderEnd(raw)
	if end < 0 {
		return nil, err
	}
	rec, err = warc.NewResponse(uri, when, append([]byte("HTTP/1.1 200 OK\r\n\r\n"), raw[end:]...))
	if err != nil {
		return nil, err
	}
	rec.Block = raw
	rec.Header.Set("WARC-Block-Digest", warc.Digest(raw))
	return rec, nil
}

func parseHeaderLines(s string) map[string][]string {
	h := http.Header{}
	for _, l := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return h
}

// ask sends a GET for url with the header fields hdr (name, value, …)
// and returns the response, its body unread.
func ask(t testing.TB, url string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t testing.TB, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	resp := ask(t, url, hdr...)
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}
