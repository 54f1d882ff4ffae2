package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
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

// Leave hands this node's part of the network over and stops it: every
// capture it holds is pushed to the nodes that hold its site once this
// node is gone (those that do not hold it already), and Leave waits until
// they have acknowledged every one; its content-seen registry goes to the
// digests' next owners; then the node leaves the membership, hands the
// URLs in its frontier and outbox, and those whose visits left no capture,
// to their new owners, and stops. It returns when the hand-over is
// complete, or ctx's error.
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

	// 1. Copies to the new holders: those that will hold a site without
	// this node and do not hold it now.
	_, err = n.pushLocal(ctx, func(c index.Capture) []string {
		site := urlkey.SiteOfKey(c.URLKey)
		current := before.Replicas(site, n.cfg.Replicas)
		var to []string
		for _, m := range rg.Replicas(site, n.cfg.Replicas) {
			if !slices.ContainsFunc(current, func(x ring.Member) bool { return x.ID == m.ID }) {
				to = append(to, m.ID)
			}
		}
		return to
	}, nil)
	if err != nil {
		return fmt.Errorf("node: handing captures over: %w", err)
	}
	for n.push.Under() > 0 {
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("node: waiting for the new holders to acknowledge %d captures: %w", n.push.Under(), err)
		}
	}

	// The content-seen registry to the digests' owners without this node,
	// now and once more before it stops; a failure does not hold the
	// leave up.
	ownerAfter := func(digest string) (string, bool) {
		o, ok := rg.Owner(digest)
		return o.ID, ok
	}
	n.moveRegistry(ctx, ownerAfter)

	// 2. Out of the membership; from now on every URL here belongs to
	// another node, and the crawler hands each over as it leases it.
	members := n.members.Members()
	n.drain.mu.Lock()
	n.drain.others = rg
	n.drain.mu.Unlock()
	n.drain.on.Store(true)
	if err := n.members.Leave(10 * time.Second); err != nil {
		n.log.Warn("node: leaving the membership", "err", err)
	}
	// The URLs whose visits here captured nothing (refused by robots.txt,
	// names that did not resolve) have no copy to take them to the new
	// holders: they go as URLs, with the frontier.
	leftBehind := false
	switch k, err := n.crawl.HandOverUncaptured(ctx); {
	case errors.Is(err, crawl.ErrNotRunning):
		n.log.Warn("node: the crawler has stopped (its page budget spent): leaving without the URLs whose visits left no capture",
			"urls", k)
		leftBehind = k > 0
	case err != nil:
		return fmt.Errorf("node: %w", err)
	case k > 0:
		n.log.Info("node: handing over the URLs whose visits left no capture", "urls", k)
	}
	// 3. Wait until the frontier and the outbox are empty. URLs set aside
	// after a failed fetch (the host or the network was down) go with the
	// rest: queued again, each is handed over as it is leased — those set
	// aside before and those whose fetch, under way, fails meanwhile.
	// A crawler that has stopped (its --max-pages spent) leases nothing
	// more: what its frontier holds stays behind, said so in the log, and
	// only the outbox is waited for.
	warned := false
wait:
	for {
		st := n.crawl.Stats()
		stopped := !n.crawl.Running()
		if stopped && !warned && (st.Queued > 0 || st.Deferred > 0) {
			n.log.Warn("node: the crawler has stopped (its page budget spent): leaving without the URLs it had not fetched",
				"queued", st.Queued, "deferred", st.Deferred)
			warned = true
		}
		outbox := n.out != nil && len(n.out.Pending()) > 0
		switch {
		case outbox:
		case stopped:
			break wait
		case st.Queued > 0:
		case st.Deferred == 0:
			break wait
		default:
			err := n.crawl.RequeueDeferred(ctx)
			if errors.Is(err, crawl.ErrNotRunning) {
				continue // it stopped meanwhile
			}
			if err != nil {
				return fmt.Errorf("node: handing over the URLs whose fetch failed: %w", err)
			}
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("node: handing URLs over: %w", err)
		}
	}
	// Registrations that reached this node while the others still saw it.
	n.moveRegistry(ctx, ownerAfter)
	if !warned && !leftBehind {
		// Nothing stayed behind: the others need not look for it.
		n.announceRetired(ctx, members)
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
