package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// takeoverWindow is how long after a change of membership a node asks the
// previous holders of a site it now owns before fetching one of its URLs.
// Long enough for their queued URLs to drain; after it, a URL new here is
// taken to be new to the network.
const takeoverWindow = 10 * time.Minute

// pastRings remembers the rings of the last takeoverWindow, for page
// recovery (UbiCrawler §5.1.1).
type pastRings struct {
	mu    sync.Mutex
	last  *ring.Ring
	rings []pastRing // oldest first
}

type pastRing struct {
	until time.Time // when it stopped being the current ring
	r     *ring.Ring
}

// changed records that the current ring is now cur. A node that was
// alone (just started, or cut off) knows no ring of the others: the ring
// of the current members without itself stands for it, which is who held
// its sites while it was away, or before it first joined. That holds too
// when the first ring it sees already has the others in it (it joined
// before it first looked).
func (p *pastRings) changed(cur *ring.Ring, self string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.last
	if (last == nil || last.Len() <= 1) && cur.Len() > 1 {
		others := slices.DeleteFunc(cur.Members(), func(m ring.Member) bool { return m.ID == self })
		if r, err := ring.New(others, ring.Options{}); err == nil {
			last = r
		}
	}
	if last != nil && last.Digest() != cur.Digest() {
		p.rings = append(p.rings, pastRing{until: now, r: last})
	}
	p.last = cur
	for len(p.rings) > 0 && now.Sub(p.rings[0].until) > takeoverWindow {
		p.rings = p.rings[1:]
	}
}

// current returns the ring changed was last told of.
func (p *pastRings) current() *ring.Ring {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// holders returns the IDs of the nodes that held site in the rings of the
// window, but for self.
func (p *pastRings) holders(site, self string, replicas int, now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, pr := range p.rings {
		if now.Sub(pr.until) > takeoverWindow {
			continue
		}
		for _, m := range pr.r.Replicas(site, replicas) {
			if m.ID != self && !slices.Contains(ids, m.ID) {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids
}

// recover is the crawler's Config.Recover: before fetching a URL of a site
// whose holders changed within the window, ask the previous holders whether
// they archived it after since. Any doubt (a holder that does not answer)
// means fetching: a second capture is better than none.
func (n *Node) recover(ctx context.Context, u string, since time.Time) bool {
	holders := n.past.holders(urlkey.Site(u), n.ID(), n.cfg.Replicas, time.Now())
	if len(holders) == 0 {
		return false
	}
	key, err := urlkey.SURT(u)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, id := range holders {
		found := false
		err := n.net.CapturesOn(ctx, id, key, func(c index.Capture) (bool, error) {
			found = c.URL == u && c.Time.Truncate(time.Second).After(since.Truncate(time.Second))
			return !found, nil
		})
		if err == nil && found {
			return true
		}
	}
	return false
}
