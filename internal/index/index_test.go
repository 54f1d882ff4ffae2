package index

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func openDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func capture(key string, ts string, off int64) Capture {
	t, _ := time.Parse("20060102150405", ts)
	return Capture{
		URLKey: key, Time: t, URL: "http://" + key, Type: "response", Status: 200,
		MIME: "text/html", Digest: "sha1:AAAA" + ts, Segment: "seg-1.warc.gz",
		Offset: off, Length: 1234, RecordID: "<urn:uuid:1>",
	}
}

func TestPutAndQuery(t *testing.T) {
	db := openDB(t)
	b := db.NewIndexedBatch()
	in := []Capture{
		capture("com,example)/", "20240101000000", 0),
		capture("com,example)/", "20230101000000", 100),
		capture("com,example)/a", "20240101000000", 200),
		capture("com,example,www)/", "20240101000000", 300),
		capture("org,other)/", "20240101000000", 400),
	}
	for _, c := range in {
		if err := Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	x := New(db)
	var got []Capture
	err := x.Captures(context.Background(), "com,example)/", false, func(c Capture) (bool, error) {
		got = append(got, c)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the two captures of that key (not "/a"), oldest first.
	if len(got) != 2 || got[0].Offset != 100 || got[1].Offset != 0 {
		t.Fatalf("captures of com,example)/ = %+v", got)
	}
	if got[1] != in[0] {
		t.Errorf("round trip: got %+v want %+v", got[1], in[0])
	}
	got = nil
	_ = x.Captures(context.Background(), "com,example)/", true, func(c Capture) (bool, error) {
		got = append(got, c)
		return false, nil
	})
	if len(got) != 1 || got[0].Offset != 0 {
		t.Fatalf("reverse first = %+v, want newest", got)
	}
	// A host range: everything under com,example) — "/" and "/a" but not com,example,www.
	var keys []string
	_ = x.Range(context.Background(), "com,example)", "com,example*", false, func(c Capture) (bool, error) {
		keys = append(keys, c.URLKey)
		return true, nil
	})
	if strings.Join(keys, " ") != "com,example)/ com,example)/ com,example)/a" {
		t.Fatalf("range = %v", keys)
	}
	if ok, _ := x.Has("com,example)/a"); !ok {
		t.Error("Has(existing) = false")
	}
	if ok, _ := x.Has("com,example)/b"); ok {
		t.Error("Has(missing) = true")
	}
}

func TestDigestFirstWins(t *testing.T) {
	db := openDB(t)
	b := db.NewIndexedBatch()
	first := capture("com,a)/", "20240101000000", 1)
	first.Digest = "sha1:SAME"
	second := capture("com,b)/", "20240102000000", 2)
	second.Digest = "sha1:SAME"
	if err := PutDigest(b, first); err != nil {
		t.Fatal(err)
	}
	// Visible through the uncommitted indexed batch.
	if c, ok, err := ByDigest(b, "sha1:SAME"); err != nil || !ok || c.Offset != 1 {
		t.Fatalf("ByDigest in batch = %+v %v %v", c, ok, err)
	}
	if _, ok, _ := ByDigest(b, second.Digest); !ok {
		if err := PutDigest(b, second); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	c, ok, err := ByDigest(db, "sha1:SAME")
	if err != nil || !ok || c.URLKey != "com,a)/" {
		t.Fatalf("ByDigest = %+v %v %v; want the first capture", c, ok, err)
	}
	if _, ok, _ := ByDigest(db, "sha1:OTHER"); ok {
		t.Fatal("unknown digest found")
	}
}

func TestCDXJ(t *testing.T) {
	db := openDB(t)
	b := db.NewIndexedBatch()
	r := capture("com,example)/", "20240101000000", 0)
	v := capture("com,example)/", "20240201000000", 500)
	v.Type = "revisit"
	for _, c := range []Capture{v, r} {
		if err := Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := New(db).WriteCDXJ(context.Background(), &buf)
	if err != nil || n != 2 {
		t.Fatalf("WriteCDXJ n=%d err=%v", n, err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.HasPrefix(lines[0], "com,example)/ 20240101000000 {") || !strings.HasPrefix(lines[1], "com,example)/ 20240201000000 {") {
		t.Fatalf("lines not sorted by time: %q", lines)
	}
	var f map[string]string
	if err := json.Unmarshal([]byte(lines[1][strings.IndexByte(lines[1], '{'):]), &f); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"url": "http://com,example)/", "mime": "warc/revisit", "status": "200",
		"digest": "sha1:AAAA20240201000000", "length": "1234", "offset": "500", "filename": "seg-1.warc.gz"}
	for k, w := range want {
		if f[k] != w {
			t.Errorf("field %s = %q, want %q", k, f[k], w)
		}
	}
}

func TestCorruptEntry(t *testing.T) {
	for _, v := range [][]byte{nil, {9}, {encodingVersion, 0xff}, {encodingVersion, 2, 200}} {
		if _, err := decodeCapture(v); err == nil {
			t.Errorf("decodeCapture(%v) accepted corrupt bytes", v)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encodeCapture(capture("com,example)/", "20240101000000", 7)))
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := decodeCapture(v)
		if err == nil {
			if again, err := decodeCapture(encodeCapture(c)); err != nil || again != c {
				t.Fatalf("re-encode mismatch: %+v vs %+v (%v)", again, c, err)
			}
		}
	})
}
