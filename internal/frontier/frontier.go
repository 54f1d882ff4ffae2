// Package frontier is the crawl frontier of one node: per-host queues on
// disk in pebble, breadth-first within a host, with politeness (connections
// in flight per host, a delay between requests, Crawl-delay), the URL-seen
// test and trap limits.
//
// Keys, all under "f/":
//
//	f/s/<16-byte hash of the URL's identity>  → ""            exact seen set
//	f/q/<host> 0x00 <depth u16 BE><seq u64 BE> → item          queued URL
//	f/h/<host>                                 → uvarint       URLs ever queued for host (page limit)
//	f/n                                        → u64 BE        next sequence number
//
// Writes are staged into the caller's indexed batch (Add, Done); after the
// caller commits it, Committed makes them visible to Next. Only the queue's
// head of each host is kept in RAM; the rest is read from disk as needed, so
// RAM per URL is the Bloom filter's ~1.2 bytes plus per-host state.
package frontier

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"
	pebblebloom "github.com/cockroachdb/pebble/v2/bloom"

	"github.com/waggle-archive/waggle/internal/urlkey"
)

// ErrEmpty is returned by Next when nothing is queued and nothing is in flight.
var ErrEmpty = errors.New("frontier: empty")

// Options tune the frontier; zero values mean the defaults listed.
type Options struct {
	PerHostConnections int           // requests in flight per host (default 1)
	Delay              time.Duration // between the end of a request and the next start, per host
	MaxDelay           time.Duration // cap on SetHostDelay (default 30s)
	MaxDepth           int           // drop links deeper than this (0: unlimited)
	MaxPagesPerHost    int           // URLs ever queued per host (0: unlimited)
	MaxPathRepeat      int           // drop URLs repeating a path segment more often (default 3)
	MaxURLLength       int           // default 2048
	MaxRedirects       int           // drop URLs reached through more redirects in a row (default 20, as browsers)
	MaxOffScopeHops    int           // drop URLs more hops outside the scope (default 3)
	ExpectedURLs       uint          // Bloom filter sizing (default 10,000,000 at 1% false positives)
	Now                func() time.Time
	// Archive, when set, tells what the node holds that this frontier
	// never queued: captures another node made, copied here.
	Archive Archive
}

// An Archive tells a frontier what its node holds already that it never
// queued itself: the captures of a site another node crawled before this
// one took it over. Its methods read through r, the batch Add stages into.
type Archive interface {
	// Archived says whether it is archived: an item that passes the seen
	// test and is, is marked seen and not queued.
	Archived(r pebble.Reader, it Item) (bool, error)
	// HostArchived counts host's archived URLs, up to limit: they count
	// toward MaxPagesPerHost from the first time this frontier queues the
	// host, as they did at the node that queued them.
	HostArchived(r pebble.Reader, host string, limit int) (int, error)
}

// Item is a URL to crawl.
type Item struct {
	URL   string // canonical absolute URL
	Key   string // identity for the seen test; when empty, the URL without session IDs
	Host  string // politeness key; queues are per host
	Depth int    // hops from a seed
	Via   string // page it was found on
	Embed bool   // a page requisite
	// Redirects counts the redirects in a row that led here: a redirect
	// keeps its source's depth, so depth alone does not end a chain.
	Redirects int
	// OffScopeHops counts the hops since the path that led here left the
	// crawl's scope, 0 inside it (Heritrix's transitive hops): page
	// requisites and redirects are followed off the scope, and without a
	// bound a chain of them across hosts (each redirecting or importing
	// the next) would never end.
	OffScopeHops int
	// Seed marks a seed while it is routed to another node; it is not
	// stored (the crawler keeps its seeds).
	Seed bool
	// Revisit marks a URL queued again, by Requeue, to see whether it
	// changed.
	Revisit bool
}

// Lease is an item handed to a worker by Next.
type Lease struct {
	Item
	Seq uint64
	key []byte // queue key
}

