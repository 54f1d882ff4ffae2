package crawl

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A Page is an archived page whose links Rediscover follows again: its URL,
// whether it is a stylesheet (whose requisites are followed off the scope
// too), and what its metadata record says (ParseMetadata): its outlinks,
// and where the crawl found it (Hops: depth, requisite, redirects and hops
// off the scope), which records written before waggle recorded it lack
// (HasHops false).
type Page struct {
	URL     string
	CSS     bool
	Links   []extract.Outlink
	Hops    frontier.Item
	HasHops bool
}

// rediscoverBatch bounds the links handed to the committer at once.
const rediscoverBatch = 1000

// Rediscover queues again the links of archived pages that keep selects:
// what a node that takes over the sites of a node gone for good does,
// since that node's frontier — the URLs it had accepted and not fetched
// yet — went with it, and an unchanged page's revisit does not follow its
// links again. Each link is followed as when its page was fetched (depth,
// scope, requisites), from the counts its metadata record gives or else
// from its re-crawl entry; a page with neither is skipped, as is one whose
// entry is a copy's (depth 0, not a seed) under a depth limit. A link this node has a re-crawl entry for is archived
// already and left to its schedule; the others pass the frontier's seen
// test, here or at their owner's. It returns how many links it queued.
func (c *Crawler) Rediscover(ctx context.Context, pages []Page, keep func(url string) bool) (int, error) {
	q := rediscovery{c: c, keep: keep}
	for _, p := range pages {
		parent := frontier.Item{URL: p.URL, Host: urlkey.Host(p.URL)}
		if p.HasHops {
			parent.Depth, parent.Embed, parent.Redirects, parent.OffScopeHops = p.Hops.Depth, p.Hops.Embed, p.Hops.Redirects, p.Hops.OffScopeHops
		} else {
			e, ok, err := recrawl.Get(c.db, p.URL)
			if err != nil {
				return q.queued, err
			}
			// A record without counts was written before they were
			// recorded; a copy of its page has an entry of depth 0 (noteMetadata
			// had no counts to give it): its depth is not known, and under a
			// depth limit its links are not followed.
			if !ok || c.cfg.MaxDepth > 0 && e.Depth == 0 && !c.isSeed(newItem(p.URL, 0, "")) {
				continue
			}
			parent.Depth, parent.Embed, parent.Redirects, parent.OffScopeHops = e.Depth, e.Embed, e.Redirects, e.OffScopeHops
		}
		for _, it := range c.follow(parent, p.CSS, p.Links) {
			if err := q.add(ctx, it); err != nil {
				return q.queued, err
			}
		}
	}
	return q.queued, q.flush(ctx)
}

// RediscoverSeeds is Rediscover for the seeds keep selects: a seed whose
// site's owner went before fetching it is not linked from any page.
func (c *Crawler) RediscoverSeeds(ctx context.Context, keep func(url string) bool) (int, error) {
	q := rediscovery{c: c, keep: keep}
	for _, s := range c.Seeds() {
		if err := q.add(ctx, newItem(s, 0, "")); err != nil {
			return q.queued, err
		}
	}
	return q.queued, q.flush(ctx)
}

// rediscovery gathers the URLs Rediscover queues, in batches.
type rediscovery struct {
	c      *Crawler
	keep   func(url string) bool
	items  []frontier.Item
	queued int
}

func (q *rediscovery) add(ctx context.Context, it frontier.Item) error {
	if !q.keep(it.URL) {
		return nil
	}
	if _, known, err := recrawl.Get(q.c.db, it.URL); err != nil || known {
		return err
	}
	q.items = append(q.items, it)
	if len(q.items) >= rediscoverBatch {
		return q.flush(ctx)
	}
	return nil
}

func (q *rediscovery) flush(ctx context.Context) error {
	if len(q.items) == 0 {
		return nil
	}
	if err := q.c.send(ctx, result{queue: q.items}); err != nil {
		return err
	}
	q.queued += len(q.items)
	q.c.stats.rediscovered.Add(int64(len(q.items)))
	q.items = nil
	return nil
}

// Rescoping reports whether Run will follow again the archived pages'
// links before fetching, the scope having widened, from one scope to the
// other, since the data directory was last crawled (settleScope), and
// that pass not having finished.
func (c *Crawler) Rescoping() (from, to Scope, ok bool) {
	v, closer, err := c.db.Get([]byte(rescopeKey))
	if err != nil {
		return "", "", false
	}
	defer closer.Close()
	return Scope(v), c.cfg.Scope, true
}

// rescope follows again, under the scope given, the links of the archived
// pages of the sites this crawler holds, when the data directory was
// crawled before with a narrower scope (rescopeKey): links that scope left
// out are queued now, those already archived or queued are not. An
// interrupted pass resumes after the last site it finished.
func (c *Crawler) rescope(ctx context.Context) {
	was, _, ok := c.Rescoping()
	if !ok {
		return
	}
	started := time.Now()
	// Pages are placed by their re-crawl entries where their metadata
	// records give no hop counts (imported ones): every URL needs one.
	c.settleEntries(ctx)
	sites, err := c.Sites(ctx)
	if err != nil {
		c.cfg.Logger.Warn("scope widened: cannot list the archive's sites to follow their links again", "err", err)
		return
	}
	if v, closer, err := c.db.Get([]byte(rescopeDoneKey)); err == nil {
		done := string(v)
		closer.Close()
		sites = slices.DeleteFunc(sites, func(s string) bool { return s <= done })
	}
	all := func(string) bool { return true }
	pages, links := 0, 0
	for _, site := range sites {
		err := c.ArchivedPages(ctx, site, PageBatch, func(ps []Page) error {
			// In a network, each site's links are the owner's to follow.
			ps = slices.DeleteFunc(ps, func(p Page) bool { return c.owner(p.URL) != "" })
			q, err := c.Rediscover(ctx, ps, all)
			pages += len(ps)
			links += q
			return err
		})
		if err == nil {
			// Its links are committed (Rediscover waits for that): a pass
			// cut short after this goes on with the next site.
			err = c.db.Set([]byte(rescopeDoneKey), []byte(site), pebble.NoSync)
		}
		if err != nil {
			c.cfg.Logger.Warn("scope widened: following the archived pages' links again; the next run goes on", "err", err)
			return
		}
	}
	if err := errors.Join(c.db.Delete([]byte(rescopeKey), pebble.Sync), c.db.Delete([]byte(rescopeDoneKey), pebble.Sync)); err != nil {
		c.cfg.Logger.Warn("scope widened: cannot record that the links were followed again", "err", err)
	}
	c.cfg.Logger.Info("scope widened: followed the archived pages' links again", "from", was, "to", c.cfg.Scope,
		"pages", pages, "links queued", links, "took", time.Since(started).Round(time.Millisecond))
}
