package node

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/replay"
)

// Status is a node's view of itself and its network: what `waggle status
// --json` prints and GET /api/status answers.
type Status struct {
	Node     NodeStatus     `json:"node"`
	Crawl    CrawlStatus    `json:"crawl"`
	Exchange ExchangeStatus `json:"exchange"`
	// Replication and Repair are the figures of copies pushed to replicas
	// and of anti-entropy (a network node only).
	Replication *ReplicationStats `json:"replication,omitempty"`
	Repair      *RepairStats      `json:"repair,omitempty"`
	Scrub       *ScrubStats       `json:"scrub,omitempty"`
	// ContentSeen are the figures of the network's content-seen test (a
	// network node only).
	ContentSeen *ContentSeenStats `json:"content_seen,omitempty"`
	// ReplayCache are the figures of replay's cache of large payloads
	// (a node serving replay only).
	ReplayCache *replay.CacheStats `json:"replay_cache,omitempty"`
	// Members are the live admitted nodes, this one included, as this
	// node sees them, each with its own figures when it answered.
	Members []MemberStatus `json:"members"`
}

// NodeStatus describes this node.
type NodeStatus struct {
	ID            string  `json:"id,omitempty"` // certified ID; empty for a single node
	Name          string  `json:"name,omitempty"`
	Network       string  `json:"network,omitempty"`
	Data          string  `json:"data"`
	HTTP          string  `json:"http,omitempty"`
	Content       string  `json:"content,omitempty"`
	Peer          string  `json:"peer,omitempty"`
	Gossip        string  `json:"gossip,omitempty"`
	Capacity      int     `json:"capacity"`
	Replicas      int     `json:"replicas"`
	UptimeSeconds float64 `json:"uptime_seconds"`
}

// CrawlStatus are a node's crawl figures.
type CrawlStatus struct {
	Captures int64 `json:"captures"`
	Bytes    int64 `json:"bytes"` // archived by this run
	Errors   int64 `json:"errors"`
	// Deferred is the URLs whose fetch failed for a reason that may pass
	// (host or network down), waiting for the hourly retry; Retried, the
	// deferred URLs queued again since the node started.
	Deferred int64 `json:"deferred"`
	Retried  int64 `json:"retried"`
	Robots   int64 `json:"robots_blocked"`
	// Forbidden and Truncated are crawl.Stats's: URLs refused for their
	// private addresses, captures archived cut short.
	Forbidden int64 `json:"forbidden"`
	Truncated int64 `json:"truncated"`
	// Recovered counts URLs not fetched because the previous holder of
	// their host had them (page recovery).
	Recovered int64 `json:"recovered"`
	// Rediscovered counts links and seeds queued again because a member
	// that held their sites is gone for good, with its frontier.
	Rediscovered int64 `json:"rediscovered"`
	// Revisits are the revisit records written since the node started,
	// by why the payload was not stored again (see crawl.Stats).
	Revisits RevisitStatus `json:"revisits"`
	// Stored is the WARC bytes written for captures since the node started.
	Stored int64 `json:"stored_bytes"`
	// RevisitsQueued counts URLs queued again because they fell due.
	RevisitsQueued int64 `json:"revisits_queued"`
	Queued         int   `json:"queued"`
	// Hosts is the number of hosts in this node's frontier: those it owns
	// or owned.
	Hosts int `json:"hosts"`
	// PagesPerSecond is the capture rate over the last minute.
	PagesPerSecond float64  `json:"pages_per_second"`
	Seeds          []string `json:"seeds,omitempty"`
}

// RevisitStatus counts revisit records by profile and reason.
type RevisitStatus struct {
	NotModified int64 `json:"not_modified"` // the server answered 304
	Unchanged   int64 `json:"unchanged"`    // the URL's payload had not changed
	Duplicate   int64 `json:"duplicate"`    // another URL's payload, here or on another node
}