// Stats are the frontier's counters.
type Stats struct {
	Queued   int            // URLs queued (including leased, not yet Done)
	InFlight int            // leases not yet released
	Hosts    int            // hosts known
	Seen     int            // URLs ever queued in this process's view (restored at Open)
	Dropped  map[string]int // URLs not queued, by reason
	// Retried counts the URLs deferred (Defer) that were queued again: by
	// Open, and by RequeueDeferred.
	Retried int
	// Deferred is the URLs deferred and not queued again yet.
	Deferred int
}

// recentSize is the number of slots of the recently-seen cache (8 MiB).
const recentSize = 1 << 20

const headSize = 16 // queue entries per host kept in RAM: enough to keep a host busy between refills

type host struct {
	name     string
	queued   int // committed or published entries not yet Done (incl. leased)
	total    int // ever queued, for the page limit
	inflight int
	readyAt  time.Time
	delay    time.Duration
	head     [][]byte // committed or published queue keys not leased, ascending, ≤ headSize
	headVals [][]byte
	diskMore bool // entries on disk beyond head
	// Every queue entry on disk below cursor is in head or leased, so a
	// refill (which runs when head is empty) starts there: the entries
	// fetched before it are deleted, and an iterator would step over every
	// one of their tombstones again. nil: the start of the host's queue.
	cursor  []byte
	leased  map[string]bool // keys leased and not yet committed Done
	heapIdx int             // -1 when not in the ready heap
	// countedIn is the Add call that last changed total: Add writes each
	// host's count once.
	countedIn uint64
	// archiveCounted: total counts the host's URLs archived already
	// (Options.Archive), once per process.
	archiveCounted bool
}

// Frontier is safe for concurrent use; Add, Requeue, Done, Publish and
// Committed must come from one goroutine at a time (the committer), which
// Publish's safety rests on.
type Frontier struct {
	db    *pebble.DB
	opts  Options
	mu    sync.Mutex
	cond  *sync.Cond
	hosts map[string]*host
	ready readyHeap
	seen  *bloom.BloomFilter
	// recent holds hashes of URLs known to be seen, direct-mapped: most links
	// on a page were seen moments ago (navigation, shared images), and this
	// answers them without the disk lookup the Bloom filter would send them to.
	recent []uint64
	seq    uint64
	adds   uint64 // Add calls so far
	stats  Stats
	timer  *time.Timer
	// staged by Add/Done into the caller's batch, applied by Committed
	stagedAdds  []staged
	stagedDones []Lease
	// stagedDeferred is the change to stats.Deferred staged (Defer,
	// RequeueDeferred).
	stagedDeferred int
}

type staged struct {
	host      string
	key, val  []byte
	published bool // available to Next already (Publish)
}

