package crawl

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A Router hands URLs to the nodes of a network that own their hosts
// (UbiCrawler's assignment): a crawler with a Router fetches only what
// this node owns.
type Router interface {
	// Owner returns the ID of the node that owns site (urlkey.Site), or
	// "" when this node does.
	Owner(site string) string
	// Route stages items for node into b, which the crawler commits and
	// then reports with Committed, so that a URL leaves the frontier and
	// enters the way out in one atomic write.
	Route(b *pebble.Batch, node string, items []frontier.Item) error
	// Handover is Route for URLs that were queued here, leased, and are
	// found to belong to node now: they must reach it even if they were
	// sent to it before (a URL can travel back and forth while two nodes'
	// views of the network differ).
	Handover(b *pebble.Batch, node string, items []frontier.Item) error
	Committed()
	// Idle says the crawler has nothing to fetch: URLs held back to be
	// sent in larger batches should leave now, as they may be all the
	// work the network has.
	Idle()
}

// ErrNotRunning is returned by Submit, Accept and AddSeeds when Run is not running.
var ErrNotRunning = errors.New("crawl: the crawler is not running")

// seedPrefix keys the seeds of a data directory: they define its scope,
// and a node learns them from the others (AddSeeds) as well as from its user.
const seedPrefix = "k/seed/"

// unqueuedSeedPrefix keys the seeds given to a re-crawl, which it queues
// only once its revisits are: a run that stops before leaves them to the
// next one.
const unqueuedSeedPrefix = "k/unqueued-seed/"

func loadSeeds(db *pebble.DB) ([]string, error) { return seedsUnder(db, seedPrefix) }

// seedsUnder returns the seeds keyed under prefix.
func seedsUnder(db *pebble.DB, prefix string) ([]string, error) {
	upper := []byte(prefix)
	upper[len(upper)-1]++
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("crawl: seeds: %w", err)
	}
	defer it.Close()
	var seeds []string
	for it.First(); it.Valid(); it.Next() {
		seeds = append(seeds, string(it.Key()[len(prefix):]))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("crawl: seeds: %w", err)
	}
	return seeds, nil
}

// addSeeds stages the seeds not known yet into b, widens the scope to
// them, and returns their frontier items.
func (c *Crawler) addSeeds(b *pebble.Batch, seeds []string) ([]frontier.Item, error) {
	c.seedMu.Lock()
	defer c.seedMu.Unlock()
	known := make(map[string]bool, len(c.seeds))
	for _, s := range c.seeds {
		known[s] = true
	}
	items := make([]frontier.Item, 0, len(seeds))
	grew := false
	for _, s := range seeds {
		items = append(items, newItem(s, 0, ""))
		if known[s] {
			continue
		}
		known[s] = true
		if err := b.Set([]byte(seedPrefix+s), nil, nil); err != nil {
			return nil, fmt.Errorf("crawl: seeds: %w", err)
		}
		c.seeds = append(c.seeds, s)
		grew = true
	}
	if grew || c.scope.Load() == nil {
		c.scope.Store(newScope(c.cfg.Scope, c.seeds))
	}
	return items, nil
}

// isSeed reports whether it is one of the seeds (not a requisite or a
// redirect target at depth 0).
func (c *Crawler) isSeed(it frontier.Item) bool {
	if it.Depth != 0 || it.Embed {
		return false
	}
	c.seedMu.Lock()
	defer c.seedMu.Unlock()
	return slices.Contains(c.seeds, it.URL)
}

// ScopeIsEmpty reports whether the scope holds no site: the data
// directory has no seeds (its captures were imported) and the scope is
// not ScopeAny. Such a crawl follows no links, a re-crawl's included.
func (c *Crawler) ScopeIsEmpty() bool {
	sc := c.scope.Load()
	return sc != nil && sc.kind != ScopeAny && len(c.Seeds()) == 0
}

// Seeds returns the seeds this data directory knows.
func (c *Crawler) Seeds() []string {
	c.seedMu.Lock()
	defer c.seedMu.Unlock()
	return append([]string(nil), c.seeds...)
}

// Submit adds seeds while Run runs: each widens the scope and is queued at
// depth 0 here or, with a Router, at the node that owns it. It returns once
// they are durable.
func (c *Crawler) Submit(ctx context.Context, urls []string) error {
	seeds := make([]string, 0, len(urls))
	for _, s := range urls {
		u, err := urlkey.Canonical("", s)
		if err != nil {
			return fmt.Errorf("crawl: seed %q: %w", s, err)
		}
		seeds = append(seeds, u)
	}
	return c.send(ctx, result{seeds: seeds, queueSeeds: true})
}

