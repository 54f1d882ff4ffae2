package crawl

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// running opens cfg's crawler and runs it until the test ends or stop is
// called.
func running(t *testing.T, cfg Config) (c *Crawler, stop func()) {
	t.Helper()
	cfg.Continuous = true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		if _, err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("the crawler stopped: %v", err)
		}
		close(done)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		c.Close()
	}
	t.Cleanup(stop)
	return c, stop
}

// recordsOnDisk reads every record of the data directory's segments:
// record ID → location, and ID → the ID of the record just before it.
func recordsOnDisk(t *testing.T, data string) (where map[string]warc.Location, before map[string]string) {
	t.Helper()
	where, before = map[string]warc.Location{}, map[string]string{}
	prev := ""
	eachRecord(t, data, func(rec *warc.Record, l warc.Location, first bool) {
		if first {
			prev = ""
		}
		where[rec.ID()] = l
		before[rec.ID()] = prev
		prev = rec.ID()
	})
	return where, before
}

// Released captures leave the disk: Compact rewrites the closed segments
// that are mostly released captures, keeps every other capture readable
// where the index says, with its request and metadata records right after
// it, and drops the old files once nothing refers to them — and a
// compaction cut short leaves an archive that opens and agrees.
func TestCompact(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 4, Pages: 120})
	cfg := testConfig(t, srv.URL(), web.Seeds()...)
	cfg.SegmentSize = 64 << 10
	runCrawl(t, cfg)
	before := archived(t, cfg.Data)
	whereBefore, prevBefore := recordsOnDisk(t, cfg.Data)
	segs, _ := warc.Segments(filepath.Join(cfg.Data, "warc"))
	if len(segs) < 4 {
		t.Fatalf("only %d segments; the test needs several", len(segs))
	}
	last := filepath.Base(segs[len(segs)-1])

	// Release three captures in four outside the last segment.
	var released, kept []index.Capture
	i := 0
	for _, u := range slices.Sorted(maps.Keys(before)) {
		for _, cp := range before[u] {
			if cp.Segment != last && i%4 != 0 {
				released = append(released, cp)
			} else {
				kept = append(kept, cp)
			}
			i++
		}
	}
	c, stop := running(t, cfg)
	ctx := context.Background()
	if err := c.Update(ctx, func(b *pebble.Batch) error {
		for _, cp := range released {
			// Its companions: the records that follow it.
			var companions []warc.Location
			for id, prev := range prevBefore {
				if prev == cp.RecordID {
					companions = append(companions, whereBefore[id])
				}
			}
			if err := Release(b, cp, companions); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A segment still referred to elsewhere keeps its file and its books.
	st, err := c.Compact(ctx, CompactOptions{InUse: func(pebble.Reader, string) (bool, error) { return true, nil }})
	if err == nil || !errors.Is(err, errSegmentInUse) || st.Segments != 0 || st.Moved == 0 {
		t.Fatalf("Compact with every segment in use = %+v, %v; want records moved, no segment dropped, an error", st, err)
	}
	// A segment left for later is not a failure of the crawl: it goes on.
	if err := c.Update(ctx, func(*pebble.Batch) error { return nil }); err != nil {
		t.Fatalf("after a compaction left segments for later, the crawler: %v", err)
	}
	stop()
	// Cut short there: the archive reopens, and the index agrees with the
	// segments (the records exist twice on disk for now).
	verifyWARCs(t, cfg.Data, archived(t, cfg.Data))

	c, stop = running(t, cfg)
	// Every segment with a released capture is rewritten (MinDead as low
	// as it goes), so that none of them may stay on disk.
	st, err = c.Compact(ctx, CompactOptions{MinDead: 1e-9, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments == 0 || st.Reclaimed <= 0 {
		t.Fatalf("Compact = %+v, want segments dropped and bytes reclaimed", st)
	}
	dropped := droppedSegments(t, c)
	if len(dropped) != st.Segments {
		t.Errorf("%d segment files are off the books, Compact dropped %d", len(dropped), st.Segments)
	}
	// Stopped within the grace period (as by a crash): the files are still
	// there, and the next start removes them.
	stop()
	for _, f := range dropped {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("dropped segment %s is gone before its grace period: %v", f, err)
		}
	}
	c, stop = running(t, cfg)
	for _, f := range dropped {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dropped segment %s is still there after a restart (%v)", f, err)
		}
	}

	// Dropped while running, a file goes at the first Compact after its
	// grace period.
	extra := -1
	active := c.activeSegment()
	for i, cp := range kept {
		if cp2, ok := indexedCapture(t, c, cp); ok && cp2.Segment != active && cp2.Segment != last {
			extra = i
			break
		}
	}
	if extra < 0 {
		t.Fatal("no kept capture in a closed segment to release")
	}
	cp, _ := indexedCapture(t, c, kept[extra])
	if err := c.Update(ctx, func(b *pebble.Batch) error { return Release(b, cp, nil) }); err != nil {
		t.Fatal(err)
	}
	released, kept = append(released, cp), slices.Delete(kept, extra, extra+1)
	if st, err := c.Compact(ctx, CompactOptions{MinDead: 1e-9, Grace: time.Nanosecond}); err != nil || st.Segments != 1 {
		t.Fatalf("Compact after releasing one more capture = %+v, %v; want its segment dropped", st, err)
	}
	if _, err := c.Compact(ctx, CompactOptions{MinDead: 1e-9, Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Data, "warc", cp.Segment)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("segment %s dropped past its grace period is still there (%v)", cp.Segment, err)
	}
	stop()

	after := archived(t, cfg.Data)
	verifyWARCs(t, cfg.Data, after)
	where, prevAfter := recordsOnDisk(t, cfg.Data)
	for _, cp := range released {
		if _, ok := where[cp.RecordID]; ok {
			t.Errorf("released capture %s %s is still on disk", cp.URL, cp.RecordID)
		}
		for _, a := range after[cp.URL] {
			if a.RecordID == cp.RecordID {
				t.Errorf("released capture %s is in the index", cp.URL)
			}
		}
	}
	// Every kept capture is indexed, and the records that followed it
	// (its request and metadata records) still follow it.
	for _, cp := range kept {
		found := false
		for _, a := range after[cp.URL] {
			found = found || a.RecordID == cp.RecordID
		}
		if !found {
			t.Errorf("kept capture %s %s left the index", cp.URL, cp.RecordID)
		}
	}
	followers := 0
	for id, prev := range prevBefore {
		if !slices.ContainsFunc(kept, func(c index.Capture) bool { return c.RecordID == prev }) {
			continue
		}
		if _, ok := where[id]; !ok {
			continue // a record of another capture or a warcinfo
		}
		followers++
		if prevAfter[id] != prev {
			t.Errorf("record %s followed capture %s before compaction, %q after", id, prev, prevAfter[id])
		}
	}
	if followers == 0 {
		t.Error("no companion record was checked")
	}
	remaining, _ := warc.Segments(filepath.Join(cfg.Data, "warc"))
	if len(remaining) >= len(segs) {
		t.Errorf("%d segments before, %d after", len(segs), len(remaining))
	}
	t.Logf("%d segments -> %d; %+v", len(segs), len(remaining), st)
}

// droppedSegments returns the segment files of c's data directory that
// are no longer on its books.
func droppedSegments(t *testing.T, c *Crawler) []string {
	t.Helper()
	ends, err := committedEnds(c.db)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(c.warcDir, "*.warc.gz"))
	var out []string
	for _, f := range files {
		if _, ok := ends[filepath.Base(f)]; !ok {
			out = append(out, f)
		}
	}
	return out
}

// indexedCapture returns cp as c's index has it now.
func indexedCapture(t *testing.T, c *Crawler, cp index.Capture) (index.Capture, bool) {
	t.Helper()
	got, ok, err := index.Lookup(c.db, cp.URLKey, cp.Time)
	if err != nil {
		t.Fatal(err)
	}
	return got, ok && got.RecordID == cp.RecordID
}

// groups reads data's segments and returns each capture's record (a
// response or revisit) followed by the records right after it that are
// concurrent to it, by capture record ID.
func groups(t *testing.T, data string) map[string][]warc.Location {
	t.Helper()
	out := map[string][]warc.Location{}
	head := ""
	eachRecord(t, data, func(rec *warc.Record, l warc.Location, first bool) {
		switch {
		case rec.Type() == warc.TypeResponse || rec.Type() == warc.TypeRevisit:
			head = rec.ID()
			out[head] = []warc.Location{l}
		case !first && head != "" && rec.Header.Get("WARC-Concurrent-To") == head:
			out[head] = append(out[head], l)
		default:
			head = ""
		}
	})
	return out
}

// Copies from other nodes keep their request and metadata records, which
// carry marks: compaction moves a kept copy's marks along with it, and
// drops the records and marks of a released copy's.
func TestCompactCopies(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 4, Hosts: 3, Pages: 60})
	src := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, src)
	srcGroups := groups(t, src.Data)
	var copies []Copy
	for _, cs := range archived(t, src.Data) {
		for _, cp := range cs {
			cp := cp
			g := srcGroups[cp.RecordID]
			copies = append(copies, Copy{Member: member(t, filepath.Join(src.Data, "warc"), g[0]), Capture: &cp})
			for _, l := range g[1:] {
				copies = append(copies, Copy{Member: member(t, filepath.Join(src.Data, "warc"), l)})
			}
		}
	}
	dst := testConfig(t, srv.URL())
	dst.SegmentSize = 32 << 10
	c, stop := running(t, dst)
	ctx := context.Background()
	if _, err := c.Store(ctx, copies); err != nil {
		t.Fatal(err)
	}
	stop()
	dstGroups := groups(t, dst.Data)
	whereBefore, _ := recordsOnDisk(t, dst.Data)
	idBefore := map[warc.Location]string{}
	for id, l := range whereBefore {
		idBefore[warc.Location{Segment: l.Segment, Offset: l.Offset}] = id
	}
	var released, kept []index.Capture
	i := 0
	for _, cs := range archived(t, dst.Data) {
		for _, cp := range cs {
			if len(dstGroups[cp.RecordID]) < 2 {
				continue // no companion to follow
			}
			if i%2 == 0 {
				released = append(released, cp)
			} else {
				kept = append(kept, cp)
			}
			i++
		}
	}
	if len(released) < 5 || len(kept) < 5 {
		t.Fatalf("%d captures to release, %d to keep", len(released), len(kept))
	}
	c, stop = running(t, dst)
	if err := c.Update(ctx, func(b *pebble.Batch) error {
		for _, cp := range released {
			if err := Release(b, cp, dstGroups[cp.RecordID][1:]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second deletes the files of the first's
		if _, err := c.Compact(ctx, CompactOptions{MinDead: 1e-9, Grace: time.Nanosecond}); err != nil {
			t.Fatal(err)
		}
	}
	stop()

	after := groups(t, dst.Data)
	where, _ := recordsOnDisk(t, dst.Data)
	db, err := OpenDB(dst.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	markOf := func(id string) (seg string, off int64, ok bool) {
		v, closer, err := db.Get(index.RecordKey(copiedPrefix, id))
		if err != nil {
			return "", 0, false
		}
		defer closer.Close()
		return markLocation(v)
	}
	idAt := map[warc.Location]string{}
	for id, l := range where {
		idAt[warc.Location{Segment: l.Segment, Offset: l.Offset}] = id
	}
	for _, cp := range released {
		for _, l := range dstGroups[cp.RecordID][1:] {
			id := idBefore[warc.Location{Segment: l.Segment, Offset: l.Offset}]
			if _, ok := where[id]; ok || id == "" {
				t.Errorf("companion %q of released %s is still on disk", id, cp.URL)
			}
			if _, _, ok := markOf(id); ok {
				t.Errorf("companion %q of released %s still has its mark", id, cp.URL)
			}
		}
		if _, ok := where[cp.RecordID]; ok {
			t.Errorf("released %s is still on disk", cp.URL)
		}
	}
	for _, cp := range kept {
		g := after[cp.RecordID]
		if len(g) != len(dstGroups[cp.RecordID]) {
			t.Errorf("kept %s: %d records with it after compaction, %d before", cp.URL, len(g), len(dstGroups[cp.RecordID]))
			continue
		}
		for _, l := range g[1:] {
			var id string
			for rid, wl := range where {
				if wl.Segment == l.Segment && wl.Offset == l.Offset {
					id = rid
				}
			}
			if seg, off, ok := markOf(id); !ok || seg != l.Segment || off != l.Offset {
				t.Errorf("kept %s: the mark of its record %s says %s:%d, it is at %s:%d", cp.URL, id, seg, off, l.Segment, l.Offset)
			}
		}
	}
	// No mark is left naming a place where its record is not.
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(copiedPrefix), UpperBound: prefixEnd([]byte(copiedPrefix))})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		seg, off, ok := markLocation(it.Value())
		if ok && idAt[warc.Location{Segment: seg, Offset: off}] == "" {
			t.Errorf("mark %x names %s:%d, where no record is", it.Key(), seg, off)
		}
	}
}

