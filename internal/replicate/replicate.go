// Package replicate copies each capture a node archives to the capture's
// other replicas: the owner sends the capture's WARC records, each the
// gzip member it wrote, byte for byte, with the capture's index entry, and
// the replica keeps them as they are, so every copy of a record is the same
// bytes with the same digests.
//
// Like package outbox, each peer has a queue on disk in the node's pebble
// database, which the crawler fills atomically with its own commits; a
// sender per peer drains its queue oldest first, in batches posted over
// the authenticated peer channel (POST /v1/replicate), and deletes a batch
// only once the peer acknowledged it, which the peer does only once the
// copies are durable. A peer that is down or slow loses nothing: its queue
// waits, retried with exponential back-off, and Retarget moves queued
// copies to the peers that should hold them when membership changes.
// Delivery is at least once; receivers skip records they already hold.
//
// The sender reads the members from the node's WARC segments as they are
// (the receiver checks every one); only when a receiver refuses a batch as
// malformed does the sender check them itself. An entry whose records are
// missing, or corrupt on disk, cannot ever be sent, and is logged, counted
// (Stats.Dropped) and dropped rather than left to block its queue.
//
// Keys, all under "p/":
//
//	p/q/<peer ID> 0x00 <seq u64 BE> → an entry queued for a peer (see appendValue)
package replicate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Path is the path batches are posted to.
const Path = "/v1/replicate"

// DefaultBatchBytes is the default of Config.BatchBytes.
const DefaultBatchBytes = 8 << 20

const (
	queuePrefix = "p/q/"
	minBackoff  = 250 * time.Millisecond
	maxBackoff  = 30 * time.Second
	// sendTimeout bounds one batch, so that a stalled peer cannot hold
	// its queue forever; it allows a batch of MaxBodyBytes at about
	// 250 KB/s, and a larger one gets longer at that rate.
	sendTimeout = 5 * time.Minute
	minSendRate = MaxBodyBytes / (5 * 60) // bytes per second
	// versionRetry is how long a peer that refused a batch of version 2
	// gets version 1 before it is tried again.
	versionRetry = 10 * time.Minute
)

// Config configures a Queue.
type Config struct {
	DB      *pebble.DB // the node's database; the queue keeps its keys under "p/"
	Client  *peer.Client
	WARCDir string // the directory of the segments that Entry.Records name
	// Resolve gives the current peer address (host:port) of a member;
	// ok is false when the member is not live now.
	Resolve func(peerID string) (addr string, ok bool)
	Logger  *slog.Logger // nil: log nothing
	// BatchBytes is the size of the members a batch carries, at least one
	// entry's whatever its size (default DefaultBatchBytes, at most
	// MaxBodyBytes/2).
	BatchBytes int
}

// Stats are a Queue's counters since Open.
type Stats struct {
	Entries  int64 // entries acknowledged by peers (one per capture and peer)
	Records  int64 // records in them
	Bytes    int64 // bytes of gzip members in them
	Batches  int64 // batches acknowledged
	Failures int64 // batches that failed (and were kept for a retry)
	// Dropped counts entries given up: their records missing or corrupt
	// in the local segments, or refused by a peer as too large.
	Dropped int64
	Invalid int64 // entries Add refused to queue (see Add)
}

// A Queue queues copies of captures for peers and sends them. Its methods
// are safe for concurrent use, but Add, Retarget and Committed follow the
// crawler's commit discipline, as in package outbox: stage into one batch
// at a time, commit it, then call Committed.
type Queue struct {
	cfg  Config
	log  *slog.Logger
	seed maphash.Seed

	mu    sync.Mutex
	peers map[string]*peerState
	seq   uint64 // last sequence number given out
	// under counts the committed copies queued per capture (by the hash
	// of its captureID); a capture leaves it at zero.
	under       map[uint64]int
	stagedUnder map[uint64]int
	// stagedDel holds the keys Retarget deleted since the last
	// Committed, so that a sender acknowledging one of them meanwhile
	// does not count it gone twice.
	stagedDel map[string]struct{}
	// abandoned holds the captures (as under) a copy of which was not
	// queued (Add refused it), was dropped unsent, or was taken back by
	// Retarget when no other node was live to hold it: some replica may
	// lack them for good. At most maxAbandoned are remembered.
	abandoned map[uint64]struct{}
	wake      chan struct{} // Committed → Run
	running   bool
	// large is held by the sender of a batch over MaxBodyBytes, which is
	// in memory whole: one at a time, whatever the number of peers.
	large chan struct{}

	backoff0, backoffMax time.Duration // fields so that tests can shorten them

	entries, records, bytes, batches, failures, dropped, invalid atomic.Int64
}

