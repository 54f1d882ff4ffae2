package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of ClientConfig.
const (
	DefaultWindow   = 2 * time.Millisecond
	DefaultMaxBatch = 256
	DefaultMaxQueue = 100_000
	DefaultTimeout  = 10 * time.Second
)

// maxInFlight is the most lookup requests a Client has in flight to one
// owner. The digests that arrive while they are all out wait for the next
// one, so that batches grow with the load instead of requests.
const maxInFlight = 4

// maxWaiting is the most lookup batches waiting for a request slot to one
// owner, the one still taking digests included. A lookup that would need
// one more fails at once (errBusy): an owner that far behind would answer
// it too late anyway, and a miss only costs a stored duplicate.
const maxWaiting = 2 * maxInFlight

// errBusy is the error of a lookup refused because its owner has
// maxWaiting batches waiting already.
var errBusy = errors.New("dedup: owner too far behind")

// Back-off from an owner that could not be reached, or answered lookups
// too late: the first retry after minBackoff, doubling up to maxBackoff.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// ErrNoOwner is the error of a Lookup while the ring names no owner for
// the digest (the node is not in a network yet).
var ErrNoOwner = errors.New("dedup: no owner for the digest")

// ErrRefused is what ClientConfig.Send's error wraps when the node answered
// that the request is not one it takes (400, 413): sending it again cannot
// succeed, so the registrations in it are dropped rather than retried, and
// the node is not backed off from.
var ErrRefused = errors.New("dedup: request refused")

// ClientConfig configures a Client. Self, Owner, Local and Send are
// required.
type ClientConfig struct {
	// Self is this node's ID, as Owner names nodes.
	Self string
	// Owner returns the node that owns a digest on the current ring, or
	// ok false when there is none. It is called for every lookup and for
	// every queued registration each time it is sent, so it must be cheap
	// and safe for concurrent use.
	Owner func(digest string) (nodeID string, ok bool)
	// Local is this node's registry, which answers for the digests it owns.
	Local *Registry
	// Send POSTs body to path on node nodeID (through the node's
	// peer.Client) and returns the body of its answer. Any answer but 200
	// must be an error, wrapping ErrRefused for 400 and 413, as must a
	// failure to reach the node; the answer may be limited to
	// MaxBodyBytes. It must be safe for concurrent use.
	Send func(ctx context.Context, nodeID, path string, body []byte) ([]byte, error)

	// Window is how long a lookup waits for others to the same owner to
	// share its request (DefaultWindow if 0).
	Window time.Duration
	// MaxBatch is the most digests in one lookup request
	// (DefaultMaxBatch if 0, at most MaxEntries).
	MaxBatch int
	// MaxQueue is the most Refs waiting to be registered
	// (DefaultMaxQueue if 0); beyond it the oldest are dropped. While
	// Run is sending a queue, up to MaxQueue more may wait behind it.
	MaxQueue int
	// Timeout limits each request (DefaultTimeout if 0). A lookup request
	// ends sooner, once all its callers have given up.
	Timeout time.Duration
	// Logger receives warnings about unreachable owners and dropped
	// registrations (nothing if nil).
	Logger *slog.Logger
}

// Stats counts what a Client has done since it was made.
type Stats struct {
	Lookups    uint64 // Lookup calls
	Hits       uint64 // lookups that found the payload archived
	Requests   uint64 // lookup requests sent to other nodes
	Registered uint64 // Refs taken by their owner's registry (new or not)
	Queued     int    // Refs waiting to be registered now, those being sent included
	Dropped    uint64 // Refs never registered: over MaxQueue, or not valid
	Errors     uint64 // requests and local registrations that failed
	HandedOver uint64 // registry entries moved to their owners by HandOver
}

// A Client asks the owners of digests whether their payloads are archived,
// and registers new captures with them. It is safe for concurrent use.
type Client struct {
	cfg ClientConfig
	log *slog.Logger

	// Back-off bounds, variables for tests.
	minBackoff, maxBackoff time.Duration

	wake        chan struct{} // a registration was queued
	running     atomic.Bool
	handingOver sync.Mutex // HandOver runs one at a time

	lookups, hits, requests, registered, dropped, errs, handedOver atomic.Uint64

	mu       sync.Mutex
	owners   map[string]*ownerLookups // lookups waiting for or in flight to a node
	backoff  map[string]*backoff      // nodes that could not be reached
	queue    []registration           // oldest first
	inFlight int                      // registrations taken from queue by a flush
}

