package crawl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// damagedSegment crawls a little, then damages one committed record of the
// first segment (one flipped bit in the middle of the fourth record). It
// returns the config, the segment's path, its committed size, the damaged
// record and the segment's captures.
func damagedSegment(t *testing.T) (cfg Config, path string, committed int64, damaged warc.Location, caps []index.Capture) {
	t.Helper()
	web, srv := startWeb(t, websim.Config{Seed: 11, Hosts: 2, Pages: 100})
	cfg = testConfig(t, srv.URL(), web.Seeds()...)
	cfg.MaxPages = 40
	runCrawl(t, cfg)
	var locs []warc.Location
	eachRecord(t, cfg.Data, func(_ *warc.Record, l warc.Location, _ bool) {
		if len(locs) == 0 || l.Segment == locs[0].Segment {
			locs = append(locs, l)
		}
	})
	if len(locs) < 12 {
		t.Fatalf("fixture: %d records in the first segment", len(locs))
	}
	damaged = locs[3]
	path = filepath.Join(cfg.Data, "warc", damaged.Segment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	committed = int64(len(b))
	b[damaged.Offset+damaged.Length/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cs := range archived(t, cfg.Data) {
		for _, c := range cs {
			if c.Segment == damaged.Segment {
				caps = append(caps, c)
			}
		}
	}
	return cfg, path, committed, damaged, caps
}

// readable counts the captures that read back whole from the segments.
func readable(t *testing.T, dir string, caps []index.Capture) int {
	t.Helper()
	n := 0
	for _, c := range caps {
		if _, err := warc.ReadAt(dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length}); err == nil {
			n++
		}
	}
	return n
}

// A crash leaves an uncommitted tail after a segment with a damaged record
// in its committed part: the tail is cut, and only the tail. Cutting at
// the damaged record lost every committed record after it, and the next
// start then refused the archive as one whose disk lost data.
func TestTornTailAfterDamagedRecord(t *testing.T) {
	cfg, path, committed, damaged, caps := damagedSegment(t)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("the torn start of a group never committed")
	f.Close()
	dir := filepath.Dir(path)
	before := readable(t, dir, caps)
	if before != len(caps)-1 && before != len(caps) {
		t.Fatalf("fixture: %d of %d captures readable with one record damaged", before, len(caps))
	}

	for range 2 { // and again, as the next start
		c, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open after the crash: %v", err)
		}
		c.Close()
		if fi, _ := os.Stat(path); fi.Size() != committed {
			t.Fatalf("segment is %d bytes after Open, %d were committed (damaged record at %d)", fi.Size(), committed, damaged.Offset)
		}
	}
	if got := readable(t, dir, caps); got != before {
		t.Errorf("%d captures readable after Open, %d before", got, before)
	}
}

// A node's segment that lost its tail (DropLost) drops the captures in the
// lost bytes, and only those: a damaged record earlier in the segment is
// not where its data ends.
func TestLostTailAfterDamagedRecord(t *testing.T) {
	cfg, path, committed, damaged, caps := damagedSegment(t)
	var last index.Capture
	for _, c := range caps {
		if c.Offset > last.Offset {
			last = c
		}
	}
	cut := last.Offset + last.Length/2
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cfg); err == nil {
		t.Fatalf("a single archive opened with %d of %d committed bytes", cut, committed)
	}

	cfg.DropLost = true
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open with DropLost: %v", err)
	}
	c.Close()
	var left []index.Capture
	for _, cs := range archived(t, cfg.Data) {
		for _, c := range cs {
			if c.Segment == damaged.Segment {
				left = append(left, c)
			}
		}
	}
	if len(left) != len(caps)-1 {
		t.Errorf("%d of the segment's %d captures left in the index, want all but the one cut (damaged record at %d, cut at %d)", len(left), len(caps), damaged.Offset, cut)
	}
	if fi, _ := os.Stat(path); fi.Size() != last.Offset {
		t.Errorf("segment is %d bytes, want %d: up to the capture whose record was cut", fi.Size(), last.Offset)
	}
}
