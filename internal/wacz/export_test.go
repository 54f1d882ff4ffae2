package wacz_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// The archive the export tests read: a real crawl of websim in two runs (so
// there are two time periods, and revisits in the second run whose payload
// is in the first), in small segments (so an export draws on many).
var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
	secondRun   time.Time // the second run started after this
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

func fixture(t *testing.T) string {
	t.Helper()
	fixtureOnce.Do(func() {
		web := websim.New(websim.Config{Seed: 7, Hosts: 6, Pages: 60})
		srv, err := websim.Start("127.0.0.1:0", web)
		if err != nil {
			fixtureErr = err
			return
		}
		defer srv.Close()
		if fixtureDir, fixtureErr = os.MkdirTemp("", "wacz-test-"); fixtureErr != nil {
			return
		}
		cfg := crawl.Config{
			Data: fixtureDir, Seeds: web.Seeds(), Scope: crawl.ScopeAny, NoDelay: true,
			Proxy: srv.URL(), AllowPrivate: true, MaxCrawlDelay: time.Millisecond,
			Workers: 8, Timeout: 10 * time.Second, MaxPagesPerHost: 80,
			SegmentSize: 64 << 10,
		}
		for i, pages := range []int{150, 400} {
			if i == 1 {
				time.Sleep(10 * time.Millisecond) // a clean boundary between the runs' capture times
				secondRun = time.Now()
			}
			cfg.MaxPages = pages
			c, err := crawl.Open(cfg)
			if err != nil {
				fixtureErr = err
				return
			}
			_, err = c.Run(context.Background())
			if cerr := c.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				fixtureErr = err
				return
			}
		}
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureDir
}

// allCaptures reads the archive's index.
func allCaptures(t *testing.T, data string) []index.Capture {
	t.Helper()
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var cs []index.Capture
	if err := index.New(db).Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		cs = append(cs, c)
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return cs
}

func export(t *testing.T, data string, sel wacz.Selection) (string, wacz.Stats) {
	t.Helper()
	return exportHeld(t, data, sel, 0)
}

// holdModes are the two places an export keeps a record's member until
// the WARC file's writer takes it: memory, and, past Source.MaxHeld (here
// 1 byte: every record), a temporary file.
var holdModes = []struct {
	name    string
	maxHeld int64
}{{"held", 0}, {"spooled", 1}}

// spoolCheck is an archive that fails the test unless every member is
// copied into a file (spooled) or none is, and keeps the files.
type spoolCheck struct {
	wacz.Archive
	t       *testing.T
	spooled bool
	mu      *sync.Mutex
	files   *[]*os.File
}

func (a spoolCheck) CopyMember(ctx context.Context, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error) {
	f, toFile := w.(*os.File)
	if toFile != a.spooled && w != io.Discard { // io.Discard: a title read
		a.t.Errorf("the member of %d bytes copied into a %T; want it spooled to a file: %v", c.Length, w, a.spooled)
	}
	if toFile {
		a.mu.Lock()
		*a.files = append(*a.files, f)
		a.mu.Unlock()
	}
	return a.Archive.CopyMember(ctx, c, w, head)
}

// checkClosed fails the test unless every file spooled to is closed.
func (a spoolCheck) checkClosed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	open := 0
	for _, f := range *a.files {
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			open++
		}
	}
	if open > 0 {
		a.t.Errorf("%d of the %d files records were spooled to are still open after the export", open, len(*a.files))
	}
}

// exportHeld is export with Source.MaxHeld set to maxHeld, checking that
// with 1 every member is spooled to a file, and with 0 none of the test
// archive's is.
func exportHeld(t *testing.T, data string, sel wacz.Selection, maxHeld int64) (string, wacz.Stats) {
	t.Helper()
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := filepath.Join(t.TempDir(), "out.wacz")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := spoolCheck{archive.NewLocal(index.New(db), filepath.Join(data, "warc")), t, maxHeld == 1, &sync.Mutex{}, new([]*os.File)}
	s, err := wacz.Export(context.Background(), f, wacz.Source{Archive: src, TempDir: t.TempDir(), MaxHeld: maxHeld}, sel)
	if err != nil {
		t.Fatalf("export %+v: %v", sel, err)
	}
	src.checkClosed() // its scratch files are unlinked at once: closed is gone
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v: %+v", sel, s)
	return out, s
}