// ownerLookups is the lookup traffic to one owner.
type ownerLookups struct {
	open     *lookupBatch   // taking digests; nil if none
	full     []*lookupBatch // at MaxBatch, waiting for a request slot
	inFlight int
}

// A lookupBatch is the digests of one lookup request and its answer.
type lookupBatch struct {
	digests []string
	waiters map[string]int // callers waiting, per digest of the batch
	waiting int            // callers waiting, all digests
	late    bool           // a caller gave up because its deadline passed
	timer   *time.Timer
	due     bool               // the window has passed: send when a slot is free
	cancel  context.CancelFunc // ends the request, once sent

	done  chan struct{} // closed once found or err is set
	found map[string]Ref
	err   error
}

type backoff struct {
	delay time.Duration
	until time.Time
	slow  bool // the last failure: a lookup answered after its callers gave up
}

// NewClient returns a client configured by cfg. It panics if Owner, Local
// or Send is nil.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Owner == nil || cfg.Local == nil || cfg.Send == nil {
		panic("dedup: NewClient needs Owner, Local and Send")
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	cfg.MaxBatch = min(cfg.MaxBatch, MaxEntries)
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{
		cfg:        cfg,
		log:        log,
		minBackoff: minBackoff,
		maxBackoff: maxBackoff,
		wake:       make(chan struct{}, 1),
		owners:     make(map[string]*ownerLookups),
		backoff:    make(map[string]*backoff),
	}
}

// Lookup reports where the payload with this digest is archived in the
// network, if anywhere, by asking the digest's current owner (its own
// Registry if that is this node). It returns an error when the owner
// cannot be asked: there is none (ErrNoOwner), it could not be reached
// recently, or answered too late, and is being backed off from, it has
// too many lookups waiting already, the request failed, or ctx ended
// first. The caller then stores the payload.
//
// A request is shared by the lookups for one owner that arrive within
// Window. It does not ask about the digests whose callers have all given
// up, and is not sent, or is cancelled, once all its callers have: an
// answer nobody waits for would only keep the owner busy. An owner that
// answers only after all of a request's callers gave up at their deadline
// is too slow to save them anything, and is backed off from as one that
// cannot be reached. While an owner has maxWaiting batches waiting for a
// request, lookups that would need another fail at once.
func (c *Client) Lookup(ctx context.Context, digest string) (Ref, bool, error) {
	if err := checkDigest(digest); err != nil {
		c.lookups.Add(1)
		return Ref{}, false, err
	}
	if err := context.Cause(ctx); err != nil {
		c.lookups.Add(1)
		return Ref{}, false, fmt.Errorf("dedup: lookup of %s: %w", digest, err)
	}
	owner, ok := c.cfg.Owner(digest)
	if !ok {
		c.lookups.Add(1)
		return Ref{}, false, ErrNoOwner
	}
	if owner == c.cfg.Self {
		c.lookups.Add(1)
		found, err := c.cfg.Local.Lookup([]string{digest})
		if err != nil || len(found) == 0 {
			return Ref{}, false, err
		}
		c.hits.Add(1)
		return found[0], true, nil
	}
	b, err := c.enqueue(owner, digest)
	if err != nil {
		return Ref{}, false, err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		c.leave(owner, b, digest, context.Cause(ctx))
		return Ref{}, false, fmt.Errorf("dedup: lookup of %s: %w", digest, context.Cause(ctx))
	}
	if b.err != nil {
		return Ref{}, false, b.err
	}
	ref, ok := b.found[digest]
	if ok {
		c.hits.Add(1)
	}
	return ref, ok, nil
}

