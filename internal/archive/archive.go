// Package archive is the read side of a node's archive as replay sees it:
// a capture index and the WARC records it points at. Local reads this
// node's own data directory; Network answers for the whole network over
// the authenticated peer channel. It asks for the captures of a URL, or of
// a range within one site, the node that owns the site first, and only
// when that node has none or cannot be reached every other live node, as
// captures can sit on previous owners and replicas; it gathers from every
// node the queries that span sites.
package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

var ErrUnavailable = errors.New("archive: node unavailable")

// An Archive is a capture index with its records. Captures are ordered by
// URL key, then time, as in package index. Implementations are safe for
// concurrent use.
type Archive interface {
	// Captures calls fn for each capture of urlKey in time order (newest
	// first when reverse) until fn returns false or an error.
	Captures(ctx context.Context, urlKey string, reverse bool, fn func(index.Capture) (bool, error)) error
	// CapturesBetween is Captures limited to from <= time <= to; a zero
	// bound is open.
	CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error
	// Range calls fn for each capture whose URL key k satisfies
	// lo <= k < hi (hi empty: no upper bound), by key then time.
	Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error
	// ByDigest returns the first capture that stored a payload with this
	// digest, on the node that holds c (the capture being resolved): a
	// revisit's original is stored where the revisit is.
	ByDigest(ctx context.Context, c index.Capture, digest string) (index.Capture, bool, error)
	// Record reads the WARC record of a capture this archive returned,
	// checking its block digest.
	Record(ctx context.Context, c index.Capture) (*warc.Record, error)
	// Summary describes the whole archive: captures, hosts, time span,
	// the hosts with most captures.
	Summary(ctx context.Context) (Summary, error)
}

// Local is the archive of one data directory.
type Local struct {
	idx *index.Index
	dir string
	// scans holds *warc.MemberReader: a gzip decoder costs more to make
	// than to read the headers of a capture's companions with.
	scans sync.Pool
}

// CompanionLocations returns where the records written with capture c lie —
// its request and metadata records: the members right after it in its
// segment whose records are concurrent to it (at most a few, each small).
func (l *Local) CompanionLocations(c index.Capture) ([]warc.Location, error) {
	f, size, err := l.openSegment(c.Segment)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return l.companionsIn(f, size, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length}, c.RecordID)
}

// Companions returns the records written with capture c, as the gzip
// members they are: those CompanionLocations finds.
func (l *Local) Companions(_ context.Context, c index.Capture) ([][]byte, error) {
	f, size, err := l.openSegment(c.Segment)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	locs, err := l.companionsIn(f, size, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length}, c.RecordID)
	if err != nil {
		return nil, err
	}
	return readMembers(f, locs)
}

// Warcinfo returns the warcinfo record that starts capture c's segment,
// as its gzip member, or nil when the segment starts with another record.
func (l *Local) Warcinfo(_ context.Context, c index.Capture) ([]byte, error) {
	f, size, err := l.openSegment(c.Segment)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	loc, err := l.warcinfoIn(f, size, c.Segment)
	if err != nil || loc.Length == 0 {
		return nil, err
	}
	members, err := readMembers(f, []warc.Location{loc})
	if err != nil {
		return nil, err
	}
	return members[0], nil
}

// readMembers reads the gzip members at locs of f.
func readMembers(f io.ReaderAt, locs []warc.Location) ([][]byte, error) {
	members := make([][]byte, 0, len(locs))
	for _, loc := range locs {
		b := make([]byte, loc.Length)
		if _, err := f.ReadAt(b, loc.Offset); err != nil {
			return nil, fmt.Errorf("archive: %s at %d: %w", loc.Segment, loc.Offset, err)
		}
		members = append(members, b)
	}
	return members, nil
}

// openSegment opens one of l's segments by base name, and never a file
// outside its directory.
func (l *Local) openSegment(seg string) (*os.File, int64, error) {
	if !warc.ValidSegmentName(seg) {
		return nil, 0, fmt.Errorf("archive: segment %.100q", seg)
	}
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		return nil, 0, fmt.Errorf("archive: %w", err)
	}
	defer root.Close()
	f, err := root.Open(seg)
	if err != nil {
		return nil, 0, fmt.Errorf("archive: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("archive: %w", err)
	}
	return f, fi.Size(), nil
}

// NewLocal returns the archive of idx, whose segments are in warcDir.
func NewLocal(idx *index.Index, warcDir string) *Local { return &Local{idx: idx, dir: warcDir} }

// Index returns the local capture index.
func (l *Local) Index() *index.Index { return l.idx }

func (l *Local) Captures(ctx context.Context, urlKey string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return l.idx.Captures(ctx, urlKey, reverse, fn)
}

func (l *Local) CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	return l.idx.CapturesBetween(ctx, urlKey, from, to, reverse, fn)
}

func (l *Local) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return l.idx.Range(ctx, lo, hi, reverse, fn)
}

func (l *Local) ByDigest(_ context.Context, _ index.Capture, digest string) (index.Capture, bool, error) {
	return l.idx.ByDigest(digest)
}

func (l *Local) Record(_ context.Context, c index.Capture) (*warc.Record, error) {
	rec, err := warc.ReadAt(l.dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return rec, nil
}

// OpenBlock opens the block of c's record to be read as a stream, for a
// record too large to read whole; reading it to the end checks its digest
// (warc.Block).
func (l *Local) OpenBlock(_ context.Context, c index.Capture) (*warc.Block, error) {
	b, err := warc.OpenBlock(l.dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return b, nil
}

// openMember opens the segment holding c's record, once c's location is
// known to lie within it.
func (l *Local) openMember(c index.Capture) (*os.File, error) {
	if c.Length <= 0 || c.Offset < 0 {
		return nil, fmt.Errorf("archive: record of %.200q: no location", c.URLKey)
	}
	f, size, err := l.openSegment(c.Segment)
	if err != nil {
		return nil, err
	}
	if c.Offset > size || c.Length > size-c.Offset {
		f.Close()
		return nil, fmt.Errorf("archive: record of %.200q at %d+%d runs past the end of %s (%d bytes)", c.URLKey, c.Offset, c.Length, c.Segment, size)
	}
	return f, nil
}

// Member returns the gzip member holding a capture's record, as written,
// and the record it holds, after checking that it reads back as the
// capture's record.
func (l *Local) Member(_ context.Context, c index.Capture) ([]byte, *warc.Record, error) {
	f, err := l.openMember(c)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b := make([]byte, c.Length)
	if _, err := f.ReadAt(b, c.Offset); err != nil {
		return nil, nil, fmt.Errorf("archive: %s at %d: %w", c.Segment, c.Offset, err)
	}
	rec, err := parseMember(b, c)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: %w", err)
	}
	return b, rec, nil
}
