// Package crawl runs a node's crawl pipeline: frontier → fetch → archive →
// extract → frontier, until the frontier is empty or a limit is hit.
//
// Many workers lease URLs from the frontier, check robots.txt, fetch, and
// extract links (the parallel, CPU- and network-bound part). One committer
// takes their results in groups and makes them durable in a fixed order:
// WARC records are written and fsynced first, then one pebble batch holds the
// capture index entries, the removal of the fetched URLs from the frontier and
// the addition of their outlinks, and is committed with fsync. A capture is
// reported archived only after that commit, so a kill -9 at any moment loses
// nothing that was reported; on the next start the WARC segments are cut back
// to what the index knows (see recover.go) and unfinished URLs are fetched again.
package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/diskfree"
	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/robots"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Crawler is one crawl over a data directory. Open it, Run it, Close it.
type Crawler struct {
	cfg     Config
	db      *pebble.DB
	front   *frontier.Frontier
	fetcher *fetch.Fetcher
	robots  *robots.Cache
	warcDir string
	scope   atomic.Pointer[scope] // replaced whole when seeds are added
	turns   hostTurns             // each host's results reach the committer in lease order
	seedMu  sync.Mutex            // serializes seed additions
	seeds   []string              // every seed of this data directory
	// seedsAfterRevisits are the seeds a re-crawl queues once its revisits
	// are: a seed queued as a revisit is not queued again as new.
	seedsAfterRevisits []frontier.Item
	ownDB              bool         // db was opened by Open, and is closed by Close
	runMu              sync.RWMutex // guards running against Submit and Accept
	running            bool         // results is open for Submit and Accept
	stats              counters
	results            chan result
	budget             atomic.Int64 // captures still allowed by MaxPages (MaxInt64 when unlimited)
	// retryingAt is when a run waiting to retry its deferred URLs
	// (retryDeferred) queues them again, in Unix nanoseconds; 0 when none waits.
	retryingAt atomic.Int64
	pending    atomic.Int64 // leases fetched or being fetched whose results are not committed
	commitMu   sync.Mutex   // guards commitGen changes with commitCond
	commitC    *sync.Cond
	gen        uint64 // commits so far; lets a worker tell "empty" from "not yet committed"

	// digests holds every payload digest of the digest index (and, as a
	// Bloom filter, others by mistake), so that the committer looks a new
	// payload's digest up only when it may be archived already. Only the
	// commit loop touches it once Run has begun.
	digests *bloom.BloomFilter

	// recentPayloads maps the digests of payloads stored or met lately to
	// their first capture, so that the committer's look for a payload
	// archived moments ago (a site's shared images, a trap's identical
	// pages) is a map lookup, not a pebble read. Only the commit loop uses
	// it; it forgets everything at an Update, which may delete digest
	// entries.
	recentPayloads map[string]index.Capture

	compacting sync.Mutex           // held by Compact
	compactMu  sync.Mutex           // guards writing and unlinkAt
	writing    string               // the segment the commit loop writes to
	unlinkAt   map[string]time.Time // compacted segments to delete, and since when they are dropped
}

// Open prepares a crawl: opens (or creates) the data directory, reconciles
// the WARC segments with the index after an unclean stop, and queues the seeds.
func Open(cfg Config) (*Crawler, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	seeds := make([]string, 0, len(cfg.Seeds))
	for _, s := range cfg.Seeds {
		u, err := urlkey.Canonical("", s)
		if err != nil {
			return nil, fmt.Errorf("crawl: seed %q: %w", s, err)
		}
		seeds = append(seeds, u)
	}
	warcDir := filepath.Join(cfg.Data, "warc")
	if err := os.MkdirAll(warcDir, 0o755); err != nil {
		return nil, fmt.Errorf("crawl: %w", err)
	}
	db, ownDB := cfg.DB, false
	if db == nil {
		var err error
		if db, err = OpenDB(cfg.Data); err != nil {
			return nil, err
		}
		ownDB = true
	}
	c := &Crawler{cfg: cfg, db: db, warcDir: warcDir, ownDB: ownDB, recentPayloads: map[string]index.Capture{}}
	c.commitC = sync.NewCond(&c.commitMu)
	if err := c.open(seeds); err != nil {
		if ownDB {
			db.Close()
		}
		return nil, err
	}
	return c, nil
}

