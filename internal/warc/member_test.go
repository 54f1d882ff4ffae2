package warc

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"testing"
)

// A MemberReader reads each member's header and as much of its block as
// asked, finds where the member ends, and refuses a block larger than
// allowed or a damaged member.
func TestMemberReader(t *testing.T) {
	dir := t.TempDir()
	in := sampleRecords(t)
	locs := writeSegment(t, dir, in)
	segs, _ := Segments(dir)
	seg, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	ra := bytes.NewReader(seg)
	var m MemberReader // one reader for every member: its buffers are reused
	for i, loc := range locs {
		h, err := m.Open(ra, loc.Offset, int64(len(seg))-loc.Offset)
		if err != nil || h.Get("WARC-Record-ID") != in[i].ID() {
			t.Fatalf("record %d: header %v, %v", i, h.Fields(), err)
		}
		block, err := m.ReadBlock(nil, 5)
		if err != nil || !bytes.Equal(block, in[i].Block[:min(5, len(in[i].Block))]) {
			t.Errorf("record %d: block starts %q, want %q (%v)", i, block, in[i].Block[:min(5, len(in[i].Block))], err)
		}
		n, err := m.Finish(int64(len(in[i].Block)))
		if err != nil || n != loc.Length {
			t.Errorf("record %d: member of %d bytes, want %d (%v)", i, n, loc.Length, err)
		}
	}
	// The first member, the segment's warcinfo record, ends where the first
	// record written starts.
	if h, err := m.Open(ra, 0, int64(len(seg))); err != nil || h.Get("WARC-Type") != TypeWarcinfo {
		t.Fatalf("segment start: %v, %v", h.Fields(), err)
	}
	if n, err := m.Finish(1 << 20); err != nil || n != locs[0].Offset {
		t.Errorf("warcinfo member: %d bytes, %v; the first record is at %d", n, err, locs[0].Offset)
	}

	big := locs[1] // "hello world"'s record
	if _, err := m.Open(ra, big.Offset, big.Length); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Finish(3); !errors.Is(err, ErrBlockTooLarge) {
		t.Errorf("a block larger than allowed: %v", err)
	}

	damaged := bytes.Clone(seg)
	damaged[big.Offset+big.Length-6] ^= 0xff // the gzip trailer's CRC
	if _, err := m.Open(bytes.NewReader(damaged), big.Offset, big.Length); err != nil {
		t.Fatal(err) // the header is before the damage
	}
	if _, err := m.Finish(1 << 20); err == nil {
		t.Error("a member with a bad CRC was read to its end without error")
	}
	if _, err := m.Open(ra, big.Offset+1, big.Length); err == nil {
		t.Error("a member opened one byte past its start")
	}

	// A record whose Content-Length is longer than its block, or shorter.
	for _, tc := range []struct{ claimed, block string }{{"500", "short"}, {"2", "longer"}} {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write([]byte("WARC/1.1\r\nWARC-Type: request\r\nContent-Length: " + tc.claimed + "\r\n\r\n" + tc.block + "\r\n\r\n"))
		zw.Close()
		if _, err := m.Open(bytes.NewReader(gz.Bytes()), 0, int64(gz.Len())); err != nil {
			t.Fatal(err)
		}
		if n, err := m.Finish(1 << 20); err == nil {
			t.Errorf("Content-Length %s for a block of %d bytes: read as a member of %d bytes", tc.claimed, len(tc.block), n)
		}
	}
}
