// Package outbox carries the links a node extracts to the nodes that own
// them. A Link is a URL with its crawl context, its depth and whether it
// is a page requisite, so that the owner's frontier applies the crawl's
// depth limit and scope as the sender's would have. Each peer has a queue
// on disk, in the node's pebble database, that the crawler fills
// atomically with its own commits; a sender drains each queue oldest
// first, in compressed batches posted over the authenticated peer channel
// (POST /v1/urls), and deletes a batch only once the peer has acknowledged
// it. A peer that is down or slow loses nothing: its queue waits, retried
// with exponential back-off, and Reroute moves it to new owners when
// membership changes. Delivery is at least once; receivers deduplicate
// through their frontier's seen set.
//
// Keys, all under "o/":
//
//	o/q/<peer ID> 0x00 <seq u64 BE> → uvarint(depth<<2 | seed<<1 | embed) URL
//	                                   a link queued for a peer
package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Path is the path batches are posted to.
const Path = "/v1/urls"

// Defaults of Config.
const (
	DefaultBatchSize     = 500
	DefaultMaxDelay      = 2 * time.Second
	DefaultRecentPerPeer = 100_000
)

const (
	queuePrefix = "o/q/"
	minBackoff  = 250 * time.Millisecond
	maxBackoff  = 30 * time.Second
	sendTimeout = time.Minute // per batch, so a stalled peer cannot hold its queue forever
)

// A Link is a URL sent to the node that owns its host, with what the
// receiver's frontier needs to treat it as the sender would have.
type Link struct {
	URL   string
	Depth int  // link hops from a seed, 0..MaxDepth (a seed is 0)
	Embed bool // a page requisite (image, CSS, script, font), fetched even off-scope
	// Seed marks a URL a user gave as a seed (at depth 0): it widens the
	// receiver's scope, which a link does not.
	Seed bool
	// Redirects and OffScopeHops are the redirects in a row and the hops
	// off the scope that led to the URL (frontier.Item's), 0..MaxHops,
	// which the receiver's frontier bounds: a chain of hosts redirecting
	// to one another spans nodes.
	Redirects, OffScopeHops int
}

// Config configures an Outbox.
type Config struct {
	DB     *pebble.DB // the node's database; the outbox keeps its keys under "o/"
	Client *peer.Client
	// Resolve gives the current peer address (host:port) of a member;
	// ok is false when the member is not live now.
	Resolve func(peerID string) (addr string, ok bool)
	// A peer's batch is sent once it holds BatchSize URLs (default 500,
	// at most MaxBatchURLs), its oldest URL has waited MaxDelay (default
	// 2s: a URL is a few bytes on the wire only in batches of dozens), or
	// Flush was called.
	BatchSize int
	MaxDelay  time.Duration
	// RecentPerPeer is the size of the per-peer cache of recently queued
	// URLs that drops repeats before they are queued (default 100,000).
	RecentPerPeer int
	Logger        *slog.Logger // nil: log nothing
}

// Stats are an Outbox's counters since Open.
type Stats struct {
	URLs     int64 // URLs acknowledged by their peers
	Batches  int64 // batches acknowledged
	Failures int64 // batches that failed (and were kept for a retry)
	Wire     int64 // compressed request bodies of acknowledged batches, in bytes
	Text     int64 // bytes of URL text in acknowledged batches
	Repeats  int64 // URLs dropped by Add as recently queued for the same peer
	Invalid  int64 // URLs dropped by Add as unfit to send (see Handler)
}

// An Outbox queues URLs for peers and sends them. Its methods are safe for
// concurrent use, but Add, Reroute and Committed follow the crawler's
// commit discipline, as in package frontier: stage into one batch at a
// time, commit it, then call Committed.
type Outbox struct {
	cfg  Config
	log  *slog.Logger
	enc  *zstd.Encoder
	seed maphash.Seed

	mu      sync.Mutex
	peers   map[string]*peerState
	seq     uint64        // last sequence number given out
	wake    chan struct{} // Committed → Run
	running bool

	backoff0, backoffMax time.Duration // fields so that tests can shorten them

	urls, batches, failures, wire, text, repeats, invalid atomic.Int64
}