// scopeKey holds the scope the data directory was last crawled with.
const scopeKey = "k/scope"

// rescopeKey is set when a data directory crawled before is given another
// scope: the links of its archived pages are followed again under the new
// one (Crawler.rescope), once, and the key deleted.
const rescopeKey = "k/rescope"

// rescopeDoneKey holds the last site whose pages the pass has followed the
// links of, so that an interrupted pass resumes after it.
const rescopeDoneKey = "k/rescope-done"

// settleScope returns the scope to crawl with: the one given, which the
// data directory then keeps, or, if none is, the one it kept — a node
// restarted without --scope keeps the scope its peers send it URLs for.
// A scope given that widens a kept one marks the archive's links to be
// followed again (rescopeKey): an unchanged page's revisit does not
// follow its links, so links the narrower scope left out would otherwise
// never be. (A narrower scope reaches no link the wider one did not.)
func settleScope(db *pebble.DB, given Scope, archived bool) (Scope, error) {
	var kept Scope
	if v, closer, err := db.Get([]byte(scopeKey)); err == nil {
		kept, err = ParseScope(string(v))
		closer.Close()
		if err != nil && given == "" { // a scope given replaces it anyway
			return "", fmt.Errorf("crawl: the scope kept in the data directory: %w", err)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return "", fmt.Errorf("crawl: %w", err)
	}
	switch {
	case given == "" && kept == "":
		return ScopeHost, nil
	case given == "" || given == kept:
		return kept, nil // nothing to write: no sync at every start
	}
	// An archive crawled without a scope given was crawled with host,
	// which was not written down.
	was := kept
	if was == "" && archived {
		was = ScopeHost
	}
	b := db.NewBatch()
	defer b.Close()
	err := b.Set([]byte(scopeKey), []byte(given), nil)
	if err == nil && was != "" && given.widens(was) {
		err = errors.Join(b.Set([]byte(rescopeKey), []byte(was), nil), b.Delete([]byte(rescopeDoneKey), nil))
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		return "", fmt.Errorf("crawl: %w", err)
	}
	return given, nil
}

// revisitKey holds the re-crawl rules (Config.Schedules, as given to
// --revisit, one per line) the data directory was last crawled with.
const revisitKey = "k/revisit"

// settleSchedules returns the re-crawl rules to crawl with: those given,
// which the data directory then keeps, or, if none are, those it kept, as
// settleScope does for the scope: a run from cron without --revisit keeps
// the schedule the archive was set up with.
func settleSchedules(db *pebble.DB, given recrawl.Rules) (recrawl.Rules, error) {
	list, ok := given.Specs()
	if !ok {
		return given, nil // made in code, not from --revisit: used as given, not kept
	}
	specs := strings.Join(list, "\n")
	var kept string
	v, closer, err := db.Get([]byte(revisitKey))
	switch {
	case err == nil:
		kept = string(v)
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return recrawl.Rules{}, fmt.Errorf("crawl: %w", err)
	}
	switch {
	case specs == "" && kept == "":
		return given, nil
	case specs == "":
		rules, err := recrawl.ParseRules(strings.Split(kept, "\n"))
		if err != nil {
			return recrawl.Rules{}, fmt.Errorf("crawl: the re-crawl rules kept in the data directory: %w", err)
		}
		return rules, nil
	case specs != kept:
		// URLs visited under these rules take them: the next --recrawl
		// moves every entry into their bounds (applyRules) again, even if
		// they are the rules it last moved them under.
		b := db.NewBatch()
		defer b.Close()
		if err := errors.Join(b.Set([]byte(revisitKey), []byte(specs), nil), b.Delete([]byte(rulesKey), nil), b.Commit(pebble.Sync)); err != nil {
			return recrawl.Rules{}, fmt.Errorf("crawl: %w", err)
		}
	}
	return given, nil
}

func (c *Crawler) open(seeds []string) error {
	cfg := c.cfg
	if err := reconcileSegments(c.db, c.warcDir, cfg.Logger, cfg.DropLost); err != nil {
		return err
	}
	st, err := loadState(c.db)
	if err != nil {
		return err
	}
	if c.seeds, err = loadSeeds(c.db); err != nil {
		return err
	}
	if c.cfg.Schedules, err = settleSchedules(c.db, cfg.Schedules); err != nil {
		return err
	}
	if c.cfg.Scope, err = settleScope(c.db, cfg.Scope, st.Captures > 0); err != nil {
		return err
	}
	c.scope.Store(newScope(c.cfg.Scope, c.seeds))
	if err := c.loadDigests(); err != nil {
		return err
	}
	c.stats.restore(st)
	c.budget.Store(1<<63 - 1)
	if cfg.MaxPages > 0 {
		c.budget.Store(int64(cfg.MaxPages) - st.Captures)
	}

	var proxy *url.URL
	if cfg.Proxy != "" {
		if proxy, err = url.Parse(cfg.Proxy); err != nil || proxy.Host == "" {
			return fmt.Errorf("crawl: bad proxy URL %q", cfg.Proxy)
		}
	}
	c.fetcher, err = fetch.New(fetch.Config{
		UserAgent:    cfg.UserAgent,
		Proxy:        proxy,
		AllowPrivate: cfg.AllowPrivate,
		TotalTimeout: cfg.Timeout,
		MaxBodySize:  cfg.MaxBodySize,
		// A worker's request through the proxy reuses a connection.
		MaxProxyConns: cfg.Workers,
	})
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	c.front, err = frontier.Open(c.db, frontier.Options{
		PerHostConnections: cfg.PerHostConnections,
		Delay:              cfg.Delay,
		MaxDelay:           cfg.MaxCrawlDelay,
		MaxDepth:           cfg.MaxDepth,
		MaxPagesPerHost:    cfg.MaxPagesPerHost,
		Archive:            c.copies(),
	})
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	if !cfg.IgnoreRobots {
		c.robots = robots.New(c.fetchRobots, robots.Options{UserAgent: robotsToken, Store: c.db})
	}
	b := c.db.NewIndexedBatch()
	defer b.Close()
	items, err := c.addSeeds(b, seeds)
	if err != nil {
		return err
	}
	// Seeds a re-crawl was given but did not get to queue.
	unqueued, err := seedsUnder(c.db, unqueuedSeedPrefix)
	if err != nil {
		return err
	}
	for _, s := range unqueued {
		items = append(items, newItem(s, 0, ""))
	}
	if cfg.Recrawl || cfg.RecrawlAll {
		// An imported archive's URLs are scheduled, and marked seen, by
		// Run: a seed queued as new before would be fetched twice. Until
		// Run queues them, they are kept apart.
		for _, it := range items {
			if err := b.Set([]byte(unqueuedSeedPrefix+it.URL), nil, nil); err != nil {
				return fmt.Errorf("crawl: seeds: %w", err)
			}
		}
		c.seedsAfterRevisits, items = items, nil
	} else if err := dropUnqueuedSeeds(b, unqueued); err != nil {
		return err
	}
	// Seeds another node owns wait in the frontier: they are handed over
	// when leased, once Run knows the network.
	if _, err := c.front.Add(b, items); err != nil {
		return fmt.Errorf("crawl: queue seeds: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("crawl: queue seeds: %w", err)
	}
	c.front.Committed()
	// Submit, Accept and Update may be called from now on; what they send
	// waits for Run to commit it.
	c.results = make(chan result, c.cfg.Workers)
	c.running = true
	return nil
}

// OpenDB opens the pebble database of a data directory, sized for a crawl.
func OpenDB(data string) (*pebble.DB, error) {
	dir := filepath.Join(data, "db")
	opts := frontier.PebbleOptions()
	maxLog := int64(opts.MemTableSize) * int64(max(opts.MemTableStopWritesThreshold, 2))
	if err := checkRoom(dir, maxLog, diskfree.Available); err != nil {
		return nil, fmt.Errorf("open %s: %w", data, err)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (is another waggle using this data directory?)", data, err)
	}
	return db, nil
}

// OpenExistingDB opens the database of a data directory that must already
// hold an archive, for commands that only read one.
func OpenExistingDB(data string) (*pebble.DB, error) {
	// Checked before pebble.Open, which would create the directory.
	if err := CheckArchive(data); err != nil {
		return nil, err
	}
	return OpenDB(data)
}

// CheckArchive reports, wrapping os.ErrNotExist, that no archive has been
// made in the data directory data, without making one.
func CheckArchive(data string) error {
	if _, err := os.Stat(filepath.Join(data, "db")); err != nil {
		return fmt.Errorf("no archive at %s: %w", data, err)
	}
	return nil
}

// Index is the archive's capture index, for serving replay while the crawl
// runs: an entry appears only once its record is durable.
func (c *Crawler) Index() *index.Index { return index.New(c.db) }

// Run crawls until the frontier is empty, MaxPages is reached or ctx is
// cancelled. Everything fetched before Run returns is durable. Cancelling ctx
// is a clean stop: the next Open on the same data resumes.
func (c *Crawler) Run(ctx context.Context) (Stats, error) {
	c.stats.start.Store(time.Now().UnixNano())
	fetchCtx, stopFetching := context.WithCancel(ctx)
	// A continuous crawl queues URLs as they fall due (pumpDue) until Run
	// returns, and not after: the caller may close the database then.
	var pumping sync.WaitGroup
	defer func() {
		stopFetching()
		pumping.Wait()
	}()

	commitErr := make(chan error, 1)
	go func() { commitErr <- c.commitLoop() }()

	// Revisits and links are queued before the workers start, which
	// would otherwise find the frontier empty and stop.
	if c.cfg.Recrawl || c.cfg.RecrawlAll {
		c.queueRevisits(fetchCtx)
		if c.cfg.Continuous {
			pumping.Add(1)
			go func() {
				defer pumping.Done()
				c.pumpDue(fetchCtx)
			}()
		}
		if seeds := c.seedsAfterRevisits; len(seeds) > 0 {
			c.seedsAfterRevisits = nil
			if err := c.Update(fetchCtx, func(b *pebble.Batch) error {
				if _, err := c.front.Add(b, seeds); err != nil {
					return err
				}
				urls := make([]string, len(seeds))
				for i, it := range seeds {
					urls[i] = it.URL
				}
				return dropUnqueuedSeeds(b, urls)
			}); err != nil {
				c.cfg.Logger.Warn("re-crawl: cannot queue the seeds", "err", err)
			}
		}
	}
	// After the revisits, which give imported captures the re-crawl
	// entries Rediscover places their pages by, and queue the seeds at
	// depth 0 before any link to them.
	c.rescope(fetchCtx)

	var err error
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		for range c.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.work(fetchCtx)
			}()
		}
		// If committing fails the crawl must stop: nothing more can be made durable.
		workersDone := make(chan struct{})
		go func() { wg.Wait(); close(workersDone) }()
		select {
		case <-workersDone:
		case err = <-commitErr:
			stopFetching()
			<-workersDone
		}
		if err != nil || !c.retryDeferred(fetchCtx, round) {
			break
		}
	}
	// Submit and Accept may be sending: stop them before closing.
	c.runMu.Lock()
	c.running = false
	close(c.results)
	c.runMu.Unlock()
	if err == nil {
		err = <-commitErr
	}
	s := c.Stats()
	if next, ok, nerr := recrawl.Next(c.db); nerr == nil && ok {
		s.NextDue = next
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil && s.Queued == 0 {
		// Whatever queued it, the frontier is empty: no --recrawl-all is
		// left to resume.
		if derr := c.db.Delete([]byte(recrawlAllKey), pebble.Sync); derr != nil {
			err = fmt.Errorf("crawl: %w", derr)
		}
	}
	return s, err
}

