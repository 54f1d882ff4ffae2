package index

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// WriteCDXJ writes lines in byte order, as `LC_ALL=C sort -c` checks and as
// tools that merge or bisect sorted CDXJ (sort -m, zipnum cluster building)
// expect: lines of one URL key within one second are ordered by their bytes,
// not by capture time. Here http://www.example.com/ is captured at .1 s and
// http://example.com/ at .5 s (same SURT key, same 14-digit timestamp): the
// later capture's line comes first.
func TestCDXJExportIsByteSorted(t *testing.T) {
	db := openDB(t)
	b := db.NewIndexedBatch()
	base, _ := time.Parse("20060102150405", "20240101000000")
	for i, u := range []string{"http://www.example.com/", "http://example.com/"} {
		c := Capture{URLKey: "com,example)/", Time: base.Add(time.Duration(100+400*i) * time.Millisecond), URL: u,
			Type: "response", Status: 200, MIME: "text/html", Digest: "sha1:AAAA", Segment: "s.warc.gz", Offset: int64(i * 100), Length: 10, RecordID: "<urn:uuid:1>"}
		if err := Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := New(db).WriteCDXJ(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if !sort.StringsAreSorted(lines) {
		t.Errorf("exported CDXJ is not sorted:\n%s", out.String())
	}
}

// A run of one key and second longer than WriteCDXJ may hold to sort is
// still written whole, and WriteCDXJ says that it is not all in order.
func TestCDXJExportLongRun(t *testing.T) {
	db := openDB(t)
	b := db.NewIndexedBatch()
	base, _ := time.Parse("20060102150405", "20240101000000")
	for i := range 20 {
		c := Capture{URLKey: "com,example)/", Time: base.Add(time.Duration(i) * time.Millisecond), URL: "http://example.com/",
			Type: "response", Status: 200, MIME: "text/html", Digest: "sha1:AAAA", Segment: "s.warc.gz", Offset: int64(1000 - i), Length: 10}
		if err := Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	c := Capture{URLKey: "com,example)/a", Time: base, URL: "http://example.com/a", Type: "response", Segment: "s.warc.gz", Offset: 1}
	if err := Put(b, c); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := New(db).writeCDXJ(context.Background(), &out, 1000)
	if err == nil || !strings.Contains(err.Error(), "not all in byte order") {
		t.Errorf("err = %v, want one saying the run is not sorted", err)
	}
	if lines := strings.Count(out.String(), "\n"); n != 21 || lines != 21 {
		t.Errorf("%d captures counted, %d lines written, want 21", n, lines)
	}
	if !strings.HasPrefix(out.String()[strings.LastIndexByte(strings.TrimSuffix(out.String(), "\n"), '\n')+1:], "com,example)/a ") {
		t.Errorf("the next key's line is not last:\n%s", out.String())
	}
	// Held to the default bound, the same run is sorted.
	out.Reset()
	if _, err := New(db).WriteCDXJ(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 21 || !sort.StringsAreSorted(lines) {
		t.Errorf("not sorted:\n%s", out.String())
	}
}