// ContentSeenStats are the figures of the content-seen test since the
// node started (see dedup.Stats).
type ContentSeenStats struct {
	Lookups    uint64 `json:"lookups"`    // payload digests asked about
	Hits       uint64 `json:"hits"`       // found archived by the digest's owner
	Requests   uint64 `json:"requests"`   // lookup requests sent to other nodes
	Registered uint64 `json:"registered"` // new payloads taken by their owner's registry
	Queued     int    `json:"queued"`     // registrations waiting to be sent
	Dropped    uint64 `json:"dropped"`    // registrations given up
	// AwaitingCopies counts new payloads not registered yet because
	// their captures' copies have not all reached their replicas.
	AwaitingCopies int    `json:"awaiting_copies"`
	Errors         uint64 `json:"errors"` // requests that failed (the payload was stored)
	// NotArchived counts hits whose capture the network's index did not
	// have (lost, or named by a faulty peer): the payload was stored.
	NotArchived uint64 `json:"hits_not_archived"`
	// Unproven counts hits whose holder could not prove it has the
	// payload's bytes (archive.PayloadProof): the payload was stored. A
	// count that grows names a faulty peer in the log.
	Unproven uint64 `json:"hits_unproven"`
	// HandedOver counts registry entries moved to the digests' new
	// owners after ring changes.
	HandedOver uint64 `json:"handed_over"`
	// CorruptEntries counts reads of this node's registry that found an
	// entry unreadable (a damaged disk); each was taken as absent.
	CorruptEntries uint64 `json:"registry_corrupt_entries"`
}

// ExchangeStatus are the link-exchange figures (UbiCrawler's communication
// overhead is URLsPerPage).
type ExchangeStatus struct {
	Sent        int64          `json:"urls_sent"`
	Batches     int64          `json:"batches_sent"`
	Failures    int64          `json:"batches_failed"`
	WireBytes   int64          `json:"wire_bytes"`
	TextBytes   int64          `json:"url_text_bytes"`
	Repeats     int64          `json:"repeats_dropped"`
	Pending     map[string]int `json:"pending,omitempty"` // queued per peer ID
	Received    int64          `json:"urls_received"`
	Refused     int64          `json:"urls_refused"`
	URLsPerPage float64        `json:"urls_per_page"` // sent per capture made by this run
}

// MemberStatus is one member as seen from this node.
type MemberStatus struct {
	ID       string  `json:"id"`
	Name     string  `json:"name"`
	State    string  `json:"state"`
	HTTP     string  `json:"http"`
	Peer     string  `json:"peer"`
	Capacity int     `json:"capacity"`
	Share    float64 `json:"share"` // of the ring: the fraction of hosts it owns
	Self     bool    `json:"self,omitempty"`
	// Crawl is the member's own report; nil when it did not answer.
	Crawl *CrawlStatus `json:"crawl,omitempty"`
	Error string       `json:"error,omitempty"`
}

// localStatus is this node's own part: everything but the other members' figures.
func (n *Node) localStatus() Status {
	cs := n.crawl.Stats()
	st := Status{
		Node: NodeStatus{
			Data:          n.cfg.Crawl.Data,
			Capacity:      n.cfg.Capacity,
			Replicas:      n.cfg.Replicas,
			UptimeSeconds: time.Since(n.start).Seconds(),
		},
		Crawl: CrawlStatus{
			Captures: cs.Captures, Bytes: cs.Bytes, Errors: cs.Errors, Deferred: cs.Deferred, Retried: cs.Retried,
			Robots: cs.Robots, Forbidden: cs.Forbidden, Truncated: cs.Truncated, Recovered: cs.Recovered,
			Rediscovered:   cs.Rediscovered,
			Revisits:       RevisitStatus{NotModified: cs.NotModified, Unchanged: cs.Unchanged, Duplicate: cs.Duplicates},
			Stored:         cs.Stored,
			RevisitsQueued: cs.RevisitsQueued,
			Queued:         cs.Queued, Hosts: cs.Hosts, PagesPerSecond: n.rate.perSecond(),
			Seeds: n.crawl.Seeds(),
		},
	}
	a := n.Addrs()
	st.Node.HTTP, st.Node.Content, st.Node.Peer, st.Node.Gossip = a.HTTP, a.Content, a.Peer, a.Gossip
	if cred := n.cfg.Credential; cred != nil {
		st.Node.ID, st.Node.Name, st.Node.Network = cred.ID(), cred.Name(), cred.Network()
	}
	if n.members != nil {
		rs := n.repairStats()
		st.Repair = &rs
		ss := n.scrubStats()
		st.Scrub = &ss
		ps := n.replicationStats()
		st.Replication = &ps
	}
	if srv := n.replay.Load(); srv != nil {
		rc := srv.CacheStats()
		st.ReplayCache = &rc
	}
	if n.contentSeen != nil {
		cs := n.contentSeen.stats()
		cs.CorruptEntries = n.seen.CorruptEntries()
		st.ContentSeen = &cs
	}
	if n.out != nil {
		os := n.out.Stats()
		st.Exchange = ExchangeStatus{
			Sent: os.URLs, Batches: os.Batches, Failures: os.Failures,
			WireBytes: os.Wire, TextBytes: os.Text, Repeats: os.Repeats,
			Pending: n.out.Pending(), Received: n.received.Load(), Refused: n.refused.Load(),
		}
		if cs.New > 0 {
			st.Exchange.URLsPerPage = float64(os.URLs) / float64(cs.New)
		}
	}
	return st
}

