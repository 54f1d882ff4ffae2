package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// VerifyStats say what a fixity check read.
type VerifyStats struct {
	Captures int64 // records read through
	Bytes    int64 // their blocks' bytes
	Damaged  int64 // records that could not be read back as written
	// Revisits counts the revisits followed to their payloads (Verify
	// with an unresolved function), Unresolved those that lead to none.
	Revisits, Unresolved int64
}

// Verify reads the record of every capture in the index through, as a
// stream (memory stays small whatever the records' sizes), which checks
// each block against its digest, and calls damaged for each that fails:
// bytes changed on disk, a member that does not inflate, a segment cut
// short or gone. Given unresolved, it also follows each revisit read
// whole to the capture holding its payload, as replay does, and calls
// unresolved for each that leads to none here (ErrNoOriginal, or a revisit
// on its chain that cannot be read), with why. A damaged or unresolved
// returning an error stops the check.
func (l *Local) Verify(ctx context.Context, damaged, unresolved func(index.Capture, error) error) (VerifyStats, error) {
	st, _, _, err := l.verifyFrom(ctx, index.Position{}, -1, damaged, unresolved)
	return st, err
}

// VerifyFrom is Verify, without following revisits, from the capture after
// cur, stopping once it has read budget bytes of blocks (no bound if
// negative): a check done a part at a time. It returns where it stopped,
// and whether it reached the end.
func (l *Local) VerifyFrom(ctx context.Context, cur index.Position, budget int64, damaged func(index.Capture, error) error) (VerifyStats, index.Position, bool, error) {
	return l.verifyFrom(ctx, cur, budget, damaged, nil)
}

func (l *Local) verifyFrom(ctx context.Context, cur index.Position, budget int64, damaged, unresolved func(index.Capture, error) error) (VerifyStats, index.Position, bool, error) {
	var st VerifyStats
	end := true
	chains := NewChains()
	err := l.idx.After(ctx, cur, func(c index.Capture) (bool, error) {
		if budget >= 0 && st.Bytes >= budget {
			end = false
			return false, nil
		}
		n, h, err := l.readThrough(c)
		st.Captures++
		st.Bytes += n
		cur = index.Position{URLKey: c.URLKey, Time: c.Time}
		if err != nil {
			st.Damaged++
			if derr := damaged(c, err); derr != nil {
				return false, derr
			}
		} else if unresolved != nil && c.Type == warc.TypeRevisit {
			st.Revisits++
			_, _, err := chains.Resolve(ctx, l, c, h)
			switch {
			case errors.Is(err, ErrNoOriginal) || errors.Is(err, ErrChainRecord):
				st.Unresolved++
				if uerr := unresolved(c, err); uerr != nil {
					return false, uerr
				}
			case err != nil:
				return false, err
			}
		}
		return ctx.Err() == nil, ctx.Err()
	})
	if ctx.Err() != nil {
		end = false
	}
	return st, cur, end, err
}

// readThrough reads c's block to its end and returns its length and the
// record's header.
func (l *Local) readThrough(c index.Capture) (int64, warc.Header, error) {
	b, err := l.OpenBlock(context.Background(), c)
	if err != nil {
		return 0, warc.Header{}, err
	}
	defer b.Close()
	n, err := b.Check()
	if err == nil && b.Header.Get("WARC-Record-ID") != c.RecordID && c.RecordID != "" {
		err = fmt.Errorf("archive: %s at %d holds record %.100s, not %s", c.Segment, c.Offset, b.Header.Get("WARC-Record-ID"), c.RecordID)
	}
	return n, b.Header, err
}
