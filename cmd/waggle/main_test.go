package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/node"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// TestDemoAndExport runs the demo (the README's first command), opens the
// replay interface it serves, and exports its capture index, through the
// same entry point as the binary.
func TestDemoAndExport(t *testing.T) {
	data := filepath.Join(t.TempDir(), "demo")
	var out, errs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--data", data, "--max-pages", "60", "--hosts", "20", "--pages", "200", "--http", "127.0.0.1:0"}, &out, &errs)
	}()
	addr := ""
	for addr == "" {
		select {
		case code := <-done:
			t.Fatalf("demo exit %d before serving\nstdout: %s\nstderr: %s", code, out.String(), errs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if m := regexp.MustCompile(`Replay: open (http://[^/ ]+)/`).FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if !strings.Contains(out.String(), "The archive is in") || !strings.Contains(errs.String(), "pages 60 (+60 new)") {
		t.Fatalf("demo output:\n%s\n%s", out.String(), errs.String())
	}
	resp, err := http.Get(addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	home, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !regexp.MustCompile(`<b>\d+</b> captures of <b>\d+</b> hosts`).Match(home) {
		t.Fatalf("demo's replay home page: %d\n%s", resp.StatusCode, home)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("demo stopped with exit %d; want 0 (a clean stop)\n%s", code, errs.String())
	}
	if segs, _ := filepath.Glob(filepath.Join(data, "warc", "*.warc.gz")); len(segs) == 0 {
		t.Fatal("demo wrote no WARC file")
	}

	var plain bytes.Buffer
	cdxj := filepath.Join(t.TempDir(), "index.cdxj")
	if code := run(context.Background(), []string{"index", "export", "--data", data, "--out", cdxj}, &plain, &plain); code != 0 {
		t.Fatalf("index export exit %d: %s", code, plain.String())
	}
	b, _ := os.ReadFile(cdxj)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 60 { // the 60 captures plus the robots.txt files
		t.Fatalf("%d CDXJ lines, want at least 60", len(lines))
	}
	for _, l := range lines {
		parts := strings.SplitN(l, " ", 3)
		var fields map[string]string
		if len(parts) != 3 || len(parts[1]) != 14 || json.Unmarshal([]byte(parts[2]), &fields) != nil || fields["filename"] == "" {
			t.Fatalf("bad CDXJ line %q", l)
		}
	}
}

// TestExportImportRoundTrip exports an archive as WACZ and imports it into
// an empty data directory through the CLI: the new archive's index lists
// the same captures.
func TestExportImportRoundTrip(t *testing.T) {
	data := filepath.Join(t.TempDir(), "demo")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--data", data, "--max-pages", "40", "--hosts", "10", "--pages", "100", "--http", ""}, &out, &out); code != 0 {
		t.Fatalf("demo exit %d: %s", code, out.String())
	}
	wacz := filepath.Join(t.TempDir(), "all.wacz")
	if code := run(context.Background(), []string{"export", "wacz", "--data", data, "--out", wacz}, &out, &out); code != 0 {
		t.Fatalf("export exit %d: %s", code, out.String())
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	if code := run(context.Background(), []string{"import", "--data", copyDir, wacz}, &out, &out); code != 0 {
		t.Fatalf("import exit %d: %s", code, out.String())
	}
	index := func(dir string) []string {
		var b bytes.Buffer
		if code := run(context.Background(), []string{"index", "export", "--data", dir}, &b, io.Discard); code != 0 {
			t.Fatalf("index export of %s: exit %d", dir, code)
		}
		var keys []string
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			var f map[string]string
			parts := strings.SplitN(l, " ", 3)
			if len(parts) != 3 || json.Unmarshal([]byte(parts[2]), &f) != nil {
				t.Fatalf("bad CDXJ line %q", l)
			}
			keys = append(keys, parts[0]+" "+parts[1]+" "+f["digest"]) // segment and offset differ, the captures do not
		}
		return keys
	}
	orig, copied := index(data), index(copyDir)
	if strings.Join(orig, "\n") != strings.Join(copied, "\n") {
		t.Errorf("imported archive differs:\noriginal %d captures, copy %d", len(orig), len(copied))
	}
	if len(orig) < 40 {
		t.Errorf("only %d captures", len(orig))
	}
}

// TestCrawlServesReplayWhileCrawling: waggle crawl --http serves the
// archive as it grows, from the same process that holds the database.
func TestCrawlServesReplayWhileCrawling(t *testing.T) {
	web, simURL := startSim(t, websim.Config{Hosts: 5, Pages: 60})
	var out, errs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"crawl", "--data", t.TempDir(), "--proxy", simURL, "--allow-private",
			"--delay", "100ms", "--max-crawl-delay", "100ms", "--max-pages", "30", "--http", "127.0.0.1:0", web.Seeds()[0]}, &out, &errs)
	}()
	addr := ""
	for addr == "" {
		select {
		case code := <-done:
			t.Fatalf("crawl exit %d before it served\n%s", code, errs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if m := regexp.MustCompile(`Replay: open (http://[^/ ]+)/`).FindStringSubmatch(errs.String()); m != nil {
			addr = m[1]
		}
	}
	resp, err := http.Get(addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	home, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(home), "The archive") {
		t.Errorf("home page during the crawl: %d\n%s", resp.StatusCode, home)
	}
	if code := <-done; code != 0 {
		t.Fatalf("crawl exit %d\n%s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "pages 30 (+30 new)") {
		t.Errorf("crawl summary: %s", errs.String())
	}
	if _, err := http.Get(addr + "/"); err == nil {
		t.Error("replay still answers after the crawl ended")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"no-such-command"},
		{"crawl", "--scope", "galaxy", "http://example.com/"},
		{"crawl", "--delay", "soon", "http://example.com/"},
		{"crawl", "--workers", "-3", "http://example.com/"},
		{"crawl", "--per-host-connections", "0", "http://example.com/"},
		{"crawl", "--timeout", "0", "http://example.com/"},
		{"crawl", "--max-body-size", "-1", "http://example.com/"},
		{"crawl", "--max-pages", "-5", "http://example.com/"},
		{"crawl", "--max-crawl-delay", "-1s", "http://example.com/"},
		{"crawl", "--segment-size", "10", "http://example.com/"},
		{"crawl", "--proxy", "ftp://x", "http://example.com/"},
		{"crawl", "--retries", "-1", "http://example.com/"},
		{"crawl", "--retries", "11", "http://example.com/"},
		{"crawl", "--retry-wait", "0s", "http://example.com/"},
		{"node", "--workers", "0", "--data", t.TempDir()},
		{"node", "--replicas", "0", "--data", t.TempDir()},
		{"node", "--capacity", "0", "--data", t.TempDir()},
		{"node", "--repair-every", "0s", "--data", t.TempDir()},
		{"node", "--repair-rate", "-5", "--data", t.TempDir()},
		{"node", "--rediscover-after", "0s", "--data", t.TempDir()},
		{"node", "--scrub-rate", "-2", "--data", t.TempDir()},
		{"node", "--join", "foo", "--network", filepath.Join(t.TempDir(), "none.pem"), "--data", t.TempDir()}, // a usage error before the missing credential
		{"status", "--data", t.TempDir(), "extra"},
		{"crawl", "--data", filepath.Join(t.TempDir(), "typo")}, // no seeds, no archive to go on with
		{"export", "wacz", "--out", t.TempDir()},                // a directory
		{"export", "wacz", "--out", "x.wacz", "--from", "20270101", "--to", "2026"},
		{"index"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("waggle %v: exit %d, stderr %q; want 2 and an explanation", args, code, errs.String())
		}
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"index", "export", "--data", filepath.Join(t.TempDir(), "none")}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "no archive") {
		t.Errorf("export of a missing archive: exit %d, %q", code, errs.String())
	}
	// A re-crawl of a directory that holds no archive (a mistyped path in
	// a cron job) fails, and makes nothing there.
	for _, flag := range []string{"--recrawl", "--recrawl-all"} {
		out.Reset()
		errs.Reset()
		missing := filepath.Join(t.TempDir(), "typo")
		if code := run(context.Background(), []string{"crawl", "--data", missing, flag}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "no archive at "+missing) {
			t.Errorf("crawl %s of a missing archive: exit %d, %q", flag, code, errs.String())
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("crawl %s of a missing archive made %s: %v", flag, missing, err)
		}
	}
	// Leaving needs a running node, and announces nothing without one.
	out.Reset()
	errs.Reset()
	if code := run(context.Background(), []string{"node", "leave", "--data", t.TempDir()}, &out, &errs); code != 1 || out.Len() != 0 || !strings.Contains(errs.String(), "no node is running") {
		t.Errorf("node leave without a node: exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}

// TestRecrawlCommand: `waggle crawl --recrawl-all` on an archive revisits
// every URL with conditional GETs, and `--recrawl` on an archive imported
// from a WACZ (which has no schedule yet) revisits what the index holds.
func TestRecrawlCommand(t *testing.T) {
	web, simURL := startSim(t, websim.Config{Seed: 4, Hosts: 6, Pages: 60})
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--proxy", simURL, "--allow-private", "--delay", "0", "--max-crawl-delay", "1ms", "--scope", "any", "--max-host-pages", "100"}
	crawl := func(dir string, args ...string) map[string]any {
		t.Helper()
		s, _ := crawlJSON(t, append(append([]string{"--data", dir}, flags...), args...)...)
		return s
	}
	first := crawl(data, web.Seeds()...)
	again := crawl(data, "--recrawl-all")
	revisits := again["revisits"].(map[string]any)
	// It says when the next URL falls due: tomorrow or so, each visited now.
	next, err := time.Parse(time.RFC3339, fmt.Sprint(again["next_due"]))
	if err != nil || time.Until(next) < time.Hour || time.Until(next) > 31*24*time.Hour {
		t.Errorf("after the re-crawl, the next URL falls due at %v (%v), want within the schedule's bounds", again["next_due"], err)
	}
	if _, said := crawlJSON(t, append([]string{"--data", data, "--recrawl"}, flags...)...); !strings.Contains(said, "re-crawl: 0 URLs were due and queued for a visit; the next falls due at ") {
		t.Errorf("a --recrawl with nothing due says:\n%s", said)
	}
	t.Logf("first crawl: %v captures, %v B fetched, %v B stored; re-crawl: %v captures, %v B fetched, %v B stored, revisits %v",
		first["new"], first["bytes"], first["stored_bytes"], again["new"], again["bytes"], again["stored_bytes"], revisits)
	if again["revisits_queued"].(float64) == 0 || revisits["not_modified"].(float64) == 0 {
		t.Errorf("the re-crawl queued %v URLs, %v answered 304", again["revisits_queued"], revisits["not_modified"])
	}
	if again["bytes"].(float64) >= first["bytes"].(float64)/2 {
		t.Errorf("the re-crawl fetched %v bytes, the first crawl %v", again["bytes"], first["bytes"])
	}

	wacz := filepath.Join(t.TempDir(), "all.wacz")
	imported := filepath.Join(t.TempDir(), "imported")
	for _, args := range [][]string{{"export", "wacz", "--data", data, "--out", wacz}, {"import", "--data", imported, wacz}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
	}
	checkRecrawlPages(t, wacz)

	fromImport := crawl(imported, "--recrawl")
	if q := fromImport["revisits_queued"].(float64); q == 0 || q > again["revisits_queued"].(float64)*2 {
		t.Errorf("a re-crawl of the imported archive queued %v URLs (the archive's own re-crawl %v)", q, again["revisits_queued"])
	}
	if r := fromImport["revisits"].(map[string]any); r["unchanged"].(float64) == 0 {
		t.Errorf("the imported archive's re-crawl found no unchanged page: %v", r)
	}

	// Captures imported into an archive that has schedules are revisited
	// too: another web's, crawled elsewhere.
	other, sim2URL := startSim(t, websim.Config{Seed: 11, Hosts: 2, Pages: 10})
	elsewhere, wacz2 := filepath.Join(t.TempDir(), "elsewhere"), filepath.Join(t.TempDir(), "other.wacz")
	flags[1] = sim2URL // the --proxy
	crawl(elsewhere, other.Seeds()...)
	for _, args := range [][]string{{"export", "wacz", "--data", elsewhere, "--out", wacz2}, {"import", "--data", imported, wacz2}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
	}
	later := crawl(imported, "--recrawl")
	if r := later["revisits"].(map[string]any); later["revisits_queued"].(float64) == 0 || r["not_modified"].(float64)+r["unchanged"].(float64) == 0 {
		t.Errorf("after a second import, the re-crawl queued %v URLs, revisits %v; want the imported ones revisited", later["revisits_queued"], r)
	}

	// A --max-pages the archive has already reached queues the revisits,
	// fetches nothing, and says why.
	var out, errOut bytes.Buffer
	args := append(append([]string{"crawl", "--data", data}, flags...), "--recrawl-all", "--max-pages", "10")
	if code := run(context.Background(), args, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "stopped at --max-pages 10: the archive holds") {
		t.Errorf("%v: exit %d, %q; want it to say the limit stopped it", args, code, errOut.String())
	}
}

// The partial file of an export is one per destination: what a killed
// export left is taken over by the next, and two exports to one name at
// once are refused.
func TestExportPartialFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "a.wacz")
	stale := filepath.Join(filepath.Dir(out), ".a.wacz.partial")
	if err := os.WriteFile(stale, []byte("left by an export that was killed"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := openPartial(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 || f.Name() != stale {
		t.Errorf("partial file %s: %v, %v; want %s taken over, empty", f.Name(), fi, err, stale)
	}
	if g, err := openPartial(out); err == nil {
		g.Close()
		t.Error("a second export to the same name was not refused")
	}
	if g, err := openPartial(filepath.Join(filepath.Dir(out), "b.wacz")); err != nil {
		t.Errorf("an export to another name: %v", err)
	} else {
		g.Close()
	}
}

// waggle index verify reads every record back: an intact archive passes,
// and a byte flipped in a record on disk is reported, with the capture,
// and makes the command fail.
func TestIndexVerify(t *testing.T) {
	data := filepath.Join(t.TempDir(), "demo")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--data", data, "--max-pages", "30", "--hosts", "5", "--pages", "60", "--http", ""}, &out, &out); code != 0 {
		t.Fatalf("demo exit %d: %s", code, out.String())
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"index", "verify", "--data", data}, &stdout, &stderr); code != 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), " 0 damaged") {
		t.Fatalf("intact archive: exit %d, %q, %q", code, stdout.String(), stderr.String())
	}
	// Flip a byte in the middle of the largest record of the first segment.
	var victim struct {
		url, seg    string
		off, length int64
	}
	db, err := crawl.OpenExistingDB(data)
	if err != nil {
		t.Fatal(err)
	}
	index.New(db).Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		if c.Length > victim.length {
			victim.url, victim.seg, victim.off, victim.length = c.URL, c.Segment, c.Offset, c.Length
		}
		return true, nil
	})
	db.Close()
	path := filepath.Join(data, "warc", victim.seg)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[victim.off+victim.length/2] ^= 0x55
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	code := run(context.Background(), []string{"index", "verify", "--data", data}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stdout.String(), "damaged: "+victim.url) || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("one record damaged: exit %d, stdout %q, stderr %q; want exit 1 and %s named", code, stdout.String(), stderr.String(), victim.url)
	}
}