// peerState is what the queue knows of one peer's queue.
type peerState struct {
	id      string
	pending int // committed entries on disk
	// cursor is the lowest sequence number that may still be queued: the
	// sender starts reading there, so as not to wade through the
	// tombstones of the batches it has sent.
	cursor uint64
	staged int    // change to pending staged since the last Committed
	minSeq uint64 // lowest sequence number staged since then (0: none)
	// limit is the batch size in member bytes, lowered when the peer
	// refuses a batch as too large.
	limit int
	// v1Until is when to try batches of version 2 again with a peer that
	// refused one.
	v1Until time.Time
	sender  bool          // a sender goroutine runs for this peer
	poke    chan struct{} // wakes that goroutine
}

// Open opens the queue kept in cfg.DB and resumes the queues found there.
func Open(cfg Config) (*Queue, error) {
	if cfg.DB == nil || cfg.Client == nil || cfg.Resolve == nil || cfg.WARCDir == "" {
		return nil, errors.New("replicate: Config needs DB, Client, WARCDir and Resolve")
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	cfg.BatchBytes = min(cfg.BatchBytes, MaxBodyBytes/2)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &Queue{
		cfg: cfg, log: log, seed: maphash.MakeSeed(),
		peers: map[string]*peerState{}, under: map[uint64]int{},
		stagedUnder: map[uint64]int{}, stagedDel: map[string]struct{}{}, abandoned: map[uint64]struct{}{},
		wake: make(chan struct{}, 1), large: make(chan struct{}, 1),
		backoff0: minBackoff, backoffMax: maxBackoff,
	}
	it, err := cfg.DB.NewIter(&pebble.IterOptions{LowerBound: []byte(queuePrefix), UpperBound: prefixEnd(queuePrefix)})
	if err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		id, seq, ok := parseKey(it.Key())
		if !ok {
			return nil, fmt.Errorf("replicate: malformed key %q", it.Key())
		}
		e, _, err := parseValue(it.Value())
		if err != nil {
			return nil, fmt.Errorf("replicate: queued entry at key %q: %w", it.Key(), err)
		}
		p := q.peer(id)
		if p.pending == 0 {
			p.cursor = seq
		}
		p.pending++
		q.under[q.hash(&e)]++
		q.seq = max(q.seq, seq)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	return q, nil
}

func (q *Queue) hash(e *Entry) uint64 { return maphash.String(q.seed, captureID(&e.Capture)) }

// peer returns the state of peer id, creating it. q.mu is held.
func (q *Queue) peer(id string) *peerState {
	p := q.peers[id]
	if p == nil {
		p = &peerState{id: id, limit: q.cfg.BatchBytes, poke: make(chan struct{}, 1)}
		q.peers[id] = p
	}
	return p
}

// Add stages into b, which the caller commits and then reports with
// Committed, a copy of e for each of peers, the capture's replicas other
// than this node. An entry that cannot be replicated — a capture the
// index could not hold, no records, a record that has no gzip member of
// its own (an imported WARC may share one among several records), or
// records too large for a batch — is logged and counted in Stats.Invalid,
// not queued; a bad peer ID is an error.
func (q *Queue) Add(b *pebble.Batch, peers []string, e Entry) error {
	targets, err := peerSet(peers)
	if err != nil || len(targets) == 0 {
		return err
	}
	if why := checkEntry(&e); why != "" {
		q.mu.Lock()
		q.abandon(q.hash(&e))
		q.mu.Unlock()
		q.invalid.Add(1)
		q.log.Warn("replicate: not replicating a capture", "url", truncate(e.Capture.URL), "record", e.Capture.RecordID, "reason", why)
		return nil
	}
	v := appendValue(nil, &e, targets)
	h := q.hash(&e)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range targets {
		if err := q.stage(b, q.peer(id), v, h); err != nil {
			return err
		}
	}
	return nil
}

// stage stages value v, of the capture hashed h, for p. q.mu is held.
func (q *Queue) stage(b *pebble.Batch, p *peerState, v []byte, h uint64) error {
	q.seq++
	if err := b.Set(queueKey(p.id, q.seq), v, nil); err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	p.staged++
	if p.minSeq == 0 {
		p.minSeq = q.seq
	}
	q.stagedUnder[h]++
	return nil
}

// Committed tells the queue that the batches given to Add and Retarget
// have been committed, so their entries can be sent.
func (q *Queue) Committed() {
	q.mu.Lock()
	for h, d := range q.stagedUnder {
		if n := q.under[h] + d; n > 0 {
			q.under[h] = n
		} else {
			delete(q.under, h)
		}
	}
	clear(q.stagedUnder)
	clear(q.stagedDel)
	for _, p := range q.peers {
		if p.staged == 0 && p.minSeq == 0 {
			continue
		}
		p.pending = max(0, p.pending+p.staged)
		if p.minSeq != 0 && p.minSeq < p.cursor {
			p.cursor = p.minSeq
		}
		p.staged, p.minSeq = 0, 0
		select {
		case p.poke <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// group is what Retarget gathers of one capture's queued copies.
type group struct {
	entry   Entry
	hash    uint64
	targets []string            // union of its entries' targets
	queued  map[string][][]byte // peer → keys of its copies
	values  map[string][]string // key → targets in its value
}

// Retarget stages into b, which must be indexed, the move of queued
// entries to the peers that should hold them now. For each capture with a
// copy queued, replicas(site) gives the current replica peers of its site
// (urlkey.SiteOfKey of its URL key) other than this node: a copy queued for
// a peer not among them is removed, and one is queued for each of them
// that has none queued and has not acknowledged one. Call it when
// membership changes; the caller commits b and then calls Committed.
// replicas is called with the queue locked and must not call the Queue.
func (q *Queue) Retarget(b *pebble.Batch, replicas func(site string) []string) error {
	if !b.Indexed() {
		return errors.New("replicate: Retarget needs an indexed batch")
	}
	// The lock is held throughout, so that no sender deletes an
	// acknowledged entry between the reading of the queue and the staging
	// of its changes: each deletion is then counted exactly once.
	q.mu.Lock()
	defer q.mu.Unlock()
	groups := map[string]*group{}
	var order []*group
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: []byte(queuePrefix), UpperBound: prefixEnd(queuePrefix)})
	if err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		id, _, ok := parseKey(it.Key())
		if !ok {
			it.Close()
			return fmt.Errorf("replicate: malformed key %q", it.Key())
		}
		e, targets, err := parseValue(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("replicate: queued entry at key %q: %w", it.Key(), err)
		}
		cid := captureID(&e.Capture)
		g := groups[cid]
		if g == nil {
			g = &group{entry: e, hash: q.hash(&e), queued: map[string][][]byte{}, values: map[string][]string{}}
			groups[cid] = g
			order = append(order, g)
		}
		key := bytes.Clone(it.Key())
		g.queued[id] = append(g.queued[id], key)
		g.values[string(key)] = targets
		g.targets = append(g.targets, targets...)
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	// Ask and check every replica set before staging anything, so that
	// an error leaves b as it was.
	sites := map[string][]string{}
	for _, g := range order {
		site := urlkey.SiteOfKey(g.entry.Capture.URLKey)
		if _, ok := sites[site]; ok {
			continue
		}
		set, err := peerSet(replicas(site))
		if err != nil {
			return err
		}
		sites[site] = set
	}
	removed, added := 0, 0
	for _, g := range order {
		want := sites[urlkey.SiteOfKey(g.entry.Capture.URLKey)]
		have := map[string]bool{} // peers that hold or will hold a copy
		for _, t := range g.targets {
			have[t] = true
		}
		unsent := 0 // peers whose copy is taken back unsent
		for id, keys := range g.queued {
			have[id] = true
			if slices.Contains(want, id) {
				continue
			}
			unsent++
			p := q.peer(id)
			for _, k := range keys {
				if err := b.Delete(k, nil); err != nil {
					return fmt.Errorf("replicate: %w", err)
				}
				p.staged--
				q.stagedUnder[g.hash]--
				q.stagedDel[string(k)] = struct{}{}
				delete(g.values, string(k))
				removed++
			}
			delete(have, id) // it never got the copy
		}
		var fresh []string
		for _, id := range want {
			if !have[id] {
				fresh = append(fresh, id)
				have[id] = true
			}
		}
		if unsent > 0 && len(want) == 0 {
			// No other node is live to hold the copies taken back: the
			// capture is on this disk alone until anti-entropy finds it.
			q.abandon(g.hash)
		}
		targets := make([]string, 0, len(have))
		for id := range have {
			targets = append(targets, id)
		}
		slices.Sort(targets)
		if len(targets) > maxTargets {
			// Peers that acknowledged long ago give way to the current replicas.
			targets = slices.DeleteFunc(targets, func(id string) bool { return !slices.Contains(want, id) })
		}
		v := appendValue(nil, &g.entry, targets)
		for k, old := range g.values {
			if !slices.Equal(old, targets) {
				if err := b.Set([]byte(k), v, nil); err != nil {
					return fmt.Errorf("replicate: %w", err)
				}
			}
		}
		for _, id := range fresh {
			if err := q.stage(b, q.peer(id), v, g.hash); err != nil {
				return err
			}
			added++
		}
	}
	if removed+added > 0 {
		q.log.Info("replicate: retargeted queued copies", "removed", removed, "added", added)
	}
	return nil
}

// Refers reports whether an entry queued in r (the database, or an
// indexed batch about to commit) names a record in segment: a segment
// being compacted away must wait until such entries are sent.
func (q *Queue) Refers(r pebble.Reader, segment string) (bool, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(queuePrefix), UpperBound: prefixEnd(queuePrefix)})
	if err != nil {
		return false, fmt.Errorf("replicate: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		e, _, err := parseValue(it.Value())
		if err != nil {
			continue // Run drops it; it names nothing that can be sent
		}
		for _, l := range e.Records {
			if l.Segment == segment {
				return true, nil
			}
		}
	}
	return false, it.Error()
}

// Pending returns the number of entries queued per peer.
func (q *Queue) Pending() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := make(map[string]int, len(q.peers))
	for id, p := range q.peers {
		if p.pending > 0 {
			m[id] = p.pending
		}
	}
	return m
}

