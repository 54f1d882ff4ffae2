package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// drainState is a node leaving its network for good (waggle node leave).
type drainState struct {
	on     atomic.Bool
	mu     sync.Mutex
	others *ring.Ring // the ring without this node
	stop   context.CancelFunc
}

// ownerWhileDraining is the owner of site once this node is gone.
func (n *Node) ownerWhileDraining(site string) string {
	n.drain.mu.Lock()
	r := n.drain.others
	n.drain.mu.Unlock()
	if o, ok := r.Owner(site); ok {
		return o.ID
	}
	return ""
}

// drainBatch bounds the captures handed over per commit.
const drainBatch = 1000

// Leave hands this node's part of the network over and stops it: every
// capture it holds is pushed to the nodes that hold its site once this
// node is gone (those that do not hold it already), and Leave waits until
// they have acknowledged every one; then the node leaves the membership,
// hands the URLs in its frontier and outbox to their new owners, and
// stops. It returns when the hand-over is complete, or ctx's error.
func (n *Node) Leave(ctx context.Context) error {
	if n.members == nil {
		return errors.New("node: a single node has no network to leave")
	}
	var others []ring.Member
	for _, m := range n.members.Ring().Members() {
		if m.ID != n.ID() {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return errors.New("node: this is the last node of the network: leaving would lose the archive")
	}
	rg, err := ring.New(others, ring.Options{})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	before := n.members.Ring()
	n.log.Info("node: leaving the network: handing captures over", "members_after", len(others))

	// 1. Copies to the new holders, in the crawler's commit order.
	var batch []index.Capture
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := n.crawl.Update(ctx, func(b *pebble.Batch) error {
			for _, c := range batch {
				if err := n.handOver(b, before, rg, c); err != nil {
					return err
				}
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	err = n.local.Index().Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		batch = append(batch, c)
		if len(batch) == drainBatch {
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("node: handing captures over: %w", err)
	}
	for n.push.Under() > 0 {
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("node: waiting for the new holders to acknowledge %d captures: %w", n.push.Under(), err)
		}
	}

	// 2. Out of the membership; from now on every URL here belongs to
	// another node, and the crawler hands each over as it leases it.
	n.drain.mu.Lock()
	n.drain.others = rg
	n.drain.mu.Unlock()
	n.drain.on.Store(true)
	if err := n.members.Leave(10 * time.Second); err != nil {
		n.log.Warn("node: leaving the membership", "err", err)
	}
	// 3. Wait until the frontier and the outbox are empty.
	for {
		_, busy := n.Progress()
		if !busy {
			break
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("node: handing URLs over: %w", err)
		}
	}
	n.log.Info("node: left the network; stopping")
	n.drain.mu.Lock()
	stop := n.drain.stop
	n.drain.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

// handOver stages the copy of c to the nodes that hold its site once this
// node is gone and do not hold it now.
func (n *Node) handOver(b *pebble.Batch, now, after *ring.Ring, c index.Capture) error {
	site := urlkey.SiteOfKey(c.URLKey)
	current := now.Replicas(site, n.cfg.Replicas)
	var to []string
	for _, m := range after.Replicas(site, n.cfg.Replicas) {
		if !slices.ContainsFunc(current, func(x ring.Member) bool { return x.ID == m.ID }) {
			to = append(to, m.ID)
		}
	}
	if len(to) == 0 {
		return nil
	}
	return n.push.Add(b, to, replicate.Entry{Capture: c, Records: []warc.Location{{Segment: c.Segment, Offset: c.Offset, Length: c.Length}}})
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
