package crawl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// deadPrefix counts, per segment, the bytes of captures released from the
// index (Release): + segment name → bytes (big-endian uint64). Compact
// rewrites the segments where they are most of the file.
const deadPrefix = "k/dead/"

// Release stages into b, an indexed batch, the removal of capture c from
// the index — a copy this node no longer needs to hold — and counts its
// record's bytes, and those of its companions (its request and metadata
// records), as dead in their segment, for Compact to reclaim.
func Release(b *pebble.Batch, c index.Capture, companions []warc.Location) error {
	// The entry as it is now: a compaction may have moved the record
	// since c was read (its companions then moved along, unaccounted).
	cur, ok, err := index.Lookup(b, c.URLKey, c.Time)
	if err != nil || !ok || cur.RecordID != c.RecordID {
		return err
	}
	if err := index.Delete(b, cur); err != nil {
		return err
	}
	n := cur.Length
	for _, l := range companions {
		if l.Segment == cur.Segment && cur.Segment == c.Segment {
			n += l.Length
		}
	}
	return addDead(b, cur.Segment, n)
}

// addDead stages n more dead bytes for segment into b, an indexed batch.
func addDead(b *pebble.Batch, segment string, n int64) error {
	key := []byte(deadPrefix + segment)
	dead, err := readUint64(b, key)
	if err != nil {
		return err
	}
	if err := b.Set(key, binary.BigEndian.AppendUint64(nil, dead+uint64(n)), nil); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	return nil
}

func readUint64(r pebble.Reader, key []byte) (uint64, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("crawl: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("crawl: record %q is corrupt", key)
	}
	return binary.BigEndian.Uint64(v), nil
}

// CompactOptions configure Compact.
type CompactOptions struct {
	// MinDead is the share of a segment's bytes that must be released
	// captures before the segment is rewritten (default 0.5).
	MinDead float64
	// InUse reports whether something besides the index and the copied
	// marks still refers to records in segment by location (a replication
	// queue). It is asked in the crawler's commit order, with the batch
	// about to commit, just before the segment is dropped; a segment in
	// use is left for a later Compact.
	InUse func(r pebble.Reader, segment string) (bool, error)
	// Grace is how long the file of a compacted segment stays on disk
	// for readers that looked a record up before it moved and open the
	// file just after (default 10s); it is deleted by the first Compact
	// after that.
	Grace time.Duration
}

// CompactStats are what one Compact did.
type CompactStats struct {
	Segments  int   // segments rewritten and dropped
	Moved     int   // records carried over to the current segment
	Reclaimed int64 // bytes of dropped segments minus bytes carried over
}

// moveBatchBytes bounds the record bytes carried over per commit.
const moveBatchBytes = 32 << 20

// Compact rewrites the closed segments whose bytes are mostly released
// captures (see Release): their live records — captures the index points
// at, with the request and metadata records that follow them, and copied
// records with a mark — are appended byte for byte to the segment being
// written, the index and marks are moved along in the same commits, and
// the old segment is dropped from the crawler's books in a last commit
// and deleted from disk after a grace period. A crash at any point leaves
// either the old segment or the new copies in force: a segment without a
// committed end is removed at start-up (see reconcileSegments). Compact
// needs Run to be running.
func (c *Crawler) Compact(ctx context.Context, opts CompactOptions) (CompactStats, error) {
	if opts.MinDead <= 0 {
		opts.MinDead = 0.5
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	var st CompactStats
	if !c.compacting.TryLock() {
		return st, nil // another Compact is at work
	}
	defer c.compacting.Unlock()
	c.unlinkDue(opts.Grace)
	candidates, err := c.compactable(opts.MinDead)
	if err != nil || len(candidates) == 0 {
		return st, err
	}
	live, err := c.liveRecords(ctx, candidates)
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	// A segment that did not read is left out (and stays as it is); the
	// others are compacted all the same.
	errs := []error{err}
	for seg, sc := range live {
		moved, bytes, err := c.compactSegment(ctx, seg, sc, opts.InUse)
		st.Moved += moved
		if err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("crawl: compacting %s: %w", seg, err))
			continue
		}
		st.Segments++
		st.Reclaimed += sc.size - bytes
	}
	return st, errors.Join(errs...)
}

// compactable returns the segments, with their committed sizes, whose dead
// bytes are at least minDead of them, except the one being written.
func (c *Crawler) compactable(minDead float64) (map[string]int64, error) {
	ends, err := committedEnds(c.db)
	if err != nil {
		return nil, err
	}
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: []byte(deadPrefix), UpperBound: prefixEnd([]byte(deadPrefix))})
	if err != nil {
		return nil, fmt.Errorf("crawl: %w", err)
	}
	defer it.Close()
	active := c.activeSegment()
	out := map[string]int64{}
	for it.First(); it.Valid(); it.Next() {
		seg := string(it.Key()[len(deadPrefix):])
		size, ok := ends[seg]
		if !ok || seg == active || len(it.Value()) != 8 {
			continue
		}
		if float64(binary.BigEndian.Uint64(it.Value())) >= minDead*float64(size) {
			out[seg] = size
		}
	}
	return out, it.Error()
}