// cdxLine is a parsed CDXJ line.
type cdxLine struct {
	key, ts string
	URL     string `json:"url"`
	MIME    string `json:"mime"`
	Status  string `json:"status"`
	Digest  string `json:"digest"`
	Length  string `json:"length"`
	Offset  string `json:"offset"`
	File    string `json:"filename"`
}

// checked is what checkWACZ found in a WACZ.
type checked struct {
	lines []cdxLine
	pages []map[string]string
	recs  map[string]int // WARC record types
}

// checkWACZ checks everything about a WACZ that does not depend on the
// selection: layout, manifest hashes, storage, the index against the WARC.
func checkWACZ(t *testing.T, path string, s wacz.Stats) checked {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if strings.HasPrefix(f.Name, "archive/") && f.Method != zip.Store {
			t.Errorf("%s is compressed in the ZIP (method %d); WACZ requires STORE", f.Name, f.Method)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		files[f.Name] = b
	}
	sort.Strings(names)
	want := []string{"archive/data.warc.gz", "datapackage-digest.json", "datapackage.json", "indexes/index.cdxj", "pages/pages.jsonl"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("WACZ holds %v, want %v", names, want)
	}

	// Manifest: every other file listed with its true hash and size.
	var pkg wacz.Package
	if err := json.Unmarshal(files["datapackage.json"], &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Profile != "data-package" || pkg.WACZVersion != "1.1.1" || pkg.Software == "" {
		t.Errorf("datapackage.json: %+v", pkg)
	}
	if _, err := time.Parse(time.RFC3339, pkg.Created); err != nil {
		t.Errorf("created %q: %v", pkg.Created, err)
	}
	listed := map[string]bool{}
	for _, r := range pkg.Resources {
		listed[r.Path] = true
		b, ok := files[r.Path]
		if !ok {
			t.Errorf("datapackage.json lists %s, not in the ZIP", r.Path)
			continue
		}
		sum := sha256.Sum256(b)
		if r.Hash != "sha256:"+hex.EncodeToString(sum[:]) || r.Bytes != int64(len(b)) {
			t.Errorf("%s: listed %s %d bytes, is sha256:%x %d bytes", r.Path, r.Hash, r.Bytes, sum, len(b))
		}
		if r.Name != filepath.Base(r.Path) {
			t.Errorf("resource name %q for %s", r.Name, r.Path)
		}
	}
	for _, n := range names {
		if !listed[n] && n != "datapackage.json" && n != "datapackage-digest.json" {
			t.Errorf("%s is not listed in datapackage.json", n)
		}
	}
	var dig struct{ Path, Hash string }
	if err := json.Unmarshal(files["datapackage-digest.json"], &dig); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(files["datapackage.json"])
	if dig.Path != "datapackage.json" || dig.Hash != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("datapackage-digest.json %+v does not match datapackage.json (sha256:%x)", dig, sum)
	}

	// The WARC file reads end to end, one gzip member per record.
	warcBytes := files["archive/data.warc.gz"]
	if int64(len(warcBytes)) != s.WARCBytes {
		t.Errorf("WARC is %d bytes, stats say %d", len(warcBytes), s.WARCBytes)
	}
	var c checked
	c.recs = map[string]int{}
	rd, _ := warc.NewReader(bytes.NewReader(warcBytes))
	for {
		rec, loc, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("WARC in WACZ: %v", err)
		}
		if loc.Length == 0 {
			t.Fatalf("record at %d does not have a gzip member of its own", loc.Offset)
		}
		c.recs[rec.Type()]++
	}
	total := 0
	for _, n := range c.recs {
		total += n
	}
	if total != s.Records {
		t.Errorf("WARC holds %d records (%v), stats say %d", total, c.recs, s.Records)
	}

	// Every index line points at a record of its URL and digest.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.warc.gz"), warcBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	cdx := strings.Split(strings.TrimSuffix(string(files["indexes/index.cdxj"]), "\n"), "\n")
	if cdx[0] == "" {
		cdx = nil
	}
	prev := ""
	for _, l := range cdx {
		key, rest, _ := strings.Cut(l, " ")
		ts, js, _ := strings.Cut(rest, " ")
		if l < prev {
			t.Errorf("index not in byte order: %q after %q", l, prev)
		}
		prev = l
		line := cdxLine{key: key, ts: ts}
		if err := json.Unmarshal([]byte(js), &line); err != nil {
			t.Fatalf("CDXJ line %q: %v", l, err)
		}
		if line.File != "data.warc.gz" {
			t.Errorf("CDXJ filename %q", line.File)
		}
		off, _ := strconv.ParseInt(line.Offset, 10, 64)
		length, _ := strconv.ParseInt(line.Length, 10, 64)
		rec, err := warc.ReadAt(dir, warc.Location{Segment: "data.warc.gz", Offset: off, Length: length})
		if err != nil {
			t.Fatalf("CDXJ line %q: %v", l, err)
		}
		wantType := warc.TypeResponse
		if line.MIME == "warc/revisit" {
			wantType = warc.TypeRevisit
		}
		if rec.TargetURI() != line.URL || rec.Header.Get("WARC-Payload-Digest") != line.Digest || rec.Type() != wantType {
			t.Errorf("CDXJ line %q points at a %s record of %s with digest %s", l, rec.Type(), rec.TargetURI(), rec.Header.Get("WARC-Payload-Digest"))
		}
		if d, _ := rec.Date(); d.Format("20060102150405") != ts {
			t.Errorf("CDXJ line %q: record dated %s", l, d)
		}
		c.lines = append(c.lines, line)
	}
	if len(c.lines) != s.Captures+s.Originals {
		t.Errorf("index has %d lines, stats say %d captures + %d originals", len(c.lines), s.Captures, s.Originals)
	}

	// Pages: the header, then one line per page with url and RFC 3339 ts.
	sc := bufio.NewScanner(bytes.NewReader(files["pages/pages.jsonl"]))
	for i := 0; sc.Scan(); i++ {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("pages line %q: %v", sc.Text(), err)
		}
		if i == 0 {
			if m["format"] != "json-pages-1.0" || m["id"] != "pages" {
				t.Errorf("pages header %q", sc.Text())
			}
			continue
		}
		if _, err := time.Parse(time.RFC3339, m["ts"]); err != nil || m["url"] == "" || m["id"] == "" {
			t.Errorf("page line %q", sc.Text())
		}
		c.pages = append(c.pages, m)
	}
	if len(c.pages) != s.Pages {
		t.Errorf("%d pages, stats say %d", len(c.pages), s.Pages)
	}

	// Our own reader accepts it.
	r, err := wacz.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := r.WARCs(); len(w) != 1 || w[0] != "archive/data.warc.gz" {
		t.Errorf("WARCs() = %v", w)
	}
	return c
}

