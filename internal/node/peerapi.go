package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/waggle-archive/waggle/internal/antientropy"
	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/dedup"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/outbox"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/replicate"
)

// Paths of the node's own peer endpoints; the outbox (/v1/urls) and the
// archive (/v1/archive/) serve theirs.
const (
	seedsPath  = "/v1/seeds"  // GET: the seeds this node knows; POST: learn seeds
	statusPath = "/v1/status" // GET: this node's status
	nodePath   = "/v1/node"   // GET: where this node gossips
	// POST: the caller left the network for good, its part handed over
	// (waggle node leave): its departure needs no rediscovery.
	retiredPath = "/v1/retired"
)

// maxSeedsBody bounds a POST of seeds.
const maxSeedsBody = 4 << 20

// nodeInfo answers nodePath: what a node joining through this one needs.
type nodeInfo struct {
	ID     string `json:"id"`
	Gossip string `json:"gossip"`
}

// peerHandler serves the peer channel. Every request reaching it comes from
// an admitted node: peer.Server checked its certificate.
func (n *Node) peerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(outbox.Path, outbox.Handler(n.acceptLinks))
	mux.Handle("/v1/archive/", archive.Handler(n.local, func(site string) bool {
		id, _, ok := n.owner(site)
		return ok && id == n.ID()
	}))
	mux.Handle(antientropy.Path, antientropy.Handler(shared{n}))
	mux.Handle(replicate.Path, replicate.Handler(n.storeCopies))
	mux.Handle(dedup.Path, n.seen.Handler())
	mux.HandleFunc("GET "+seedsPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.crawl.Seeds())
	})
	mux.HandleFunc("POST "+seedsPath, func(w http.ResponseWriter, r *http.Request) {
		var seeds []string
		if err := json.NewDecoder(io.LimitReader(r.Body, maxSeedsBody)).Decode(&seeds); err != nil {
			http.Error(w, "node: seeds: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := n.crawl.AddSeeds(r.Context(), seeds); err != nil {
			http.Error(w, "node: seeds: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.localStatus())
	})
	mux.HandleFunc("POST "+retiredPath, func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := peer.Caller(r.Context())
		if !ok {
			http.Error(w, "node: retired: no caller identity", http.StatusForbidden)
			return
		}
		var body struct {
			Gossip string `json:"gossip"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil {
			http.Error(w, "node: retired: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := n.noteRetired(id, body.Gossip, time.Now()); err != nil {
			http.Error(w, "node: retired: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+nodePath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nodeInfo{ID: n.ID(), Gossip: n.members.Self().GossipAddr})
	})
	return mux
}

// acceptLinks takes URLs another node found for hosts this node owns.
func (n *Node) acceptLinks(ctx context.Context, from string, links []outbox.Link) error {
	items := make([]frontier.Item, len(links))
	for i, l := range links {
		items[i] = frontier.Item{URL: l.URL, Depth: l.Depth, Embed: l.Embed, Seed: l.Seed, Redirects: l.Redirects, OffScopeHops: l.OffScopeHops}
	}
	refused, err := n.crawl.Accept(ctx, items)
	if err != nil {
		return err
	}
	n.received.Add(int64(len(links) - refused))
	n.refused.Add(int64(refused))
	if refused > 0 {
		n.log.Debug("node: refused URLs from a peer", "from", from, "refused", refused, "of", len(links))
	}
	return nil
}

// gossipOf asks the node at a peer address where it gossips.
func (n *Node) gossipOf(ctx context.Context, addr string) (string, error) {
	id, _, err := n.client.Identify(ctx, addr)
	if err != nil {
		return "", err
	}
	var info nodeInfo
	if err := n.call(ctx, addr, id, http.MethodGet, nodePath, nil, &info); err != nil {
		return "", err
	}
	if info.Gossip == "" {
		return "", errors.New("node: the node did not say where it gossips")
	}
	return info.Gossip, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
