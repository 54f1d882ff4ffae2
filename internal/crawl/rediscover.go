package crawl

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A Page is an archived page whose links Rediscover follows again: its URL,
// whether it is a stylesheet (whose requisites are followed off the scope
// too), and its outlinks as its metadata record lists them (ParseOutlinks).
type Page struct {
	URL   string
	CSS   bool
	Links []extract.Outlink
}

// rediscoverBatch bounds the links handed to the committer at once.
const rediscoverBatch = 1000

// Rediscover queues again the links of archived pages that keep selects:
// what a node that takes over the sites of a node gone for good does,
// since that node's frontier — the URLs it had accepted and not fetched
// yet — went with it, and an unchanged page's revisit does not follow its
// links again. Each link is followed as when its page was fetched (depth,
// scope, requisites), from the page's re-crawl entry; a page without one
// is skipped. A link this node has a re-crawl entry for is archived
// already and left to its schedule; the others pass the frontier's seen
// test, here or at their owner's. It returns how many links it queued.
func (c *Crawler) Rediscover(ctx context.Context, pages []Page, keep func(url string) bool) (int, error) {
	q := rediscovery{c: c, keep: keep}
	for _, p := range pages {
		e, ok, err := recrawl.Get(c.db, p.URL)
		if err != nil {
			return q.queued, err
		}
		if !ok {
			continue
		}
		parent := frontier.Item{URL: p.URL, Host: urlkey.Host(p.URL), Depth: e.Depth, Embed: e.Embed,
			Redirects: e.Redirects, OffScopeHops: e.OffScopeHops}
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

// ParseOutlinks reads the outlinks a metadata record's block lists, in the
// form outlinkFields writes (Heritrix's "outlink: <url> <hop> <path>"),
// keeping those whose URL is canonical.
func ParseOutlinks(block []byte) ([]extract.Outlink, error) {
	var links []extract.Outlink
	sc := bufio.NewScanner(bytes.NewReader(block))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.EqualFold(name, "outlink") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) < 2 {
			continue
		}
		u, err := urlkey.Canonical("", fields[0])
		if err != nil || u != fields[0] {
			continue
		}
		l := extract.Outlink{URL: u, Kind: extract.Link}
		switch fields[1] {
		case "E":
			l.Kind = extract.Embed
		case "R":
			l.Kind = extract.Redirect
		}
		if len(fields) > 2 {
			l.Path = fields[2]
		}
		links = append(links, l)
	}
	if err := sc.Err(); err != nil {
		return links, fmt.Errorf("crawl: outlinks: %w", err)
	}
	return links, nil
}