// peerState is what the outbox knows of one peer's queue.
type peerState struct {
	id      string
	pending int       // committed URLs on disk
	since   time.Time // when the queue last became non-empty
	// cursor is the lowest sequence number that may still be queued: the
	// sender starts reading there, so as not to wade through the
	// tombstones of the batches it has sent.
	cursor uint64
	staged int    // change to pending staged since the last Committed
	minSeq uint64 // lowest sequence number staged since then (0: none)
	recent *recentSet
	sender bool          // a sender goroutine runs for this peer
	poke   chan struct{} // wakes that goroutine
	flush  bool          // send without waiting for a full batch, until the queue is empty
	// plainUntil is set when the peer refused a batch with hop counts
	// (version 3; it predates them): until then its batches go without.
	plainUntil time.Time
}

// Open opens the outbox kept in cfg.DB and resumes the queues found there.
func Open(cfg Config) (*Outbox, error) {
	if cfg.DB == nil || cfg.Client == nil || cfg.Resolve == nil {
		return nil, errors.New("outbox: Config needs DB, Client and Resolve")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.BatchSize = min(cfg.BatchSize, MaxBatchURLs)
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.RecentPerPeer <= 0 {
		cfg.RecentPerPeer = DefaultRecentPerPeer
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	o := &Outbox{
		cfg: cfg, log: log, enc: enc, seed: maphash.MakeSeed(),
		peers: map[string]*peerState{}, wake: make(chan struct{}, 1),
		backoff0: minBackoff, backoffMax: maxBackoff,
	}
	it, err := cfg.DB.NewIter(&pebble.IterOptions{LowerBound: []byte(queuePrefix), UpperBound: prefixEnd(queuePrefix)})
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	defer it.Close()
	now := time.Now()
	for it.First(); it.Valid(); it.Next() {
		id, seq, ok := parseKey(it.Key())
		if !ok {
			return nil, fmt.Errorf("outbox: malformed key %q", it.Key())
		}
		l, err := parseValue(it.Value())
		if err != nil {
			return nil, fmt.Errorf("outbox: queued link at key %q: %w", it.Key(), err)
		}
		p := o.peer(id)
		if p.pending == 0 {
			p.cursor, p.since = seq, now
		}
		p.pending++
		p.recent.add(o.linkID(l.URL))
		o.seq = max(o.seq, seq)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return o, nil
}

// linkID is a URL's identity in the recent caches: the one the receiving
// frontier's seen test uses, so that the session-ID variants a trap hands
// out are sent once.
func (o *Outbox) linkID(url string) uint64 {
	return maphash.String(o.seed, urlkey.WithoutSessionIDs(url))
}

// peer returns the state of peer id, creating it. o.mu is held.
func (o *Outbox) peer(id string) *peerState {
	p := o.peers[id]
	if p == nil {
		p = &peerState{id: id, recent: newRecentSet(o.cfg.RecentPerPeer), poke: make(chan struct{}, 1)}
		o.peers[id] = p
	}
	return p
}

func checkPeerID(id string) error {
	if id == "" || len(id) > 255 || strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("outbox: bad peer ID %.80q", id)
	}
	return nil
}

// Add stages links for peerID into b, which the caller commits and then
// reports with Committed. A link whose URL was queued for that peer
// recently (or earlier in links) is dropped, whatever its depth, as is a
// link no peer would accept (see Handler).
func (o *Outbox) Add(b *pebble.Batch, peerID string, links []Link) error {
	if err := checkPeerID(peerID); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.add(b, o.peer(peerID), links)
}

// Forward is Add for links that must reach peerID even if they were
// queued for it recently: URLs a node held and hands over because their
// host now belongs to peerID. Without it, a URL that travelled to a node
// and back while two nodes' views of the network differed would be dropped
// as a repeat, and never fetched.
func (o *Outbox) Forward(b *pebble.Batch, peerID string, links []Link) error {
	if err := checkPeerID(peerID); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.peer(peerID)
	for _, l := range links {
		p.recent.remove(o.linkID(l.URL))
	}
	return o.add(b, p, links)
}

// add is Add with o.mu held.
func (o *Outbox) add(b *pebble.Batch, p *peerState, links []Link) error {
	for _, l := range links {
		if why := validLink(l); why != "" {
			o.invalid.Add(1)
			o.log.Debug("outbox: dropping link", "peer", p.id, "url", truncate(l.URL), "depth", l.Depth, "reason", why)
			continue
		}
		h := o.linkID(l.URL)
		if p.recent.has(h) {
			o.repeats.Add(1)
			continue
		}
		o.seq++
		if err := b.Set(queueKey(p.id, o.seq), appendValue(nil, l), nil); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		p.recent.add(h)
		p.staged++
		if p.minSeq == 0 {
			p.minSeq = o.seq
		}
	}
	return nil
}

// Committed tells the outbox that the batches given to Add and Reroute
// have been committed, so their URLs can be sent.
func (o *Outbox) Committed() {
	o.mu.Lock()
	now := time.Now()
	for _, p := range o.peers {
		if p.staged == 0 && p.minSeq == 0 {
			continue
		}
		if p.pending == 0 && p.staged > 0 {
			p.since = now
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
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Reroute stages into b, which must be indexed, the move of every queued
// link whose URL's owner, as owner now answers, is not the peer it is
// queued for; a link moves whole, with its depth and embed flag. Call it
// when membership changes: a peer gone for good has no link left once
// owner no longer names it. owner may answer "" to leave a link where it
// is. The caller commits b and then calls Committed. A batch being sent
// while Reroute moves it may reach both peers.
func (o *Outbox) Reroute(b *pebble.Batch, owner func(url string) (peerID string)) error {
	if !b.Indexed() {
		return errors.New("outbox: Reroute needs an indexed batch")
	}
	type move struct {
		key  []byte
		link Link
		to   string
	}
	var moves []move
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: []byte(queuePrefix), UpperBound: prefixEnd(queuePrefix)})
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		id, _, ok := parseKey(it.Key())
		if !ok {
			it.Close()
			return fmt.Errorf("outbox: malformed key %q", it.Key())
		}
		l, err := parseValue(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("outbox: queued link at key %q: %w", it.Key(), err)
		}
		to := owner(l.URL)
		if to == "" || to == id {
			continue
		}
		if err := checkPeerID(to); err != nil {
			it.Close()
			return err
		}
		moves = append(moves, move{bytes.Clone(it.Key()), l, to})
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range moves {
		id, _, _ := parseKey(m.key)
		if err := b.Delete(m.key, nil); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		o.peer(id).staged--
		to := o.peer(m.to)
		// A URL moved from a gone peer is new to its owner: the recent
		// cache must not drop it.
		to.recent.remove(o.linkID(m.link.URL))
		if err := o.add(b, to, []Link{m.link}); err != nil {
			return err
		}
	}
	if len(moves) > 0 {
		o.log.Info("outbox: rerouted queued links", "links", len(moves))
	}
	return nil
}

// Pending returns the number of URLs queued per peer.
func (o *Outbox) Pending() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[string]int, len(o.peers))
	for id, p := range o.peers {
		if p.pending > 0 {
			m[id] = p.pending
		}
	}
	return m
}

// Stats returns the outbox's counters.
func (o *Outbox) Stats() Stats {
	return Stats{
		URLs: o.urls.Load(), Batches: o.batches.Load(), Failures: o.failures.Load(),
		Wire: o.wire.Load(), Text: o.text.Load(),
		Repeats: o.repeats.Load(), Invalid: o.invalid.Load(),
	}
}

// Flush has every peer's queued URLs sent now, and those queued until its
// queue is next empty, without waiting for a batch to fill or MaxDelay to
// pass. A crawler calls it when it has nothing left to fetch: then
// batching would only hold up the network's work.
func (o *Outbox) Flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.peers {
		p.flush = true
		select {
		case p.poke <- struct{}{}:
		default:
		}
	}
}