// Status returns this node's status with every live member's figures,
// asked of them over the peer channel.
func (n *Node) Status(ctx context.Context) Status {
	st := n.localStatus()
	if n.members == nil {
		st.Members = []MemberStatus{{
			Name: "this node", State: "alive", HTTP: st.Node.HTTP, Capacity: n.cfg.Capacity,
			Share: 1, Self: true, Crawl: &st.Crawl,
		}}
		return st
	}
	ring := n.members.Ring()
	ms := n.members.Members()
	st.Members = make([]MemberStatus, len(ms))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range ms {
		st.Members[i] = MemberStatus{
			ID: m.ID, Name: m.Name, State: m.State.String(), HTTP: m.HTTPAddr, Peer: m.PeerAddr,
			Capacity: m.Capacity, Share: ring.Share(m.ID), Self: m.ID == n.ID(),
		}
		if m.ID == n.ID() {
			st.Members[i].Crawl = &st.Crawl
			continue
		}
		wg.Go(func() {
			var their Status
			if err := n.call(ctx, m.PeerAddr, m.ID, http.MethodGet, statusPath, nil, &their); err != nil {
				st.Members[i].Error = err.Error()
				return
			}
			their.Crawl.Seeds = nil
			st.Members[i].Crawl = &their.Crawl
		})
	}
	wg.Wait()
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	return st
}

func (n *Node) statusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.Status(r.Context()))
	})
}

// rate measures captures per second over the last minute from samples
// taken every few seconds.
type rate struct {
	mu      sync.Mutex
	samples []sample // oldest first, spanning at most rateWindow
}

type sample struct {
	at       time.Time
	captures int64
}

const (
	rateWindow = time.Minute
	rateEvery  = 5 * time.Second
)

func (r *rate) add(at time.Time, captures int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, sample{at, captures})
	for len(r.samples) > 2 && at.Sub(r.samples[1].at) >= rateWindow {
		r.samples = r.samples[1:]
	}
}

func (r *rate) perSecond() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < 2 {
		return 0
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(last.captures-first.captures) / secs
}

// sampleRate feeds rate until ctx is done.
func (n *Node) sampleRate(ctx context.Context) {
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	n.rate.add(time.Now(), n.crawl.Stats().Captures)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n.rate.add(now, n.crawl.Stats().Captures)
		}
	}
}

// Progress reports the captures this node holds and whether it has work
// left: URLs in its frontier, or URLs waiting to reach their owners. A
// network is done with its seeds when no node is busy and no node's
// captures change.
func (n *Node) Progress() (captures int64, busy bool) {
	s := n.crawl.Stats()
	busy = s.Queued > 0
	if n.out != nil && len(n.out.Pending()) > 0 {
		busy = true
	}
	return s.Captures, busy
}

// WaitIdle waits until the nodes of a network (in one process, as in tests
// and benchmarks) have nothing left to do: none is busy (see Progress) and
// their captures have not changed for quiet. It returns the captures then
// and when they last changed.
func WaitIdle(ctx context.Context, nodes []*Node, quiet time.Duration) (captures int64, lastChange time.Time, err error) {
	last := int64(-1)
	for {
		captures = 0
		busy := false
		for _, n := range nodes {
			c, b := n.Progress()
			captures += c
			busy = busy || b
		}
		if busy || captures != last {
			last, lastChange = captures, time.Now()
		} else if time.Since(lastChange) >= quiet {
			return captures, lastChange, nil
		}
		select {
		case <-ctx.Done():
			return captures, lastChange, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