// retryDeferred is called when a run's workers have stopped: when the
// frontier emptied with URLs deferred (Frontier.Defer) and Config.Retries
// allows another round, it waits (RetryWait, doubled each round up to
// maxRetryWait), has the robots.txt files that could not be had fetched
// again, queues the URLs again and reports true, for the workers to start
// again.
func (c *Crawler) retryDeferred(ctx context.Context, round int) bool {
	fs := c.front.Stats()
	if round >= c.cfg.Retries || fs.Deferred == 0 || fs.Queued > 0 || c.budget.Load() <= 0 || ctx.Err() != nil {
		return false
	}
	wait := retryWait(c.cfg.RetryWait, round)
	c.cfg.Logger.Info("retrying the URLs whose fetch failed for a reason that may pass", "urls", fs.Deferred, "in", wait, "round", round+1, "of", c.cfg.Retries)
	c.retryingAt.Store(time.Now().Add(wait).UnixNano())
	defer c.retryingAt.Store(0)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	if err := c.RequeueDeferred(ctx); err != nil {
		c.cfg.Logger.Warn("cannot queue again the URLs whose fetch failed", "err", err)
		return false
	}
	return true
}

// RequeueDeferred queues again the URLs whose fetch failed for a reason
// that may pass (Frontier.Defer), having the robots.txt files that could
// not be had fetched again: a run's retry round, a node's hourly one, and
// a node leaving, which hands them over with the rest of its frontier.
func (c *Crawler) RequeueDeferred(ctx context.Context) error {
	if c.robots != nil {
		c.robots.ForgetUnreachable()
	}
	return c.Update(ctx, c.front.RequeueDeferred)
}

