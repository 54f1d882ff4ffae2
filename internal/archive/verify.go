package archive

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/waggle-archive/waggle/internal/index"
)

// VerifyStats say what a fixity check read.
type VerifyStats struct {
	Captures int64 // records read through
	Bytes    int64 // their blocks' bytes
	Damaged  int64 // records that could not be read back as written
}

// Verify reads the record of every capture in the index through, as a
// stream (memory stays small whatever the records' sizes), which checks
// each block against its digest, and calls damaged for each that fails:
// bytes changed on disk, a member that does not inflate, a segment cut
// short or gone. A damaged returning an error stops the check.
func (l *Local) Verify(ctx context.Context, damaged func(index.Capture, error) error) (VerifyStats, error) {
	var st VerifyStats
	err := l.idx.Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		n, err := l.readThrough(c)
		st.Captures++
		st.Bytes += n
		if err != nil {
			st.Damaged++
			if derr := damaged(c, err); derr != nil {
				return false, derr
			}
		}
		return ctx.Err() == nil, ctx.Err()
	})
	return st, err
}

// readThrough reads c's block to its end and returns its length.
func (l *Local) readThrough(c index.Capture) (int64, error) {
	b, err := l.OpenBlock(c)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	n, err := io.Copy(io.Discard, b)
	if err == nil && b.Header.Get("WARC-Record-ID") != c.RecordID && c.RecordID != "" {
		err = fmt.Errorf("archive: %s at %d holds record %.100s, not %s", c.Segment, c.Offset, b.Header.Get("WARC-Record-ID"), c.RecordID)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