// waggle index verify follows every revisit to its payload, as replay
// does: one whose original was never imported is named and fails the
// check, unless the node has been part of a network, whose other nodes
// may hold the payload.
func TestIndexVerifyFollowsRevisits(t *testing.T) {
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{Prefix: "other"})
	if err != nil {
		t.Fatal(err)
	}
	const page = "http://example.test/page"
	when := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := warc.NewRevisit(page, when, warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n"),
		"sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", warc.RefersTo{ID: "<urn:uuid:0c4f6a1e-0000-4000-8000-000000000001>", URI: page, Date: when.Add(-24 * time.Hour)})
	if _, err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	data := filepath.Join(t.TempDir(), "data")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"import", "--data", data, segs[0]}, &out, &out); code != 0 {
		t.Fatalf("import exit %d: %s", code, out.String())
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"index", "verify", "--data", data}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stdout.String(), "no payload: "+page+" 20260301120000 ") || strings.Count(stdout.String(), "\n") != 1 ||
		!strings.Contains(stderr.String(), "1 revisits followed, 1 lead to no payload here") {
		t.Errorf("a revisit without its original: exit %d, stdout %q, stderr %q; want it named and exit 1", code, stdout.String(), stderr.String())
	}

	db, err := crawl.OpenExistingDB(data)
	if err != nil {
		t.Fatal(err)
	}
	// What a node that has had other members remembers (node.Networked).
	if err := db.Set([]byte("k/peers"), []byte(`["127.0.0.1:7946"]`), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"index", "verify", "--data", data}, &stdout, &stderr)
	if code != 0 || !strings.HasPrefix(stdout.String(), "no payload: "+page) || !strings.Contains(stderr.String(), "may be on other nodes") {
		t.Errorf("the same on a node of a network: exit %d, stdout %q, stderr %q; want it named, exit 0", code, stdout.String(), stderr.String())
	}
}

// checkRecrawlPages checks the page list of a WACZ of an archive crawled
// twice, the web unchanged: every page of the first crawl is listed again
// at its revisit (a 304 or an unchanged payload, stored as a revisit
// record), with the same title, read from the record it refers to.
func checkRecrawlPages(t *testing.T, path string) {
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
	type listing struct{ ts, title string }
	byURL := map[string][]listing{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p struct{ URL, TS, Title string }
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("pages line %q: %v", sc.Text(), err)
		}
		if p.URL != "" {
			byURL[p.URL] = append(byURL[p.URL], listing{p.TS, p.Title})
		}
	}
	titled := 0
	for u, ls := range byURL {
		if len(ls) != 2 || ls[0].title != ls[1].title {
			t.Errorf("%s is listed as a page %v; want once per crawl, with one title", u, ls)
		}
		if ls[0].title != "" {
			titled++
		}
	}
	if len(byURL) == 0 || titled == 0 {
		t.Errorf("%d pages listed, %d with a title", len(byURL), titled)
	}
}

// A crawl says what it did not archive whole: URLs refused for their
// private addresses (with the flag that permits them), and captures cut
// short, in its summary and its JSON.
func TestCrawlSaysWhatItRefusedOrCut(t *testing.T) {
	web, simURL := startSim(t, websim.Config{Seed: 3, Hosts: 2, Pages: 10})
	crawl := func(args ...string) (map[string]any, string) {
		t.Helper()
		return crawlJSON(t, append([]string{"--data", t.TempDir(), "--delay", "0"}, args...)...)
	}
	s, msg := crawl(simURL + "/")
	if s["forbidden"].(float64) != 1 || !strings.Contains(msg, "--allow-private") {
		t.Errorf("a loopback seed without --allow-private: forbidden %v, stderr %q; want it counted and the flag named", s["forbidden"], msg)
	}
	s, msg = crawl("--proxy", simURL, "--allow-private", "--max-body-size", "100", "--scope", "any", web.Seeds()[0])
	if s["truncated"].(float64) == 0 || !strings.Contains(msg, "archived cut short") {
		t.Errorf("pages over --max-body-size: truncated %v, stderr %q; want them counted and said", s["truncated"], msg)
	}
}

// crawlJSON runs `waggle crawl --json` with args, failing the test unless
// it exits 0, and returns its summary and what it wrote to stderr.
func crawlJSON(t *testing.T, args ...string) (map[string]any, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"crawl", "--json"}, args...)
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	var s map[string]any
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	return s, errOut.String()
}

// startSim serves the web cfg makes on a loopback port until the test
// ends, and returns it with its proxy URL.
func startSim(t *testing.T, cfg websim.Config) (*websim.Web, string) {
	t.Helper()
	web := websim.New(cfg)
	srv, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return web, srv.URL()
}

func TestNextDue(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{time.Time{}, "no URL is scheduled"},
		{now.Add(-time.Second), "some are due now, not visited by this run"},
		{now, "some are due now, not visited by this run"},
		{now.Add(20 * time.Second), "the next falls due at 2026-11-25 03:00 UTC (in under a minute)"},
		{now.Add(26*time.Hour + 31*time.Minute), "the next falls due at 2026-11-26 05:31 UTC (in 26h31m)"},
	} {
		if got := nextDue(tc.at, now); got != tc.want {
			t.Errorf("nextDue(%v) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

// waggle status prints the content-seen figures, and points at the log
// when a holder failed to prove a payload.
func TestStatusContentSeenLine(t *testing.T) {
	var out bytes.Buffer
	st := node.Status{ContentSeen: &node.ContentSeenStats{Lookups: 120, Hits: 30, NotArchived: 2, Unproven: 1}}
	printStatus(&out, st)
	for _, want := range []string{
		"content-seen: 120 payloads asked about, 30 found archived elsewhere; 2 found not archived, 1 whose holder proved nothing (stored again)",
		"the log names it",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	st.ContentSeen.Unproven = 0
	printStatus(&out, st)
	if strings.Contains(out.String(), "the log names it") {
		t.Errorf("status points at the log with no unproven hit:\n%s", out.String())
	}
}

// --revisit refuses two rules for the same URLs, naming both, before
// anything is crawled.
func TestRevisitFlagRefusesTwoRulesForTheSameURLs(t *testing.T) {
	var out bytes.Buffer
	data := filepath.Join(t.TempDir(), "data")
	code := run(context.Background(), []string{"crawl", "--data", data, "--revisit", "example.com=1h", "--revisit", "www.example.com=6h", "http://example.com/"}, &out, &out)
	if code == 0 || !strings.Contains(out.String(), `"example.com=1h" and "www.example.com=6h" cover the same URLs`) {
		t.Errorf("exit %d, %q; want the two rules named and refused", code, out.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was made (%v): the crawl went ahead", err)
	}
}
