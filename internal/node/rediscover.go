package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// DefaultRediscoverAfter is Config.RediscoverAfter's default: longer than a
// restart or a reboot takes, so that a node coming back with its frontier
// does not find the others crawling it too.
const DefaultRediscoverAfter = 15 * time.Minute

// departedPrefix keys the members that left the ring and have not come
// back: k/departed/<ID> → departure (JSON). They are kept on disk so that a
// restart does not forget a departure it has not acted on.
const departedPrefix = "k/departed/"

// A departure is a member seen leaving the ring, and the ring's members
// before it left: who owned and who held each site then.
type departure struct {
	Member ring.Member   `json:"member"`
	Since  time.Time     `json:"since"`
	Before []ring.Member `json:"before"`
}

// noteDepartures records the members of prev that cur lacks, and forgets
// the departures of members cur has again.
func (n *Node) noteDepartures(prev, cur *ring.Ring, now time.Time) error {
	n.departMu.Lock()
	defer n.departMu.Unlock()
	b := n.db.NewBatch()
	defer b.Close()
	if prev != nil {
		for _, m := range prev.Members() {
			if m.ID == n.ID() || inRing(cur, m.ID) {
				continue
			}
			retired, err := n.retired(m.ID, now)
			if err != nil {
				return err
			}
			if retired {
				// Its part was handed over before it said so (noteRetired).
				if err := b.Delete([]byte(retiredPrefix+m.ID), nil); err != nil {
					return err
				}
				continue
			}
			v, err := json.Marshal(departure{Member: m, Since: now, Before: prev.Members()})
			if err != nil {
				return err
			}
			if err := b.Set([]byte(departedPrefix+m.ID), v, nil); err != nil {
				return err
			}
		}
	}
	for _, m := range cur.Members() {
		if err := b.Delete([]byte(departedPrefix+m.ID), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// forgetDeparture deletes d's record, unless the member came back and
// left again while it was acted on: that departure is a new one.
func (n *Node) forgetDeparture(d departure) error {
	n.departMu.Lock()
	defer n.departMu.Unlock()
	key := []byte(departedPrefix + d.Member.ID)
	v, closer, err := n.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var now departure
	err = json.Unmarshal(v, &now)
	closer.Close()
	if err == nil && !now.Since.Equal(d.Since) {
		return nil
	}
	return n.db.Delete(key, pebble.Sync)
}

func inRing(r *ring.Ring, id string) bool {
	return slices.ContainsFunc(r.Members(), func(m ring.Member) bool { return m.ID == id })
}

// departures returns the departures on record.
func (n *Node) departures() ([]departure, error) {
	it, err := n.db.NewIter(&pebble.IterOptions{LowerBound: []byte(departedPrefix), UpperBound: []byte("k/departed0")})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ds []departure
	for it.First(); it.Valid(); it.Next() {
		var d departure
		if err := json.Unmarshal(it.Value(), &d); err != nil || d.Member.ID == "" {
			n.log.Warn("node: dropping an unreadable departure record", "key", string(it.Key()))
			if err := n.db.Delete(bytes.Clone(it.Key()), pebble.Sync); err != nil {
				return nil, err
			}
			continue
		}
		ds = append(ds, d)
	}
	return ds, it.Error()
}

// rediscoverGone waits for members that left the ring to stay away for
// Config.RediscoverAfter, and then takes their frontiers for lost: the
// URLs they had accepted and not fetched yet. It follows again the links
// of the archived pages of the sites this node now owns — every link of
// a site the gone member owned, and the links into its sites from the
// others — and queues again its sites' seeds, so that what the gone
// member would have crawled is crawled (Herodotus re-seeds its queue with
// every URL ever seen for the same reason). Links archived already are
// left to their re-crawl entries; the rest pass the seen test.
func (n *Node) rediscoverGone(ctx context.Context) {
	after := n.cfg.RediscoverAfter
	tick := time.NewTicker(min(max(after/4, 50*time.Millisecond), time.Minute))
	defer tick.Stop()
	cutOff := false // said so in the log
	// A pass that failed (the crawler stopped, its page budget spent; a
	// disk error) is tried again later and later, not at every tick: each
	// reads the whole archive.
	var retryAt time.Time
	backoff := after
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Now().Before(retryAt) || !n.crawl.Running() {
			continue
		}
		ds, err := n.departures()
		if err != nil {
			n.log.Warn("node: reading departures", "err", err)
			continue
		}
		// The members gone long enough are taken together: one pass over
		// the archive, however many left (a node cut off from all the
		// others sees every one of them go).
		var gone []departure
		var away []ring.Member // gone long enough or not: who held what
		for _, d := range ds {
			if inRing(n.members.Ring(), d.Member.ID) {
				continue
			}
			away = append(away, d.Member)
			if time.Since(d.Since) >= after {
				gone = append(gone, d)
			}
		}
		if len(gone) == 0 || n.drain.on.Load() {
			continue
		}
		if cur := n.members.Ring().Len(); len(away) > cur {
			// More members gone than here (a network of two that lost one
			// acts): more likely this node is cut
			// off from them than they all failed. Each side of a partition
			// owns the other's sites and crawls them as it finds links, but
			// following every link again would crawl again what the
			// others hold; wait for them to come back, or for more of the
			// network to.
			if !cutOff {
				n.log.Warn("node: more members gone than present; not taking their frontiers for lost while this may be a partition", "gone", len(away), "present", cur)
				cutOff = true
			}
			continue
		}
		cutOff = false
		if err := n.rediscover(ctx, gone); err != nil {
			if ctx.Err() == nil {
				retryAt = time.Now().Add(backoff)
				n.log.Warn("node: following again the links into gone members' sites", "members", len(gone), "err", err, "again in", backoff)
				backoff = min(2*backoff, time.Hour)
			}
			continue
		}
		retryAt, backoff = time.Time{}, after
		for _, d := range gone {
			if err := n.forgetDeparture(d); err != nil {
				n.log.Warn("node: forgetting a departure", "err", err)
			}
		}
	}
}

// rediscover follows again, from the sites this node owns, the links that
// the frontiers (and outboxes) of the gone members may have held.
func (n *Node) rediscover(ctx context.Context, gone []departure) error {
	cur := n.members.Ring()
	formers := make([]former, 0, len(gone))
	ids := make([]string, 0, len(gone))
	for _, d := range gone {
		before, err := ring.New(d.Before, ring.Options{})
		if err != nil {
			return err
		}
		formers = append(formers, former{d.Member.ID, before})
		ids = append(ids, d.Member.ID)
	}
	into := func(site string) (wasGone, follow bool) { return intoGone(site, cur, formers, n.cfg.Replicas) }
	mine := func(site string) bool {
		o, ok := cur.Owner(site)
		return ok && o.ID == n.ID()
	}
	started := time.Now()
	seeds, err := n.crawl.RediscoverSeeds(ctx, func(u string) bool {
		s := urlkey.Site(u)
		wasGone, follow := into(s)
		return mine(s) && wasGone && follow
	})
	if err != nil {
		return err
	}
	sites, err := n.crawl.Sites(ctx)
	if err != nil {
		return err
	}
	pages, links := 0, 0
	for _, site := range sites {
		if !mine(site) {
			continue
		}
		// Every link of a site taken from a gone member (its outbox may
		// have held those to other sites), the links into its sites from
		// the others.
		taken, _ := into(site)
		keep := func(u string) bool {
			if wasGone, follow := into(urlkey.Site(u)); wasGone {
				return follow
			}
			return taken
		}
		err := n.crawl.ArchivedPages(ctx, site, crawl.PageBatch, func(ps []crawl.Page) error {
			q, err := n.crawl.Rediscover(ctx, ps, keep)
			pages += len(ps)
			links += q
			return err
		})
		if err != nil {
			return err
		}
	}
	n.log.Info("node: followed again the links gone members may not have crawled", "members", ids,
		"pages", pages, "links", links, "seeds", seeds, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// A former is a gone member and the ring from before it left.
type former struct {
	id     string
	before *ring.Ring
}

// intoGone says whether site was a gone member's, and whether to follow
// links into it: only where its owner in cur was one of its replicas then,
// and so holds copies of it, knows what was archived there and skips it.
// A node that was not — one that joined since, still being handed the
// site's captures — would fetch them again; with one copy of each capture
// none was, and nothing is followed. A site can have been several gone
// members' in turn (A left, B took it and left): the owner need have been
// a replica in one of those rings. Other sites are followed into.
func intoGone(site string, cur *ring.Ring, formers []former, replicas int) (wasGone, follow bool) {
	now, owned := cur.Owner(site)
	for _, f := range formers {
		if o, ok := f.before.Owner(site); !ok || o.ID != f.id {
			continue
		}
		wasGone = true
		if owned && slices.ContainsFunc(f.before.Replicas(site, replicas), func(m ring.Member) bool { return m.ID == now.ID }) {
			return true, true
		}
	}
	return wasGone, !wasGone
}