// Run sends queued URLs until ctx is done, with one sender per peer that
// has any, so that a slow peer delays only its own queue. It returns nil
// once ctx is done and every send in flight has ended.
func (o *Outbox) Run(ctx context.Context) error {
	o.mu.Lock()
	if o.running {
		o.mu.Unlock()
		return errors.New("outbox: Run called twice")
	}
	o.running = true
	o.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		o.mu.Lock()
		o.running = false
		o.mu.Unlock()
	}()
	for {
		o.mu.Lock()
		for _, p := range o.peers {
			if p.pending > 0 && !p.sender {
				p.sender = true
				wg.Go(func() { o.send(ctx, p) })
			}
		}
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-o.wake:
		}
	}
}

// send drains p's queue, then returns.
func (o *Outbox) send(ctx context.Context, p *peerState) {
	var backoff time.Duration
	for {
		o.mu.Lock()
		if p.pending == 0 {
			// The count can fall short of the disk, when a batch in
			// flight was also rerouted; look before leaving, so that
			// nothing waits for the peer's next Add.
			cursor := p.cursor
			o.mu.Unlock()
			keys, _, err := o.read(p.id, cursor)
			o.mu.Lock()
			if err == nil && len(keys) > 0 && p.pending == 0 {
				p.pending, p.since = len(keys), time.Time{}
			}
			if p.pending == 0 {
				p.sender = false
				o.mu.Unlock()
				if err != nil {
					o.log.Error("outbox: reading queue", "peer", p.id, "err", err)
				}
				return
			}
		}
		pending, since := p.pending, p.since
		wait := time.Duration(0)
		if pending < o.cfg.BatchSize && !p.flush {
			wait = time.Until(since.Add(o.cfg.MaxDelay))
		}
		o.mu.Unlock()
		if wait > 0 {
			if !sleep(ctx, wait, p.poke) {
				o.stop(p)
				return
			}
			continue // woken by a commit or Flush, or the wait is over: look again
		}
		if ctx.Err() != nil {
			o.stop(p)
			return
		}
		err := o.sendBatch(ctx, p, pending)
		if err == nil {
			backoff = 0
			continue
		}
		if ctx.Err() != nil {
			o.stop(p)
			return
		}
		o.failures.Add(1)
		backoff = min(max(2*backoff, o.backoff0), o.backoffMax)
		// Jitter, so that nodes that lost the same peer do not retry in step.
		d := backoff/2 + rand.N(backoff/2+1)
		o.log.Warn("outbox: sending failed; keeping the batch", "peer", p.id, "queued", pending, "retry_in", d.Round(time.Millisecond), "err", err)
		if !sleep(ctx, d, nil) {
			o.stop(p)
			return
		}
	}
}