// Imported records carry marks without a place; compaction keeps them all,
// wget's request records written before their responses included.
func TestCompactKeepsImports(t *testing.T) {
	data := filepath.Join(t.TempDir(), "imported")
	importFiles(t, data, wgetWARC)
	cfg := testConfig(t, "http://127.0.0.1:1")
	cfg.Data = data
	c, stop := running(t, cfg)
	ctx := context.Background()
	segs, _ := warc.Segments(filepath.Join(data, "warc"))
	if len(segs) != 1 {
		t.Fatalf("%d segments after the import", len(segs))
	}
	seg := filepath.Base(segs[0])
	// Count the whole segment dead, as if a capture of it had been
	// released, so that Compact takes it.
	if err := c.Update(ctx, func(b *pebble.Batch) error { return addDead(b, seg, 1) }); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Compact(ctx, CompactOptions{MinDead: 1e-9, Grace: time.Nanosecond}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	after, _ := recordsOnDisk(t, data)
	for _, rec := range readRecords(t, wgetWARC) {
		if _, ok := after[rec.ID()]; !ok {
			t.Errorf("imported %s record %s is gone", rec.Type(), rec.ID())
		}
	}
	if _, err := os.Stat(segs[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the imported segment was not rewritten (%v)", err)
	}
	verifyWARCs(t, data, archived(t, data))
}