// A liveRecord is a record of a segment being compacted that must be kept.
type liveRecord struct {
	loc     warc.Location
	capture *index.Capture // the index's entry, for a capture's own record
	mark    []byte         // the copied mark's key, for a marked record
}

// A segmentScan is what Compact keeps of a segment and what it drops with
// it besides the bytes.
type segmentScan struct {
	size      int64 // the committed size it was read to
	live      []liveRecord
	deadMarks [][]byte // marks of records left behind, deleted with the segment
}

// liveRecords reads the segments (to their committed sizes) and finds, in
// segment order, the records to keep. A segment that cannot be read is
// missing from the result, and named in the error.
func (c *Crawler) liveRecords(ctx context.Context, segments map[string]int64) (map[string]*segmentScan, error) {
	captures := map[string]map[int64]index.Capture{}
	err := index.New(c.db).Range(ctx, "", "", false, func(cp index.Capture) (bool, error) {
		if _, ok := segments[cp.Segment]; ok {
			if captures[cp.Segment] == nil {
				captures[cp.Segment] = map[int64]index.Capture{}
			}
			captures[cp.Segment][cp.Offset] = cp
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: %w", err)
	}
	out := map[string]*segmentScan{}
	var errs []error
	for seg, size := range segments {
		sc, err := c.scanLive(seg, size, captures[seg])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[seg] = sc
	}
	return out, errors.Join(errs...)
}

// scanLive reads segment's records up to size and sorts them: kept are
// the captures the index points at here, the records right after each of
// them that belong to it (its request and metadata records, by
// warc.IsCompanion, the rule replication and export follow too), and
// the records with a copied or imported mark that names this place or no
// place — unless they are concurrent to a capture of this segment that is
// no longer indexed (the companions of a released copy); everything else
// is left behind.
func (c *Crawler) scanLive(segment string, size int64, captures map[int64]index.Capture) (*segmentScan, error) {
	f, err := os.Open(filepath.Join(c.warcDir, segment))
	if err != nil {
		return nil, fmt.Errorf("crawl: %w", err)
	}
	defer f.Close()
	rd, err := warc.NewReader(io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, fmt.Errorf("crawl: %s: %w", segment, err)
	}
	sc := &segmentScan{size: size}
	head := ""                    // the ID of the live capture whose companions may follow
	released := map[string]bool{} // captures of this segment the index no longer holds
	for {
		rec, l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return sc, nil
		}
		if err != nil {
			// A committed segment that does not read is not rewritten:
			// its records stay where they are.
			return nil, fmt.Errorf("crawl: %s: %w", segment, err)
		}
		l.Segment = segment
		lr := liveRecord{loc: l}
		if cp, ok := captures[l.Offset]; ok {
			lr.capture = &cp
			head = cp.RecordID
			sc.live = append(sc.live, lr)
			continue
		}
		if t := rec.Type(); t == warc.TypeResponse || t == warc.TypeRevisit {
			released[rec.ID()] = true
		}
		concurrent := rec.Header.Get("WARC-Concurrent-To")
		companion := warc.IsCompanion(&rec.Header, head)
		if !companion {
			head = ""
		}
		key := index.RecordKey(copiedPrefix, rec.ID())
		here, marked, err := c.markHere(key, l)
		if err != nil {
			return nil, err
		}
		if marked && here {
			lr.mark = key
		}
		switch {
		case companion:
		case !marked || !here:
			continue // not kept for itself: a copy elsewhere is, if any
		case released[concurrent]:
			// The request or metadata record of a released copy.
			sc.deadMarks = append(sc.deadMarks, key)
			continue
		}
		sc.live = append(sc.live, lr)
	}
}

// markHere reports whether the record has a mark under key, and whether
// the mark names l or no place (imports mark their records without one).
func (c *Crawler) markHere(key []byte, l warc.Location) (here, marked bool, err error) {
	v, closer, err := c.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("crawl: %w", err)
	}
	defer closer.Close()
	seg, off, located := markLocation(v)
	return !located || seg == l.Segment && off == l.Offset, true, nil
}

