package archive

import (
	"errors"
	"fmt"
	"io"

	"github.com/waggle-archive/waggle/internal/warc"
)

// scan returns a warc.MemberReader of l's pool, or a new one.
func (l *Local) scan() *warc.MemberReader {
	if m, ok := l.scans.Get().(*warc.MemberReader); ok {
		return m
	}
	return &warc.MemberReader{}
}

// companionsIn finds the companions of the record at loc, whose ID is id,
// in f, its segment of size bytes: the members right after it whose
// records are its request and metadata records (warc.IsCompanion), up to
// the metadata record, which the crawler and Heritrix write last. A
// companion too large to pass between nodes (maxCompanionBlock) is an
// error, not left out unsaid.
func (l *Local) companionsIn(f io.ReaderAt, size int64, loc warc.Location, id string) ([]warc.Location, error) {
	pos := loc.Offset + loc.Length
	if pos > size {
		return nil, fmt.Errorf("archive: record at %d+%d runs past the end of %s", loc.Offset, loc.Length, loc.Segment)
	}
	m := l.scan()
	defer l.scans.Put(m)
	var locs []warc.Location
	for len(locs) < maxCompanions && pos < size {
		h, err := m.Open(f, pos, size-pos)
		if err != nil || !warc.IsCompanion(&h, id) {
			break // the end, damage, or a record of another capture
		}
		n, err := m.Finish(maxCompanionBlock)
		if errors.Is(err, warc.ErrBlockTooLarge) {
			return locs, fmt.Errorf("archive: the %s record of %s at %d in %s is larger than %d bytes", h.Get("WARC-Type"), id, pos, loc.Segment, maxCompanionBlock)
		}
		if err != nil {
			break // damaged: what came before it stands
		}
		locs = append(locs, warc.Location{Segment: loc.Segment, Offset: pos, Length: n})
		pos += n
		if h.Get("WARC-Type") == warc.TypeMetadata {
			break
		}
	}
	return locs, nil
}

// warcinfoIn returns where the warcinfo record starting f, a segment of
// size bytes, lies; a zero Location when the segment starts otherwise.
func (l *Local) warcinfoIn(f io.ReaderAt, size int64, seg string) (warc.Location, error) {
	m := l.scan()
	defer l.scans.Put(m)
	h, err := m.Open(f, 0, size)
	if err != nil || h.Get("WARC-Type") != warc.TypeWarcinfo {
		return warc.Location{}, nil // damage, or another record first: no warcinfo to give
	}
	n, err := m.Finish(maxCompanionBlock)
	if err != nil {
		return warc.Location{}, nil
	}
	return warc.Location{Segment: seg, Offset: 0, Length: n}, nil
}