func (o *Outbox) stop(p *peerState) {
	o.mu.Lock()
	p.sender = false
	o.mu.Unlock()
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

// sendBatch sends the oldest batch of p's queue; pending is the count
// seen before reading it.
func (o *Outbox) sendBatch(ctx context.Context, p *peerState, pending int) error {
	o.mu.Lock()
	cursor := p.cursor
	o.mu.Unlock()
	keys, links, err := o.read(p.id, cursor)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		// Every URL counted before the read was committed before it, so
		// none is left: the count was of a batch the caller abandoned.
		o.mu.Lock()
		p.pending = max(0, p.pending-pending)
		o.mu.Unlock()
		return nil
	}
	addr, ok := o.cfg.Resolve(p.id)
	if !ok {
		return errors.New("outbox: peer is not live")
	}
	text := 0
	for _, l := range links {
		text += len(l.URL)
	}
	o.mu.Lock()
	plain := time.Now().Before(p.plainUntil)
	o.mu.Unlock()
	if plain {
		links = withoutHops(links)
	}
	payload, sent := encodePayload(nil, links)
	body := o.enc.EncodeAll(payload, nil)
	err = o.post(ctx, addr, p.id, body)
	if errors.Is(err, errVersionRefused) && payload[3] == versionHops {
		// A peer that predates hop counts refuses version 3 (400): it
		// gets the URLs without them, its trap limits counting afresh,
		// rather than none at all. It is asked again after a while, in
		// case it was upgraded.
		o.mu.Lock()
		p.plainUntil = time.Now().Add(plainFor)
		o.mu.Unlock()
		o.log.Warn("outbox: peer refused URLs with hop counts (an older version?); sending them without", "peer", p.id, "err", err)
		payload, sent = encodePayload(nil, withoutHops(sent))
		body = o.enc.EncodeAll(payload, nil)
		err = o.post(ctx, addr, p.id, body)
	}
	if err != nil {
		return err
	}
	db := o.cfg.DB.NewBatch()
	for _, k := range keys {
		db.Delete(k, nil)
	}
	// Without a sync: a deletion lost in a crash only sends the batch
	// again, which receivers deduplicate.
	if err := db.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("outbox: deleting a sent batch: %w", err)
	}
	_, last, _ := parseKey(keys[len(keys)-1])
	o.mu.Lock()
	p.pending = max(0, p.pending-len(keys))
	if p.pending == 0 {
		p.flush = false
	}
	if p.cursor == cursor {
		p.cursor = last + 1
	}
	o.mu.Unlock()
	o.urls.Add(int64(len(sent)))
	o.batches.Add(1)
	o.wire.Add(int64(len(body)))
	o.text.Add(int64(text))
	return nil
}