// enqueue adds digest to the open batch for owner and returns the batch.
func (c *Client) enqueue(owner, digest string) (*lookupBatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Counted under the lock, so that once Stats shows a lookup its digest
	// is in a batch.
	c.lookups.Add(1)
	if bo := c.backoff[owner]; bo != nil && time.Now().Before(bo.until) {
		return nil, fmt.Errorf("dedup: owner %s of %s unreachable, next try in %v",
			owner, digest, time.Until(bo.until).Round(time.Millisecond))
	}
	st := c.owners[owner]
	if st == nil {
		st = &ownerLookups{}
		c.owners[owner] = st
	}
	b := st.open
	if b == nil {
		if len(st.full) >= maxWaiting {
			return nil, fmt.Errorf("%w: %d lookup requests to %s wait to be sent; not asking about %s",
				errBusy, len(st.full), owner, digest)
		}
		b = &lookupBatch{waiters: make(map[string]int), done: make(chan struct{})}
		b.timer = time.AfterFunc(c.cfg.Window, func() { c.windowPassed(owner, b) })
		st.open = b
	}
	if _, ok := b.waiters[digest]; !ok {
		b.digests = append(b.digests, digest)
	}
	b.waiters[digest]++
	b.waiting++
	if len(b.digests) >= c.cfg.MaxBatch {
		b.timer.Stop()
		st.open = nil
		st.full = append(st.full, b)
	}
	c.dispatch(owner, st)
	return b, nil
}

// windowPassed marks b due, if it is still taking digests.
func (c *Client) windowPassed(owner string, b *lookupBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.owners[owner]; st != nil && st.open == b {
		b.due = true
		c.dispatch(owner, st)
	}
}

