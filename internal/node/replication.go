package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// replicator is the crawler's crawl.Replicator: each capture this node
// makes is queued, in the batch that indexes it, for the other replicas of
// its site (the owner and the next r−1 distinct nodes on the ring).
type replicator struct{ n *Node }

func (r replicator) Captured(b *pebble.Batch, c index.Capture, locs []warc.Location) error {
	peers := r.n.otherReplicas(urlkey.SiteOfKey(c.URLKey))
	if len(peers) == 0 {
		return nil
	}
	return r.n.push.Add(b, peers, replicate.Entry{Capture: c, Records: locs})
}

func (r replicator) Committed() { r.n.push.Committed() }

// otherReplicas are the IDs of the nodes but this one that should hold site.
func (n *Node) otherReplicas(site string) []string {
	var ids []string
	for _, m := range n.members.Ring().Replicas(site, n.cfg.Replicas) {
		if m.ID != n.ID() {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// storeCopies takes the records another node pushes: its copies of
// captures this node is a replica of.
func (n *Node) storeCopies(ctx context.Context, from string, copies []replicate.Copy) error {
	cs := make([]crawl.Copy, len(copies))
	for i, c := range copies {
		cs[i] = crawl.Copy{Member: c.Member, Capture: c.Capture, Record: c.Record}
	}
	stored, err := n.crawl.Store(ctx, cs)
	n.replicaStored.Add(int64(stored))
	return err
}

// ReplicationStats are a node's replication figures.
type ReplicationStats struct {
	Replicas int `json:"replicas"`
	// UnderReplicated counts captures made here that some replica has not
	// acknowledged yet: fewer than r durable copies.
	UnderReplicated int            `json:"under_replicated"`
	Pending         map[string]int `json:"pending,omitempty"` // entries queued per peer
	Pushed          int64          `json:"captures_pushed"`
	PushedBytes     int64          `json:"bytes_pushed"`
	Dropped         int64          `json:"dropped"` // copies abandoned (unreadable here); anti-entropy restores them
	Received        int64          `json:"records_received"`
	// HandedOver counts captures of sites this node is not a replica of
	// (any more) that it pushed to their replicas.
	HandedOver int64 `json:"handed_over"`
	// HandedOverBytes counts the record bytes queued by hand-overs (here
	// and by leave), times the nodes each went to; they are charged to
	// the repair budget.
	HandedOverBytes int64 `json:"handed_over_bytes"`
	// Released counts those taken out of this node's index once every
	// replica confirmed it holds them.
	Released int64 `json:"released"`
	// Compacted counts the segments rewritten without released copies,
	// and Reclaimed the disk bytes that freed.
	Compacted int64 `json:"segments_compacted"`
	Reclaimed int64 `json:"bytes_reclaimed"`
}

func (n *Node) replicationStats() ReplicationStats {
	ps := n.push.Stats()
	return ReplicationStats{
		Replicas: n.cfg.Replicas, UnderReplicated: n.push.Under(), Pending: n.push.Pending(),
		Pushed: ps.Entries, PushedBytes: ps.Bytes, Dropped: ps.Dropped, Received: n.replicaStored.Load(),
		HandedOver: n.handedOver.Load(), HandedOverBytes: n.pushedOver.Load(), Released: n.released.Load(),
		Compacted: n.compacted.Load(), Reclaimed: n.reclaimed.Load(),
	}
}

// metricsHandler serves the node's figures in the Prometheus text format.
func (n *Node) metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := n.localStatus()
		var b strings.Builder
		metric := func(name, help, kind string, v float64) {
			fmt.Fprintf(&b, "# HELP waggle_%s %s\n# TYPE waggle_%s %s\nwaggle_%s %g\n", name, help, name, kind, name, v)
		}
		c := st.Crawl
		metric("captures", "Captures this node made, in its data directory.", "gauge", float64(c.Captures))
		metric("crawl_errors_total", "Fetches that failed.", "counter", float64(c.Errors))
		metric("frontier_queued", "URLs queued in the frontier.", "gauge", float64(c.Queued))
		metric("frontier_hosts", "Hosts in the frontier.", "gauge", float64(c.Hosts))
		metric("pages_per_second", "Capture rate over the last minute.", "gauge", c.PagesPerSecond)
		metric("recovered_total", "URLs not fetched because a previous holder had them.", "counter", float64(c.Recovered))
		metric("rediscovered_total", "Links and seeds queued again because a member gone for good held their sites.", "counter", float64(c.Rediscovered))
		metric("revisits_not_modified_total", "Revisit records of 304 Not Modified answers.", "counter", float64(c.Revisits.NotModified))
		metric("revisits_unchanged_total", "Revisit records of unchanged payloads.", "counter", float64(c.Revisits.Unchanged))
		metric("revisits_duplicate_total", "Revisit records of payloads archived under another URL.", "counter", float64(c.Revisits.Duplicate))
		metric("revisits_queued_total", "URLs queued again because they fell due.", "counter", float64(c.RevisitsQueued))
		metric("stored_bytes_total", "WARC bytes written for captures.", "counter", float64(c.Stored))
		metric("deferred_urls", "URLs whose fetch failed for a reason that may pass, waiting for the hourly retry.", "gauge", float64(c.Deferred))
		if cs := st.ContentSeen; cs != nil {
			metric("content_seen_lookups_total", "Payload digests asked about in the network's content-seen test.", "counter", float64(cs.Lookups))
			metric("content_seen_hits_total", "Payloads found archived by their digest's owner.", "counter", float64(cs.Hits))
			metric("content_seen_errors_total", "Content-seen requests that failed (the payload was stored).", "counter", float64(cs.Errors))
			metric("content_seen_hits_not_archived_total", "Content-seen hits whose capture was not in the archive (the payload was stored).", "counter", float64(cs.NotArchived))
			metric("content_seen_hits_unproven_total", "Content-seen hits whose holder did not prove it has the payload (the payload was stored).", "counter", float64(cs.Unproven))
			metric("content_seen_handed_over_total", "Registry entries moved to their digests' new owners after ring changes.", "counter", float64(cs.HandedOver))
			metric("content_seen_registry_corrupt_entries_total", "Reads of this node's content-seen registry that found an entry unreadable (taken as absent).", "counter", float64(cs.CorruptEntries))
			metric("content_seen_registrations_queued", "Payload registrations waiting to reach their digest's owner.", "gauge", float64(cs.Queued))
		}
		if st.Replication != nil {
			rs := st.Replication
			metric("under_replicated_captures", "Captures made here with fewer than r acknowledged copies.", "gauge", float64(rs.UnderReplicated))
			metric("replication_pushed_total", "Captures pushed to replicas.", "counter", float64(rs.Pushed))
			metric("replication_received_total", "Records stored from other nodes' pushes.", "counter", float64(rs.Received))
			metric("handed_over_total", "Captures of sites this node no longer holds, pushed to their replicas.", "counter", float64(rs.HandedOver))
			metric("released_total", "Captures taken out of this node's index once their replicas confirmed them.", "counter", float64(rs.Released))
			metric("segments_compacted_total", "WARC segments rewritten without released captures.", "counter", float64(rs.Compacted))
			metric("reclaimed_bytes_total", "Disk bytes freed by those rewrites.", "counter", float64(rs.Reclaimed))
		}
		if rc := st.ReplayCache; rc != nil {
			metric("replay_cache_bytes", "Payload bytes replay keeps for range requests.", "gauge", float64(rc.Bytes))
			metric("replay_cache_hits_total", "Replay requests answered from a kept or shared load.", "counter", float64(rc.Hits))
			metric("replay_cache_loads_total", "Records replay loaded.", "counter", float64(rc.Loads))
		}
		if st.Repair != nil {
			metric("antientropy_rounds_total", "Anti-entropy rounds.", "counter", float64(st.Repair.Rounds))
			metric("antientropy_copied_total", "Records (captures, their requests and metadata) copied by anti-entropy.", "counter", float64(st.Repair.Copied))
			metric("antientropy_bytes_total", "Bytes of anti-entropy comparisons.", "counter", float64(st.Repair.Bytes))
			metric("antientropy_lacking_captures", "Captures the last round with each member found missing here and did not copy.", "gauge", float64(st.Repair.Lacking))
			metric("antientropy_peers_lack_captures", "Captures of this node's the last round with each member found that member lacked.", "gauge", float64(st.Repair.PeersLack))
			metric("antientropy_members_not_compared", "Live members with no anti-entropy round since this node started.", "gauge", float64(st.Repair.NotCompared))
		}
		if st.Exchange.Sent+st.Exchange.Received > 0 || n.out != nil {
			metric("links_sent_total", "URLs sent to their owners.", "counter", float64(st.Exchange.Sent))
			metric("links_received_total", "URLs received from other nodes.", "counter", float64(st.Exchange.Received))
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte(b.String()))
	})
}