func isHTMLPage(c index.Capture) bool {
	return c.Status == 200 && c.MIME == "text/html"
}

func TestExportEverything(t *testing.T) {
	for _, mode := range holdModes {
		t.Run(mode.name, func(t *testing.T) { testExportEverything(t, mode.maxHeld) })
	}
}

func testExportEverything(t *testing.T, maxHeld int64) {
	data := fixture(t)
	caps := allCaptures(t, data)
	path, s := exportHeld(t, data, wacz.Selection{}, maxHeld)
	c := checkWACZ(t, path, s)

	if s.Captures != len(caps) || s.Originals != 0 || s.Missing != 0 {
		t.Errorf("stats %+v for an archive of %d captures", s, len(caps))
	}
	// Same captures, in the same order, only the location changed.
	for i, cp := range caps {
		if i >= len(c.lines) {
			break
		}
		l := c.lines[i]
		if l.URL != cp.URL || l.ts != cp.Timestamp14() || l.Digest != cp.Digest || l.key != cp.URLKey {
			t.Errorf("line %d is %s %s, capture is %s %s", i, l.URL, l.ts, cp.URL, cp.Timestamp14())
		}
	}
	revisits, pages, segs := 0, 0, map[string]bool{}
	for _, cp := range caps {
		segs[cp.Segment] = true
		if cp.Type == warc.TypeRevisit {
			revisits++
		}
		if isHTMLPage(cp) {
			pages++
		}
	}
	if revisits == 0 {
		t.Fatal("the fixture has no revisit records: the test would not cover them")
	}
	if len(segs) < 3 {
		t.Fatalf("the fixture has %d segments; the test wants several", len(segs))
	}
	// Every capture brings its request, most their outlinks; each segment its warcinfo.
	if c.recs[warc.TypeRequest] != len(caps) || c.recs[warc.TypeMetadata] == 0 || c.recs[warc.TypeWarcinfo] != len(segs) {
		t.Errorf("record types %v for %d captures from %d segments", c.recs, len(caps), len(segs))
	}
	if s.Pages != pages {
		t.Errorf("%d pages, the archive has %d HTML captures with status 200", s.Pages, pages)
	}
	checkTitles(t, data, caps, c.pages)
}