// maxRetryWait bounds the doubling of Config.RetryWait between a run's
// retries.
const maxRetryWait = time.Hour

// retryWait is the pause before retry round round (from 0): base, doubled
// each round up to maxRetryWait (or base, if it is longer).
func retryWait(base time.Duration, round int) time.Duration {
	wait := base
	for i := 0; i < round && wait < maxRetryWait; i++ {
		wait *= 2
	}
	return min(wait, max(base, maxRetryWait))
}

// recrawlAllKey is present while the URLs a --recrawl-all run queued are
// not all visited: set once they are all queued, removed when any run
// ends with nothing left in the frontier.
const recrawlAllKey = "k/recrawl-all"

// resumingRecrawlAll reports whether a --recrawl-all run was stopped
// after it had queued every URL and before it visited them all.
func (c *Crawler) resumingRecrawlAll() bool {
	_, closer, err := c.db.Get([]byte(recrawlAllKey))
	if err != nil {
		return false
	}
	closer.Close()
	return c.front.Stats().Queued > 0
}

// dropUnqueuedSeeds stages the deletion of the marks of seeds queued now.
func dropUnqueuedSeeds(b *pebble.Batch, seeds []string) error {
	for _, s := range seeds {
		if err := b.Delete([]byte(unqueuedSeedPrefix+s), nil); err != nil {
			return fmt.Errorf("crawl: seeds: %w", err)
		}
	}
	return nil
}