// Open loads the frontier from db: queue heads, per-host counts and the seen
// Bloom filter. Leases outstanding when the process stopped are queued again.
func Open(db *pebble.DB, opts Options) (*Frontier, error) {
	if opts.PerHostConnections <= 0 {
		opts.PerHostConnections = 1
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = 30 * time.Second
	}
	if opts.MaxPathRepeat <= 0 {
		opts.MaxPathRepeat = 3
	}
	if opts.MaxURLLength <= 0 {
		opts.MaxURLLength = 2048
	}
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = 20
	}
	if opts.MaxOffScopeHops <= 0 {
		opts.MaxOffScopeHops = 3
	}
	if opts.ExpectedURLs == 0 {
		opts.ExpectedURLs = 10_000_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	f := &Frontier{
		db: db, opts: opts, hosts: map[string]*host{},
		seen:   bloom.NewWithEstimates(opts.ExpectedURLs, 0.01),
		recent: make([]uint64, recentSize),
		stats:  Stats{Dropped: map[string]int{}},
	}
	f.cond = sync.NewCond(&f.mu)
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Frontier) load() error {
	if v, closer, err := f.db.Get([]byte("f/n")); err == nil {
		if len(v) == 8 {
			f.seq = binary.BigEndian.Uint64(v)
		}
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("frontier: %w", err)
	}
	err := f.scan("f/s/", func(k, _ []byte) error {
		f.seen.Add(k[len("f/s/"):])
		f.stats.Seen++
		return nil
	})
	if err != nil {
		return err
	}
	err = f.scan("f/h/", func(k, v []byte) error {
		n, _ := binary.Uvarint(v)
		f.host(string(k[len("f/h/"):])).total = int(n)
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.requeueDeferred(); err != nil {
		return err
	}
	err = f.scan("f/q/", func(k, v []byte) error {
		name, _, ok := bytes.Cut(k[len("f/q/"):], []byte{0})
		if !ok {
			return fmt.Errorf("frontier: corrupt queue key %q", k)
		}
		h := f.host(string(name))
		h.queued++
		f.stats.Queued++
		if len(h.head) < headSize {
			h.head = append(h.head, bytes.Clone(k))
			h.headVals = append(h.headVals, bytes.Clone(v))
		} else {
			h.diskMore = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, h := range f.hosts {
		f.consider(h)
	}
	return nil
}

func (f *Frontier) scan(prefix string, fn func(k, v []byte) error) error {
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	b[len(b)-1]++
	return b
}

// seenID is the identity under which a URL is queued once: its key, or
// the URL without the session IDs a trap hands out on every page.
func seenID(key, url string) string {
	if key != "" {
		return key
	}
	return urlkey.WithoutSessionIDs(url)
}

// seenHash is the seen test's hash of an item: of its Key, or its URL
// without session IDs.
func seenHash(it Item) []byte {
	sum := sha256.Sum256([]byte(seenID(it.Key, it.URL)))
	return sum[:16]
}

func (f *Frontier) host(name string) *host {
	h := f.hosts[name]
	if h == nil {
		h = &host{name: name, delay: f.opts.Delay, heapIdx: -1, leased: map[string]bool{}}
		f.hosts[name] = h
	}
	return h
}

// Add stages items into b, an indexed batch the caller commits and then
// reports with Committed. It returns how many were queued; the rest were
// seen before or hit a trap limit.
func (f *Frontier) Add(b *pebble.Batch, items []Item) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	added := 0
	var counted []*host // hosts whose total changed
	f.adds++
	for _, it := range items {
		if reason := f.reject(it); reason != "" {
			f.stats.Dropped[reason]++
			continue
		}
		hash := seenHash(it)
		h64 := binary.LittleEndian.Uint64(hash) | 1 // never 0, the empty slot
		slot := &f.recent[h64&(recentSize-1)]
		if *slot == h64 {
			f.stats.Dropped["seen"]++
			continue
		}
		seenKey := append([]byte("f/s/"), hash...)
		if f.seen.Test(hash) {
			_, closer, err := b.Get(seenKey)
			if err == nil {
				closer.Close()
				*slot = h64
				f.stats.Dropped["seen"]++
				continue
			}
			if !errors.Is(err, pebble.ErrNotFound) {
				return added, fmt.Errorf("frontier: seen test: %w", err)
			}
		}
		*slot = h64
		if f.opts.Archive != nil {
			archived, err := f.opts.Archive.Archived(b, it)
			if err != nil {
				return added, fmt.Errorf("frontier: %w", err)
			}
			if archived {
				if err := b.Set(seenKey, nil, nil); err != nil {
					return added, fmt.Errorf("frontier: %w", err)
				}
				f.seen.Add(hash)
				f.stats.Dropped["archived"]++
				continue
			}
		}
		h := f.host(it.Host)
		if f.opts.MaxPagesPerHost > 0 && f.opts.Archive != nil && !h.archiveCounted {
			n, err := f.opts.Archive.HostArchived(b, it.Host, f.opts.MaxPagesPerHost)
			if err != nil {
				return added, fmt.Errorf("frontier: %w", err)
			}
			h.total = max(h.total, n)
			h.archiveCounted = true
		}
		if f.opts.MaxPagesPerHost > 0 && h.total >= f.opts.MaxPagesPerHost {
			f.stats.Dropped["host-limit"]++
			continue
		}
		f.seq++
		key := queueKey(it.Host, it.Depth, f.seq)
		val := encodeItem(it)
		h.total++
		if err := errors.Join(b.Set(seenKey, nil, nil), b.Set(key, val, nil)); err != nil {
			return added, fmt.Errorf("frontier: %w", err)
		}
		if h.countedIn != f.adds {
			h.countedIn = f.adds
			counted = append(counted, h)
		}
		f.seen.Add(hash)
		f.stats.Seen++
		f.stagedAdds = append(f.stagedAdds, staged{host: it.Host, key: key, val: val})
		added++
	}
	// The counters once per call, not once per URL: each Set is a
	// memtable entry.
	for _, h := range counted {
		if err := b.Set([]byte("f/h/"+h.name), binary.AppendUvarint(nil, uint64(h.total)), nil); err != nil {
			return added, fmt.Errorf("frontier: %w", err)
		}
	}
	if added > 0 {
		if err := f.saveSeq(b); err != nil {
			return added, err
		}
	}
	return added, nil
}

// saveSeq stages the queue sequence number, so that keys stay unique across
// restarts.
func (f *Frontier) saveSeq(b *pebble.Batch) error {
	if err := b.Set([]byte("f/n"), binary.BigEndian.AppendUint64(nil, f.seq), nil); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	return nil
}

// Requeue stages into b items to visit again: URLs queued and fetched
// before, which the seen test and the page limit would refuse.
func (f *Frontier) Requeue(b *pebble.Batch, items []Item) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range items {
		if it.Host == "" {
			f.stats.Dropped["no-host"]++
			continue
		}
		it.Revisit = true
		f.seq++
		key := queueKey(it.Host, it.Depth, f.seq)
		val := encodeItem(it)
		// Seen from now on, if it was not (a URL imported, not crawled
		// here): a link to it in this run is the revisit already queued.
		hash := seenHash(it)
		if err := errors.Join(b.Set(append([]byte("f/s/"), hash...), nil, nil), b.Set(key, val, nil)); err != nil {
			return fmt.Errorf("frontier: %w", err)
		}
		f.seen.Add(hash)
		f.stagedAdds = append(f.stagedAdds, staged{host: it.Host, key: key, val: val})
	}
	if len(items) == 0 {
		return nil
	}
	return f.saveSeq(b)
}

// reject gives the trap rule an item breaks, or "".
func (f *Frontier) reject(it Item) string {
	switch {
	case len(it.URL) > f.opts.MaxURLLength:
		return "length"
	case f.opts.MaxDepth > 0 && it.Depth > f.opts.MaxDepth:
		return "depth"
	case it.Redirects > f.opts.MaxRedirects:
		return "redirects"
	case it.OffScopeHops > f.opts.MaxOffScopeHops:
		return "off-scope-hops"
	case repeatsSegment(it.URL, f.opts.MaxPathRepeat):
		return "repeat"
	case it.Host == "":
		return "no-host"
	}
	return ""
}

// repeatsSegment reports whether a path segment occurs more than max times
// (/a/b/a/b/a/b/a/b… and /x/x/x/x are the shapes of crawler traps).
func repeatsSegment(u string, max int) bool {
	i := strings.Index(u, "://")
	if i < 0 {
		return false
	}
	p := u[i+3:]
	j := strings.IndexByte(p, '/')
	if j < 0 {
		return false
	}
	p = p[j:]
	if q := strings.IndexAny(p, "?#"); q >= 0 {
		p = p[:q]
	}
	if strings.Count(p, "/") <= max {
		return false
	}
	counts := map[string]int{}
	for _, s := range strings.Split(p, "/") {
		if s == "" {
			continue
		}
		if counts[s]++; counts[s] > max {
			return true
		}
	}
	return false
}

// Done stages the removal of a fetched lease's queue entry into b.
func (f *Frontier) Done(b *pebble.Batch, l Lease) error {
	if err := b.Delete(l.key, nil); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	f.mu.Lock()
	f.stagedDones = append(f.stagedDones, l)
	f.mu.Unlock()
	return nil
}

// Defer stages into b that a fetched lease failed for a reason that may
// pass (the network or the server was down): it leaves the queue, as with
// Done, and is kept aside until the frontier is next opened, when it is
// queued again. A run does not retry it at once (the outage would fail it
// again in a loop), and its URL, seen already, is not lost to the archive.
func (f *Frontier) Defer(b *pebble.Batch, l Lease) error {
	if err := b.Set(deferKey(l.key), encodeItem(l.Item), nil); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	f.mu.Lock()
	f.stagedDeferred++
	f.mu.Unlock()
	return f.Done(b, l)
}

// deferKey is where a deferred lease is kept: its queue key under f/d/.
func deferKey(queueKey []byte) []byte {
	return append([]byte("f/d/"), queueKey[len("f/q/"):]...)
}

// Hold stages the setting aside of a lease this crawl's own rules refused
// (a private address, without permission for it) until the frontier is
// next opened: a run given other rules takes it up again, while this
// one's retries (RequeueDeferred) do not, as asking again would give the
// same answer.
func (f *Frontier) Hold(b *pebble.Batch, l Lease) error {
	if err := b.Set(heldKey(l.key), encodeItem(l.Item), nil); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	return f.Done(b, l)
}

// heldKey is where a held lease is kept: its queue key under f/r/.
func heldKey(queueKey []byte) []byte {
	return append([]byte("f/r/"), queueKey[len("f/q/"):]...)
}

// requeueDeferred moves the leases deferred or held by an earlier run
// back into the queue, under the queue keys they had.
func (f *Frontier) requeueDeferred() error {
	b := f.db.NewBatch()
	defer b.Close()
	moved, err := f.moveDeferred(b, "f/d/")
	if err != nil {
		return err
	}
	held, err := f.moveDeferred(b, "f/r/")
	if err != nil || len(moved)+len(held) == 0 {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	return nil // the queue is loaded from disk next
}

// RequeueDeferred stages into b the return to the queue of every lease
// deferred so far, for a frontier that stays open (a node's) to try them
// again now and then, as Open does for a run.
func (f *Frontier) RequeueDeferred(b *pebble.Batch) error {
	moved, err := f.moveDeferred(b, "f/d/")
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.stagedAdds = append(f.stagedAdds, moved...)
	f.stagedDeferred -= len(moved)
	f.mu.Unlock()
	return nil
}

// moveDeferred stages into b the move of every committed lease set aside
// under prefix (deferred, f/d/, or held, f/r/) back under its queue key,
// and returns them as staged queue entries.
func (f *Frontier) moveDeferred(b *pebble.Batch, prefix string) ([]staged, error) {
	var moved []staged
	err := f.scan(prefix, func(k, v []byte) error {
		key := append([]byte("f/q/"), k[len(prefix):]...)
		name, _, ok := bytes.Cut(key[len("f/q/"):], []byte{0})
		if !ok {
			return fmt.Errorf("corrupt deferred key %q", k)
		}
		val := bytes.Clone(v)
		if err := errors.Join(b.Delete(k, nil), b.Set(key, val, nil)); err != nil {
			return err
		}
		moved = append(moved, staged{host: string(name), key: key, val: val})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("frontier: %w", err)
	}
	if prefix == "f/d/" {
		f.mu.Lock()
		f.stats.Retried += len(moved)
		f.mu.Unlock()
	}
	return moved, nil
}

// Forget stages the removal of a lease that is not fetched here, and is
// to be taken again if it comes back: its queue entry, and its mark in
// the seen set. A lease handed to another node (its host now belongs to
// that node) is forgotten so, and one a node's rules refuse, which the
// node given other rules (restarted) takes when it is found again.
func (f *Frontier) Forget(b *pebble.Batch, l Lease) error {
	sum := sha256.Sum256([]byte(seenID(l.Key, l.URL)))
	if err := b.Delete(append([]byte("f/s/"), sum[:16]...), nil); err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	f.mu.Lock()
	slot := &f.recent[(binary.LittleEndian.Uint64(sum[:16])|1)&(recentSize-1)]
	if *slot == binary.LittleEndian.Uint64(sum[:16])|1 {
		*slot = 0
	}
	// Nor does it count against the host's page limit here.
	h := f.host(l.Host)
	if h.total > 0 {
		h.total--
	}
	err := b.Set([]byte("f/h/"+l.Host), binary.AppendUvarint(nil, uint64(h.total)), nil)
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	return f.Done(b, l)
}

// Publish makes URLs staged so far available to Next before their batch is
// durable, so that a link found on a page can be fetched while the page is
// still being written: the committer's fsyncs need not hold up a host whose
// next URL only that page names. It is safe because the committer is
// serial: a lease's result is committed after the batch that queued its
// URL, so a crash before that batch is durable loses the lease along with
// the URL. Only URLs that fit in their host's head without pushing an entry
// out are published (a refill, which reads the disk, could not find one
// pushed out before it is there); the rest wait for Committed.
func (f *Frontier) Publish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.stagedAdds {
		s := &f.stagedAdds[i]
		if !s.published && f.host(s.host).fits(s.key) {
			f.addStaged(*s)
			s.published = true
		}
	}
	f.cond.Broadcast()
}

// fits reports whether key would go into h's head without pushing an entry
// out of it or staying on disk.
func (h *host) fits(key []byte) bool {
	n := len(h.head)
	return n < headSize && (!h.diskMore || n > 0 && bytes.Compare(key, h.head[n-1]) < 0)
}

func (f *Frontier) addStaged(s staged) {
	h := f.host(s.host)
	h.queued++
	f.stats.Queued++
	h.insertHead(s.key, s.val)
	f.consider(h)
}

// Committed tells the frontier that the batch holding its staged Adds and
// Dones is durable: new URLs become available to Next.
func (f *Frontier) Committed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.stagedDones {
		h := f.host(l.Host)
		delete(h.leased, string(l.key))
		h.queued--
		f.stats.Queued--
	}
	for _, s := range f.stagedAdds {
		if !s.published {
			f.addStaged(s)
		}
	}
	f.stagedAdds, f.stagedDones = f.stagedAdds[:0], f.stagedDones[:0]
	f.stats.Deferred += f.stagedDeferred
	f.stagedDeferred = 0
	f.cond.Broadcast()
}

// insertHead puts a committed entry into the RAM head if it belongs there;
// otherwise it stays on disk for a later refill. A refill may already have
// read it from disk (between the caller's commit and Committed): then it is
// in the head or leased, and is not inserted twice.
func (h *host) insertHead(key, val []byte) {
	if h.leased[string(key)] {
		return
	}
	n := len(h.head)
	if h.diskMore && (n == 0 || bytes.Compare(key, h.head[n-1]) > 0) {
		h.onDisk(key)
		return
	}
	i := n
	for i > 0 && bytes.Compare(h.head[i-1], key) > 0 {
		i--
	}
	if i > 0 && bytes.Equal(h.head[i-1], key) {
		return
	}
	if n == headSize {
		if i == n {
			h.diskMore = true
			h.onDisk(key)
			return
		}
		h.onDisk(h.head[n-1])
		h.head, h.headVals = h.head[:n-1], h.headVals[:n-1] // the old tail stays on disk
		h.diskMore = true
	}
	h.head = append(h.head, nil)
	h.headVals = append(h.headVals, nil)
	copy(h.head[i+1:], h.head[i:])
	copy(h.headVals[i+1:], h.headVals[i:])
	h.head[i], h.headVals[i] = key, val
}

// onDisk notes that the entry key is left on disk, not in head.
func (h *host) onDisk(key []byte) {
	if h.cursor != nil && bytes.Compare(key, h.cursor) < 0 {
		h.cursor = key
	}
}

// refill reads the next queue entries of h from disk, from its cursor on,
// skipping leased ones. It runs when h's head is empty.
func (f *Frontier) refill(h *host) error {
	prefix := "f/q/" + h.name + "\x00"
	lower := []byte(prefix)
	if h.cursor != nil {
		lower = h.cursor
	}
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("frontier: %w", err)
	}
	defer it.Close()
	h.head, h.headVals, h.diskMore = h.head[:0], h.headVals[:0], false
	var last []byte
	for it.First(); it.Valid(); it.Next() {
		if h.leased[string(it.Key())] {
			continue
		}
		if len(h.head) == headSize {
			h.diskMore = true
			h.cursor = bytes.Clone(it.Key())
			return it.Error()
		}
		last = bytes.Clone(it.Key())
		h.head = append(h.head, last)
		h.headVals = append(h.headVals, bytes.Clone(it.Value()))
	}
	if last != nil {
		h.cursor = append(last[:len(last):len(last)], 0) // just after the last entry read
	}
	return it.Error()
}

func (h *host) available() bool { return len(h.head) > 0 || h.diskMore }

// consider puts h in the ready heap if it has work and a free connection.
func (f *Frontier) consider(h *host) {
	if h.heapIdx < 0 && h.available() && h.inflight < f.opts.PerHostConnections {
		heap.Push(&f.ready, h)
	}
}

// Next blocks until a host may be fetched and returns its next URL.
func (f *Frontier) Next(ctx context.Context) (Lease, error) {
	// A cancelled ctx wakes the wait below; registered only before a
	// first wait, as most calls find a host ready.
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	wait := func() {
		if stop == nil {
			stop = context.AfterFunc(ctx, func() {
				f.mu.Lock()
				f.cond.Broadcast()
				f.mu.Unlock()
			})
			if ctx.Err() != nil {
				return // the loop sees it; no broadcast may come while f.mu is held
			}
		}
		f.cond.Wait()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return Lease{}, err
		}
		if len(f.ready) == 0 {
			if f.stats.InFlight == 0 {
				return Lease{}, ErrEmpty
			}
			wait()
			continue
		}
		h := f.ready[0]
		now := f.opts.Now()
		if d := h.readyAt.Sub(now); d > 0 {
			f.wakeAt(d)
			wait()
			continue
		}
		heap.Pop(&f.ready)
		if len(h.head) == 0 {
			if err := f.refill(h); err != nil {
				return Lease{}, err
			}
			if len(h.head) == 0 {
				continue
			}
		}
		key, val := h.head[0], h.headVals[0]
		h.head, h.headVals = h.head[1:], h.headVals[1:]
		it, err := decodeItem(val)
		if err != nil {
			return Lease{}, fmt.Errorf("frontier: entry %q: %w", key, err)
		}
		it.Host = h.name
		h.leased[string(key)] = true
		h.inflight++
		f.stats.InFlight++
		f.consider(h)
		return Lease{Item: it, Seq: binary.BigEndian.Uint64(key[len(key)-8:]), key: key}, nil
	}
}

// wakeAt arranges a broadcast after d, for waiters on a host's delay.
func (f *Frontier) wakeAt(d time.Duration) {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer = time.AfterFunc(d, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
}

// Release ends a lease's request: the host's next request may start after its delay.
func (f *Frontier) Release(l Lease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.host(l.Host)
	h.inflight--
	f.stats.InFlight--
	h.readyAt = f.opts.Now().Add(h.delay)
	if h.heapIdx >= 0 {
		heap.Fix(&f.ready, h.heapIdx)
	}
	f.consider(h)
	f.cond.Broadcast()
}

// SetHostDelay sets a host's delay (from robots.txt Crawl-delay), never
// below Options.Delay nor above Options.MaxDelay.
func (f *Frontier) SetHostDelay(name string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.host(name).delay = max(f.opts.Delay, min(d, f.opts.MaxDelay))
}

// HostDelay returns a host's delay between requests.
func (f *Frontier) HostDelay(name string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.host(name).delay
}

// Stats returns the frontier's counters.
func (f *Frontier) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Hosts = len(f.hosts)
	s.Dropped = make(map[string]int, len(f.stats.Dropped))
	for k, v := range f.stats.Dropped {
		s.Dropped[k] = v
	}
	return s
}

// Close stops the frontier's timer; the database belongs to the caller.
func (f *Frontier) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		f.timer.Stop()
	}
	return nil
}

