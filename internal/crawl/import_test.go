package crawl

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/simhash"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

const wgetWARC = "../warc/testdata/wget-1.21.warc.gz"

func importFiles(t *testing.T, data string, files ...string) ImportStats {
	t.Helper()
	s, err := Import(context.Background(), data, files, nil)
	if err != nil {
		t.Fatalf("import %v: %v (stats %+v)", files, err, s)
	}
	return s
}

// warcFile writes recs into a WARC file of their own and returns its path.
func warcFile(t *testing.T, recs ...*warc.Record) string {
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
	files, _ := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	return files[0]
}

// readRecords reads every record of a WARC file.
func readRecords(t *testing.T, path string) []*warc.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _ := warc.NewReader(f)
	var recs []*warc.Record
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		recs = append(recs, rec)
	}
}

// segmentRecords reads the records of all segments of a data directory, by
// record ID, leaving out the warcinfo records the writer made.
func segmentRecords(t *testing.T, data string) map[string]*warc.Record {
	t.Helper()
	segs, _ := warc.Segments(filepath.Join(data, "warc"))
	recs := map[string]*warc.Record{}
	for _, s := range segs {
		for _, rec := range readRecords(t, s) {
			if rec.Type() == warc.TypeWarcinfo && strings.HasPrefix(rec.Header.Get("WARC-Filename"), "waggle-") {
				continue
			}
			if recs[rec.ID()] != nil {
				t.Errorf("record %s is in the archive twice", rec.ID())
			}
			recs[rec.ID()] = rec
		}
	}
	return recs
}

// sameRecord reports how an imported record differs from its original:
// header fields and block must be the same, except for a WARC-Warcinfo-ID
// the writer adds to records that had none.
func sameRecord(orig, got *warc.Record) string {
	if !bytes.Equal(orig.Block, got.Block) {
		return "block differs"
	}
	of, gf := orig.Header.Fields(), got.Header.Fields()
	if orig.Header.Get("WARC-Warcinfo-ID") == "" {
		var kept []warc.Field
		for _, f := range gf {
			if !strings.EqualFold(f.Name, "WARC-Warcinfo-ID") {
				kept = append(kept, f)
			}
		}
		gf = kept
	}
	if fmt.Sprint(of) != fmt.Sprint(gf) {
		return fmt.Sprintf("header %v, was %v", gf, of)
	}
	return ""
}

func segmentSizes(t *testing.T, data string) map[string]int64 {
	t.Helper()
	segs, _ := warc.Segments(filepath.Join(data, "warc"))
	m := map[string]int64{}
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(s)] = fi.Size()
	}
	return m
}

func TestImportWget(t *testing.T) {
	data := filepath.Join(t.TempDir(), "new") // Import creates it
	s := importFiles(t, data, wgetWARC)
	orig := readRecords(t, wgetWARC)
	if s.Files != 1 || s.Records != int64(len(orig)) || s.Written != s.Records || s.Captures != 1 || s.Duplicates != 0 || s.Rejected != 0 {
		t.Fatalf("stats %+v for a file of %d records with one capture", s, len(orig))
	}
	caps := archived(t, data)
	cs := caps["http://www.round-storm.test/people/"]
	if len(caps) != 1 || len(cs) != 1 {
		t.Fatalf("index: %v", caps)
	}
	c := cs[0]
	want := index.Capture{
		URLKey: "test,round-storm)/people", URL: "http://www.round-storm.test/people/", Type: "response",
		Status: 200, MIME: "text/html", Digest: "sha1:HSYPQZ2POETZWTS2E6XUWD75DEBMCGOS",
		Time:     time.Date(2026, 11, 22, 15, 3, 23, 0, time.UTC),
		RecordID: "<urn:uuid:8f140f17-c1b2-4431-bd2f-866fc2828eee>",
	}
	for _, rec := range orig {
		if rec.Type() == warc.TypeResponse {
			payload, _ := warc.HTTPPayload(rec.Block)
			want.SimHash = simhash.OfHTML(payload) // wget asks for no content coding
		}
	}
	if want.SimHash == 0 {
		t.Fatal("the page has no SimHash")
	}
	c.Segment, c.Offset, c.Length = "", 0, 0
	if c != want {
		t.Errorf("capture\n%+v, want\n%+v", c, want)
	}
	verifyWARCs(t, data, caps)
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	first, ok, err := index.ByDigest(db, want.Digest)
	db.Close()
	if err != nil || !ok || first.RecordID != want.RecordID {
		t.Errorf("digest entry: %+v %v %v", first, ok, err)
	}
	// Every record is there, unchanged.
	got := segmentRecords(t, data)
	if len(got) != len(orig) {
		t.Errorf("archive holds %d records, the file %d", len(got), len(orig))
	}
	for _, o := range orig {
		g := got[o.ID()]
		if g == nil {
			t.Errorf("%s record %s not imported", o.Type(), o.ID())
		} else if d := sameRecord(o, g); d != "" {
			t.Errorf("%s record %s: %s", o.Type(), o.ID(), d)
		}
	}

	// Again: nothing new, not a byte written.
	sizes := segmentSizes(t, data)
	s = importFiles(t, data, wgetWARC)
	if s.Captures != 0 || s.Written != 0 || s.Duplicates != int64(len(orig)) {
		t.Errorf("second import: %+v", s)
	}
	if after := segmentSizes(t, data); fmt.Sprint(after) != fmt.Sprint(sizes) {
		t.Errorf("second import changed the segments: %v → %v", sizes, after)
	}
	if n := len(archived(t, data)["http://www.round-storm.test/people/"]); n != 1 {
		t.Errorf("%d captures after importing twice", n)
	}
}

