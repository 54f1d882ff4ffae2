package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waggle-archive/waggle/internal/antientropy"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/membership"
)

// Defaults of the repair settings.
const (
	DefaultRepairEvery = 30 * time.Second
	DefaultRepairRate  = 8 << 20 // bytes per second
	// DefaultCompactMinDead is Config.CompactMinDead's default: a node
	// that a join relieves of a quarter of its sites rewrites its
	// segments, at the cost of writing the other three quarters again.
	DefaultCompactMinDead = 0.25
)

// repairBatch and repairBatchBytes bound the records copied per Store
// call, which are held in memory until then: a batch is stored as soon as
// it reaches either bound (so at most one record beyond them).
const (
	repairBatch      = 64
	repairBatchBytes = 64 << 20
)

// holds reports whether the node id should hold site: it is one of the
// site's replicas on the current ring.
func (n *Node) holds(id, site string) bool {
	for _, m := range n.members.Ring().Replicas(site, n.cfg.Replicas) {
		if m.ID == id {
			return true
		}
	}
	return false
}

// shared is the anti-entropy Source of this node.
type shared struct{ n *Node }

func (s shared) Index() *index.Index { return s.n.local.Index() }

func (s shared) Shared(peerID, site string) bool {
	return s.n.holds(s.n.ID(), site) && s.n.holds(peerID, site)
}

// Version changes with the ring (which sites are shared) and with every
// commit of the crawler (which captures there are).
func (s shared) Version() uint64 {
	return s.n.members.Ring().Digest() ^ s.n.crawl.Commits()*0x9e3779b97f4a7c15
}

// RepairStats are the anti-entropy figures of a node.
type RepairStats struct {
	Rounds      int64   `json:"rounds"`
	EqualRounds int64   `json:"equal_rounds"`
	Bytes       int64   `json:"comparison_bytes"` // of the comparisons
	Copied      int64   `json:"copied"`           // records copied here (captures with their request and metadata records)
	CopiedBytes int64   `json:"copied_bytes"`
	Failures    int64   `json:"failures"`
	RateLimit   int64   `json:"rate_limit"` // bytes per second, comparisons and copies together
	LastRound   float64 `json:"last_round_seconds_ago,omitempty"`
	// What the last completed round with each live member found, summed:
	// captures of their shared sites this node lacked and did not copy,
	// and captures of this node's the member lacked (its own rounds copy
	// them). Both 0, with every member compared, means the copies agree,
	// as of those rounds.
	Lacking   int64 `json:"lacking"`
	PeersLack int64 `json:"peers_lack"`
	// LackingMore: a round found more differences than it lists (its
	// MaxMissing); the counts are lower bounds.
	LackingMore bool `json:"lacking_more,omitempty"`
	// NotCompared counts the live members with no round completed since
	// this node started, or whose last round failed before it compared.
	NotCompared int `json:"peers_not_compared"`
}

// repair runs anti-entropy until ctx is done: every RepairEvery, a round
// with each member this node shares sites with, copying what this node
// lacks — after a crash, a lost segment, a partition, or when it has just
// become a replica of sites (a join, a leave). Each side pulls what it
// lacks, so a pair is repaired both ways by the two nodes' own rounds.
func (n *Node) repair(ctx context.Context) {
	t := time.NewTicker(n.cfg.RepairEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, m := range n.members.Members() {
			if m.ID == n.ID() || ctx.Err() != nil {
				continue
			}
			if err := n.repairWith(ctx, m); err != nil && ctx.Err() == nil {
				n.repairs.failures.Add(1)
				n.log.Warn("node: anti-entropy round failed", "member", m.Name, "err", err)
			}
		}
		if n.registryPassWanted() {
			n.handOverRegistry(ctx, false)
		}
		if err := n.release(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("node: releasing captures handed over", "err", err)
		}
		n.compact(ctx)
		n.scrub(ctx)
		n.repairs.last.Store(time.Now().UnixNano())
	}
}

