package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/membership"
	"github.com/waggle-archive/waggle/internal/outbox"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// router is the crawler's crawl.Router: the ring of the live members says
// who owns a site, and the outbox carries URLs to them.
type router struct {
	n       *Node
	self    string
	members *membership.Membership
	out     *outbox.Outbox
}

func (r *router) Owner(site string) string {
	if r.n.drain.on.Load() {
		return r.n.ownerWhileDraining(site)
	}
	o, ok := r.members.Ring().Owner(site)
	if !ok || o.ID == r.self {
		return ""
	}
	return o.ID
}

func (r *router) Route(b *pebble.Batch, node string, items []frontier.Item) error {
	return r.out.Add(b, node, links(items))
}

func (r *router) Handover(b *pebble.Batch, node string, items []frontier.Item) error {
	return r.out.Forward(b, node, links(items))
}

func (r *router) Committed() { r.out.Committed() }

func (r *router) Idle() { r.out.Flush() }

func links(items []frontier.Item) []outbox.Link {
	ls := make([]outbox.Link, len(items))
	for i, it := range items {
		ls[i] = outbox.Link{URL: it.URL, Depth: it.Depth, Embed: it.Embed, Seed: it.Seed,
			// Past the frontier's limits the receiver drops the URL
			// whatever the count; capped, it still travels.
			Redirects: min(it.Redirects, outbox.MaxHops), OffScopeHops: min(it.OffScopeHops, outbox.MaxHops)}
	}
	return ls
}

// ownerOfURL is the ring's owner of a URL's site, this node included, for
// rerouting queued URLs.
func (n *Node) ownerOfURL(u string) string {
	if n.drain.on.Load() {
		return n.ownerWhileDraining(urlkey.Site(u))
	}
	o, ok := n.members.Ring().Owner(urlkey.Site(u))
	if !ok {
		return ""
	}
	return o.ID
}

// seedSyncEvery is how often a node asks one member, picked at random,
// for the seeds it knows, besides asking each member once as it appears
// and being told of new seeds when they are submitted: seeds define the
// scope every node judges URLs by, and a seed a node missed reaches it
// within a few rounds, as gossip does, at one call per node per round.
const seedSyncEvery = time.Minute

// watch follows membership: when the members change, URLs queued for
// peers move to their new owners (a peer gone for good keeps nothing), and
// new members are asked for their seeds.
func (n *Node) watch(ctx context.Context) {
	tick := time.NewTicker(seedSyncEvery)
	defer tick.Stop()
	n.syncSeeds(ctx, false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.members.Changes():
			prev, cur := n.past.current(), n.members.Ring()
			n.past.changed(cur, n.ID(), time.Now())
			if err := n.noteDepartures(prev, cur, time.Now()); err != nil {
				n.log.Error("node: recording departures", "err", err)
			}
			n.rememberPeers()
			err := n.crawl.Update(ctx, func(b *pebble.Batch) error {
				if err := n.out.Reroute(b, n.ownerOfURL); err != nil {
					return err
				}
				return n.push.Retarget(b, n.otherReplicas)
			})
			if err != nil && ctx.Err() == nil {
				n.log.Error("node: rerouting queued URLs and copies", "err", err)
			}
			n.syncSeeds(ctx, false)
			n.requestHandOff(ctx)
		case <-tick.C:
			n.syncSeeds(ctx, true)
		}
	}
}

// syncSeeds asks members for their seeds: those not asked yet, or one at
// random.
func (n *Node) syncSeeds(ctx context.Context, random bool) {
	ms := n.members.Members()
	if random {
		ms = slices.DeleteFunc(ms, func(m membership.Member) bool { return m.ID == n.ID() })
		if len(ms) == 0 {
			return
		}
		ms = ms[rand.IntN(len(ms)):][:1]
	}
	for _, m := range ms {
		if m.ID == n.ID() {
			continue
		}
		n.seedMu.Lock()
		done := n.seedSynced[m.ID]
		n.seedMu.Unlock()
		if done && !random {
			continue
		}
		var seeds []string
		if err := n.call(ctx, m.PeerAddr, m.ID, http.MethodGet, seedsPath, nil, &seeds); err != nil {
			n.log.Warn("node: asking a member for its seeds", "member", m.Name, "err", err)
			continue
		}
		if err := n.crawl.AddSeeds(ctx, seeds); err != nil {
			n.log.Warn("node: recording seeds", "err", err)
			continue
		}
		n.seedMu.Lock()
		n.seedSynced[m.ID] = true
		n.seedMu.Unlock()
	}
}

// pushSeeds tells the other members of new seeds, best effort: a member
// that misses them asks at its next sync.
func (n *Node) pushSeeds(ctx context.Context, seeds []string) {
	if n.members == nil {
		return
	}
	for _, m := range n.members.Members() {
		if m.ID == n.ID() {
			continue
		}
		if err := n.call(ctx, m.PeerAddr, m.ID, http.MethodPost, seedsPath, seeds, nil); err != nil {
			n.log.Warn("node: telling a member of new seeds", "member", m.Name, "err", err)
		}
	}
}

// maxAnswer bounds a JSON answer read from a peer.
const maxAnswer = 8 << 20

// call makes a JSON call to a member over the peer channel.
func (n *Node) call(ctx context.Context, addr, id, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := n.client.Do(ctx, addr, id, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("node: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("node: %s %s: %s: %.200s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("node: %s %s: answer over %d bytes", method, path, maxAnswer)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("node: %s %s: %w", method, path, err)
	}
	return nil
}

// knownPeersKey holds the gossip addresses of the members last seen, so
// that a node restarted on its data can rejoin through any of them, not
// only through the nodes named by --join (which may be gone).
const knownPeersKey = "k/peers"

func (n *Node) rememberPeers() {
	var addrs []string
	for _, m := range n.members.Members() {
		if m.ID != n.ID() && m.GossipAddr != "" {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	if len(addrs) == 0 {
		return // alone: keep the last list, for the next start
	}
	v, _ := json.Marshal(addrs)
	if err := n.db.Set([]byte(knownPeersKey), v, pebble.NoSync); err != nil {
		n.log.Warn("node: remembering peers", "err", err)
	}
}

// forgetPeer takes a member that retired out of the gossip addresses
// remembered, so that a node left alone does not try to join through it
// at its next start.
func (n *Node) forgetPeer(b *pebble.Batch, gossip string) error {
	addrs := n.knownPeers()
	kept := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == gossip })
	if gossip == "" || len(kept) == len(addrs) {
		return nil
	}
	v, _ := json.Marshal(kept)
	return b.Set([]byte(knownPeersKey), v, nil)
}

// Networked reports whether the node whose database is db has had other
// members: its revisits may then name payloads that other nodes hold.
func Networked(db *pebble.DB) (bool, error) {
	_, closer, err := db.Get([]byte(knownPeersKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("node: %w", err)
	}
	closer.Close()
	return true, nil
}

// knownPeers returns the gossip addresses remembered by rememberPeers.
func (n *Node) knownPeers() []string {
	v, closer, err := n.db.Get([]byte(knownPeersKey))
	if err != nil {
		return nil
	}
	defer closer.Close()
	var addrs []string
	if json.Unmarshal(v, &addrs) != nil || len(addrs) > 10_000 {
		return nil
	}
	return addrs
}
