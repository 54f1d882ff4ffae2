package archive

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// VerifyFrom, a capture at a time, visits every capture exactly once,
// several captures of one key and keys prefixes of others included.
func TestVerifyFromCursor(t *testing.T) {
	var pages []page
	for _, u := range []string{"http://a.com/x", "http://a.com/x?y", "http://a.com/x/z", "http://a.com/xy", "http://b.com/"} {
		for h := range 3 {
			pages = append(pages, page{url: u, at: t0.Add(time.Duration(h) * time.Hour), body: "body of " + u})
		}
	}
	l := archivePages(t, pages)
	seen := map[string]int{}
	var cur index.Position
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("no end")
		}
		st, next, done, err := l.VerifyFrom(context.Background(), cur, 1, func(c index.Capture, err error) error {
			t.Errorf("damaged %s: %v", c.URL, err)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		seen[next.URLKey+" "+next.Time.String()] += int(st.Captures)
		cur = next
		if done {
			break
		}
	}
	if len(seen) != len(pages) {
		t.Errorf("visited %d distinct captures, want %d: %v", len(seen), len(pages), seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s visited %d times", k, n)
		}
	}
}

// A record whose gzip trailer (CRC-32, ISIZE) is damaged does not read
// back (Member, which replication and repair use, refuses it), and Verify
// counts it damaged: it reads to the end of the gzip member.
func TestVerifyFindsDamagedGzipTrailer(t *testing.T) {
	l := archivePages(t, []page{{url: "http://a.com/", at: t0, body: "hello"}, {url: "http://b.com/", at: t0, body: "world"}})
	var first index.Capture
	l.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		first = c
		return false, nil
	})
	path := filepath.Join(l.dir, first.Segment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[first.Offset+first.Length-6] ^= 0x55 // in the CRC-32 of its gzip trailer
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Member(context.Background(), first); err == nil {
		t.Fatal("Member reads the damaged record")
	}
	st, err := l.Verify(context.Background(), func(index.Capture, error) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Damaged != 1 {
		t.Errorf("Verify: %+v; want the record whose member's CRC fails counted damaged", st)
	}
}

// A segment cut short by the last bytes of its last record's gzip member
// (what crawl.Open then refuses, pointing at waggle index verify to list
// the captures affected) fails Verify.
func TestVerifyFindsSegmentCutInTrailer(t *testing.T) {
	l := archivePages(t, []page{{url: "http://a.com/", at: t0, body: "hello"}, {url: "http://b.com/", at: t0, body: "world"}})
	var last index.Capture
	l.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		if c.Offset >= last.Offset {
			last = c
		}
		return true, nil
	})
	path := filepath.Join(l.dir, last.Segment)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != last.Offset+last.Length {
		t.Fatalf("segment %d bytes, last record ends at %d", fi.Size(), last.Offset+last.Length)
	}
	if err := os.Truncate(path, fi.Size()-4); err != nil {
		t.Fatal(err)
	}
	st, err := l.Verify(context.Background(), func(index.Capture, error) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Damaged != 1 {
		t.Errorf("Verify of a segment cut 4 bytes short: %+v; want its last record damaged", st)
	}
}