// repairWith runs one round with m and copies what this node lacks.
func (n *Node) repairWith(ctx context.Context, m membership.Member) error {
	res, err := antientropy.Sync(ctx, antientropy.SyncConfig{
		Index:    n.local.Index(),
		Client:   n.client,
		PeerID:   m.ID,
		PeerAddr: m.PeerAddr,
		Shared:   func(site string) bool { return n.holds(n.ID(), site) && n.holds(m.ID, site) },
		Budget:   n.budget,
	})
	n.repairs.rounds.Add(1)
	n.repairs.bytes.Add(int64(res.Bytes))
	if err != nil {
		n.repairs.forgetDiff(m.ID) // what differs is not known now
		return err
	}
	if res.Equal {
		n.repairs.equal.Add(1)
		n.repairs.noteDiff(m.ID, peerDiff{})
		return nil
	}
	var copies []crawl.Copy
	held := 0       // bytes of copies
	batched := 0    // captures in copies
	copiedCaps := 0 // captures stored (or found here already)
	defer func() {
		n.repairs.noteDiff(m.ID, peerDiff{lacking: len(res.MissingHere) - copiedCaps, peerLacks: res.MissingThere, more: res.Truncated})
	}()
	flush := func() error {
		if len(copies) == 0 {
			return nil
		}
		stored, err := n.crawl.Store(ctx, copies)
		n.repairs.copied.Add(int64(stored))
		if err == nil {
			copiedCaps += batched
		}
		copies, held, batched = nil, 0, 0 // the members held go with the old slice
		return err
	}
	var errs []error
	for _, c := range res.MissingHere {
		member, _, err := n.net.Member(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The capture's request and metadata records come along: a
		// repaired copy is the owner's, record for record. Without them
		// the capture still replays; they are not worth failing it for.
		companions, err := n.net.Companions(ctx, c)
		if err != nil {
			n.log.Debug("node: repair: the capture's request and metadata records", "url", c.URL, "err", err)
		}
		size := len(member)
		for _, m := range companions {
			size += len(m)
		}
		if err := n.budget.Throttle(ctx, size); err != nil {
			return err
		}
		n.repairs.copiedBytes.Add(int64(size))
		c := c
		copies = append(copies, crawl.Copy{Member: member, Capture: &c})
		batched++
		for _, m := range companions {
			copies = append(copies, crawl.Copy{Member: m})
		}
		if held += size; len(copies) >= repairBatch || held >= repairBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

type repairCounters struct {
	rounds, equal, bytes, copied, copiedBytes, failures atomic.Int64
	last                                                atomic.Int64 // unix ns of the last round's end

	mu    sync.Mutex
	diffs map[string]peerDiff // by member ID: what the last completed round with it found
}

// peerDiff is what a completed round with a member found.
type peerDiff struct {
	lacking   int  // captures this node lacked and did not copy
	peerLacks int  // captures of this node's the member lacked
	more      bool // the round listed at most MaxMissing: more differ
}

func (r *repairCounters) forgetDiff(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.diffs, id)
}

func (r *repairCounters) noteDiff(id string, d peerDiff) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.diffs == nil {
		r.diffs = map[string]peerDiff{}
	}
	r.diffs[id] = d
}

func (n *Node) repairStats() RepairStats {
	r := &n.repairs
	st := RepairStats{
		Rounds: r.rounds.Load(), EqualRounds: r.equal.Load(), Bytes: r.bytes.Load(),
		Copied: r.copied.Load(), CopiedBytes: r.copiedBytes.Load(), Failures: r.failures.Load(),
		RateLimit: n.cfg.RepairRate,
	}
	if last := r.last.Load(); last != 0 {
		st.LastRound = time.Since(time.Unix(0, last)).Seconds()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range n.members.Members() {
		if m.ID == n.ID() {
			continue
		}
		d, ok := r.diffs[m.ID]
		if !ok {
			st.NotCompared++
			continue
		}
		st.Lacking += int64(d.lacking)
		st.PeersLack += int64(d.peerLacks)
		st.LackingMore = st.LackingMore || d.more
	}
	return st
}
