package node

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
)

// DefaultScrubRate is Config.ScrubRate's default: a terabyte is read
// through in about three days.
const DefaultScrubRate = 4 << 20 // bytes per second

// scrubKey holds where the scrub left off, so that a restart goes on
// from there instead of checking the start of the archive again.
const scrubKey = "k/scrub"

// ScrubStats are the figures of a node's scrub: its own records read back
// against their digests, a part each repair round.
type ScrubStats struct {
	Checked int64 `json:"checked"` // captures read back since the node started
	Bytes   int64 `json:"bytes"`
	// Damaged counts the records found damaged; Unrepairable, those of
	// them no other node holds, which only a backup can bring back.
	Damaged      int64 `json:"damaged"`
	Unrepairable int64 `json:"unrepairable"`
	Passes       int64 `json:"passes"` // whole passes over the archive finished
	RateLimit    int64 `json:"rate_limit"`
}

type scrubCounters struct {
	checked, bytes, damaged, unrepairable, passes atomic.Int64
}

func (n *Node) scrubStats() ScrubStats {
	s := &n.scrubs
	return ScrubStats{Checked: s.checked.Load(), Bytes: s.bytes.Load(), Damaged: s.damaged.Load(),
		Unrepairable: s.unrepairable.Load(), Passes: s.passes.Load(), RateLimit: max(n.cfg.ScrubRate, 0)}
}

// scrub reads back the next part of this node's records, as many bytes as
// its rate allows in a repair round: bit rot is found before a reader
// meets it. A damaged capture another node holds leaves the index, and
// repair copies it back (crawl.DropDamaged); one no other node holds is
// logged as an error, for an operator to restore from a backup.
func (n *Node) scrub(ctx context.Context) {
	if n.cfg.ScrubRate < 0 {
		return
	}
	cur := n.scrubCursor()
	budget := int64(float64(n.cfg.ScrubRate) * n.cfg.RepairEvery.Seconds())
	st, next, done, err := n.local.VerifyFrom(ctx, cur, budget, func(c index.Capture, why error) error {
		n.scrubDamaged(ctx, c, why)
		return nil
	})
	n.scrubs.checked.Add(st.Captures)
	n.scrubs.bytes.Add(st.Bytes)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("node: scrub", "err", err)
		}
		return
	}
	if done {
		n.scrubs.passes.Add(1)
		next = index.Position{}
	}
	n.saveScrubCursor(next)
}

// scrubDamaged handles a capture whose record the scrub found damaged.
func (n *Node) scrubDamaged(ctx context.Context, c index.Capture, why error) {
	// A record compaction has just moved is not damaged: its old segment
	// is gone, and the index names its new place.
	if cur, ok, err := index.Lookup(n.db, c.URLKey, c.Time); err != nil || !ok || cur.Segment != c.Segment || cur.Offset != c.Offset {
		return
	}
	n.scrubs.damaged.Add(1)
	good, unknown := false, false
	if n.net != nil {
		good, unknown = n.net.GoodCopyElsewhere(ctx, c)
		// Fewer live nodes than copies kept: a copy may be on one away.
		unknown = unknown || !good && len(n.members.Members()) < n.cfg.Replicas
	}
	switch {
	case good:
		// Dropped only once another copy is known to be intact: a record
		// rotten on every node stays indexed, and reported.
		if err := n.crawl.DropDamaged(ctx, c); err != nil && ctx.Err() == nil {
			n.log.Warn("node: cannot drop a damaged capture for repair", "url", c.URL, "err", err)
		}
		return
	case unknown || ctx.Err() != nil:
		n.log.Warn("a record is damaged, and the nodes that may hold a copy could not all be asked; the next pass looks again",
			"url", c.URL, "timestamp", c.Timestamp14(), "segment", c.Segment, "offset", c.Offset, "err", why)
		return
	}
	n.scrubs.unrepairable.Add(1)
	if err := n.crawl.ForgetDamagedPayload(ctx, c); err != nil && ctx.Err() == nil {
		n.log.Warn("node: cannot have a damaged capture's page fetched whole again", "url", c.URL, "err", err)
	}
	n.log.Error("a record is damaged and no other node holds a good copy: restore its segment from a backup",
		"url", c.URL, "timestamp", c.Timestamp14(), "segment", c.Segment, "offset", c.Offset, "err", why)
}

func (n *Node) scrubCursor() index.Position {
	v, closer, err := n.db.Get([]byte(scrubKey))
	if err != nil {
		return index.Position{}
	}
	defer closer.Close()
	if len(v) < 8 {
		return index.Position{}
	}
	return index.Position{Time: time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC(), URLKey: string(v[8:])}
}

func (n *Node) saveScrubCursor(c index.Position) {
	var v []byte
	if c.URLKey != "" {
		v = binary.BigEndian.AppendUint64(nil, uint64(c.Time.UnixNano()))
		v = append(v, c.URLKey...)
	}
	if err := n.db.Set([]byte(scrubKey), v, pebble.NoSync); err != nil && !errors.Is(err, pebble.ErrClosed) {
		n.log.Warn("node: cannot save where the scrub is", "err", err)
	}
}
