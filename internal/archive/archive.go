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
	"path/filepath"
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
}

// Companions returns where the records written with capture c lie — its
// request and metadata records: the members right after it in its segment
// whose records are concurrent to it (at most a few, each small).
func (l *Local) Companions(c index.Capture) ([]warc.Location, error) {
	if !warc.ValidSegmentName(c.Segment) {
		return nil, fmt.Errorf("archive: segment %.100q", c.Segment)
	}
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer root.Close()
	f, err := root.Open(c.Segment)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return companionsIn(f, fi.Size(), warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length}, c.RecordID)
}

// companionsIn finds the companions of the record at loc, whose ID is id,
// in f, its segment of size bytes.
func companionsIn(f io.ReaderAt, size int64, loc warc.Location, id string) ([]warc.Location, error) {
	start := loc.Offset + loc.Length
	if start > size {
		return nil, fmt.Errorf("archive: record at %d+%d runs past the end of %s", loc.Offset, loc.Length, loc.Segment)
	}
	rd, err := warc.NewReader(io.NewSectionReader(f, start, size-start))
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	rd.MaxBlock = maxCompanionBlock
	var locs []warc.Location
	for len(locs) < maxCompanions {
		rec, l, err := rd.Next()
		if err != nil || l.Length == 0 || rec.Header.Get("WARC-Concurrent-To") != id {
			break // the end, a record of another capture, or one too large to be a companion
		}
		locs = append(locs, warc.Location{Segment: loc.Segment, Offset: start + l.Offset, Length: l.Length})
	}
	return locs, nil
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

// Member returns the gzip member holding a capture's record, as written,
// after checking that it reads back as the capture's record.
func (l *Local) Member(c index.Capture) ([]byte, error) {
	if c.Length <= 0 || c.Offset < 0 {
		return nil, fmt.Errorf("archive: record of %.200q: no location", c.URLKey)
	}
	f, err := os.Open(filepath.Join(l.dir, filepath.Base(c.Segment)))
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	b := make([]byte, c.Length)
	if _, err := f.ReadAt(b, c.Offset); err != nil {
		return nil, fmt.Errorf("archive: %s at %d: %w", c.Segment, c.Offset, err)
	}
	if _, err := parseMember(b, c); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return b, nil
}
