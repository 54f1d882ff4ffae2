package crawl

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode"

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

// maxRecordedCount bounds the hop counts a metadata record may claim (a
// peer's records are read too): with a larger one, or one that does not
// read, the record's counts are not believed.
const maxRecordedCount = 1 << 20

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
			// The entry of a copy says depth 0: its page's depth is not
			// known, and under a depth limit its links are not followed.
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

// ParseMetadata reads what a metadata record's block says of its page,
// as the crawler writes it: the outlinks, in Heritrix's form ("outlink:
// <url> <hop> <path>", those whose URL is canonical), and the hop counts
// (hopFields). The URL and CSS of the Page are the caller's to set.
func ParseMetadata(block []byte) (Page, error) {
	var p Page
	sc := bufio.NewScanner(bytes.NewReader(block))
	sc.Buffer(nil, 1<<20)
	bad := false // a count that does not read: the counts are not believed
	count := func(v string) int {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > maxRecordedCount {
			bad = true
			return 0
		}
		return n
	}
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.ToLower(name) {
		case "outlink":
			if l, ok := parseOutlink(value); ok {
				p.Links = append(p.Links, l)
			}
		case fieldDepth:
			p.Hops.Depth, p.HasHops = count(value), true
		case fieldEmbed:
			p.Hops.Embed = strings.TrimSpace(value) == "true"
		case fieldRedirects:
			p.Hops.Redirects = count(value)
		case fieldOffScopeHops:
			p.Hops.OffScopeHops = count(value)
		}
	}
	if bad || !p.HasHops {
		p.Hops, p.HasHops = frontier.Item{}, false
	}
	if err := sc.Err(); err != nil {
		return p, fmt.Errorf("crawl: metadata record: %w", err)
	}
	return p, nil
}

func parseOutlink(value string) (extract.Outlink, bool) {
	// Split as a writer's control characters, made spaces, would be.
	fields := strings.FieldsFunc(value, func(r rune) bool { return unicode.IsSpace(r) || r < 0x20 || r == 0x7f })
	if len(fields) < 2 {
		return extract.Outlink{}, false
	}
	u, err := urlkey.Canonical("", fields[0])
	if err != nil || u != fields[0] {
		return extract.Outlink{}, false
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
	return l, true
}