// compactSegment carries segment's live records over in commits of at
// most moveBatchBytes, then drops the segment, and returns the records and
// bytes carried over.
func (c *Crawler) compactSegment(ctx context.Context, segment string, sc *segmentScan, inUse func(pebble.Reader, string) (bool, error)) (int, int64, error) {
	live := sc.live
	f, err := os.Open(filepath.Join(c.warcDir, segment))
	if err != nil {
		return 0, 0, fmt.Errorf("crawl: %w", err)
	}
	defer f.Close()
	moved, movedBytes := 0, int64(0)
	for len(live) > 0 {
		// A capture and its companions move together, so that they stay
		// adjacent (companions are found by position).
		n, size := 0, int64(0)
		for n < len(live) && (size < moveBatchBytes || live[n].capture == nil) {
			size += live[n].loc.Length
			n++
		}
		chunk := live[:n]
		live = live[n:]
		members := make([][]byte, len(chunk))
		for i, lr := range chunk {
			members[i] = make([]byte, lr.loc.Length)
			if _, err := f.ReadAt(members[i], lr.loc.Offset); err != nil {
				return moved, movedBytes, fmt.Errorf("crawl: %s: %w", segment, err)
			}
		}
		done := make(chan int, 1)
		if err := c.send(ctx, result{move: &relocation{records: chunk, members: members}, stored: done}); err != nil {
			return moved, movedBytes, err
		}
		moved += <-done
		movedBytes += size
	}
	err = c.Update(ctx, func(b *pebble.Batch) error {
		// Nothing may have been committed to the segment since it was
		// read (a commit that wrote to it, then rolled), and nothing in
		// this commit may go to it: it must not be the writer's.
		c.compactMu.Lock()
		writing := c.writing
		c.compactMu.Unlock()
		end, err := readUint64(b, []byte(segmentPrefix+segment))
		if err != nil {
			return err
		}
		if segment == writing || int64(end) != sc.size {
			return refusal{errSegmentChanged}
		}
		if inUse != nil {
			used, err := inUse(b, segment)
			if err != nil {
				return err
			}
			if used {
				return refusal{errSegmentInUse}
			}
		}
		for _, key := range sc.deadMarks {
			v, closer, err := b.Get(key)
			if errors.Is(err, pebble.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			seg, _, located := markLocation(v)
			closer.Close()
			if !located || seg == segment {
				if err := b.Delete(key, nil); err != nil {
					return err
				}
			}
		}
		if err := b.Delete([]byte(segmentPrefix+segment), nil); err != nil {
			return err
		}
		return b.Delete([]byte(deadPrefix+segment), nil)
	})
	if err != nil {
		return moved, movedBytes, err
	}
	c.compactMu.Lock()
	if c.unlinkAt == nil {
		c.unlinkAt = map[string]time.Time{}
	}
	c.unlinkAt[segment] = time.Now()
	c.compactMu.Unlock()
	return moved, movedBytes, nil
}

var (
	errSegmentInUse   = errors.New("records of the segment are still queued for other nodes; left for later")
	errSegmentChanged = errors.New("the segment changed while it was compacted; left for later")
)

// A relocation is a chunk of a segment's live records to carry over.
type relocation struct {
	records []liveRecord
	members [][]byte
}

// stageMove appends a relocation's members to the current segment and
// stages the moves of their index entries and marks; a record whose entry
// no longer points at it (released meanwhile) is carried over all the
// same, and counts as dead where it lands. It returns the records moved.
func (c *Crawler) stageMove(b *pebble.Batch, openWriter func() (*warc.Writer, error), mv *relocation, ends map[string]int64) (int, error) {
	w, err := openWriter()
	if err != nil {
		return 0, err
	}
	locs, err := w.WriteMembers(mv.members)
	if err != nil {
		return 0, fmt.Errorf("crawl: warc: %w", err)
	}
	if err := w.Sync(); err != nil {
		return 0, fmt.Errorf("crawl: warc sync: %w", err)
	}
	for i, lr := range mv.records {
		l := locs[i]
		ends[l.Segment] = max(ends[l.Segment], l.Offset+l.Length)
		if lr.mark != nil {
			if err := b.Set(lr.mark, markValue(l), nil); err != nil {
				return 0, fmt.Errorf("crawl: %w", err)
			}
		}
		if lr.capture == nil {
			continue
		}
		cp, ok, err := index.Lookup(b, lr.capture.URLKey, lr.capture.Time)
		if err != nil {
			return 0, err
		}
		if !ok || cp.RecordID != lr.capture.RecordID || cp.Segment != lr.loc.Segment || cp.Offset != lr.loc.Offset {
			// Released (or moved) since the segment was read.
			if err := addDead(b, l.Segment, l.Length); err != nil {
				return 0, err
			}
			continue
		}
		cp.Segment, cp.Offset, cp.Length = l.Segment, l.Offset, l.Length
		if err := index.Put(b, cp); err != nil {
			return 0, err
		}
		if first, ok, err := index.ByDigest(b, cp.Digest); err != nil {
			return 0, err
		} else if ok && first.RecordID == cp.RecordID {
			if err := index.PutDigest(b, cp); err != nil {
				return 0, err
			}
		}
	}
	return len(mv.records), nil
}

// activeSegment is the segment the commit loop writes to ("" before its
// first write).
func (c *Crawler) activeSegment() string {
	c.compactMu.Lock()
	defer c.compactMu.Unlock()
	return c.writing
}

// unlinkDue deletes the files of compacted segments dropped more than
// grace ago.
func (c *Crawler) unlinkDue(grace time.Duration) {
	c.compactMu.Lock()
	defer c.compactMu.Unlock()
	for seg, at := range c.unlinkAt {
		if time.Since(at) < grace {
			continue
		}
		err := os.Remove(filepath.Join(c.warcDir, seg))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			c.cfg.Logger.Warn("compaction: removing a dropped segment", "segment", seg, "err", err)
			continue
		}
		delete(c.unlinkAt, seg)
	}
}