// PebbleOptions are the pebble settings a crawling node opens its database
// with: a modest cache and memtable, so the frontier's RAM per URL stays small.
func PebbleOptions() *pebble.Options {
	o := &pebble.Options{
		Cache:        pebble.NewCache(32 << 20),
		MemTableSize: 16 << 20,
		Logger:       quietLogger{},
	}
	// Most point lookups (seen test, payload digests) are for keys that do
	// not exist: sstable Bloom filters answer those without reading blocks.
	// Deeper levels inherit the policy.
	o.Levels[0].FilterPolicy = pebblebloom.FilterPolicy(10)
	return o
}

// quietLogger drops pebble's informational messages (WAL replay and the
// like), which would interleave with the crawler's progress line; errors are
// still returned to callers, and fatal ones still stop the process.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

func queueKey(host string, depth int, seq uint64) []byte {
	k := make([]byte, 0, 4+len(host)+1+2+8)
	k = append(k, "f/q/"...)
	k = append(k, host...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint16(k, uint16(min(depth, 0xffff)))
	return binary.BigEndian.AppendUint64(k, seq)
}

// Flags of a stored item.
const (
	flagEmbed   = 1 << 0
	flagRevisit = 1 << 1
)

func encodeItem(it Item) []byte {
	b := make([]byte, 0, 8+len(it.URL)+len(it.Via)+len(it.Key))
	b = binary.AppendUvarint(b, uint64(it.Depth))
	flags := byte(0)
	if it.Embed {
		flags |= flagEmbed
	}
	if it.Revisit {
		flags |= flagRevisit
	}
	b = append(b, flags)
	for _, s := range []string{it.URL, it.Via, it.Key} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	// The hop counts come last and only when set, so that an item stored
	// before they existed reads as having none.
	if it.Redirects > 0 || it.OffScopeHops > 0 {
		b = binary.AppendUvarint(b, uint64(min(it.Redirects, maxHops)))
		b = binary.AppendUvarint(b, uint64(min(it.OffScopeHops, maxHops)))
	}
	return b
}

var errCorrupt = errors.New("corrupt item")

func decodeItem(b []byte) (Item, error) {
	var it Item
	d, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return it, errCorrupt
	}
	flags := b[n]
	if flags&^(flagEmbed|flagRevisit) != 0 {
		return it, errCorrupt
	}
	it.Depth, it.Embed, it.Revisit = int(d), flags&flagEmbed != 0, flags&flagRevisit != 0
	b = b[n+1:]
	for _, s := range []*string{&it.URL, &it.Via, &it.Key} {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return it, errCorrupt
		}
		*s = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	if len(b) == 0 {
		return it, nil
	}
	r, n := binary.Uvarint(b)
	o, m := binary.Uvarint(b[max(n, 0):])
	if n <= 0 || m <= 0 || n+m != len(b) || r > maxHops || o > maxHops {
		return it, errCorrupt
	}
	it.Redirects, it.OffScopeHops = int(r), int(o)
	return it, nil
}

// maxHops bounds a stored hop count, far beyond any limit a crawl sets.
const maxHops = 1 << 16

// readyHeap orders hosts by when they may next be fetched.
type readyHeap []*host

func (r readyHeap) Len() int           { return len(r) }
func (r readyHeap) Less(i, j int) bool { return r[i].readyAt.Before(r[j].readyAt) }
func (r readyHeap) Swap(i, j int) {
	r[i], r[j] = r[j], r[i]
	r[i].heapIdx, r[j].heapIdx = i, j
}
func (r *readyHeap) Push(x any) {
	h := x.(*host)
	h.heapIdx = len(*r)
	*r = append(*r, h)
}
func (r *readyHeap) Pop() any {
	old := *r
	h := old[len(old)-1]
	*r = old[:len(old)-1]
	h.heapIdx = -1
	return h
}