// Under returns the number of distinct captures with at least one copy
// queued and not yet acknowledged: the under-replicated captures.
func (q *Queue) Under() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.under)
}

// Copies says where the copies of capture c stand.
type Copies int

const (
	// CopiesArrived: every copy queued was acknowledged, or none was due.
	CopiesArrived Copies = iota
	// CopiesQueued: a copy is queued for a peer, not yet acknowledged.
	CopiesQueued
	// CopiesAbandoned: a copy was not queued (Add refused it), was
	// dropped unsent, or was taken back by Retarget when no other node
	// was live to hold it: a replica may lack the capture for good.
	CopiesAbandoned
)

// maxAbandoned bounds the abandoned captures remembered; past it they are
// forgotten, and count as arrived.
const maxAbandoned = 1 << 16

// abandon notes a capture a copy of which was given up. q.mu is held.
func (q *Queue) abandon(h uint64) {
	if len(q.abandoned) >= maxAbandoned {
		clear(q.abandoned)
	}
	q.abandoned[h] = struct{}{}
}

// CopiesOf reports where the copies of c stand.
func (q *Queue) CopiesOf(c index.Capture) Copies {
	h := maphash.String(q.seed, captureID(&c))
	q.mu.Lock()
	defer q.mu.Unlock()
	switch _, lost := q.abandoned[h]; {
	case lost:
		return CopiesAbandoned
	case q.under[h] > 0 || q.stagedUnder[h] > 0:
		return CopiesQueued
	}
	return CopiesArrived
}