// AddSeeds makes seeds given to other nodes of the network part of this
// node's scope too, without queueing them, so that every node judges a URL
// as the others do.
func (c *Crawler) AddSeeds(ctx context.Context, seeds []string) error {
	var ok []string
	for _, s := range seeds {
		if u, err := urlkey.Canonical("", s); err == nil && u == s {
			ok = append(ok, s)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	return c.send(ctx, result{seeds: ok})
}

// Accept queues URLs another node found on its pages for hosts this node
// owns. They are held to the rules local links are: canonical form, the
// scope (page requisites excepted, as for local links), and the frontier's
// trap limits; the fetcher applies the address rules. A URL marked Seed
// was given as a seed at another node: it widens the scope. Accept returns once what it kept is
// durable, and reports how many URLs it refused.
func (c *Crawler) Accept(ctx context.Context, items []frontier.Item) (refused int, err error) {
	sc := c.scope.Load()
	r := result{queue: make([]frontier.Item, 0, len(items)), keep: true}
	for _, it := range items {
		u, err := urlkey.Canonical("", it.URL)
		if err != nil || u != it.URL || it.Depth < 0 {
			refused++
			continue
		}
		if it.Seed {
			r.seeds = append(r.seeds, u)
		} else if !it.Embed && !sc.contains(u) || it.Embed && c.cfg.NoRequisites && !sc.contains(u) {
			refused++
			continue
		}
		r.queue = append(r.queue, frontier.Item{URL: u, Host: urlkey.Host(u), Depth: it.Depth, Embed: it.Embed,
			Redirects: it.Redirects, OffScopeHops: it.OffScopeHops})
	}
	if len(r.queue) == 0 {
		return refused, nil
	}
	// The URLs stay here even if this node's view of the network gives
	// their host to another node: the sender thought otherwise, and the
	// lease-time check hands them over once the views agree.
	return refused, c.send(ctx, r)
}

// Update runs fn with the batch of the crawler's next commit, in the
// crawler's commit order, so that a caller can stage writes (such as moving
// queued URLs between peers) that must not interleave with the crawler's
// own. It returns once that commit is durable, or fn's error.
func (c *Crawler) Update(ctx context.Context, fn func(b *pebble.Batch) error) error {
	return c.send(ctx, result{update: fn})
}

// Running reports whether Run is running: a crawl whose page budget is
// spent (Config.MaxPages) has stopped, and leases nothing more.
func (c *Crawler) Running() bool {
	c.runMu.RLock()
	defer c.runMu.RUnlock()
	return c.running
}

// send hands r to the committer and waits until it is committed.
func (c *Crawler) send(ctx context.Context, r result) error {
	ack := make(chan error, 1)
	r.ack = ack
	c.runMu.RLock()
	if !c.running {
		c.runMu.RUnlock()
		return ErrNotRunning
	}
	c.pending.Add(1)
	select {
	case c.results <- r:
	case <-ctx.Done():
		c.pending.Add(-1)
		c.runMu.RUnlock()
		return ctx.Err()
	}
	c.runMu.RUnlock()
	// Once the committer has r, wait until it is done with it, even if ctx
	// ends meanwhile: r holds the caller's slices and closures, which the
	// caller may change as soon as send returns. (Every result taken is
	// acknowledged, committed or not, and a commit takes milliseconds.)
	err := <-ack
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// owner returns the node that owns u's host, "" for this node.
func (c *Crawler) owner(u string) string {
	if c.cfg.Router == nil {
		return ""
	}
	return c.cfg.Router.Owner(urlkey.Site(u))
}

// copies is the frontier's Archive for a node of a network, which holds
// copies of captures other nodes made (replication, anti-entropy,
// hand-over): a URL it holds a capture of — a re-crawl entry — is left to
// that entry's schedule, since fetching it now would be overlap: a site's
// new owner, whose seen set knows only what it fetched itself, would
// otherwise fetch again every page of the site its first fetch there
// links to; and the URLs of a host archived already count toward its
// limit, so that a takeover does not start the count afresh. A seed is
// queued whatever the archive holds, as is everything in a single node's
// crawl: there an entry without a fetch comes from an import, which a
// crawl is free to archive again.
func (c *Crawler) copies() frontier.Archive {
	if c.cfg.Router == nil {
		return nil
	}
	return copiedCaptures{c}
}

type copiedCaptures struct{ c *Crawler }

func (a copiedCaptures) Archived(r pebble.Reader, it frontier.Item) (bool, error) {
	if a.c.isSeed(it) {
		return false, nil
	}
	_, ok, err := recrawl.Get(r, it.URL)
	return ok, err
}

func (copiedCaptures) HostArchived(r pebble.Reader, host string, limit int) (int, error) {
	return recrawl.CountHost(r, host, limit)
}

// queue stages items into b: into the frontier when this node owns their
// host, else to their owners through the Router.
func (c *Crawler) queue(b *pebble.Batch, items []frontier.Item) error {
	if c.cfg.Router == nil {
		_, err := c.front.Add(b, items)
		return err
	}
	local := items[:0:0]
	var away map[string][]frontier.Item
	for _, it := range items {
		if o := c.owner(it.URL); o != "" {
			it.Seed = c.isSeed(it)
			if away == nil {
				away = map[string][]frontier.Item{}
			}
			away[o] = append(away[o], it)
			continue
		}
		local = append(local, it)
	}
	if _, err := c.front.Add(b, local); err != nil {
		return err
	}
	for node, its := range away {
		if err := c.cfg.Router.Route(b, node, its); err != nil {
			return fmt.Errorf("crawl: route: %w", err)
		}
	}
	return nil
}