// A record damaged on disk is left out of an export, counted and named;
// every other capture is still exported.
func TestExportLeavesOutDamagedRecords(t *testing.T) {
	for _, mode := range holdModes {
		t.Run(mode.name, func(t *testing.T) { testExportLeavesOutDamagedRecords(t, mode.maxHeld) })
	}
}

func testExportLeavesOutDamagedRecords(t *testing.T, maxHeld int64) {
	data := t.TempDir()
	if err := os.CopyFS(data, os.DirFS(fixture(t))); err != nil {
		t.Fatal(err)
	}
	caps := allCaptures(t, data)
	var victim index.Capture
	for _, c := range caps {
		if c.Type == warc.TypeResponse && c.Length > 200 {
			victim = c
			break
		}
	}
	f, err := os.OpenFile(filepath.Join(data, "warc", victim.Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Past the gzip header, inside the deflate stream: the member no longer
	// decompresses to the record, or fails its CRC.
	mid := victim.Offset + victim.Length/2
	var b [1]byte
	if _, err := f.ReadAt(b[:], mid); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], mid); err != nil {
		t.Fatal(err)
	}
	f.Close()

	path, s := exportHeld(t, data, wacz.Selection{}, maxHeld)
	c := checkWACZ(t, path, s)
	if s.Unreadable != 1 || s.Captures != len(caps)-1 {
		t.Errorf("stats %+v for %d captures, one damaged: want it alone left out", s, len(caps))
	}
	if !strings.Contains(s.FirstError, victim.URL) {
		t.Errorf("FirstError %q does not name the damaged capture %s", s.FirstError, victim.URL)
	}
	for _, l := range c.lines {
		if l.key == victim.URLKey && l.ts == victim.Timestamp14() && l.Digest == victim.Digest {
			t.Errorf("the damaged capture of %s is in the index", victim.URL)
		}
	}
}