// dispatch sends owner's ready batches while it has request slots free,
// without the digests whose callers have all given up, and fails them at
// once while owner is backed off from. c.mu is held.
func (c *Client) dispatch(owner string, st *ownerLookups) {
	defer func() {
		if st.inFlight == 0 && st.open == nil && len(st.full) == 0 {
			delete(c.owners, owner)
		}
	}()
	for st.inFlight < maxInFlight {
		var b *lookupBatch
		switch {
		case len(st.full) > 0:
			b = st.full[0]
			st.full = st.full[1:]
		case st.open != nil && st.open.due:
			b = st.open
			st.open = nil
		default:
			return
		}
		if until, ok := c.backoffUntil(owner, time.Now()); ok {
			b.err = fmt.Errorf("dedup: owner %s of %d digests backed off from, next try in %v",
				owner, len(b.digests), time.Until(until).Round(time.Millisecond))
			close(b.done)
			continue
		}
		b.digests = slices.DeleteFunc(b.digests, func(d string) bool {
			if b.waiters[d] > 0 {
				return false
			}
			delete(b.waiters, d)
			return true
		})
		if len(b.digests) == 0 {
			abandon(b)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		b.cancel = cancel
		st.inFlight++
		go c.send(ctx, owner, b)
	}
}

// abandon ends b, whose callers have all given up, unsent.
func abandon(b *lookupBatch) {
	b.err = errors.New("dedup: lookup abandoned by its callers")
	close(b.done)
}

// leave records that a caller waiting in b for digest's answer gave up
// with err, and drops b, or cancels its request, if it was the last.
func (c *Client) leave(owner string, b *lookupBatch, digest string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.waiters[digest]--
	b.waiting--
	if errors.Is(err, context.DeadlineExceeded) {
		b.late = true
	}
	if b.waiting > 0 {
		return
	}
	if b.cancel != nil {
		b.cancel()
		return
	}
	if st := c.owners[owner]; st != nil {
		if i := slices.Index(st.full, b); i >= 0 {
			st.full = slices.Delete(st.full, i, i+1)
			abandon(b)
			c.dispatch(owner, st)
		}
	}
}

// send asks owner about b's digests and hands the answer to its waiters.
// ctx is the request's, which b.cancel ends.
func (c *Client) send(ctx context.Context, owner string, b *lookupBatch) {
	c.requests.Add(1)
	body, err := c.cfg.Send(ctx, owner, lookupPath, encodeLookup(b.digests))
	ended := ctx.Err() != nil // cancelled, or Timeout passed
	b.cancel()
	var found []Ref
	if err == nil {
		found, err = decodeRefs(body, kindFound)
	}

	c.mu.Lock()
	gone, late := b.waiting == 0, b.late
	if err == nil && !gone {
		b.found = make(map[string]Ref, len(found))
		for _, ref := range found {
			if _, ok := b.waiters[ref.Digest]; ok { // an answer about anything else is ignored
				b.found[ref.Digest] = ref
			}
		}
	}
	c.mu.Unlock()
	switch {
	case err != nil && (!ended || !gone):
		c.errs.Add(1)
		c.failed(owner, err, false)
		b.err = fmt.Errorf("dedup: asking %s about %d digests: %w", owner, len(b.digests), err)
	case gone:
		b.err = fmt.Errorf("dedup: %s did not answer about %d digests before their callers gave up", owner, len(b.digests))
		if late {
			c.errs.Add(1)
			c.failed(owner, b.err, true)
		}
	default:
		c.reached(owner, true)
	}
	close(b.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.owners[owner]
	st.inFlight--
	c.dispatch(owner, st)
}

// failed starts or extends the back-off from owner; slow says that owner
// answered a lookup, but only after its callers gave up at their deadline.
func (c *Client) failed(owner string, err error, slow bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bo := c.backoff[owner]
	if bo == nil {
		bo = &backoff{}
		c.backoff[owner] = bo
		if slow {
			c.log.Warn("dedup: owner answers lookups too late, backing off", "node", owner, "err", err)
		} else {
			c.log.Warn("dedup: owner unreachable, backing off", "node", owner, "err", err)
		}
	}
	bo.slow = slow
	now := time.Now()
	if now.Before(bo.until) {
		return // another request failed first; one failure is one step
	}
	bo.delay = min(max(2*bo.delay, c.minBackoff), c.maxBackoff)
	bo.until = now.Add(bo.delay)
}

// reached ends any back-off from owner, which answered a lookup in time
// (lookup), or took registrations. Registrations taken do not end a
// back-off from an owner too slow for lookups: they are not waited for,
// and ending it would restart every back-off at minBackoff.
func (c *Client) reached(owner string, lookup bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bo := c.backoff[owner]; bo != nil && (lookup || !bo.slow) {
		delete(c.backoff, owner)
		c.log.Info("dedup: owner reachable again", "node", owner)
	}
}

// Register queues refs, the response records of captures this node has
// just committed, to be registered with their owners by Run. It does not
// block. Refs that are not valid are dropped and logged; beyond MaxQueue
// the oldest queued Refs are dropped. Both are counted in Stats.Dropped,
// and cost only a later duplicate: the queue is not durable, since a lost
// registration never loses data.
func (c *Client) Register(refs []Ref) {
	c.enqueueRegistrations(plain(refs))
}

// Replace queues fresh, a capture this node has just committed, to take
// the place of the registry entry that names the record stale: a capture
// that Lookup returned but that is no longer archived (lost with its disk,
// or never made), whose payload this node therefore stored again. Without
// it the owner would keep the stale entry for good, first-wins, and every
// later copy of the payload would be stored too. The owner replaces the
// entry only if it still names stale, so that of the nodes that stored
// the payload again, one is registered. It is queued and sent as Register's
// registrations are.
func (c *Client) Replace(fresh Ref, stale string) {
	c.enqueueRegistrations([]registration{{Ref: fresh, replaces: stale}})
}

func (c *Client) enqueueRegistrations(regs []registration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, reg := range regs {
		if err := reg.check(); err != nil {
			c.dropped.Add(1)
			c.log.Warn("dedup: not registering an invalid ref", "url", reg.URL, "err", err)
			continue
		}
		c.queue = append(c.queue, reg)
	}
	c.trim()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// trim drops the oldest queued Refs beyond MaxQueue. Those a flush is
// sending are not counted: they are older than any in the queue, and are
// trimmed with it once they are back. c.mu is held.
func (c *Client) trim() {
	over := len(c.queue) - c.cfg.MaxQueue
	if over <= 0 {
		return
	}
	clear(c.queue[:over])
	c.queue = c.queue[over:]
	c.dropped.Add(uint64(over))
	c.log.Warn("dedup: registration queue full, dropped the oldest", "dropped", over)
}

// Run sends queued registrations to the owners of their digests until ctx
// is done, then returns nil; the registrations still queued are not sent.
// A batch an owner did not take stays queued, and the owner is backed off
// from (for one second, doubling up to a minute); queued registrations
// whose digest has no owner are tried again every second. While some are
// waiting, new registrations are sent at most once a second. Lookups do
// not need Run.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("dedup: Run called twice")
	}
	defer c.running.Store(false)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := c.flush(ctx)
		if ctx.Err() != nil {
			return nil
		}
		timer.Stop()
		var retry <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			retry = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-retry:
			continue
		}
		if next.IsZero() {
			continue
		}
		// Refs are waiting for an owner: a flush goes over all of them,
		// so new registrations wake it at most once per minBackoff.
		gap := time.NewTimer(c.minBackoff)
		select {
		case <-ctx.Done():
			gap.Stop()
			return nil
		case <-gap.C:
		}
	}
}

