package replicate

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// member writes rec alone into a segment and returns its gzip member.
func member(t testing.TB, rec *warc.Record) []byte {
	t.Helper()
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := w.Write(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return segmentBytes(t.(*testing.T), dir, loc)
}

func TestHandlerRefuses(t *testing.T) {
	creds := network(t, 2)
	rb := newReceiver()
	addr, _ := serve(t, creds[1], Handler(rb.store))
	client := newSender(t, creds[0], t.TempDir(), t.TempDir(), &resolver{addrs: map[string]string{}}, 0).client
	post := func(body []byte, ctype string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		resp, err := client.Do(context.Background(), addr, creds[1].ID(), req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}

	dir := t.TempDir()
	entries := captures(t, dir, 2)
	e := entries[0]
	var good [][]byte
	for _, l := range e.Records {
		good = append(good, segmentBytes(t, dir, l))
	}
	capture := e.Capture
	capture.Segment, capture.Offset, capture.Length = "", 0, 0
	batch := func(c index.Capture, members ...[]byte) []byte {
		return batchBytes([]wireEntry{{capture: c, members: members}})
	}
	if code, msg := post(batch(capture, good...), ContentType); code != http.StatusNoContent {
		t.Fatalf("a good batch answered %d %s", code, msg)
	}
	rb.check(t, dir, entries[:1], creds[0].ID())

	other := segmentBytes(t, dir, entries[1].Records[1])
	badDigest, err := warc.NewResponse(e.Capture.URL, e.Capture.Time, []byte("HTTP/1.1 200 OK\r\n\r\nhello"))
	if err != nil {
		t.Fatal(err)
	}
	badDigest.Block = []byte("HTTP/1.1 200 OK\r\n\r\nhellO")
	var plain bytes.Buffer
	zw := gzip.NewWriter(&plain)
	zw.Write([]byte("WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: 2\r\n\r\nab\r\n\r\n"))
	zw.Write([]byte("WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: 2\r\n\r\ncd\r\n\r\n"))
	zw.Close()
	idMismatch := capture
	idMismatch.RecordID = entries[1].Capture.RecordID
	keyMismatch := capture
	keyMismatch.URLKey = entries[1].Capture.URLKey
	timeMismatch := capture
	timeMismatch.Time = capture.Time.Add(time.Second)
	typeMismatch := capture
	typeMismatch.Type = warc.TypeRevisit
	oversize := append([]byte(nil), magic...)
	oversize = binary.AppendUvarint(oversize, 1)
	oversize = appendCapture(oversize, &capture, false)
	oversize = binary.AppendUvarint(oversize, 1)
	oversize = binary.AppendUvarint(oversize, MaxMemberBytes+1)
	oversize = append(oversize, good[0]...)
	wrongVersion := batch(capture, good...)
	wrongVersion[3] = 9

	for _, tc := range []struct {
		name  string
		body  []byte
		ctype string
		code  int
	}{
		{"truncated gzip", batch(capture, good[0], good[1][:len(good[1])-9]), ContentType, 400},
		{"two members", batch(capture, good[0], append(bytes.Clone(good[1]), other...)), ContentType, 400},
		{"two records in a member", batch(capture, good[0], plain.Bytes()), ContentType, 400},
		{"bytes after the member", batch(capture, good[0], append(bytes.Clone(good[1]), 0)), ContentType, 400},
		{"not gzip", batch(capture, good[0], []byte("WARC/1.1\r\n")), ContentType, 400},
		{"digest mismatch", batch(capture, member(t, badDigest)), ContentType, 400},
		{"record ID mismatch", batch(idMismatch, good...), ContentType, 400},
		{"URL key mismatch", batch(keyMismatch, good...), ContentType, 400},
		{"date mismatch", batch(timeMismatch, good...), ContentType, 400},
		{"type mismatch", batch(typeMismatch, good...), ContentType, 400},
		{"capture record second", batch(capture, good[1], good[0]), ContentType, 400},
		{"oversize member", oversize, ContentType, 413},
		{"trailing bytes", append(batch(capture, good...), 0), ContentType, 400},
		{"cut off", batch(capture, good...)[:100], ContentType, 400},
		{"empty", nil, ContentType, 400},
		{"wrong version", wrongVersion, ContentType, 400},
		{"wrong media type", batch(capture, good...), "application/octet-stream", 415},
	} {
		calls := rb.calls
		code, msg := post(tc.body, tc.ctype)
		if code != tc.code {
			t.Errorf("%s: answered %d %s, want %d", tc.name, code, strings.TrimSpace(msg), tc.code)
		}
		if rb.calls != calls {
			t.Errorf("%s: store was called", tc.name)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	dir := t.TempDir()
	entries := captures(t, dir, 5)
	var wes []wireEntry
	for i, e := range entries {
		c := e.Capture
		c.Segment, c.Offset, c.Length = "", 0, 0
		c.Redirect = "https://example.com/ünïcode"
		c.SimHash = 0x9e3779b97f4a7c15 * uint64(i+1)
		we := wireEntry{capture: c}
		for _, l := range e.Records {
			we.members = append(we.members, segmentBytes(t, dir, l))
		}
		wes = append(wes, we)
	}
	// Version 1 leaves the SimHash behind; version 2 carries it.
	for _, version := range []byte{magic[3], versionSimHash} {
		copies, err := decodeCopies(batchVersion(wes, version))
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for _, we := range wes {
			want := we.capture
			if version != versionSimHash {
				want.SimHash = 0
			}
			for j, m := range we.members {
				cp := copies[i]
				i++
				if !bytes.Equal(cp.Member, m) {
					t.Errorf("version %d: member %d differs", version, i)
				}
				if (j == 0) != (cp.Capture != nil) {
					t.Fatalf("version %d: copy %d: capture %v", version, i, cp.Capture)
				}
				if j == 0 && (*cp.Capture != want) {
					if !cp.Capture.Time.Equal(want.Time) {
						t.Errorf("version %d: time %v, want %v", version, cp.Capture.Time, want.Time)
					}
					c := *cp.Capture
					c.Time = want.Time
					if c != want {
						t.Errorf("version %d: capture %+v, want %+v", version, c, want)
					}
				}
			}
		}
		if i != len(copies) {
			t.Errorf("version %d: %d copies, want %d", version, len(copies), i)
		}
		if err := verifyCopies(copies, math.MaxInt64); err != nil {
			t.Error(err)
		}
	}
	// A capture without SimHash is queued in version 1, which nodes that
	// predate SimHashes in the queue read.
	if v := appendValue(nil, &entries[0], nil); entries[0].Capture.SimHash != 0 || v[0] != 1 {
		t.Errorf("a capture without SimHash queued in version %d", v[0])
	}
	// Queue values round-trip too, with the SimHash; a value of version 1,
	// written before SimHashes were queued, still reads.
	for i, e := range entries {
		e.Capture.SimHash = wes[i].capture.SimHash
		v := appendValue(nil, &e, []string{"a", "b"})
		got, targets, err := parseValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Capture.Time.Equal(e.Capture.Time) || got.Capture.RecordID != e.Capture.RecordID || got.Capture.SimHash != e.Capture.SimHash ||
			got.Capture.Segment != e.Capture.Segment || len(got.Records) != len(e.Records) || len(targets) != 2 {
			t.Errorf("queue value: %+v %v, want %+v", got, targets, e)
		}
		capEnd := 1 + len(appendCapture(nil, &e.Capture, false))
		old := append([]byte{1}, v[1:capEnd]...)
		old = append(old, v[capEnd+8:]...)
		got, targets, err = parseValue(old)
		if err != nil {
			t.Fatalf("queue value of version 1: %v", err)
		}
		if got.Capture.RecordID != e.Capture.RecordID || got.Capture.SimHash != 0 || len(got.Records) != len(e.Records) || len(targets) != 2 {
			t.Errorf("queue value of version 1: %+v %v, want %+v without SimHash", got, targets, e)
		}
	}
}

func FuzzDecodeCopies(f *testing.F) {
	dir := f.TempDir()
	entries := captures(f, dir, 3)
	for _, e := range entries {
		c := e.Capture
		c.Segment, c.Offset, c.Length = "", 0, 0
		we := wireEntry{capture: c}
		for _, l := range e.Records {
			b, err := os.ReadFile(filepath.Join(dir, l.Segment))
			if err != nil {
				f.Fatal(err)
			}
			we.members = append(we.members, b[l.Offset:l.Offset+l.Length])
		}
		f.Add(batchBytes([]wireEntry{we}))
		f.Add(batchVersion([]wireEntry{we}, versionSimHash))
	}
	f.Add([]byte("WGR\x01\x00"))
	f.Add([]byte("WGR\x02"))
	f.Add([]byte("WGR\x03"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		copies, err := decodeCopies(body)
		if err != nil {
			return
		}
		if len(copies) == 0 || copies[0].Capture == nil {
			t.Fatalf("decoded %d copies, the first without a capture", len(copies))
		}
		// Re-encoding what was decoded gives the body back.
		var wes []wireEntry
		for _, cp := range copies {
			if cp.Capture != nil {
				wes = append(wes, wireEntry{capture: *cp.Capture})
			}
			wes[len(wes)-1].members = append(wes[len(wes)-1].members, cp.Member)
		}
		if again := batchVersion(wes, body[3]); !bytes.Equal(again, body) {
			t.Fatalf("re-encoded %x, decoded from %x", again, body)
		}
		verifyCopies(copies, math.MaxInt64) // must not panic
	})
}

// The records a batch keeps for the store (so that it need not decompress
// them again) are bounded; past the bound a copy goes without, whole.
func TestVerifyCopiesBoundsRecordsKept(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 6<<20) // compresses to almost nothing
	var copies []Copy
	for i := range 4 {
		raw := append([]byte("GET /"+strings.Repeat("a", i)+" HTTP/1.1\r\nHost: example.test\r\n\r\n"), body...)
		copies = append(copies, Copy{Member: member(t, warc.NewRequest("http://example.test/", time.Now(), raw))})
	}
	if err := verifyCopies(copies, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for i, cp := range copies {
		if cp.Record != nil {
			kept += len(cp.Record.Block)
			if i > 1 {
				t.Errorf("copy %d kept its record past the bound (%d bytes kept)", i, kept)
			}
		}
	}
	if kept == 0 || kept > maxRetainedBlocks {
		t.Errorf("%d bytes of records kept, want some and at most %d", kept, maxRetainedBlocks)
	}
}

// batchBytes is the wire form of entries in one piece, of version 1.
func batchBytes(entries []wireEntry) []byte {
	return batchVersion(entries, magic[3])
}

func batchVersion(entries []wireEntry, version byte) []byte {
	pieces, _ := encodeBatch(entries, version)
	return bytes.Join(pieces, nil)
}