// read returns the oldest batch of peer id's queue from cursor on.
func (o *Outbox) read(id string, cursor uint64) (keys [][]byte, links []Link, err error) {
	prefix := queuePrefix + id + "\x00"
	it, err := o.cfg.DB.NewIter(&pebble.IterOptions{LowerBound: queueKey(id, cursor), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid() && len(keys) < o.cfg.BatchSize; it.Next() {
		l, err := parseValue(it.Value())
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: queued link at key %q: %w", it.Key(), err)
		}
		keys = append(keys, bytes.Clone(it.Key()))
		links = append(links, l)
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("outbox: %w", err)
	}
	return keys, links, nil
}

// post sends one batch body and waits for its acknowledgement.
func (o *Outbox) post(ctx context.Context, addr, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, Path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Content-Encoding", "zstd")
	resp, err := o.cfg.Client.Do(ctx, addr, id, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusBadRequest && bytes.Contains(msg, []byte("URL batch version")) && bytes.Contains(msg, []byte("is not supported")):
		return fmt.Errorf("%w: peer %s answered %s: %q", errVersionRefused, addr, resp.Status, strings.TrimSpace(string(msg)))
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("outbox: peer %s answered %s: %q", addr, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// errVersionRefused is a batch the peer cannot read for its version: its
// answer (400) names the version as unsupported, as decodePayload's
// error, in every version, does. Another 400 (a batch cut in transit)
// says nothing of what the peer reads.
var errVersionRefused = errors.New("outbox: batch version refused")

// plainFor is how long a peer that refused hop counts gets batches
// without them before it is asked again.
const plainFor = 10 * time.Minute

// withoutHops returns a copy of links with no hop counts.
func withoutHops(links []Link) []Link {
	plain := slices.Clone(links)
	for i := range plain {
		plain[i].Redirects, plain[i].OffScopeHops = 0, 0
	}
	return plain
}

func queueKey(id string, seq uint64) []byte {
	k := make([]byte, 0, len(queuePrefix)+len(id)+1+8)
	k = append(k, queuePrefix...)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// appendValue appends the queue value of l, which must be valid: its
// tag, its URL and, if it has any, a zero byte (which no valid URL
// holds) and its hop counts, so that values queued before the counts
// existed read as having none.
func appendValue(dst []byte, l Link) []byte {
	dst = binary.AppendUvarint(dst, tag(l))
	dst = append(dst, l.URL...)
	if hasHops(l) {
		dst = append(dst, 0)
		dst = binary.AppendUvarint(dst, uint64(l.Redirects))
		dst = binary.AppendUvarint(dst, uint64(l.OffScopeHops))
	}
	return dst
}

// parseValue parses a queue value, checking it as a receiver would.
func parseValue(v []byte) (Link, error) {
	t, n := binary.Uvarint(v)
	if n <= 0 {
		return Link{}, errors.New("malformed depth")
	}
	u, hops, _ := bytes.Cut(v[n:], []byte{0})
	l := Link{URL: string(u)}
	if err := untag(t, &l); err != nil {
		return Link{}, err
	}
	if hops != nil {
		r, n := binary.Uvarint(hops)
		o, m := binary.Uvarint(hops[max(n, 0):])
		if n <= 0 || m <= 0 || n+m != len(hops) || r > MaxHops || o > MaxHops {
			return Link{}, errors.New("malformed hop counts")
		}
		l.Redirects, l.OffScopeHops = int(r), int(o)
	}
	if why := validURL(l.URL); why != "" {
		return Link{}, errors.New(why)
	}
	return l, nil
}

func parseKey(k []byte) (id string, seq uint64, ok bool) {
	rest, ok := bytes.CutPrefix(k, []byte(queuePrefix))
	if !ok || len(rest) < 10 || rest[len(rest)-9] != 0 {
		return "", 0, false
	}
	return string(rest[:len(rest)-9]), binary.BigEndian.Uint64(rest[len(rest)-8:]), true
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