// flush sends the queued registrations to their owners, and returns when
// to try again those it could not send (zero if it sent all).
func (c *Client) flush(ctx context.Context) (next time.Time) {
	c.mu.Lock()
	regs := c.queue
	c.queue = nil
	c.inFlight = len(regs)
	c.mu.Unlock()
	if len(regs) == 0 {
		return time.Time{}
	}

	// Group by owner, and keep (by index, to restore the queue's order)
	// what cannot be sent now.
	var kept []int
	groups := make(map[string][]int)
	now := time.Now()
	c.mu.Lock()
	for i, reg := range regs {
		owner, ok := c.cfg.Owner(reg.Digest)
		if !ok {
			kept = append(kept, i)
			next = earliest(next, now.Add(c.minBackoff))
			continue
		}
		if until, ok := c.backoffUntil(owner, now); ok {
			kept = append(kept, i)
			next = earliest(next, until)
			continue
		}
		groups[owner] = append(groups[owner], i)
	}
	c.mu.Unlock()

	var (
		wg     sync.WaitGroup
		keptMu sync.Mutex
	)
	for owner, idx := range groups {
		wg.Go(func() {
			unsent, refused := c.registerWith(ctx, owner, regs, idx)
			c.registered.Add(uint64(len(idx) - len(unsent) - len(refused)))
			c.dropped.Add(uint64(len(refused)))
			if len(unsent) == 0 {
				return
			}
			keptMu.Lock()
			defer keptMu.Unlock()
			kept = append(kept, unsent...)
			c.mu.Lock()
			if bo := c.backoff[owner]; bo != nil {
				next = earliest(next, bo.until)
			} else {
				next = earliest(next, time.Now().Add(c.minBackoff))
			}
			c.mu.Unlock()
		})
	}
	wg.Wait()

	slices.Sort(kept)
	back := make([]registration, 0, len(kept))
	for _, i := range kept {
		back = append(back, regs[i])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight = 0
	c.queue = append(back, c.queue...)
	c.trim()
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// registerWith registers regs[i] for each i of idx with owner, in batches,
// and returns the indexes of those it could not send now, and of those the
// owner refused (ErrRefused), which sending again would not change.
func (c *Client) registerWith(ctx context.Context, owner string, regs []registration, idx []int) (unsent, refused []int) {
	for len(idx) > 0 {
		// A batch: as many as fit in MaxEntries and MaxBodyBytes, all
		// replacements or none.
		n, size := 0, emptySize
		replacing := regs[idx[0]].replaces != ""
		for n < len(idx) && n < MaxEntries && (regs[idx[n]].replaces != "") == replacing &&
			size+registrationSize(regs[idx[n]]) <= MaxBodyBytes {
			size += registrationSize(regs[idx[n]])
			n++
		}
		batch := make([]registration, n)
		for j, i := range idx[:n] {
			batch[j] = regs[i]
		}
		var err error
		if owner == c.cfg.Self {
			_, err = c.cfg.Local.register(batch)
		} else {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
			var body []byte
			body, err = c.cfg.Send(rctx, owner, registerPath, encodeRegistrations(batch))
			cancel()
			if err == nil {
				_, err = decodeAdded(body)
			}
		}
		switch {
		case errors.Is(err, ErrRefused):
			c.errs.Add(1)
			c.log.Warn("dedup: owner refused registrations", "node", owner, "refs", n, "err", err)
			refused = append(refused, idx[:n]...)
		case err != nil:
			if ctx.Err() == nil {
				c.errs.Add(1)
				c.failed(owner, err, false)
			}
			return idx, refused
		default:
			c.reached(owner, false)
		}
		idx = idx[n:]
	}
	return nil, refused
}

// handOverBatch bounds the registry entries HandOver reads at a time.
const handOverBatch = 4096

// HandOver moves the entries of this node's registry whose digests owner
// gives to another node to that node, as Apoidea's peers hand over their
// keys when the ring changes: a node that joins learns the payloads
// archived before it came, and one that leaves passes on what it knew.
// Each entry is registered with its owner as it was registered here
// (first-wins, or as the replacement of a missing capture's entry) and
// removed here once the owner has it durable, unless it changed meanwhile
// (a replacement arrived: the next call sends it). Entries the owner
// refuses (ErrRefused) are deleted, at the cost of a later duplicate, and
// so are unreadable ones. Entries whose owner cannot be reached, or is
// being backed off from, stay for a later call; HandOver then returns an
// error saying how many. It returns how many entries their owners took.
// Calls run one at a time.
func (c *Client) HandOver(ctx context.Context, owner func(digest string) (nodeID string, ok bool)) (moved int, err error) {
	c.handingOver.Lock()
	defer c.handingOver.Unlock()
	elsewhere := func(d string) (string, bool) {
		o, ok := owner(d)
		return o, ok && o != c.cfg.Self
	}
	stay, bad := 0, 0
	for after := ""; ; {
		regs, stored, corrupt, last, err := c.cfg.Local.foreign(after, handOverBatch, func(d string) bool {
			_, ok := elsewhere(d)
			return ok
		})
		if err != nil {
			return moved, err
		}
		bad += len(corrupt)
		if _, err := c.cfg.Local.remove(corrupt); err != nil {
			return moved, err
		}
		groups := make(map[string][]int)
		for i, reg := range regs {
			if o, ok := elsewhere(reg.Digest); ok {
				groups[o] = append(groups[o], i)
			}
		}
		for o, idx := range groups {
			if c.backedOff(o) {
				stay += len(idx)
				continue
			}
			unsent, refused := c.registerWith(ctx, o, regs, idx)
			kept := make(map[int]bool, len(unsent))
			for _, i := range unsent {
				kept[i] = true
			}
			done := make([]entry, 0, len(idx)-len(kept))
			for _, i := range idx {
				if !kept[i] {
					done = append(done, stored[i])
				}
			}
			if _, err := c.cfg.Local.remove(done); err != nil {
				return moved, err
			}
			taken := len(done) - len(refused)
			moved += taken
			c.handedOver.Add(uint64(taken))
			c.dropped.Add(uint64(len(refused)))
			stay += len(unsent)
		}
		if ctx.Err() != nil {
			return moved, ctx.Err()
		}
		if last == "" {
			break
		}
		after = last
	}
	if bad > 0 {
		c.log.Warn("dedup: deleted unreadable registry entries of digests other nodes own", "entries", bad)
	}
	if stay > 0 {
		return moved, fmt.Errorf("dedup: %d registry entries stay here for now: their owners could not be reached", stay)
	}
	return moved, nil
}

// backedOff reports whether requests to owner wait for its back-off.
func (c *Client) backedOff(owner string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.backoffUntil(owner, time.Now())
	return ok
}

// backoffUntil returns when the back-off from owner ends, if it has not
// ended by now. c.mu is held.
func (c *Client) backoffUntil(owner string, now time.Time) (time.Time, bool) {
	if bo := c.backoff[owner]; bo != nil && now.Before(bo.until) {
		return bo.until, true
	}
	return time.Time{}, false
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	queued := len(c.queue) + c.inFlight
	c.mu.Unlock()
	return Stats{
		Lookups:    c.lookups.Load(),
		Hits:       c.hits.Load(),
		Requests:   c.requests.Load(),
		Registered: c.registered.Load(),
		Queued:     queued,
		Dropped:    c.dropped.Load(),
		Errors:     c.errs.Load(),
		HandedOver: c.handedOver.Load(),
	}
}