// Stats returns the queue's counters.
func (q *Queue) Stats() Stats {
	return Stats{
		Entries: q.entries.Load(), Records: q.records.Load(), Bytes: q.bytes.Load(),
		Batches: q.batches.Load(), Failures: q.failures.Load(),
		Dropped: q.dropped.Load(), Invalid: q.invalid.Load(),
	}
}

// Run sends queued entries until ctx is done, with one sender per peer
// that has any, so that a slow peer delays only its own queue. It returns
// nil once ctx is done and every send in flight has ended.
func (q *Queue) Run(ctx context.Context) error {
	q.mu.Lock()
	if q.running {
		q.mu.Unlock()
		return errors.New("replicate: Run called twice")
	}
	q.running = true
	q.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		q.mu.Lock()
		q.running = false
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		for _, p := range q.peers {
			if p.pending > 0 && !p.sender {
				p.sender = true
				wg.Go(func() { q.send(ctx, p) })
			}
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-q.wake:
		}
	}
}

// send drains p's queue, then returns.
func (q *Queue) send(ctx context.Context, p *peerState) {
	defer func() {
		q.mu.Lock()
		p.sender = false
		q.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		q.mu.Lock()
		if p.pending == 0 {
			// The count can fall short of the disk after a batch was
			// abandoned; look before leaving, so that nothing waits for
			// the peer's next Add.
			cursor := p.cursor
			q.mu.Unlock()
			items, err := q.read(p.id, cursor, 1)
			if err != nil {
				q.log.Error("replicate: reading queue", "peer", p.id, "err", err)
				return
			}
			q.mu.Lock()
			if len(items) == 0 || p.pending > 0 {
				stop := p.pending == 0
				q.mu.Unlock()
				if stop {
					return
				}
				continue
			}
			p.pending = 1 // at least; the count is set right as batches are sent
		}
		pending := p.pending
		q.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		err := q.sendBatch(ctx, p, pending)
		if err == nil {
			backoff = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		q.failures.Add(1)
		backoff = min(max(2*backoff, q.backoff0), q.backoffMax)
		// Jitter, so that nodes that lost the same peer do not retry in step.
		d := backoff/2 + rand.N(backoff/2+1)
		q.log.Warn("replicate: sending failed; keeping the batch", "peer", p.id, "queued", pending, "retry_in", d.Round(time.Millisecond), "err", err)
		// Not woken by new entries: a crawler adds them all the time.
		if !sleep(ctx, d, nil) {
			return
		}
	}
}

// sleep waits d, or until poke, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration, poke <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-poke:
	}
	return true
}