// settleEntries gives every URL of the archive its re-crawl entry under its
// key: entries of an older layout moved, captures imported since given
// theirs. Each step is a no-op once done.
func (c *Crawler) settleEntries(ctx context.Context) {
	if n, err := c.rekeyEntries(ctx); err != nil {
		c.cfg.Logger.Warn("re-crawl: cannot move the URLs' entries to their keys", "err", err)
	} else if n > 0 {
		c.cfg.Logger.Info("re-crawl: moved URLs' entries to their keys", "urls", n)
	}
	if n, err := c.scheduleFromIndex(ctx); err != nil {
		c.cfg.Logger.Warn("re-crawl: cannot schedule the archive's URLs", "err", err)
	} else if n > 0 {
		c.cfg.Logger.Info("re-crawl: scheduled the archive's URLs", "urls", n)
	}
}

// queueRevisits queues the URLs due for a visit (all of them with
// RecrawlAll).
func (c *Crawler) queueRevisits(ctx context.Context) {
	c.settleEntries(ctx)
	if n, err := c.applyRules(ctx); err != nil {
		c.cfg.Logger.Warn("re-crawl: cannot apply the re-crawl rules to the URLs scheduled", "err", err)
	} else if n > 0 {
		c.cfg.Logger.Info("re-crawl: rescheduled URLs under the re-crawl rules", "urls", n)
	}
	before := time.Now()
	all := c.cfg.RecrawlAll && !c.resumingRecrawlAll()
	if all {
		before = time.Unix(allDue, 0)
	} else if c.cfg.RecrawlAll {
		// Every URL was queued when the run that was stopped began: those
		// it visited have their next visit scheduled, the rest are still
		// queued. Queueing everything again would visit the former twice.
		c.cfg.Logger.Info("re-crawl: resuming an interrupted --recrawl-all: the URLs it has not visited yet are still queued")
	}
	if n, err := c.queueDue(ctx, before); err != nil {
		c.cfg.Logger.Warn("re-crawl: cannot queue due URLs", "err", err)
	} else {
		c.cfg.Logger.Info("re-crawl: queued URLs due for a visit", "urls", n)
		if all {
			if err := c.db.Set([]byte(recrawlAllKey), nil, pebble.Sync); err != nil {
				c.cfg.Logger.Warn("re-crawl: cannot record that every URL is queued", "err", err)
			}
		}
	}
}