// TestImportFormats imports the same records from an uncompressed WARC and
// from a WARC compressed as one gzip stream.
func TestImportFormats(t *testing.T) {
	raw, err := os.ReadFile(wgetWARC)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr) // all members
	if err != nil {
		t.Fatal(err)
	}
	var whole bytes.Buffer
	zw := gzip.NewWriter(&whole)
	zw.Write(plain)
	zw.Close()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"plain.warc": plain, "whole.warc.gz": whole.Bytes()} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		data := t.TempDir()
		s := importFiles(t, data, path)
		if s.Captures != 1 || s.Written != s.Records || s.Records < 5 {
			t.Errorf("%s: %+v", name, s)
		}
		caps := archived(t, data)
		if cs := caps["http://www.round-storm.test/people/"]; len(cs) != 1 || cs[0].Digest != "sha1:HSYPQZ2POETZWTS2E6XUWD75DEBMCGOS" {
			t.Errorf("%s: index %v", name, caps)
		}
		verifyWARCs(t, data, caps)
	}
}

// crawlArchive crawls a small synthetic web into a new data directory.
func crawlArchive(t *testing.T, seed int64, maxPages int) string {
	t.Helper()
	web, srv := startWeb(t, websim.Config{Seed: seed, Hosts: 8, Pages: 120})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	cfg.MaxPages = maxPages
	cfg.MaxPagesPerHost = 80
	runCrawl(t, cfg)
	return cfg.Data
}

func exportWACZ(t *testing.T, data string, sel wacz.Selection) string {
	t.Helper()
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	path := filepath.Join(t.TempDir(), "export.wacz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := wacz.Export(context.Background(), f, wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc"))}, sel); err != nil {
		t.Fatal(err)
	}
	return path
}