// item is a queued entry read back.
type item struct {
	key   []byte
	seq   uint64
	entry Entry
}

// errTooLargeForPeer is a batch the peer refused as too large.
var errTooLargeForPeer = errors.New("replicate: peer refused the batch as too large")

// errRefusedByPeer is a batch the peer refused as malformed: a record in
// it did not check out there.
var errRefusedByPeer = errors.New("replicate: peer refused the batch")

// sendBatch sends the oldest batch of p's queue; pending is the count
// seen before reading it.
func (q *Queue) sendBatch(ctx context.Context, p *peerState, pending int) error {
	q.mu.Lock()
	cursor, limit := p.cursor, p.limit
	q.mu.Unlock()
	items, err := q.read(p.id, cursor, limit)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		// Every entry counted before the read was committed before it, so
		// none is left: the count was of a batch the caller abandoned.
		q.mu.Lock()
		p.pending = max(0, p.pending-pending)
		q.mu.Unlock()
		return nil
	}
	addr, ok := q.cfg.Resolve(p.id)
	if !ok {
		return errors.New("replicate: peer is not live")
	}
	if len(items) == 1 && entrySize(&items[0].entry) > MaxBodyBytes {
		select {
		case q.large <- struct{}{}:
			defer func() { <-q.large }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The records are read unchecked: the receiver checks every one, and
	// only when it refuses a batch are they checked here, to drop those
	// that went bad on this node's disk (each check decompresses one).
	entries, dropped, err := q.load(p.id, items, false)
	if err != nil {
		return err
	}
	q.dropped.Add(int64(len(dropped)))
	if len(entries) == 0 {
		return q.remove(p, cursor, true, dropped, nil)
	}
	version := magic[3]
	q.mu.Lock()
	if carriesSimHash(entries) && time.Now().After(p.v1Until) {
		version = versionSimHash
	}
	q.mu.Unlock()
	body, size := encodeBatch(entries, version)
	err = q.post(ctx, addr, p.id, body, size)
	if errors.Is(err, errRefusedByPeer) && version == versionSimHash &&
		strings.Contains(err.Error(), "batch version 2 is not supported") {
		// A node that predates version 2 says so, as every version of
		// decodeCopies does: it gets version 1, without the revisits'
		// SimHashes, and is asked again later, once it may be upgraded.
		q.mu.Lock()
		p.v1Until = time.Now().Add(versionRetry)
		q.mu.Unlock()
		q.log.Warn("replicate: peer refused a batch with SimHashes (an older version?); sending without", "peer", p.id, "err", err)
		body, size = encodeBatch(entries, magic[3])
		err = q.post(ctx, addr, p.id, body, size)
	}
	if errors.Is(err, errRefusedByPeer) {
		if _, bad, lerr := q.load(p.id, items, true); lerr == nil && len(bad) > len(dropped) {
			// Some records went bad here: drop them, send the rest.
			q.dropped.Add(int64(len(bad) - len(dropped)))
			return q.remove(p, cursor, false, bad, nil)
		}
	}
	switch {
	case errors.Is(err, errRefusedByPeer) && len(entries) > 1:
		// Nothing wrong here that this node can see: find the entry the
		// peer refuses by sending smaller batches, rather than hold the
		// whole queue back.
		q.mu.Lock()
		p.limit = max(1, size/2)
		q.mu.Unlock()
		q.log.Warn("replicate: peer refused a batch; sending smaller ones to find the entry it refuses", "peer", p.id, "entries", len(entries), "err", err)
		return q.remove(p, cursor, false, dropped, nil)
	case errors.Is(err, errRefusedByPeer):
		// One entry, sound here, that the peer will not take: it would
		// block the queue for good. Dropped; anti-entropy tries again.
		q.dropped.Add(1)
		q.log.Error("replicate: peer refuses a capture that checks out here; dropping its copy", "peer", p.id,
			"url", truncate(entries[0].capture.URL), "record", entries[0].capture.RecordID, "err", err)
		return q.remove(p, cursor, true, append(dropped, sent(items, dropped)...), nil)
	case errors.Is(err, errTooLargeForPeer) && len(entries) > 1:
		q.mu.Lock()
		p.limit = max(1, size/2)
		q.mu.Unlock()
		q.log.Warn("replicate: peer refused a batch as too large; sending smaller ones", "peer", p.id, "bytes", size)
		return q.remove(p, cursor, false, dropped, nil)
	case errors.Is(err, errTooLargeForPeer):
		q.dropped.Add(1)
		q.log.Error("replicate: peer refuses a capture as too large; dropping its copy", "peer", p.id,
			"url", truncate(entries[0].capture.URL), "record", entries[0].capture.RecordID, "bytes", size)
		return q.remove(p, cursor, true, append(dropped, sent(items, dropped)...), nil)
	case err != nil:
		if rerr := q.remove(p, cursor, false, dropped, nil); rerr != nil {
			q.log.Error("replicate: dropping entries", "peer", p.id, "err", rerr)
		}
		return err
	}
	acked := sent(items, dropped)
	if err := q.remove(p, cursor, true, dropped, acked); err != nil {
		return err
	}
	q.mu.Lock()
	p.limit = min(2*p.limit, q.cfg.BatchBytes)
	q.mu.Unlock()
	records, n := 0, 0
	for _, e := range entries {
		records += len(e.members)
		for _, m := range e.members {
			n += len(m)
		}
	}
	q.entries.Add(int64(len(entries)))
	q.records.Add(int64(records))
	q.bytes.Add(int64(n))
	q.batches.Add(1)
	return nil
}

// sent returns the items not in dropped.
func sent(items, dropped []item) []item {
	var out []item
	for _, it := range items {
		if !slices.ContainsFunc(dropped, func(d item) bool { return d.seq == it.seq }) {
			out = append(out, it)
		}
	}
	return out
}

// read returns the oldest batch of peer id's queue from cursor on: the
// entries whose members are about limit bytes in all, at least one.
func (q *Queue) read(id string, cursor uint64, limit int) ([]item, error) {
	prefix := queuePrefix + id + "\x00"
	it, err := q.cfg.DB.NewIter(&pebble.IterOptions{LowerBound: queueKey(id, cursor), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	defer it.Close()
	var items []item
	size := len(magic) + 10
	for it.First(); it.Valid() && size < limit && len(items) < MaxBatchEntries; it.Next() {
		_, seq, ok := parseKey(it.Key())
		if !ok {
			return nil, fmt.Errorf("replicate: malformed key %q", it.Key())
		}
		e, _, err := parseValue(it.Value())
		if err != nil {
			return nil, fmt.Errorf("replicate: queued entry at key %q: %w", it.Key(), err)
		}
		n := entrySize(&e)
		if len(items) > 0 && size+n > MaxBodyBytes {
			break
		}
		size += n
		items = append(items, item{bytes.Clone(it.Key()), seq, e})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	return items, nil
}

// entrySize is the size of e's wire form, about.
func entrySize(e *Entry) int {
	n := 0
	for _, l := range e.Records {
		n += int(l.Length)
	}
	return wireSize(&e.Capture, len(e.Records), n)
}

// errDrop marks a local record that cannot be read or is corrupt: its
// entry can never be sent.
type errDrop struct{ err error }

func (e errDrop) Error() string { return e.err.Error() }

// load reads the members of items from the WARC directory, checking each
// member whole if verify is set (else only that it starts as a gzip
// member does). It returns the entries to send and the items whose
// records are missing or corrupt, which it logs; an error is
// one that may pass (the directory unreadable, an I/O error).
func (q *Queue) load(id string, items []item, verify bool) (entries []wireEntry, dropped []item, err error) {
	root, err := os.OpenRoot(q.cfg.WARCDir)
	if err != nil {
		return nil, nil, fmt.Errorf("replicate: %w", err)
	}
	defer root.Close()
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, it := range items {
		members, err := loadEntry(root, files, &it.entry, verify)
		var drop errDrop
		switch {
		case errors.As(err, &drop):
			q.log.Error("replicate: a capture's local records are missing or corrupt; dropping its copy",
				"peer", id, "url", truncate(it.entry.Capture.URL), "record", it.entry.Capture.RecordID, "err", err)
			dropped = append(dropped, it)
			continue
		case err != nil:
			return nil, nil, err
		}
		c := it.entry.Capture
		c.Segment, c.Offset, c.Length, c.Node = "", 0, 0, ""
		entries = append(entries, wireEntry{capture: c, members: members})
	}
	return entries, dropped, nil
}

// loadEntry reads e's members through root, opening files as needed, and
// checks them as load does.
func loadEntry(root *os.Root, files map[string]*os.File, e *Entry, verify bool) ([][]byte, error) {
	members := make([][]byte, 0, len(e.Records))
	for i, l := range e.Records {
		f := files[l.Segment]
		if f == nil {
			var err error
			f, err = root.Open(l.Segment)
			if err != nil {
				// Missing, or a link out of the directory (os.Root's
				// error for which is not exported).
				if errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "escapes") {
					return nil, errDrop{fmt.Errorf("replicate: %w", err)}
				}
				return nil, fmt.Errorf("replicate: %w", err)
			}
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				f.Close()
				return nil, errDrop{fmt.Errorf("replicate: segment %s is not a regular file", l.Segment)}
			}
			files[l.Segment] = f
		}
		m := make([]byte, l.Length)
		n, err := f.ReadAt(m, l.Offset)
		switch {
		case errors.Is(err, io.EOF):
			return nil, errDrop{fmt.Errorf("replicate: %s is cut off: %d of %d bytes at %d", l.Segment, n, l.Length, l.Offset)}
		case err != nil:
			return nil, fmt.Errorf("replicate: %w", err)
		}
		if len(m) < 2 || m[0] != 0x1f || m[1] != 0x8b {
			return nil, errDrop{fmt.Errorf("replicate: record at %d in %s: not a gzip member", l.Offset, l.Segment)}
		}
		if verify {
			cp := Copy{Member: m}
			if i == 0 {
				cp.Capture = &e.Capture
			}
			if err := verifyCopy(&cp, MaxBlockBytes); err != nil {
				return nil, errDrop{fmt.Errorf("replicate: record at %d in %s: %w", l.Offset, l.Segment, err)}
			}
		}
		members = append(members, m)
	}
	return members, nil
}

// remove deletes from p's queue the dropped and the acknowledged items
// read from cursor on, and counts them gone; all says they are all the
// items read, so that the cursor can pass them. Only items still on disk
// are counted: Retarget may have removed some meanwhile.
func (q *Queue) remove(p *peerState, cursor uint64, all bool, dropped, acked []item) error {
	items := append(slices.Clip(dropped), acked...)
	if len(items) == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.cfg.DB.NewBatch()
	defer b.Close()
	var gone, lost []*item
	for i := range items {
		_, closer, err := q.cfg.DB.Get(items[i].key)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("replicate: %w", err)
		}
		closer.Close()
		if err := b.Delete(items[i].key, nil); err != nil {
			return fmt.Errorf("replicate: %w", err)
		}
		gone = append(gone, &items[i])
		if i < len(dropped) {
			lost = append(lost, &items[i])
		}
	}
	// Without a sync: a deletion lost in a crash only sends an entry
	// again, which receivers skip.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("replicate: deleting sent entries: %w", err)
	}
	for _, it := range lost {
		q.abandon(q.hash(&it.entry))
	}
	for _, it := range gone {
		h := q.hash(&it.entry)
		// An entry can be sent between the commit of its batch and
		// Committed, while still counted as staged: it is taken off there,
		// or Committed would count it queued for good (and Leave, waiting
		// for Under to reach zero, would wait for ever).
		switch {
		case p.pending > 0:
			p.pending--
		case p.staged > 0:
			p.staged--
		}
		switch n := q.under[h]; {
		case n > 1:
			q.under[h] = n - 1
		case n == 1:
			delete(q.under, h)
		case q.stagedUnder[h] > 0:
			if q.stagedUnder[h]--; q.stagedUnder[h] == 0 {
				delete(q.stagedUnder, h)
			}
		}
		if _, ok := q.stagedDel[string(it.key)]; ok {
			// Retarget staged this deletion too: it is done now.
			delete(q.stagedDel, string(it.key))
			p.staged++
			q.stagedUnder[h]++
		}
	}
	if all && p.cursor == cursor {
		last := uint64(0)
		for _, it := range items {
			last = max(last, it.seq)
		}
		p.cursor = last + 1
	}
	// With nothing queued anywhere, nothing is under-replicated: this
	// mends any count that a batch given to Add but never committed left.
	idle := len(q.stagedUnder) == 0
	for _, o := range q.peers {
		idle = idle && o.pending == 0 && o.staged == 0
	}
	if idle {
		clear(q.under)
	}
	return nil
}

// post sends one batch body, in pieces of size bytes in all, and waits
// for its acknowledgement.
func (q *Queue) post(ctx context.Context, addr, id string, body [][]byte, size int) error {
	ctx, cancel := context.WithTimeout(ctx, max(sendTimeout, time.Duration(size/minSendRate)*time.Second))
	defer cancel()
	open := func() io.Reader {
		readers := make([]io.Reader, len(body))
		for i, b := range body {
			readers[i] = bytes.NewReader(b)
		}
		return io.MultiReader(readers...)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, Path, open())
	if err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	// Declared, as the receiver takes a batch over MaxBodyBytes only so;
	// and again on a retry of the transport's.
	req.ContentLength = int64(size)
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	req.Header.Set("Content-Type", ContentType)
	resp, err := q.cfg.Client.Do(ctx, addr, id, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %q", errTooLargeForPeer, strings.TrimSpace(string(msg)))
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w: %q", errRefusedByPeer, strings.TrimSpace(string(msg)))
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("replicate: peer %s answered %s: %q", addr, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
