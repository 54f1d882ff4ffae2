package warc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

func TestOpenBlock(t *testing.T) {
	dir := t.TempDir()
	in := sampleRecords(t)
	locs := writeSegment(t, dir, in)
	for i, rec := range in {
		b, err := OpenBlock(dir, locs[i])
		if err != nil {
			t.Fatalf("%s: %v", rec.Type(), err)
		}
		if b.Length != int64(len(rec.Block)) || b.Header.Get("WARC-Record-ID") != rec.ID() {
			t.Errorf("%s: length %d, ID %s; want %d, %s", rec.Type(), b.Length, b.Header.Get("WARC-Record-ID"), len(rec.Block), rec.ID())
		}
		// One byte at a time, so that the block's end falls inside a read
		// no larger than what remains.
		if err := iotest.TestReader(b, rec.Block); err != nil {
			t.Errorf("%s: %v", rec.Type(), err)
		}
		b.Close()
	}
}

func TestOpenBlockWithholdsAMismatchedEnd(t *testing.T) {
	in := sampleRecords(t)
	resp := in[1]
	resp.Block = bytes.Clone(resp.Block)
	resp.Block[len(resp.Block)-1] ^= 1 // the digest is the original block's
	dir := t.TempDir()
	locs := writeSegment(t, dir, in)
	b, err := OpenBlock(dir, locs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := io.ReadAll(b)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("read the block with %v, want ErrDigestMismatch", err)
	}
	if len(got) >= len(resp.Block) {
		t.Errorf("gave all %d bytes of a block that does not match its digest", len(got))
	}
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("a read after the mismatch gave %v", err)
	}
}

func TestOpenBlockCutShort(t *testing.T) {
	dir := t.TempDir()
	in := sampleRecords(t)
	raw := make([]byte, 200<<10)
	for i := range raw {
		raw[i] = byte(i * 7 % 251) // little to compress: the member is long
	}
	big, err := NewResponse("http://example.com/big", when, append([]byte("HTTP/1.1 200 OK\r\n\r\n"), raw...))
	if err != nil {
		t.Fatal(err)
	}
	locs := writeSegment(t, dir, append(in, big))
	loc := locs[len(locs)-1]
	segs, _ := Segments(dir)
	if err := os.Truncate(segs[0], loc.Offset+loc.Length/2); err != nil {
		t.Fatal(err)
	}
	b, err := OpenBlock(dir, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := io.ReadAll(b)
	if err == nil || errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("read %d bytes of a block cut short with %v, want an error saying it is cut off", len(got), err)
	}
}

// HTTPSection returns exactly the header section, whatever its line ends,
// and fails on one cut short or over its limit.
func TestHTTPSection(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\n", "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		{"HTTP/1.1 200 OK\nA: b\n\nbody", "HTTP/1.1 200 OK\nA: b\n\n"},
		{"HTTP/1.1 200 OK\r\nA: " + string(bytes.Repeat([]byte("x"), 10000)) + "\r\n\r\n", "HTTP/1.1 200 OK\r\nA: " + string(bytes.Repeat([]byte("x"), 10000)) + "\r\n\r\n"},
		{"HTTP/1.1 200 OK\r\nA: b\r\n", ""},
		{"HTTP/1.1 200 OK\r\n" + string(bytes.Repeat([]byte("A: b\r\n"), maxHTTPHeader/6+1)) + "\r\n", ""},
	} {
		got, err := HTTPSection(bytes.NewReader([]byte(tc.in)))
		if string(got) != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("HTTPSection(%.40q…) = %.40q…, %v; want %.40q…", tc.in, got, err, tc.want)
		}
	}
}
