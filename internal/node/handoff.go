package node

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// handoffPrefix marks the captures of sites this node does not hold that it
// has pushed to their replicas, with the ring (its digest) they were
// pushed under: + the SHA-256 of the record ID.
const handoffPrefix = "k/handoff/"

// pushBatch bounds the captures staged per commit by pushLocal.
const pushBatch = 1000

// pushLocal copies captures of this node's index to other nodes through the
// replication queue, staged in the crawler's commit order a batch at a
// time: targets gives the nodes a capture goes to (none: it stays), and
// mark, if not nil, stages whatever must be recorded with the push in the
// same batch. It returns the number of captures queued. The pushes are
// maintenance: each batch is charged to the repair budget, bytes times
// targets, before it is queued, so that a hand-over moves no faster than
// anti-entropy may (the queue sends what it is given at once).
func (n *Node) pushLocal(ctx context.Context, targets func(index.Capture) []string, mark func(*pebble.Batch, index.Capture) error) (int, error) {
	// The locations read here are queued later: no segment may be
	// compacted away meanwhile (see compact).
	n.pushing.Add(1)
	defer n.pushing.Add(-1)
	type push struct {
		c       index.Capture
		records []warc.Location // the capture's own, then its request and metadata records
		to      []string
	}
	var batch []push
	pushed := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		size := 0
		for _, p := range batch {
			for _, r := range p.records {
				size += int(r.Length) * len(p.to)
			}
		}
		if err := n.budget.Throttle(ctx, size); err != nil {
			return err
		}
		n.pushedOver.Add(int64(size))
		err := n.crawl.Update(ctx, func(b *pebble.Batch) error {
			for _, p := range batch {
				entry := replicate.Entry{Capture: p.c, Records: p.records}
				if err := n.push.Add(b, p.to, entry); err != nil {
					return err
				}
				if mark != nil {
					if err := mark(b, p.c); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			pushed += len(batch)
		}
		batch = batch[:0]
		return err
	}
	err := n.local.Index().Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		if to := targets(c); len(to) > 0 {
			records := []warc.Location{{Segment: c.Segment, Offset: c.Offset, Length: c.Length}}
			// The copies are the owner's record for record; a capture
			// whose companions cannot be read still goes.
			if more, err := n.local.CompanionLocations(c); err == nil {
				records = append(records, more...)
			} else {
				n.log.Debug("node: push: the capture's request and metadata records", "url", c.URL, "err", err)
			}
			batch = append(batch, push{c, records, to})
		}
		if len(batch) == pushBatch {
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	return pushed, err
}

// handOff pushes the captures this node holds of sites it is not a replica
// of — made while it owned a site that has since moved, or on the wrong
// side of a partition — to the site's replicas, which anti-entropy would
// never ask it for (it compares only the sites both ends hold). It runs
// when the ring changes; a capture is pushed once per ring.
func (n *Node) handOff(ctx context.Context) error {
	rg := n.members.Ring()
	if rg.Len() <= 1 {
		return nil // alone: there is nobody to hand over to
	}
	digest := binary.BigEndian.AppendUint64(nil, rg.Digest())
	orphans := int64(0)
	pushed, err := n.pushLocal(ctx, func(c index.Capture) []string {
		site := urlkey.SiteOfKey(c.URLKey)
		if n.holds(n.ID(), site) {
			return nil
		}
		orphans++
		if n.handedOff(c.RecordID, digest) {
			return nil
		}
		return n.otherReplicas(site)
	}, func(b *pebble.Batch, c index.Capture) error {
		return b.Set(handoffKey(c.RecordID), digest, nil)
	})
	n.orphans.Store(orphans)
	if pushed > 0 {
		n.handedOver.Add(int64(pushed))
		n.log.Info("node: handing captures of sites this node no longer holds to their replicas", "captures", pushed)
	}
	return err
}

func handoffKey(recordID string) []byte { return index.RecordKey(handoffPrefix, recordID) }

// handedOff reports whether the capture was pushed under the ring digest.
func (n *Node) handedOff(recordID string, digest []byte) bool {
	v, closer, err := n.db.Get(handoffKey(recordID))
	if err != nil {
		return false
	}
	defer closer.Close()
	return string(v) == string(digest)
}

// handoffRunner runs the hand-overs that follow a ring change, the
// registry's and the captures', one run at a time, again if the ring
// changed meanwhile. (Registry hand-overs also run from the repair loop and
// Leave; dedup.Client.HandOver runs them one at a time.)
type handoffRunner struct {
	pending atomic.Bool
	running atomic.Bool
}

func (n *Node) requestHandOff(ctx context.Context) {
	n.handoff.pending.Store(true)
	if !n.handoff.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.handoff.running.Store(false)
		for n.handoff.pending.Swap(false) {
			// The registry first: it is small and not throttled, while
			// the captures go at the repair budget's pace.
			n.handOverRegistry(ctx, true)
			if err := n.handOff(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("node: handing captures over", "err", err)
			}
		}
	}()
}

// releaseBatch bounds the captures released per commit.
const releaseBatch = 256

// release takes out of this node's index the captures of sites it no
// longer holds, once they were handed over under the current ring and
// every replica of the site has confirmed it holds them: the copy here is
// no longer needed, and no longer served. Their bytes leave the disk when
// compact rewrites their segments. It goes through the index a batch at a
// time for up to half a repair interval, each batch after the last and
// each pass after the last one's, so that captures not confirmed yet do
// not hold back the others.
func (n *Node) release(ctx context.Context) error {
	if n.orphans.Load() == 0 {
		return nil
	}
	rg := n.members.Ring()
	if rg.Len() <= 1 {
		return nil
	}
	digest := binary.BigEndian.AppendUint64(nil, rg.Digest())
	deadline := time.Now().Add(n.cfg.RepairEvery / 2)
	after := &n.releaseAfter
	for ctx.Err() == nil && time.Now().Before(deadline) {
		more, err := n.releaseNext(ctx, digest, after)
		if err != nil {
			return err
		}
		if !more {
			*after = index.Position{} // the next pass starts again from the front
			return nil
		}
	}
	return nil
}

// releaseNext releases what it can of the next releaseBatch candidates
// after *after, and moves *after past them; more is false at the end of
// the index.
func (n *Node) releaseNext(ctx context.Context, digest []byte, after *index.Position) (more bool, err error) {
	var candidates []index.Capture
	err = n.local.Index().After(ctx, *after, func(c index.Capture) (bool, error) {
		*after = index.Position{URLKey: c.URLKey, Time: c.Time}
		if !n.holds(n.ID(), urlkey.SiteOfKey(c.URLKey)) && n.handedOff(c.RecordID, digest) {
			candidates = append(candidates, c)
		}
		return len(candidates) < releaseBatch, nil
	})
	if err != nil || len(candidates) == 0 {
		return false, err
	}
	var confirmed []index.Capture
	var companions [][]warc.Location
	for _, c := range candidates {
		if n.confirmed(ctx, c) {
			confirmed = append(confirmed, c)
			// Without them the capture still goes; its request and
			// metadata records are only not counted as dead bytes.
			more, _ := n.local.CompanionLocations(c)
			companions = append(companions, more)
		}
	}
	if len(confirmed) == 0 {
		return true, nil
	}
	err = n.crawl.Update(ctx, func(b *pebble.Batch) error {
		for i, c := range confirmed {
			if err := crawl.Release(b, c, companions[i]); err != nil {
				return err
			}
			if err := b.Delete(handoffKey(c.RecordID), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	n.released.Add(int64(len(confirmed)))
	n.orphans.Add(-int64(len(confirmed)))
	return true, nil
}

// confirmed reports whether every other replica of c's site holds c.
func (n *Node) confirmed(ctx context.Context, c index.Capture) bool {
	to := n.otherReplicas(urlkey.SiteOfKey(c.URLKey))
	if len(to) < n.cfg.Replicas && len(to) < n.members.Ring().Len() {
		return false
	}
	for _, id := range to {
		found := false
		err := n.net.CapturesOn(ctx, id, c.URLKey, func(o index.Capture) (bool, error) {
			found = o.RecordID == c.RecordID
			return !found, nil
		})
		if err != nil || !found {
			return false
		}
	}
	return len(to) > 0
}

// compact rewrites the segments that are mostly released copies, so that
// a copy this node handed over leaves its disk too; a segment whose
// records are still queued for other nodes waits for a later round.
func (n *Node) compact(ctx context.Context) {
	st, err := n.crawl.Compact(ctx, crawl.CompactOptions{
		MinDead: n.cfg.CompactMinDead,
		InUse: func(r pebble.Reader, segment string) (bool, error) {
			if n.pushing.Load() > 0 {
				return true, nil // a hand-over may be about to queue records of it
			}
			return n.push.Refers(r, segment)
		},
	})
	n.compacted.Add(int64(st.Segments))
	n.reclaimed.Add(st.Reclaimed)
	if st.Segments > 0 {
		n.log.Info("node: compacted segments of released copies", "segments", st.Segments, "records_kept", st.Moved, "bytes_reclaimed", st.Reclaimed)
	}
	if err != nil && ctx.Err() == nil {
		n.log.Warn("node: compacting segments", "err", err)
	}
}