// Stats returns the crawl's counters so far.
func (c *Crawler) Stats() Stats {
	s := c.stats.snapshot()
	fs := c.front.Stats()
	s.Queued = fs.Queued
	s.Hosts = fs.Hosts
	s.Retried = int64(fs.Retried)
	s.Deferred = int64(fs.Deferred)
	if at := c.retryingAt.Load(); at != 0 {
		s.RetryAt = time.Unix(0, at)
	}
	return s
}

// Close releases the data directory.
func (c *Crawler) Close() error {
	var errs []error
	if c.fetcher != nil {
		errs = append(errs, c.fetcher.Close())
	}
	if c.front != nil {
		errs = append(errs, c.front.Close())
	}
	if c.ownDB {
		errs = append(errs, c.db.Close())
	}
	return errors.Join(errs...)
}

// work is one fetch worker's loop.
func (c *Crawler) work(ctx context.Context) {
	for ctx.Err() == nil {
		if c.budget.Add(-1) < 0 {
			c.budget.Add(1)
			return
		}
		gen := c.commitGen()
		lease, err := c.front.Next(ctx)
		if errors.Is(err, frontier.ErrEmpty) {
			c.budget.Add(1)
			if c.cfg.Router != nil {
				c.cfg.Router.Idle()
			}
			// The frontier is empty, but results still being committed may
			// add links: wait for the next commit and look again.
			if !c.waitCommit(ctx, gen) {
				return
			}
			continue
		}
		if err != nil {
			c.budget.Add(1)
			return
		}
		c.pending.Add(1)
		if owner := c.owner(lease.URL); owner != "" {
			// The host belongs to another node now: hand the URL over.
			c.front.Release(lease)
			c.budget.Add(1)
			c.results <- result{lease: lease, hasLease: true, outcome: "forward", forward: owner}
			continue
		}
		before, done := c.turns.take(lease.Host)
		r, resp, prev := c.visit(ctx, lease)
		// The request is over: the host's next one may start while this
		// response is processed.
		c.front.Release(lease)
		if resp != nil {
			r = c.process(ctx, r, resp, prev)
		}
		if r.resp == nil {
			c.budget.Add(1) // nothing archived: the slot goes back
		}
		if before != nil {
			<-before
		}
		c.results <- r
		done()
	}
}

// Commits counts the crawler's commits so far: it changes whenever the
// archive, the frontier or the outboxes have.
func (c *Crawler) Commits() uint64 { return c.commitGen() }

func (c *Crawler) commitGen() uint64 {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	return c.gen
}

// waitCommit waits until a commit after gen, and reports false when there is
// nothing left to wait for (no result pending) or ctx ends.
func (c *Crawler) waitCommit(ctx context.Context, gen uint64) bool {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.commitMu.Lock()
		c.commitC.Broadcast()
		c.commitMu.Unlock()
	})
	defer stop()
	for c.gen == gen {
		if c.pending.Load() == 0 && !c.cfg.Continuous || ctx.Err() != nil {
			return false
		}
		c.commitC.Wait()
	}
	return true
}

// committed is called after each commit: pending results are durable and
// their links are visible in the frontier.
func (c *Crawler) committed(n int) {
	c.commitMu.Lock()
	c.gen++
	c.pending.Add(-int64(n))
	c.commitC.Broadcast()
	c.commitMu.Unlock()
}

// warcInfo is the warcinfo record's description of this crawl.
func (c *Crawler) warcInfo() []warc.Field {
	robotsPolicy := "obey"
	if c.cfg.IgnoreRobots {
		robotsPolicy = "ignore"
	}
	return []warc.Field{
		{Name: "software", Value: "waggle/0.1"},
		{Name: "format", Value: "WARC File Format 1.1"},
		{Name: "conformsTo", Value: "http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"},
		{Name: "http-header-user-agent", Value: c.cfg.UserAgent},
		{Name: "robots", Value: robotsPolicy},
		{Name: "scope", Value: string(c.cfg.Scope)},
	}
}

// loadDigests fills the digest filter from the digest index, sized for
// twice what it holds (at least a million) at a 1% false-positive rate:
// one pass over the index's digest keys to count them, one to add them.
func (c *Crawler) loadDigests() error {
	n := 0
	if err := index.Digests(c.db, func(string) { n++ }); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	c.digests = bloom.NewWithEstimates(uint(max(2*n, 1<<20)), 0.01)
	if err := index.Digests(c.db, func(d string) { c.digests.AddString(d) }); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	return nil
}