// captureSet describes captures by what replay needs of them; times are
// cut to the microsecond WARC-Date keeps.
func captureSet(caps map[string][]index.Capture, keep func(index.Capture) bool) []string {
	var out []string
	for _, cs := range caps {
		for _, c := range cs {
			if keep == nil || keep(c) {
				out = append(out, fmt.Sprintf("%s %s %s %s %d %s %s %s %s", c.URLKey, c.Time.Truncate(time.Microsecond).Format(time.RFC3339Nano),
					c.URL, c.Type, c.Status, c.MIME, c.Digest, c.Redirect, c.RecordID))
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportOwnWACZ(t *testing.T) {
	src := crawlArchive(t, 4, 150)
	srcCaps := archived(t, src)
	revisits := 0
	for _, cs := range srcCaps {
		for _, c := range cs {
			if c.Type == warc.TypeRevisit {
				revisits++
			}
		}
	}
	if revisits == 0 {
		t.Fatal("the crawl made no revisit records: the test would not cover them")
	}

	// Everything: the imported index is the original's.
	full := exportWACZ(t, src, wacz.Selection{})
	data := t.TempDir()
	s := importFiles(t, data, full)
	caps := archived(t, data)
	want, got := captureSet(srcCaps, nil), captureSet(caps, nil)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Errorf("imported index differs from the original:\n%s\n---\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s.Captures != int64(len(want)) || s.Files != 1 {
		t.Errorf("stats %+v, want %d captures", s, len(want))
	}
	recs := verifyWARCs(t, data, caps)
	if recs[warc.TypeRequest] != len(want) || recs[warc.TypeMetadata] == 0 {
		t.Errorf("records imported: %v", recs)
	}

	// Again, and into the archive it came from: nothing is added.
	for _, dir := range []string{data, src} {
		sizes := segmentSizes(t, dir)
		s := importFiles(t, dir, full)
		if s.Captures != 0 || s.Written != 0 || s.Duplicates != s.Records {
			t.Errorf("importing %s again: %+v", full, s)
		}
		if after := segmentSizes(t, dir); fmt.Sprint(after) != fmt.Sprint(sizes) {
			t.Errorf("importing again changed the segments: %v → %v", sizes, after)
		}
	}

	// One host: its captures, plus the payload records its revisits need,
	// which therefore replay.
	var host string
	for _, cs := range srcCaps {
		if c := cs[0]; c.Type == warc.TypeRevisit {
			host = bareHost(c.URL)
			break
		}
	}
	part := exportWACZ(t, src, wacz.Selection{Host: host})
	data2 := t.TempDir()
	importFiles(t, data2, part)
	caps2 := archived(t, data2)
	inHost := func(c index.Capture) bool { return bareHost(c.URL) == host }
	wantHost, gotHost := captureSet(srcCaps, inHost), captureSet(caps2, inHost)
	if strings.Join(wantHost, "\n") != strings.Join(gotHost, "\n") {
		t.Errorf("host %s: imported\n%s\nwant\n%s", host, strings.Join(gotHost, "\n"), strings.Join(wantHost, "\n"))
	}
	db, err := OpenDB(data2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, cs := range caps2 {
		for _, c := range cs {
			if c.Type != warc.TypeRevisit {
				continue
			}
			if _, ok, err := index.ByDigest(db, c.Digest); err != nil || !ok {
				t.Errorf("revisit %s imported without its payload (%v)", c.URL, err)
			}
		}
	}
}

func bareHost(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	h, _, _ := strings.Cut(rest, "/")
	return strings.TrimPrefix(h, "www.")
}

// concatSegments writes all segments of an archive as one WARC file.
func concatSegments(t *testing.T, data, path string) []byte {
	t.Helper()
	segs, _ := warc.Segments(filepath.Join(data, "warc"))
	var all []byte
	for _, s := range segs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if err := os.WriteFile(path, all, 0o644); err != nil {
		t.Fatal(err)
	}
	return all
}

// capturesBefore counts the index-worthy records a reader gets from a file
// before its first error.
func capturesBefore(t *testing.T, b []byte) int {
	t.Helper()
	r, _ := warc.NewReader(bytes.NewReader(b))
	n := 0
	for {
		rec, _, err := r.Next()
		if err != nil {
			return n
		}
		if typ := rec.Type(); typ == warc.TypeResponse || typ == warc.TypeRevisit {
			n++
		}
	}
}

func TestImportDamaged(t *testing.T) {
	src := crawlArchive(t, 9, 80)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.warc.gz")
	all := concatSegments(t, src, good)
	wantAll := capturesBefore(t, all)

	truncated := filepath.Join(dir, "truncated.warc.gz")
	cut := all[:len(all)*3/5]
	os.WriteFile(truncated, cut, 0o644)

	// A byte changed inside the first member that starts after 40% of the file.
	corrupt := filepath.Join(dir, "corrupt.warc.gz")
	bad := bytes.Clone(all)
	at := int64(-1)
	rd, _ := warc.NewReader(bytes.NewReader(all))
	for at < 0 {
		_, loc, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if loc.Offset >= int64(len(all))*2/5 && loc.Length > 60 {
			at = loc.Offset
		}
	}
	bad[at+40] ^= 0x55
	os.WriteFile(corrupt, bad, 0o644)

	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("These are not the records you are looking for.\n"), 0o644)

	noManifest := filepath.Join(dir, "plain.zip")
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	w, _ := zw.Create("archive/data.warc.gz")
	w.Write(all)
	zw.Close()
	os.WriteFile(noManifest, zbuf.Bytes(), 0o644)

	// A WACZ whose WARC data was altered after it was made.
	tampered := filepath.Join(dir, "tampered.wacz")
	zb, err := os.ReadFile(exportWACZ(t, src, wacz.Selection{}))
	if err != nil {
		t.Fatal(err)
	}
	zrd, err := zip.NewReader(bytes.NewReader(zb), int64(len(zb)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zrd.File {
		if f.Name == "archive/data.warc.gz" {
			off, _ := f.DataOffset()
			zb[off+int64(f.CompressedSize64)/2] ^= 1
		}
	}
	os.WriteFile(tampered, zb, 0o644)

	for _, tc := range []struct {
		file     string
		want     string // in the error
		captures int
	}{
		{truncated, "truncated.warc.gz: warc: ", capturesBefore(t, cut)},
		{truncated, "offset", capturesBefore(t, cut)},
		{corrupt, fmt.Sprintf("gzip member at offset %d", at), capturesBefore(t, bad)},
		{corrupt, "corrupt.warc.gz: warc: ", capturesBefore(t, bad)},
		{text, "notes.txt is neither a WARC nor a WACZ file", 0},
		{noManifest, "no datapackage.json", 0},
		{tampered, "tampered.wacz: wacz: ", 0},
	} {
		data := t.TempDir()
		s, err := Import(context.Background(), data, []string{tc.file}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", filepath.Base(tc.file), err, tc.want)
		}
		if s.Captures != int64(tc.captures) || s.Files != 0 {
			t.Errorf("%s: stats %+v, want %d captures", filepath.Base(tc.file), s, tc.captures)
		}
		if tc.captures == 0 {
			continue
		}
		if tc.captures >= wantAll {
			t.Fatalf("%s: the damage is after every capture; the test needs it midway", tc.file)
		}
		caps := archived(t, data)
		n := 0
		for _, cs := range caps {
			n += len(cs)
		}
		if n != tc.captures {
			t.Errorf("%s: %d captures in the index, want %d", filepath.Base(tc.file), n, tc.captures)
		}
		verifyWARCs(t, data, caps)
		// Nothing half-written: the next open has nothing to cut.
		sizes := segmentSizes(t, data)
		importFiles(t, data)
		if after := segmentSizes(t, data); fmt.Sprint(after) != fmt.Sprint(sizes) {
			t.Errorf("%s: segments were cut on reopening: %v → %v", filepath.Base(tc.file), sizes, after)
		}
	}

	// Bad files among good ones: the good ones are imported, every problem is reported.
	data := t.TempDir()
	s, err := Import(context.Background(), data, []string{wgetWARC, text, truncated, good, filepath.Join(dir, "absent.warc")}, nil)
	for _, want := range []string{"notes.txt", "truncated.warc.gz", "absent.warc"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mixed import: error %v does not mention %s", err, want)
		}
	}
	if s.Files != 2 || s.Captures != int64(wantAll)+1 {
		t.Errorf("mixed import: %+v, want 2 files and %d captures", s, wantAll+1)
	}
	caps := archived(t, data)
	verifyWARCs(t, data, caps)
}

func TestImportRejectsBadDigest(t *testing.T) {
	recs := readRecords(t, wgetWARC)
	var buf bytes.Buffer
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Type() == warc.TypeResponse {
			r.Block = bytes.Replace(r.Block, []byte("<html"), []byte("<HTML"), 1)
		}
		if _, err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	name := w.Segment()
	w.Close()
	b, _ := os.ReadFile(filepath.Join(dir, name))
	buf.Write(b)
	path := filepath.Join(t.TempDir(), "bad.warc.gz")
	os.WriteFile(path, buf.Bytes(), 0o644)
	data := t.TempDir()
	s := importFiles(t, data, path)
	if s.Rejected != 1 || s.Captures != 0 || s.Written != s.Records-1 {
		t.Errorf("stats %+v: the altered response must be rejected, the rest written", s)
	}
}

func TestDatePrecision(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"2024-01-02T03:04:05Z":             time.Second,
		"2024-01-02T03:04:05.123456Z":      time.Microsecond,
		"2024-01-02T03:04:05.1Z":           100 * time.Millisecond,
		"2024-01-02T03:04:05.123456789Z":   time.Nanosecond,
		"2024-01-02T03:04:05+01:00":        time.Second,
		"2024-01-02T03:04Z":                time.Minute,
		"2024-01-02":                       24 * time.Hour,
		"2024-01-02T03:04:05.12345678901Z": time.Nanosecond,
	} {
		if got := datePrecision(s); got != want {
			t.Errorf("datePrecision(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestImportKill9 kills an importing process with SIGKILL at several points
// and imports the same file again each time. In the end the archive must be
// exactly what one clean import makes: every capture once, every segment
// readable and in agreement with the index.
func TestImportKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary as a child process")
	}
	file := generateWARC(t, 3000)
	clean := t.TempDir()
	importFiles(t, clean, file)
	want := captureSet(archived(t, clean), nil)

	data := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 4 {
		base := len(segmentSizes(t, data))
		cmd := exec.Command(os.Args[0], "-test.run=^TestImportHelperProcess$")
		cmd.Env = append(os.Environ(), "WAGGLE_IMPORT_DATA="+data, "WAGGLE_IMPORT_FILE="+file)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Kill soon after the child's first commit has started a segment.
	wait:
		for len(segmentSizes(t, data)) <= base {
			select {
			case err := <-done:
				done <- err
				break wait
			case <-time.After(time.Millisecond):
			}
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		cmd.Process.Kill()
		err := <-done
		n := 0
		for _, cs := range archived(t, data) {
			n += len(cs)
		}
		t.Logf("round %d: child ended with %v; %d of %d captures committed", round, err, n, len(want))
	}
	s := importFiles(t, data, file)
	t.Logf("final import: %+v", s)
	caps := archived(t, data)
	got := captureSet(caps, nil)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after kills and a final import the index holds %d captures, a clean import %d", len(got), len(want))
	}
	verifyWARCs(t, data, caps)
	segmentRecords(t, data) // fails the test on a record written twice
}

// generateWARC writes a WARC file of n distinct captures, each a response
// record with its request record.
func generateWARC(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{MaxSegmentSize: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i := range n {
		u := fmt.Sprintf("http://gen%d.test/page/%d.html", i%7, i)
		body := fmt.Sprintf("<html><title>Page %d</title><p>%s</p></html>", i, strings.Repeat(fmt.Sprintf("word%d ", i), 200))
		raw := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		date := base.Add(time.Duration(i) * time.Second)
		resp, err := warc.NewResponse(u, date, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		req := warc.NewRequest(u, date, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		req.Header.Set("WARC-Concurrent-To", resp.ID())
		if _, err := w.WriteGroup([]*warc.Record{resp, req}); err != nil {
			t.Fatal(err)
		}
	}
	name := w.Segment()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// TestImportHelperProcess is the child of TestImportKill9.
func TestImportHelperProcess(t *testing.T) {
	data, file := os.Getenv("WAGGLE_IMPORT_DATA"), os.Getenv("WAGGLE_IMPORT_FILE")
	if data == "" {
		t.Skip("only run by TestImportKill9")
	}
	if _, err := Import(context.Background(), data, []string{file}, nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzCaptureOf reads a record from arbitrary bytes and derives its index
// entry as Import does: no panic, and a capture always has a key and a time
// the index can encode.
func FuzzCaptureOf(f *testing.F) {
	raw, err := os.ReadFile(wgetWARC)
	if err != nil {
		f.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		f.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	for _, rec := range bytes.SplitAfter(plain, []byte("\r\n\r\nWARC/")) {
		f.Add(append([]byte("WARC/"), bytes.TrimPrefix(rec, []byte("WARC/"))...))
	}
	f.Add([]byte("WARC/1.1\r\nWARC-Type: revisit\r\nWARC-Target-URI: http://a.test/\r\nWARC-Date: 2024-01-01T00:00:00Z\r\nContent-Length: 12\r\n\r\nHTTP/1.1 301\r\n\r\n\r\n"))
	f.Add([]byte("WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: http://a.test/\r\nWARC-Date: 0001-01-01T00:00:00Z\r\nContent-Length: 19\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\r\n\r\n"))
	f.Add([]byte("WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: http://a.test/\r\nWARC-Date: 1969-12-31T23:59:59Z\r\nContent-Length: 19\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\r\n\r\n"))
	f.Add([]byte("WARC/1.1\r\nWARC-Type: resource\r\nWARC-Target-URI: https://a.test/x\r\nWARC-Date: 2024\r\nContent-Type: text/html;;\r\nContent-Length: 0\r\n\r\n\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, _ := warc.NewReader(bytes.NewReader(b))
		rec, _, err := r.Next()
		if err != nil {
			return
		}
		warc.VerifyBlock(rec)
		datePrecision(rec.Header.Get("WARC-Date"))
		cp, _ := captureOf(rec)
		if cp != nil && (cp.URLKey == "" || cp.URL == "" || !index.OrderedTime(cp.Time)) {
			t.Fatalf("capture without key, or a time the index cannot hold in order: %+v", cp)
		}
	})
}

// An archive exported as WACZ and imported into a fresh data directory
// keeps the SimHash of every HTML revisit record: import gives a revisit its
// original's SimHash, as the crawl and replication do, so collapse=simhash
// and the near_ capture list treat it as the HTML page it is after a round
// trip.
func TestImportKeepsRevisitSimHash(t *testing.T) {
	_, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 3, Pages: 40})
	web := websim.New(websim.Config{Seed: 3, Hosts: 3, Pages: 40})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	cfg.MaxPages = 40
	runCrawl(t, cfg)
	time.Sleep(1100 * time.Millisecond) // a distinct second for the revisits
	all := cfg
	all.RecrawlAll = true
	all.MaxPages = 1000
	runCrawl(t, all)

	src := archived(t, cfg.Data)
	want := map[string]uint64{}
	for _, cs := range src {
		for _, c := range cs {
			if c.Type == warc.TypeRevisit && c.SimHash != 0 {
				want[c.URLKey+" "+c.Timestamp14()] = c.SimHash
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no HTML revisit with a SimHash in the source archive: the test covers nothing")
	}
	data := t.TempDir()
	importFiles(t, data, exportWACZ(t, cfg.Data, wacz.Selection{}))
	lost := 0
	for _, cs := range archived(t, data) {
		for _, c := range cs {
			if h, ok := want[c.URLKey+" "+c.Timestamp14()]; ok && c.SimHash != h {
				lost++
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d HTML revisits lost their SimHash on export+import", lost, len(want))
	}
}

// htmlResponse is a response record of http://a.example/ on 2024-01-01:
// an HTML page of text repeated; head is its HTTP head.
func htmlResponse(t *testing.T, text string) (rec *warc.Record, head []byte) {
	t.Helper()
	body := "<html><head><title>t</title></head><body><p>" + strings.Repeat(text, 20) + "</p></body></html>"
	raw := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	rec, err := warc.NewResponse("http://a.example/", time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec, raw[:bytes.Index(raw, []byte("\r\n\r\n"))+4]
}

// A revisit imported takes the SimHash of its original, whether the
// original was imported earlier in the same batch or by an earlier Import.
func TestImportRevisitSimHashFromOriginal(t *testing.T) {
	orig, head := htmlResponse(t, "words of a page that has text ")
	at, _ := orig.Date()
	digest := orig.Header.Get("WARC-Payload-Digest")
	revisit := func(u string, d time.Duration) *warc.Record {
		return warc.NewRevisit(u, at.Add(d), "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest", head, digest,
			warc.RefersTo{ID: orig.ID(), URI: "http://a.example/", Date: at})
	}
	data := t.TempDir()
	importFiles(t, data, warcFile(t, orig, revisit("http://b.example/", time.Hour)))
	importFiles(t, data, warcFile(t, revisit("http://c.example/", 2*time.Hour)))
	got := archived(t, data)
	want := got["http://a.example/"][0].SimHash
	if want == 0 {
		t.Fatal("the original has no SimHash: the test covers nothing")
	}
	for _, u := range []string{"http://b.example/", "http://c.example/"} {
		if cs := got[u]; len(cs) != 1 || cs[0].Type != warc.TypeRevisit || cs[0].SimHash != want {
			t.Errorf("%s: %+v, want a revisit with SimHash %016x", u, cs, want)
		}
	}
}

// Revisits imported before their original, by the same Import or one
// before, end with what they would have had after it: its SimHash, and,
// for one that names it by WARC-Refers-To alone (no digest, no URL and
// date, as some tools write a server-not-modified revisit), its payload
// digest, by which replay finds it; so does one imported after. Revisits
// whose payload is nowhere are counted until it comes.
func TestImportResolvesRevisitsBeforeTheirOriginal(t *testing.T) {
	orig, head := htmlResponse(t, "the text of a page imported late ")
	at, _ := orig.Date()
	digest := orig.Header.Get("WARC-Payload-Digest")
	early := warc.NewRevisit("http://b.example/", at.Add(time.Hour), warc.ProfileIdenticalPayload, head, digest,
		warc.RefersTo{ID: orig.ID(), URI: "http://a.example/", Date: at})
	byID := func(d time.Duration) *warc.Record {
		return warc.NewRevisit("http://a.example/", at.Add(d), "http://netpreserve.org/warc/1.0/revisit/server-not-modified",
			[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{ID: orig.ID()})
	}
	nowhere := warc.NewRevisit("http://c.example/", at.Add(3*time.Hour), warc.ProfileIdenticalPayload, head,
		"sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", warc.RefersTo{})
	data := t.TempDir()
	if s := importFiles(t, data, warcFile(t, early, byID(2*time.Hour), nowhere)); s.Unresolved != 3 {
		t.Errorf("before the original: %d revisits counted unresolved; want 3", s.Unresolved)
	}
	if s := importFiles(t, data, warcFile(t, orig), warcFile(t, byID(4*time.Hour))); s.Unresolved != 1 {
		t.Errorf("with the original: %d revisits counted unresolved; want the one whose payload is nowhere", s.Unresolved)
	}
	got := archived(t, data)
	want := got["http://a.example/"][0]
	if want.SimHash == 0 {
		t.Fatal("the original has no SimHash: the test covers nothing")
	}
	if cs := got["http://b.example/"]; len(cs) != 1 || cs[0].SimHash != want.SimHash {
		t.Errorf("the revisit imported before its original: %+v; want SimHash %016x", cs, want.SimHash)
	}
	if cs := got["http://a.example/"]; len(cs) != 3 || cs[1].Digest != digest || cs[2].Digest != digest {
		t.Errorf("the revisits naming their original by record ID alone: %+v; want digest %s", cs, digest)
	}
}

// A revisit that names, by record ID alone, a response that Import skipped
// as a copy of a capture the archive holds resolves to that capture's
// payload.
func TestImportRevisitOfASkippedDuplicate(t *testing.T) {
	first, _ := htmlResponse(t, "the same page twice ")
	again, _ := htmlResponse(t, "the same page twice ") // another record ID, the same capture
	at, _ := first.Date()
	byID := warc.NewRevisit("http://a.example/", at.Add(time.Hour), "http://netpreserve.org/warc/1.0/revisit/server-not-modified",
		[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{ID: again.ID()})
	for _, c := range []struct {
		name  string
		files func() []string
	}{
		{"in one file", func() []string { return []string{warcFile(t, again, byID)} }},
		{"the revisit first", func() []string { return []string{warcFile(t, byID), warcFile(t, again)} }},
		{"the copy first", func() []string { return []string{warcFile(t, again), warcFile(t, byID)} }},
	} {
		data := t.TempDir()
		importFiles(t, data, warcFile(t, first))
		if s := importFiles(t, data, c.files()...); s.Duplicates != 1 || s.Unresolved != 0 {
			t.Errorf("%s: %d duplicates, %d unresolved; want the copy skipped and the revisit resolved", c.name, s.Duplicates, s.Unresolved)
		}
		if cs := archived(t, data)["http://a.example/"]; len(cs) != 2 || cs[1].Digest != first.Header.Get("WARC-Payload-Digest") {
			t.Errorf("%s: captures %+v; want the revisit with the payload's digest", c.name, cs)
		}
	}
}

// A claim touches only the orphans that name exactly its record ID, though
// an ID with a NUL makes another's ref key look like one of its own.
func TestClaimOrphansMatchesTheWholeID(t *testing.T) {
	db, err := OpenDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewIndexedBatch()
	defer b.Close()
	o := orphan{URLKey: "example,a)/", Time: time.Now(), RecordID: "Q", RefersTo: "X\x00P", Walk: true}
	if err := errors.Join(putOrphan(b, o), b.Set(orphanRefKey(o.RefersTo, o.RecordID), nil, nil)); err != nil {
		t.Fatal(err)
	}
	digest := func() string {
		v, closer, err := b.Get([]byte(orphanPrefix + "Q"))
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		var o orphan
		if err := json.Unmarshal(v, &o); err != nil {
			t.Fatal(err)
		}
		return o.Digest
	}
	if err := claimOrphans(b, "X", "sha1:X"); err != nil || digest() != "" {
		t.Fatalf("a claim of X gave the orphan naming X\\x00P digest %q (%v)", digest(), err)
	}
	if err := claimOrphans(b, "X\x00P", "sha1:XP"); err != nil || digest() != "sha1:XP" {
		t.Errorf("the claim of X\\x00P gave its orphan digest %q (%v)", digest(), err)
	}
	// A ref left by a record whose entry another with the same ID took (a
	// malformed file) gives that other nothing.
	o = orphan{URLKey: "example,b)/", Time: time.Now(), RecordID: "R", RefersTo: "Y", Walk: true}
	if err := errors.Join(putOrphan(b, o), b.Set(orphanRefKey("Z", "R"), nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := claimOrphans(b, "Z", "sha1:Z"); err != nil {
		t.Fatal(err)
	}
	v, closer, err := b.Get([]byte(orphanPrefix + "R"))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if err := json.Unmarshal(v, &o); err != nil || o.Digest != "" || !o.Walk {
		t.Errorf("a stale ref's claim changed the orphan that names Y: %+v (%v)", o, err)
	}
}

// An Import cut short after its records were committed, before it looked
// at its orphans again (a crash, Ctrl-C), leaves them to the next Import,
// which walks the index for the one that names its original, imported
// before, by record ID alone.
func TestImportCutShortLeavesItsOrphansToTheNext(t *testing.T) {
	orig, _ := htmlResponse(t, "an original imported first ")
	at, _ := orig.Date()
	byID := warc.NewRevisit("http://a.example/", at.Add(time.Hour), "http://netpreserve.org/warc/1.0/revisit/server-not-modified",
		[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{ID: orig.ID()})
	data := t.TempDir()
	importFiles(t, data, warcFile(t, orig))
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	im, err := newImporter(db, filepath.Join(data, "warc"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(im.importFile(context.Background(), warcFile(t, byID)), im.w.Close(), db.Close()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if s := importFiles(t, data); s.Unresolved != 0 {
			t.Errorf("Import %d after the one cut short: %d unresolved, want 0", i+1, s.Unresolved)
		}
	}
	if cs := archived(t, data)["http://a.example/"]; len(cs) != 2 || cs[1].Digest != orig.Header.Get("WARC-Payload-Digest") {
		t.Errorf("captures %+v; want the revisit with the original's digest", cs)
	}
}

// An orphan whose revisit left the index (released to other nodes,
// dropped as damaged) is forgotten, not counted at every Import after.
func TestImportForgetsOrphansThatLeftTheIndex(t *testing.T) {
	orig, head := htmlResponse(t, "a page released later ")
	at, _ := orig.Date()
	rv := warc.NewRevisit("http://b.example/", at.Add(time.Hour), warc.ProfileIdenticalPayload, head,
		orig.Header.Get("WARC-Payload-Digest"), warc.RefersTo{})
	data := t.TempDir()
	if s := importFiles(t, data, warcFile(t, rv)); s.Unresolved != 1 {
		t.Fatalf("%d unresolved; want the revisit without its original", s.Unresolved)
	}
	cp := archived(t, data)["http://b.example/"][0]
	db, err := OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewIndexedBatch()
	if err := errors.Join(Release(b, cp, nil), b.Commit(pebble.Sync), db.Close()); err != nil {
		t.Fatal(err)
	}
	if s := importFiles(t, data); s.Unresolved != 0 {
		t.Errorf("after the revisit left the index: %d unresolved, want 0", s.Unresolved)
	}
	importFiles(t, data, warcFile(t, orig))
	if cs := archived(t, data)["http://b.example/"]; len(cs) != 0 {
		t.Errorf("the released revisit is back in the index: %+v", cs)
	}
}

// A response dated before 1970, which the index would sort out of order,
// or of an ftp: URL, which replay does not serve, is kept in the archive
// (nothing is lost) but not indexed, and counted; the same file as written
// indexes it. A dns: record, a crawler's own, is kept and not counted.
func TestImportKeepsButDoesNotIndexPre1970(t *testing.T) {
	write := func(change func(*warc.Record)) string {
		dir := t.TempDir()
		w, err := warc.NewWriter(dir, warc.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range readRecords(t, wgetWARC) {
			if r.Type() == warc.TypeResponse && change != nil {
				change(r)
			}
			if _, err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		name := w.Segment()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, name)
	}
	if s := importFiles(t, t.TempDir(), write(nil)); s.Captures != 1 || s.Unindexed != 0 {
		t.Fatalf("fixture: the file as written imports as %+v; want its one page indexed", s)
	}
	for _, tc := range []struct {
		name    string
		change  func(*warc.Record)
		counted int64
	}{
		{"dated 1969", func(r *warc.Record) { r.Header.Set("WARC-Date", "1969-07-20T20:17:40Z") }, 1},
		{"of an ftp: URL", func(r *warc.Record) { r.Header.Set("WARC-Target-URI", "ftp://ftp.example/file") }, 1},
		{"of a dns: lookup", func(r *warc.Record) { r.Header.Set("WARC-Target-URI", "dns:www.example.com") }, 0},
	} {
		data, old := t.TempDir(), write(tc.change)
		s := importFiles(t, data, old)
		if s.Unindexed != tc.counted || s.Captures != 0 || s.Rejected != 0 || s.Written != s.Records {
			t.Errorf("%s: stats %+v; want the page written, not indexed, and %d counted", tc.name, s, tc.counted)
		}
		if s := importFiles(t, data, old); s.Unindexed != 0 || s.Written != 0 || s.Duplicates != s.Records {
			t.Errorf("%s: the same file again: %+v; want every record a duplicate, none counted as kept", tc.name, s)
		}
	}
}

// An imported response whose SHA-1 WARC-Payload-Digest is not its
// payload's (another tool's bug, or a forged file) is indexed by its
// payload's own digest: a page fetched later whose payload has the claimed
// digest is stored, not made a revisit of the imported record's other
// bytes. A digest taken over a chunked body's framing, as some tools
// write it, is that tool's reading of the payload and is kept.
func TestImportedPayloadDigestMustBeThePayloads(t *testing.T) {
	live := `<html><body><p>The page as the server sends it today.</p></body></html>`
	other := `<html><body><p>Something else, in an imported file.</p></body></html>`
	chunkedBody := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(other), other)
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{MaxSegmentSize: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	forged, err := warc.NewResponse("http://imported.test/x", at, []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(other), other)))
	if err != nil {
		t.Fatal(err)
	}
	forged.Header.Set("WARC-Payload-Digest", warc.Digest([]byte(live)))
	framed, err := warc.NewResponse("http://imported.test/chunked", at, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"+chunkedBody))
	if err != nil {
		t.Fatal(err)
	}
	framed.Header.Set("WARC-Payload-Digest", warc.Digest([]byte(chunkedBody)))
	if _, err := w.WriteGroup([]*warc.Record{forged, framed}); err != nil {
		t.Fatal(err)
	}
	name := w.Segment()
	w.Close()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, live)
	}))
	defer srv.Close()
	cfg := directConfig(t, srv.URL+"/page")
	s, err := Import(context.Background(), cfg.Data, []string{filepath.Join(dir, name)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Misdigested != 1 || s.Captures != 2 {
		t.Errorf("import: %d captures, %d misdigested; want 2 and 1", s.Captures, s.Misdigested)
	}
	runCrawl(t, cfg)
	caps := archived(t, cfg.Data)
	if c := caps[srv.URL+"/page"][0]; c.Type != warc.TypeResponse {
		t.Errorf("the fetched page was archived as a %s (the imported record's digest claimed its payload)", c.Type)
	}
	if c := caps["http://imported.test/x"][0]; c.Digest != warc.Digest([]byte(other)) {
		t.Errorf("the misdigested record is indexed by %s, want its payload's %s", c.Digest, warc.Digest([]byte(other)))
	}
	if c := caps["http://imported.test/chunked"][0]; c.Digest != warc.Digest([]byte(chunkedBody)) {
		t.Errorf("the chunked record is indexed by %s, want the digest its file gives, over the framing (%s)", c.Digest, warc.Digest([]byte(chunkedBody)))
	}
}

// A chain of server-not-modified revisits, each naming the visit before,
// itself a revisit, by record ID alone (WARC Annex C's example, common in
// WARC/1.0 files), or by URL and date, resolves to the response that holds
// the payload: in one file, over several Imports, and with the revisits
// imported before what they name.
func TestImportResolvesChainsOfRevisits(t *testing.T) {
	orig, _ := htmlResponse(t, "the text of a page visited four times ")
	at, _ := orig.Date()
	notModified := []byte("HTTP/1.1 304 Not Modified\r\n\r\n")
	const profile = "http://netpreserve.org/warc/1.0/revisit/server-not-modified"
	r2 := warc.NewRevisit("http://a.example/", at.Add(time.Hour), profile, notModified, "", warc.RefersTo{ID: orig.ID()})
	r3 := warc.NewRevisit("http://a.example/", at.Add(2*time.Hour), profile, notModified, "", warc.RefersTo{ID: r2.ID()})
	r4 := warc.NewRevisit("http://a.example/", at.Add(3*time.Hour), profile, notModified, "",
		warc.RefersTo{URI: "http://a.example/", Date: at.Add(2 * time.Hour)})
	digest := orig.Header.Get("WARC-Payload-Digest")
	for _, c := range []struct {
		name string
		runs [][]*warc.Record
	}{
		{"in one file", [][]*warc.Record{{orig, r2, r3, r4}}},
		{"one Import each", [][]*warc.Record{{orig}, {r2}, {r3}, {r4}}},
		{"newest first", [][]*warc.Record{{r4}, {r3}, {r2}, {orig}}},
		{"the original last", [][]*warc.Record{{r2, r3, r4}, {orig}}},
	} {
		data := t.TempDir()
		var s ImportStats
		for _, recs := range c.runs {
			s = importFiles(t, data, warcFile(t, recs...))
		}
		if s.Unresolved != 0 {
			t.Errorf("%s: %d revisits counted unresolved after the last Import, want none", c.name, s.Unresolved)
		}
		caps := archived(t, data)["http://a.example/"]
		if len(caps) != 4 {
			t.Fatalf("%s: %d captures, want 4", c.name, len(caps))
		}
		db, err := OpenDB(data)
		if err != nil {
			t.Fatal(err)
		}
		a := archive.NewLocal(index.New(db), filepath.Join(data, "warc"))
		for _, cp := range caps[1:] {
			rec, err := a.Record(context.Background(), cp)
			if err != nil {
				t.Fatal(err)
			}
			o, _, err := archive.Original(context.Background(), a, cp, rec.Header)
			if err != nil || o.RecordID != orig.ID() {
				t.Errorf("%s: the revisit at %s resolves to %s (%v), want the response %s", c.name, cp.Timestamp14(), o.RecordID, err, orig.ID())
			}
			if cp.Digest != digest {
				t.Errorf("%s: the revisit at %s is indexed with digest %q, want its payload's %s", c.name, cp.Timestamp14(), cp.Digest, digest)
			}
		}
		db.Close()
	}
	// Without the original, every revisit of the chain stays counted,
	// though the first names the payload's digest.
	withDigest := warc.NewRevisit("http://a.example/", at.Add(time.Hour), profile, notModified, digest, warc.RefersTo{ID: orig.ID()})
	after := warc.NewRevisit("http://a.example/", at.Add(2*time.Hour), profile, notModified, "", warc.RefersTo{ID: withDigest.ID()})
	data := t.TempDir()
	importFiles(t, data, warcFile(t, withDigest))
	if s := importFiles(t, data, warcFile(t, after)); s.Unresolved != 2 {
		t.Errorf("a chain whose original is not imported: %d revisits counted unresolved, want 2", s.Unresolved)
	}
}

// A revisit that names its original by URL and date alone, to the second
// (as Heritrix does), takes the payload of that URL's capture in that
// second, not of another URL of the same key fetched then: the http URL's
// redirect to https, whose empty body would make the page a redirect to
// itself.
func TestImportRevisitNamedByDateBesideARedirect(t *testing.T) {
	day := func(d int, ms int) time.Time {
		return time.Date(2024, 1, d, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	redirect := func(at time.Time) *warc.Record {
		rec, err := warc.NewResponse("http://site.example/", at, []byte("HTTP/1.1 301 Moved Permanently\r\nLocation: https://site.example/\r\nContent-Length: 0\r\n\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	body := "<html><body>the page</body></html>"
	page, err := warc.NewResponse("https://site.example/", day(1, 400), []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s", len(body), body)))
	if err != nil {
		t.Fatal(err)
	}
	notModified := warc.NewRevisit("https://site.example/", day(2, 400), warc.ProfileServerNotModified,
		[]byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "", warc.RefersTo{URI: "https://site.example/", Date: day(1, 0)})
	data := t.TempDir()
	if s := importFiles(t, data, warcFile(t, redirect(day(1, 100)), page, redirect(day(2, 100)), notModified)); s.Unresolved != 0 {
		t.Errorf("%d revisits unresolved; want none", s.Unresolved)
	}
	want := page.Header.Get("WARC-Payload-Digest")
	if cs := archived(t, data)["https://site.example/"]; len(cs) != 2 || cs[1].Type != warc.TypeRevisit || cs[1].Digest != want || cs[1].MIME != "text/html" {
		t.Errorf("captures of the page %+v; want the revisit with the page's digest %s and type", cs, want)
	}
}

// A chain of 304s naming each the one before by record ID alone, imported
// after its original (two files, two imports): the first revisit's
// adoption gives the second its digest in the same walk, which the walk
// must not then undo with the copy it had listed.
func TestImportChainByIDAfterItsOriginal(t *testing.T) {
	const url = "http://steady.example/"
	month := func(i int) time.Time { return time.Date(2024, time.Month(1+i), 1, 0, 0, 0, 0, time.UTC) }
	body := "<html><title>x</title>steady</html>"
	r0, err := warc.NewResponse(url, month(0), []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"s\"\r\nContent-Length: %d\r\n\r\n%s", len(body), body)))
	if err != nil {
		t.Fatal(err)
	}
	head := []byte("HTTP/1.1 304 Not Modified\r\nETag: \"s\"\r\n\r\n")
	r1 := warc.NewRevisit(url, month(1), warc.ProfileServerNotModified, head, "", warc.RefersTo{ID: r0.ID()})
	r2 := warc.NewRevisit(url, month(2), warc.ProfileServerNotModified, head, "", warc.RefersTo{ID: r1.ID()})
	data := t.TempDir()
	importFiles(t, data, warcFile(t, r0))
	if s := importFiles(t, data, warcFile(t, r1, r2)); s.Unresolved != 0 {
		t.Errorf("%d revisits unresolved; want none", s.Unresolved)
	}
	want := r0.Header.Get("WARC-Payload-Digest")
	if cs := archived(t, data)[url]; len(cs) != 3 || cs[1].Digest != want || cs[2].Digest != want {
		t.Errorf("captures %+v; want both revisits with the original's digest %s", cs, want)
	}
}