// TestWarcioReadsExport has warcio.js, an outside implementation, read the
// WARC file of an export and verify every record's digest.
func TestWarcioReadsExport(t *testing.T) {
	tool := filepath.Join("..", "..", "tools", "warcio-check")
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed (.ci/run installs it)")
	}
	if _, err := os.Stat(filepath.Join(tool, "node_modules", "warcio")); err != nil {
		t.Skip("tools/warcio-check: run npm ci there (.ci/run does)")
	}
	path, s := export(t, fixture(t), wacz.Selection{})
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	rc, err := zr.Open("archive/data.warc.gz")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	warcPath := filepath.Join(t.TempDir(), "data.warc.gz")
	if err := os.WriteFile(warcPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", filepath.Join(tool, "check.mjs"), warcPath).Output()
	if err != nil {
		t.Fatalf("warcio.js: %v", err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			BlockDigestOK, PayloadDigestOK *bool
			Type                           string
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		n++
		if r.BlockDigestOK == nil || !*r.BlockDigestOK || (r.PayloadDigestOK != nil && !*r.PayloadDigestOK) {
			t.Errorf("warcio.js: %s", sc.Text())
		}
	}
	if n != s.Records {
		t.Errorf("warcio.js read %d records, the export wrote %d", n, s.Records)
	}
}

// checkTitles compares page titles with the <title> of the archived HTML.
func checkTitles(t *testing.T, data string, caps []index.Capture, pages []map[string]string) {
	t.Helper()
	byURL := map[string]index.Capture{}
	for _, c := range caps {
		byURL[c.URL] = c
	}
	titleRE := regexp.MustCompile(`(?s)<title>(.*?)</title>`)
	withTitle := 0
	for _, p := range pages {
		cp := byURL[p["url"]]
		if cp.Type != warc.TypeResponse {
			continue
		}
		rec, err := warc.ReadAt(filepath.Join(data, "warc"), warc.Location{Segment: cp.Segment, Offset: cp.Offset, Length: cp.Length})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := warc.HTTPPayload(rec.Block)
		end := warc.HTTPHeaderEnd(rec.Block)
		ce := ""
		for _, l := range strings.Split(string(rec.Block[:end]), "\r\n") {
			if name, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(name, "Content-Encoding") {
				ce = strings.TrimSpace(v)
			}
		}
		body, err = fetch.DecodeContent(body, ce, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if m := titleRE.FindSubmatch(body); m != nil {
			want = strings.Join(strings.Fields(string(m[1])), " ")
		}
		if p["title"] != want {
			t.Errorf("page %s: title %q, the HTML says %q", p["url"], p["title"], want)
		}
		if want != "" {
			withTitle++
		}
	}
	if withTitle == 0 {
		t.Error("no page title was found at all")
	}
}

func TestExportSelections(t *testing.T) {
	data := fixture(t)
	caps := allCaptures(t, data)
	byDigest := firstCaptures(t, data, caps)
	// A revisit whose payload is on another host makes the host selection
	// need an original from outside.
	var crossHost index.Capture
	for _, c := range caps {
		if o, ok := byDigest[c.Digest]; c.Type == warc.TypeRevisit && ok && bareHost(o.URL) != bareHost(c.URL) {
			crossHost = c
			break
		}
	}
	if crossHost.URL == "" {
		t.Fatal("the fixture has no revisit of a payload archived on another host")
	}
	var lateRevisit bool
	for _, c := range caps {
		if o, ok := byDigest[c.Digest]; c.Type == warc.TypeRevisit && ok && c.Time.After(secondRun) && o.Time.Before(secondRun) {
			lateRevisit = true
		}
	}
	host := bareHost(crossHost.URL)
	// The busiest directory, for the prefix selection.
	dirs := map[string]int{}
	for _, c := range caps {
		if parts := strings.SplitN(strings.TrimPrefix(c.URL, "http://"), "/", 3); len(parts) == 3 {
			dirs["http://"+parts[0]+"/"+parts[1]+"/"]++
		}
	}
	prefix, most := "", 0
	for d, n := range dirs {
		if n > most || (n == most && d < prefix) {
			prefix, most = d, n
		}
	}
	times := make([]time.Time, len(caps))
	for i, c := range caps {
		times[i] = c.Time
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	mid := times[len(times)/2]

	tests := []struct {
		name  string
		sel   wacz.Selection
		want  func(index.Capture) bool
		needs bool // the selection must need originals from outside
	}{
		{"host", wacz.Selection{Host: host}, func(c index.Capture) bool { return bareHost(c.URL) == host }, true},
		{"www host", wacz.Selection{Host: "WWW." + host}, func(c index.Capture) bool { return bareHost(c.URL) == host }, true},
		{"prefix", wacz.Selection{Prefix: prefix}, func(c index.Capture) bool {
			u, p := strings.ToLower(noWWW(c.URL)), strings.ToLower(noWWW(prefix))
			return strings.HasPrefix(u, p) || u == strings.TrimSuffix(p, "/")
		}, false},
		{"from", wacz.Selection{From: mid}, func(c index.Capture) bool { return !c.Time.Before(mid) }, false},
		{"to", wacz.Selection{To: mid}, func(c index.Capture) bool { return c.Time.Before(mid) }, false},
		{"second run", wacz.Selection{From: secondRun}, func(c index.Capture) bool { return c.Time.After(secondRun) }, lateRevisit},
		{"host and time", wacz.Selection{Host: host, From: mid}, func(c index.Capture) bool {
			return bareHost(c.URL) == host && !c.Time.Before(mid)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, s := export(t, data, tc.sel)
			c := checkWACZ(t, path, s)
			want := map[string]index.Capture{}
			pages := 0
			for _, cp := range caps {
				if tc.want(cp) {
					want[cp.URL+" "+cp.Timestamp14()+" "+cp.Digest] = cp
					if isHTMLPage(cp) {
						pages++
					}
				}
			}
			if s.Captures != len(want) || s.Pages != pages {
				t.Errorf("stats %+v, want %d captures and %d pages", s, len(want), pages)
			}
			got := map[string]bool{}
			origs := 0
			for _, l := range c.lines {
				k := l.URL + " " + l.ts + " " + l.Digest
				got[k] = true
				if _, ok := want[k]; ok {
					continue
				}
				// Not selected: it must be the payload of a selected revisit.
				needed := false
				for _, w := range want {
					if w.Type == warc.TypeRevisit && w.Digest == l.Digest && l.MIME != "warc/revisit" {
						needed = true
					}
				}
				if !needed {
					t.Errorf("exported capture %s is outside the selection", k)
				}
				origs++
			}
			for k, w := range want {
				if !got[k] {
					t.Errorf("selected capture %s is missing", k)
				}
				if w.Type == warc.TypeRevisit {
					o := byDigest[w.Digest]
					if !got[o.URL+" "+o.Timestamp14()+" "+o.Digest] {
						t.Errorf("revisit %s exported without its payload record %s", k, o.URL)
					}
				}
			}
			if origs != s.Originals {
				t.Errorf("%d originals in the index, stats say %d", origs, s.Originals)
			}
			if tc.needs && s.Originals == 0 {
				t.Errorf("selection %+v needed originals from outside, none added", tc.sel)
			}
		})
	}
}

// firstCaptures maps each payload digest to the capture that stored it, as
// revisits find it.
func firstCaptures(t *testing.T, data string, caps []index.Capture) map[string]index.Capture {
	t.Helper()
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := map[string]index.Capture{}
	for _, c := range caps {
		if _, ok := m[c.Digest]; ok || c.Digest == "" {
			continue
		}
		if o, ok, err := index.ByDigest(db, c.Digest); err != nil {
			t.Fatal(err)
		} else if ok {
			m[c.Digest] = o
		}
	}
	return m
}

func TestExportNothing(t *testing.T) {
	data := fixture(t)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, sel := range []wacz.Selection{{Host: "absent.test"}, {To: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}} {
		_, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc"))}, sel)
		if !errors.Is(err, wacz.ErrNoCaptures) {
			t.Errorf("selection %+v: %v, want ErrNoCaptures", sel, err)
		}
	}
}

func bareHost(u string) string { return strings.TrimPrefix(urlkey.Host(u), "www.") }

func noWWW(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	return strings.TrimPrefix(rest, "www.")
}

func TestSelectionErrors(t *testing.T) {
	data := fixture(t)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	for _, sel := range []wacz.Selection{
		{Host: "a.test", Prefix: "http://a.test/"},
		{From: now, To: now},
		{From: now, To: now.Add(-time.Hour)},
		{Prefix: "ftp://a.test/"},
		{Prefix: "not a url"},
		{Host: "a.test/path"},
	} {
		var buf bytes.Buffer
		_, err := wacz.Export(context.Background(), &buf, wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc"))}, sel)
		if err == nil || !strings.HasPrefix(err.Error(), "wacz: ") {
			t.Errorf("selection %+v: error %v", sel, err)
		}
		if buf.Len() != 0 {
			t.Errorf("selection %+v: wrote %d bytes before failing", sel, buf.Len())
		}
	}
}

func TestExportCancelled(t *testing.T) {
	data := fixture(t)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = wacz.Export(ctx, io.Discard, wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc"))}, wacz.Selection{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled export: %v", err)
	}
}

// BenchmarkExport exports the whole test archive (websim, 2 crawls) from
// its data directory, as `waggle export wacz` does for a stopped node.
func BenchmarkExport(b *testing.B) {
	data := fixture(&testing.T{})
	db, err := crawl.OpenDB(data)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	src := wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc")), TempDir: b.TempDir()}
	var s wacz.Stats
	for b.Loop() {
		if s, err = wacz.Export(context.Background(), io.Discard, src, wacz.Selection{}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(s.WARCBytes)
	b.ReportMetric(float64(s.Captures)*float64(b.N)/b.Elapsed().Seconds(), "captures/s")
}

// failingWriter fails once more than room bytes were written to it.
type failingWriter struct{ room int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.room {
		return 0, errDiskFull
	}
	w.room -= len(p)
	return len(p), nil
}

// An export whose output fails part way returns that error, whatever the
// records being read ahead of it; one cancelled part way, its context's.
func TestExportStopsPartWay(t *testing.T) {
	data := fixture(t)
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := wacz.Source{Archive: archive.NewLocal(index.New(db), filepath.Join(data, "warc")), TempDir: t.TempDir()}
	for _, room := range []int{0, 10 << 10, 200 << 10} {
		_, err := wacz.Export(context.Background(), &failingWriter{room: room}, src, wacz.Selection{})
		if !errors.Is(err, errDiskFull) {
			t.Errorf("export to a writer failing after %d bytes: %v", room, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &cancellingWriter{after: 100 << 10, cancel: cancel}
	if _, err := wacz.Export(ctx, w, src, wacz.Selection{}); !errors.Is(err, context.Canceled) {
		t.Errorf("export cancelled after %d bytes: %v", w.n, err)
	}
}

// cancellingWriter cancels its export once after bytes were written.
type cancellingWriter struct {
	after, n int
	cancel   func()
}

func (w *cancellingWriter) Write(p []byte) (int, error) {
	if w.n += len(p); w.n > w.after {
		w.cancel()
	}
	return len(p), nil
}

// failing is an archive whose records, or whose companions, cannot be
// read; reading companions may cancel the export as well.
type failing struct {
	wacz.Archive
	member, companions error
	cancel             func()
	panics             bool // CopyMember panics
	rangePanics        bool // Range panics after its first capture
	unasked            error
	lookups            error // Captures, CapturesBetween and ByDigest fail: no revisit's original can be looked up
	spoolFull          bool  // writing a spooled member fails, as on a full disk
}

func (a failing) Captures(ctx context.Context, urlKey string, reverse bool, fn func(index.Capture) (bool, error)) error {
	if a.lookups != nil {
		return a.lookups
	}
	return a.Archive.Captures(ctx, urlKey, reverse, fn)
}

func (a failing) CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	if a.lookups != nil {
		return a.lookups
	}
	return a.Archive.CapturesBetween(ctx, urlKey, from, to, reverse, fn)
}

func (a failing) ByDigest(ctx context.Context, c index.Capture, digest string) (index.Capture, bool, error) {
	if a.lookups != nil {
		return index.Capture{}, false, a.lookups
	}
	return a.Archive.ByDigest(ctx, c, digest)
}

// Range lists the captures, then fails with a.unasked wrapped in an
// archive.PartialError, if set: a node that could not be asked.
func (a failing) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	if a.rangePanics {
		a.Archive.Range(ctx, lo, hi, reverse, func(c index.Capture) (bool, error) {
			fn(c)
			panic("a bug in listing captures")
		})
	}
	if err := a.Archive.Range(ctx, lo, hi, reverse, fn); err != nil || a.unasked == nil {
		return err
	}
	return &archive.PartialError{Failed: []error{a.unasked}}
}

func (a failing) CopyMember(ctx context.Context, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error) {
	if a.panics {
		panic("a bug in reading a record")
	}
	if a.member != nil {
		return warc.Header{}, nil, a.member
	}
	if _, toFile := w.(*os.File); toFile && a.spoolFull {
		w = diskFull{}
	}
	return a.Archive.CopyMember(ctx, c, w, head)
}

func (a failing) Companions(ctx context.Context, c index.Capture) ([][]byte, error) {
	if a.cancel != nil {
		a.cancel()
		return nil, ctx.Err()
	}
	if a.companions != nil {
		return nil, a.companions
	}
	return a.Archive.Companions(ctx, c)
}

// What cannot be read is said: captures whose companions fail are written
// without them and counted; a selection none of whose records can be read
// is an error of its own, not "no capture matches"; an export cancelled
// while reading companions fails.
func TestExportSaysWhatItCouldNotRead(t *testing.T) {
	data := fixture(t)
	sel := wacz.Selection{Host: urlkey.Host(allCaptures(t, data)[0].URL)}
	db, err := crawl.OpenDB(data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	local := archive.NewLocal(index.New(db), filepath.Join(data, "warc"))

	gone := errors.New("the peer went away")
	s, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, companions: gone}, TempDir: t.TempDir()}, sel)
	if err != nil || s.Captures == 0 || s.Incomplete != s.Captures+s.Originals || !strings.Contains(s.FirstIncomplete, gone.Error()) {
		t.Errorf("companions failing: %+v, %v; want every capture written and counted incomplete", s, err)
	}

	for _, mode := range holdModes {
		s, err = wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, member: gone}, TempDir: t.TempDir(), MaxHeld: mode.maxHeld}, sel)
		if !errors.Is(err, wacz.ErrUnreadable) || errors.Is(err, wacz.ErrNoCaptures) || !strings.Contains(err.Error(), gone.Error()) || s.Unreadable == 0 {
			t.Errorf("%s: no record readable: %+v, %v", mode.name, s, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if s, err := wacz.Export(ctx, io.Discard, wacz.Source{Archive: failing{Archive: local, cancel: cancel}, TempDir: t.TempDir()}, sel); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while reading companions: %+v, %v", s, err)
	}

	// A node that could not be asked for its captures: the others' are
	// exported, and the node named.
	down := fmt.Errorf("%w: node3: connection refused", archive.ErrUnavailable)
	s, err = wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, unasked: down}, TempDir: t.TempDir()}, sel)
	if err != nil || s.Captures == 0 || !strings.Contains(s.Unasked, "node3: connection refused") {
		t.Errorf("a node not asked: %+v, %v; want the export made, the node named in Unasked", s, err)
	}
	_, err = wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, unasked: down}, TempDir: t.TempDir()}, wacz.Selection{Host: "nothing.example"})
	if !errors.Is(err, wacz.ErrNoCaptures) || !strings.Contains(err.Error(), "node3") {
		t.Errorf("nothing selected with a node not asked: %v; want ErrNoCaptures naming the node", err)
	}

	// Revisits whose originals cannot be looked up (their node down) are
	// exported, and counted apart from the records that could not be read.
	captures, revisits := 0, 0
	local.Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		captures++
		if c.Type == warc.TypeRevisit {
			revisits++
		}
		return true, nil
	})
	s, err = wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, lookups: down}, TempDir: t.TempDir()}, wacz.Selection{})
	if err != nil || revisits == 0 || s.Unresolved != revisits || s.Unreadable != 0 || s.Captures != captures || !strings.Contains(s.FirstUnresolved, "node3") {
		t.Errorf("originals not looked up: %+v, %v; want all %d captures written, the %d revisits counted unresolved", s, err, captures, revisits)
	}
	// The fixture's revisits of pages are answered 200, so they are still
	// listed as pages (untitled).
	if all, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: local, TempDir: t.TempDir()}, wacz.Selection{}); err != nil || s.Pages != all.Pages {
		t.Errorf("originals not looked up: %d pages listed, %d when they are (%v)", s.Pages, all.Pages, err)
	}

	// A temporary copy that cannot be written (a full disk) ends the
	// export: it is not the records' fault.
	if s, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, spoolFull: true}, TempDir: t.TempDir(), MaxHeld: 1}, sel); !errors.Is(err, archive.ErrWrite) || s.Unreadable != 0 {
		t.Errorf("spooling to a full disk: %+v, %v; want the export failed with archive.ErrWrite", s, err)
	}

	// A panic while captures are listed ends the export, and its reader
	// goroutines with it.
	if s, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, rangePanics: true}, TempDir: t.TempDir()}, sel); err == nil || !strings.Contains(err.Error(), "a bug in listing captures") {
		t.Errorf("a listing that panics: %+v, %v; want the panic as an error", s, err)
	}

	// A panic in a reader goroutine would take a serving node down with it.
	for _, mode := range holdModes {
		if s, err := wacz.Export(context.Background(), io.Discard, wacz.Source{Archive: failing{Archive: local, panics: true}, TempDir: t.TempDir(), MaxHeld: mode.maxHeld}, sel); err == nil || errors.Is(err, wacz.ErrUnreadable) || !strings.Contains(err.Error(), "a bug in reading a record") {
			t.Errorf("%s: a reader that panics: %+v, %v; want the panic as an error", mode.name, s, err)
		}
	}
}

// diskFull fails every write, as a full disk does.
type diskFull struct{}

func (diskFull) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }
