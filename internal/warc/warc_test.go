package warc

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

var when = time.Date(2026, 11, 22, 13, 45, 27, 123456000, time.UTC)

const rawResp = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 11\r\n\r\nhello world"

// sampleRecords has one record of each kind the crawler writes.
func sampleRecords(t *testing.T) []*Record {
	t.Helper()
	resp, err := NewResponse("http://example.com/", when, []byte(rawResp))
	if err != nil {
		t.Fatal(err)
	}
	req := NewRequest("http://example.com/", when, []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"))
	req.Header.Set("WARC-Concurrent-To", resp.ID())
	rev := NewRevisit("http://example.com/again", when.Add(time.Hour), ProfileIdenticalPayload,
		[]byte("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"), resp.Header.Get("WARC-Payload-Digest"),
		RefersTo{ID: resp.ID(), URI: "http://example.com/", Date: when})
	meta := NewMetadata("http://example.com/", when, []Field{{"outlink", "http://example.com/a L a/@href"}})
	return []*Record{req, resp, rev, meta}
}

func writeSegment(t *testing.T, dir string, recs []*Record) []Location {
	t.Helper()
	w, err := NewWriter(dir, WriterOptions{Prefix: "test", Info: []Field{{"software", "waggle test"}}})
	if err != nil {
		t.Fatal(err)
	}
	var locs []Location
	for _, r := range recs {
		loc, err := w.Write(r)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return locs
}

func readAll(t *testing.T, path string) []*Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _ := NewReader(f)
	var out []*Record
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, rec)
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := sampleRecords(t)
	locs := writeSegment(t, dir, in)
	segs, _ := Segments(dir)
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	out := readAll(t, segs[0])
	if len(out) != len(in)+1 || out[0].Type() != TypeWarcinfo {
		t.Fatalf("read %d records, first %q", len(out), out[0].Type())
	}
	if out[0].Header.Get("WARC-Filename") != filepath.Base(segs[0]) {
		t.Errorf("warcinfo filename %q", out[0].Header.Get("WARC-Filename"))
	}
	for i, want := range in {
		got := out[i+1]
		if !bytes.Equal(got.Block, want.Block) || got.ID() != want.ID() || got.Type() != want.Type() {
			t.Errorf("record %d differs: %+v", i, got.Header.Fields())
		}
		if got.Header.Get("WARC-Warcinfo-ID") != out[0].ID() {
			t.Errorf("record %d lacks WARC-Warcinfo-ID", i)
		}
		// Every location reads back its own record, and the digest checks.
		at, err := ReadAt(dir, locs[i])
		if err != nil || at.ID() != want.ID() {
			t.Errorf("ReadAt(%+v) = %v, %v", locs[i], at, err)
		}
	}
	// The digests are what an independent computation gives.
	if d := in[1].Header.Get("WARC-Payload-Digest"); d != Digest([]byte("hello world")) {
		t.Errorf("payload digest %s", d)
	}
	if d, _ := out[1].Date(); !d.Equal(when) {
		t.Errorf("date %v, want %v", d, when)
	}
	if out[3].Header.Get("WARC-Refers-To") != in[1].ID() || out[3].Header.Get("WARC-Profile") != ProfileIdenticalPayload {
		t.Errorf("revisit fields: %v", out[3].Header.Fields())
	}
}

// A fetched response's record has the payload digest NewResponse gives,
// without a second reading of its headers where they name no chunking.
func TestNewFetchedResponse(t *testing.T) {
	for _, raw := range []string{
		rawResp,
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, CHUNKED\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Note: not chunked at all\r\n\r\nbody\r\n\r\nmore",
		"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
		"HTTP/1.0 200 OK\nContent-Type: text/plain\n\nbare LF",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n",
		// net/http ignores Transfer-Encoding in HTTP/1.0; HTTPPayload's
		// Unicode case folding reads the Kelvin sign as a k.
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		want, werr := NewResponse("http://example.com/", when, []byte(raw))
		got, gerr := NewFetchedResponse("http://example.com/", when, []byte(raw))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: error %v, NewResponse's %v", raw, gerr, werr)
		}
		if werr != nil {
			continue
		}
		for _, name := range []string{"WARC-Payload-Digest", "WARC-Block-Digest", "Content-Length", "WARC-Type"} {
			if g, w := got.Header.Get(name), want.Header.Get(name); g != w {
				t.Errorf("%q: %s %q, NewResponse gives %q", raw, name, g, w)
			}
		}
	}
}

// FormatDate by hand writes what time.Format does with the layout.
func TestFormatDate(t *testing.T) {
	for _, d := range []time.Time{
		time.Date(2024, 1, 2, 3, 4, 5, 6_789_123, time.UTC),
		time.Date(1996, 12, 31, 23, 59, 59, 999_999_999, time.FixedZone("x", -5*3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 0),
		time.Now(),
	} {
		if got, want := FormatDate(d), d.UTC().Format("2006-01-02T15:04:05.000000Z"); got != want {
			t.Errorf("FormatDate(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestHeaderInjection(t *testing.T) {
	rec := NewRequest("http://example.com/\r\nWARC-Type: evil", when, []byte("x"))
	dir := t.TempDir()
	writeSegment(t, dir, []*Record{rec})
	segs, _ := Segments(dir)
	out := readAll(t, segs[0])
	if len(out) != 2 || out[1].Type() != TypeRequest || strings.ContainsAny(out[1].TargetURI(), "\r\n") {
		t.Fatalf("hostile URI changed the record: %+v", out[1].Header.Fields())
	}
}

func TestRolling(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, WriterOptions{MaxSegmentSize: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		r, _ := NewResponse("http://example.com/"+strings.Repeat("x", i), when, []byte(rawResp+strings.Repeat("!", 200)))
		if _, err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	segs, _ := Segments(dir)
	if len(segs) < 3 {
		t.Fatalf("only %d segments", len(segs))
	}
	total := 0
	for _, s := range segs {
		recs := readAll(t, s)
		if recs[0].Type() != TypeWarcinfo {
			t.Errorf("%s does not start with warcinfo", s)
		}
		total += len(recs) - 1
	}
	if total != 50 {
		t.Errorf("%d records over the segments, want 50", total)
	}
}

// TestRepairEveryCut cuts a segment at every byte of its last record, as a
// crash could, and checks that Repair keeps exactly the earlier records and
// that the file reads and extends cleanly afterwards.
func TestRepairEveryCut(t *testing.T) {
	dir := t.TempDir()
	locs := writeSegment(t, dir, sampleRecords(t))
	segs, _ := Segments(dir)
	whole, _ := os.ReadFile(segs[0])
	last := locs[len(locs)-1]
	for cut := last.Offset; cut < last.Offset+last.Length; cut++ {
		path := filepath.Join(t.TempDir(), "cut.warc.gz")
		os.WriteFile(path, whole[:cut], 0o644)
		res, err := Repair(path)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if res.Size != last.Offset || res.Records != len(locs) { // warcinfo + all but the last
			t.Fatalf("cut at %d: kept %+v, want size %d", cut, res, last.Offset)
		}
		if got := readAll(t, path); len(got) != len(locs) {
			t.Fatalf("cut at %d: %d records readable after repair", cut, len(got))
		}
	}
}

func TestCorruption(t *testing.T) {
	dir := t.TempDir()
	in := sampleRecords(t)
	in[1].Block = bytes.Clone(in[1].Block)
	locs := writeSegment(t, dir, in)
	// Rewrite the response with a block that does not match its digest.
	in[1].Block[len(in[1].Block)-1] ^= 1
	dir2 := t.TempDir()
	locs2 := writeSegment(t, dir2, in)
	if _, err := ReadAt(dir2, locs2[1]); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("flipped block byte: %v, want ErrDigestMismatch", err)
	}
	// A flipped byte in the compressed member is caught too (by gzip's CRC or the digest).
	segs, _ := Segments(dir)
	b, _ := os.ReadFile(segs[0])
	b[locs[1].Offset+locs[1].Length/2] ^= 0xff
	os.WriteFile(segs[0], b, 0o644)
	if _, err := ReadAt(dir, locs[1]); err == nil {
		t.Error("corrupt gzip member read without error")
	}
	for name, data := range map[string]string{
		"not warc":        "hello, this is not a WARC file\r\n\r\n",
		"bad length":      "WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: -5\r\n\r\n",
		"huge length":     "WARC/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
		"truncated block": "WARC/1.1\r\nContent-Length: 100\r\n\r\nshort",
	} {
		r, _ := NewReader(strings.NewReader(data))
		if _, _, err := r.Next(); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: got %v, want an error", name, err)
		}
	}
}

func TestHTTPPayload(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
	p, trunc := HTTPPayload([]byte(chunked))
	if trunc || string(p) != "hello world" {
		t.Errorf("chunked: %q %v", p, trunc)
	}
	// The header read once already gives the same payload.
	if p, trunc := HTTPBody([]byte(chunked), ReadHTTPHead([]byte(chunked)).Header); trunc || string(p) != "hello world" {
		t.Errorf("chunked, header read before: %q %v", p, trunc)
	}
	p, trunc = HTTPPayload([]byte(chunked[:60]))
	if !trunc || !strings.HasPrefix("hello world", string(p)) {
		t.Errorf("cut chunked: %q %v", p, trunc)
	}
	p, _ = HTTPPayload([]byte(rawResp))
	if string(p) != "hello world" {
		t.Errorf("plain: %q", p)
	}
	// A line that is not a field is passed over, as ReadHTTPHead reads a
	// head: the chunking named after it still frames the payload.
	junk := "HTTP/1.1 200 OK\r\nX-Powered-By PHP/5.2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	if p, trunc := HTTPPayload([]byte(junk)); trunc || string(p) != "hello" {
		t.Errorf("chunked after a line that is not a field: %q %v", p, trunc)
	}
	// A head of bare LF lines ends at its first empty line, as net/http
	// reads it, though the body holds a CRLF CRLF.
	bare := "HTTP/1.0 200 OK\nContent-Type: text/plain\n\nbody\r\n\r\nmore"
	if p, _ := HTTPPayload([]byte(bare)); string(p) != "body\r\n\r\nmore" {
		t.Errorf("a bare-LF head with CRLF CRLF in its body: payload %q", p)
	}
	// Chunking named in a second Transfer-Encoding field frames it too.
	second := "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	if p, _ := HTTPPayload([]byte(second)); string(p) != "hello" {
		t.Errorf("chunked in a second field: %q", p)
	}
	// A field net/http would not take (a space before its colon) is no
	// Transfer-Encoding, as net/http, which fetched it, read it.
	spaced := "HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello"
	if p, _ := HTTPPayload([]byte(spaced)); string(p) != "hello" {
		t.Errorf("a Transfer-Encoding net/http does not take: %q", p)
	}
	if _, err := NewResponse("http://example.com/", when, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err == nil {
		t.Error("a request made a response record: no error")
	}
}

// TestReadsWget reads a WARC written by GNU Wget 1.21 (testdata).
func TestReadsWget(t *testing.T) {
	recs := readAll(t, "testdata/wget-1.21.warc.gz")
	types := map[string]int{}
	for _, r := range recs {
		types[r.Type()]++
		if err := VerifyBlock(r); err != nil {
			t.Errorf("%s %s: %v", r.Type(), r.TargetURI(), err)
		}
		if r.Type() == TypeResponse {
			if p, _ := HTTPPayload(r.Block); Digest(p) != r.Header.Get("WARC-Payload-Digest") {
				t.Errorf("payload digest of %s", r.TargetURI())
			}
		}
	}
	if types[TypeWarcinfo] != 1 || types[TypeRequest] == 0 || types[TypeResponse] == 0 || types[TypeResource] == 0 {
		t.Errorf("record types %v", types)
	}
}

// TestWarcioReadsOurs has warcio.js, an outside implementation, read a
// segment we wrote and verify its digests.
func TestWarcioReadsOurs(t *testing.T) {
	tool := filepath.Join("..", "..", "tools", "warcio-check")
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed (.ci/run installs it)")
	}
	if _, err := os.Stat(filepath.Join(tool, "node_modules", "warcio")); err != nil {
		t.Skip("tools/warcio-check: run npm ci there (.ci/run does)")
	}
	dir := t.TempDir()
	writeSegment(t, dir, sampleRecords(t))
	segs, _ := Segments(dir)
	out, err := exec.Command("node", filepath.Join(tool, "check.mjs"), segs[0]).Output()
	if err != nil {
		t.Fatalf("warcio.js: %v", err)
	}
	var types []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			Type                           string
			BlockDigestOK, PayloadDigestOK *bool
			Length, BlockLength            int
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		types = append(types, r.Type)
		if r.BlockDigestOK == nil || !*r.BlockDigestOK || r.Length != r.BlockLength {
			t.Errorf("warcio.js: %s", sc.Text())
		}
		if r.Type == TypeResponse && (r.PayloadDigestOK == nil || !*r.PayloadDigestOK) {
			t.Errorf("warcio.js payload digest: %s", sc.Text())
		}
	}
	if strings.Join(types, " ") != "warcinfo request response revisit metadata" {
		t.Errorf("warcio.js saw %v", types)
	}
}

func FuzzReader(f *testing.F) {
	wget, _ := os.ReadFile("testdata/wget-1.21.warc.gz")
	f.Add(wget)
	f.Add([]byte("WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: 3\r\n\r\nabc\r\n\r\n"))
	f.Add([]byte("WARC/1.0\nContent-Length: 0\n\n\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, _ := NewReader(bytes.NewReader(data))
		r.MaxBlock = 1 << 20
		for range 1000 {
			if _, _, err := r.Next(); err != nil {
				return
			}
		}
	})
}

func BenchmarkWrite(b *testing.B) {
	body := bytes.Repeat([]byte("<p>Some archived text, compressible as pages are.</p>\n"), 370) // ~20 KB
	raw := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"), body...)
	w, err := NewWriter(b.TempDir(), WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		r, _ := NewResponse("http://example.com/page", when, raw)
		if _, err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWriteGroup(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, WriterOptions{MaxSegmentSize: 3000})
	if err != nil {
		t.Fatal(err)
	}
	var all [][]Location
	var ids [][]string
	for g := range 12 {
		var recs []*Record
		var gids []string
		for i := range 4 {
			r, _ := NewResponse(fmt.Sprintf("http://example.com/%d/%d", g, i), when, []byte(rawResp+strings.Repeat("?", 100*i)))
			recs = append(recs, r)
			gids = append(gids, r.ID())
		}
		locs, err := w.WriteGroup(recs)
		if err != nil {
			t.Fatal(err)
		}
		all, ids = append(all, locs), append(ids, gids)
	}
	w.Close()
	segs, _ := Segments(dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments, want rolling", len(segs))
	}
	for g, locs := range all {
		for i, l := range locs {
			if l.Segment != locs[0].Segment {
				t.Errorf("group %d straddles %s and %s", g, locs[0].Segment, l.Segment)
			}
			rec, err := ReadAt(dir, l)
			if err != nil || rec.ID() != ids[g][i] {
				t.Fatalf("group %d record %d: %v %v", g, i, rec, err)
			}
			// Each record names the warcinfo record of its own segment.
			info := readAll(t, filepath.Join(dir, l.Segment))[0]
			if rec.Header.Get("WARC-Warcinfo-ID") != info.ID() {
				t.Errorf("group %d record %d refers to another segment's warcinfo", g, i)
			}
		}
	}
}

func TestVerifyBlockForms(t *testing.T) {
	block := []byte("HTTP/1.1 200 OK\r\n\r\nhello")
	s1 := sha1.Sum(block)
	s256 := sha256.Sum256(block)
	for _, tc := range []struct {
		digest string
		ok     bool
	}{
		{"sha1:" + base32.StdEncoding.EncodeToString(s1[:]), true},
		{"SHA1:" + strings.ToLower(base32.StdEncoding.EncodeToString(s1[:])), true},
		{"sha1:" + hex.EncodeToString(s1[:]), true},
		{"sha256:" + hex.EncodeToString(s256[:]), true},
		{"sha256:" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(s256[:]), true},
		{"sha1:" + hex.EncodeToString(s256[:20]), false},
		{"sha256:" + hex.EncodeToString(s1[:]), false},
		{"md5:whatever", true}, // not checked
		{"", true},
	} {
		rec := &Record{Block: block}
		if tc.digest != "" {
			rec.Header.Set("WARC-Block-Digest", tc.digest)
		}
		if err := VerifyBlock(rec); (err == nil) != tc.ok {
			t.Errorf("VerifyBlock with %q: %v, want ok=%v", tc.digest, err, tc.ok)
		}
	}
}

// BenchmarkWriteGroupCrawl writes what a crawl commit writes: groups of 64
// captures, each a 6 KB response, its request and a metadata record.
func BenchmarkWriteGroupCrawl(b *testing.B) {
	body := bytes.Repeat([]byte("<p>Some archived text, <a href=\"/x\">compressible</a> as pages are.</p>\n"), 80)
	raw := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"), body...)
	req := []byte("GET /page HTTP/1.1\r\nHost: example.com\r\nUser-Agent: waggle/0 (+https://example.org/bot)\r\nAccept: */*\r\nAccept-Encoding: gzip, br\r\n\r\n")
	links := []Field{}
	for i := range 30 {
		links = append(links, Field{Name: "outlink", Value: fmt.Sprintf("http://example.com/section/page-%d.html L a/@href", i)})
	}
	w, err := NewWriter(b.TempDir(), WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	for b.Loop() {
		var recs []*Record
		for i := range 64 {
			u := fmt.Sprintf("http://example.com/page-%d", i)
			r, _ := NewResponse(u, when, raw)
			recs = append(recs, r, NewRequest(u, when, req), NewMetadata(u, when, links))
		}
		if _, err := w.WriteGroup(recs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNewIDForm checks record IDs against RFC 4122's version-4 form.
func TestNewIDForm(t *testing.T) {
	form := regexp.MustCompile(`^<urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}>$`)
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !form.MatchString(id) {
			t.Fatalf("record ID %q is not a version-4 UUID URN", id)
		}
		if seen[id] {
			t.Fatalf("record ID %q made twice", id)
		}
		seen[id] = true
	}
}

// HTTPHeaderAt reads a response's header fields without its body: those
// before a malformed line are kept, a section cut short gives none, from
// compressed and uncompressed segments alike; a revisit without an HTTP
// header has none.
func TestHTTPHeaderAt(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	raws := map[string]string{
		"whole":       "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Type: text/html\r\n\r\n" + strings.Repeat("body ", 100_000),
		"bad line":    "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nX Bad Line\r\n\r\nbody",
		"bad before":  "HTTP/1.1 200 OK\r\nX-Powered-By PHP/5.2\r\nETag: \"abc\"\r\n\r\nbody", // read past, as ReadHTTPHead reads it
		"long header": "HTTP/1.1 200 OK\r\nSet-Cookie: " + strings.Repeat("a", 900<<10) + "\r\nETag: \"abc\"\r\n\r\nbody",
		"4 KiB line":  "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 4096-10) + "\r\nETag: \"abc\"\r\n\r\nbody",
	}
	cut := map[string]string{
		"cut in a name":     "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Ty",
		"cut between CR LF": "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n\r",
		"over the limit":    "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nSet-Cookie: " + strings.Repeat("a", 1<<20) + "\r\n\r\nbody",
		"no blank end":      "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n",
		"cut in a field":    "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Type: text/ht",
	}
	write := func(raws map[string]string) map[string]Location {
		locs := map[string]Location{}
		for name, raw := range raws {
			l, err := w.Write(newResponse("http://a.test/", now, []byte(raw), nil))
			if err != nil {
				t.Fatal(err)
			}
			locs[name] = l
		}
		return locs
	}
	locs, cutLocs := write(raws), write(cut)
	rv, err := w.Write(NewRevisit("http://a.test/", now, "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest", nil, "sha1:AAAA", RefersTo{}))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	whole, err := ReadAt(dir, locs["whole"])
	if err != nil {
		t.Fatal(err)
	}
	plain := whole.appendTo(nil)
	if err := os.WriteFile(filepath.Join(dir, "plain.warc"), plain, 0o644); err != nil {
		t.Fatal(err)
	}
	locs["uncompressed"] = Location{Segment: "plain.warc", Length: int64(len(plain))}
	for name, l := range locs {
		wh, h, err := HTTPHeaderAt(dir, l)
		if err != nil || h.Get("ETag") != `"abc"` || wh.Get("WARC-Type") != TypeResponse {
			t.Errorf("%s: ETag %q, WARC-Type %q, %v", name, h.Get("ETag"), wh.Get("WARC-Type"), err)
		}
	}
	// A header cut short is a capture cut short: it gives no fields that
	// could make a later fetch conditional.
	for name, l := range cutLocs {
		if _, h, err := HTTPHeaderAt(dir, l); err == nil || len(h) != 0 {
			t.Errorf("%s: fields %v, %v; want an error", name, h, err)
		}
	}
	if _, h, err := HTTPHeaderAt(dir, rv); err == nil || len(h) != 0 {
		t.Errorf("a revisit without an HTTP header: %v, %v", h, err)
	}
}

// A member that turns corrupt after the first header fields gives none:
// only a malformed line keeps the fields before it.
func TestHTTPHeaderAtCorruptMember(t *testing.T) {
	dir := t.TempDir()
	head := "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\n"
	rest := "Content-Type: text/html\r\n\r\nbody"
	whdr := fmt.Sprintf("WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000000>\r\n"+
		"WARC-Date: 2026-01-01T00:00:00Z\r\nWARC-Target-URI: http://a.test/\r\nContent-Type: application/http;msgtype=response\r\n"+
		"Content-Length: %d\r\n\r\n", len(head)+len(rest))
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	zw.Write([]byte(whdr + head))
	zw.Flush()
	corrupt := buf.Len()
	zw.Write([]byte(rest + "\r\n\r\n"))
	zw.Close()
	data := buf.Bytes()
	data[corrupt] = 0x07 // a final deflate block of the reserved type
	if err := os.WriteFile(filepath.Join(dir, "x.warc.gz"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, h, err := HTTPHeaderAt(dir, Location{Segment: "x.warc.gz", Length: int64(len(data))}); err == nil || len(h) != 0 {
		t.Errorf("a member corrupt after the ETag: fields %v, %v; want an error and none", h, err)
	}
}

// WARC 1.1 §6.7.2: a revisit of an identical payload that keeps the
// response's HTTP headers is that response cut before its payload, and
// says so; one with no block, or a 304's, cuts nothing.
func TestIdenticalPayloadRevisitIsMarkedTruncated(t *testing.T) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n")
	for _, c := range []struct {
		profile string
		block   []byte
		want    string
	}{
		{ProfileIdenticalPayload, head, "length"},
		{ProfileIdenticalPayload, nil, ""},
		{ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\n\r\n"), ""},
	} {
		rv := NewRevisit("http://example.com/", when, c.profile, c.block, "sha1:AAAA", RefersTo{})
		if got := rv.Header.Get("WARC-Truncated"); got != c.want {
			t.Errorf("%s with a block of %d bytes: WARC-Truncated %q, want %q", c.profile, len(c.block), got, c.want)
		}
	}
}
