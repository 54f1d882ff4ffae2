// Package node runs a waggle node: the long-lived process that crawls its
// share of the web, archives it, serves replay, and — given a network
// credential — takes part in a network of identical peers with no
// coordinator.
//
// Data flows one way through a node (see docs/architecture.md):
//
//	frontier → fetch → WARC + index → extract → router ─┬→ frontier (hosts this node owns)
//	                                                     └→ outbox → peer → owner's frontier
//
// Membership (gossip) says which nodes are live; the ring over them says
// which node owns a host (urlkey.Site); the crawler fetches only what this
// node owns and hands the rest, durably, to the owners. Replay asks the
// owner of a URL's host for its captures, so any node answers for the
// whole archive.
package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/antientropy"
	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/dedup"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/membership"
	"github.com/waggle-archive/waggle/internal/outbox"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/replay"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/wacz"
)

// Config configures a node. Crawl.Data is its data directory; the other
// crawl settings apply to everything the node fetches.
type Config struct {
	Crawl crawl.Config

	// HTTPAddr serves replay and /api/status; ContentAddr the replayed
	// pages (default: HTTPAddr's host, next port). Empty HTTPAddr: no replay.
	HTTPAddr, ContentAddr string

	// Credential admits the node to a network; nil runs a single node,
	// which needs none of the settings below.
	Credential *admission.Credential
	// PeerAddr is where the node serves peer RPC (mutual TLS).
	PeerAddr string
	// GossipAddr is where membership gossip is served, over TCP and UDP
	// (default: PeerAddr's host, next port; port 0 stays 0).
	GossipAddr string
	// Advertise is the host name or IP the other nodes reach this node
	// at (default: the host of PeerAddr, which must then be a specific
	// address).
	Advertise string
	// Join lists peer addresses (host:port) of nodes of the network; empty
	// starts a new network.
	Join []string
	// Capacity is the node's relative capacity (default 1): its share of
	// hosts is in proportion.
	Capacity int
	// Replicas is how many nodes keep each capture (default 3). Every node
	// of a network must use the same: Open fails with
	// membership.ErrReplicasDisagree when the network keeps another count.
	Replicas int
	// Tuning sets membership timings (default: memberlist's LAN settings).
	Tuning membership.Tuning
	// RepairEvery is the interval of anti-entropy rounds (default
	// DefaultRepairEvery); RepairRate caps their bytes per second,
	// comparisons and copies together (default DefaultRepairRate), so
	// that repair never starves crawling or replay.
	RepairEvery time.Duration
	RepairRate  int64
	// RediscoverAfter is how long a member must stay away before the
	// others take its frontier for lost and follow again the links into
	// its sites (default DefaultRediscoverAfter).
	RediscoverAfter time.Duration
	// ScrubRate caps the bytes per second of this node's own records read
	// back against their digests, a part each repair round (default
	// DefaultScrubRate; negative: no scrub).
	ScrubRate int64
	// ReplayCacheBytes is replay.Config.PayloadCacheBytes.
	ReplayCacheBytes int64
	// ReplaySpoolBytes is replay.Config.SpoolBytes, of a spool in
	// Crawl.Data/replay-spool.
	ReplaySpoolBytes int64
	// CompactMinDead is the share of a WARC segment's bytes that released
	// copies must make up before the segment is rewritten without them
	// (default DefaultCompactMinDead).
	CompactMinDead float64
	// LeaveTimeout is how long a stopping node waits for the news of its
	// departure to spread (default 2s). Negative: it stops without
	// announcing it, as a crash would, and the others notice by failure
	// detection.
	LeaveTimeout time.Duration
	// Faults, if not nil, injects network faults between the nodes that
	// share it (tests only).
	Faults *Faults

	Logger *slog.Logger

	// joinAnyway has the node join through Join even when those nodes are
	// of another network, as a stranger that ignores the refusal would
	// (tests of the network's own defences only).
	joinAnyway bool
}

// A Node is a running waggle node. Open it, Run it; Run's end closes it.
type Node struct {
	cfg   Config
	log   *slog.Logger
	db    *pebble.DB
	crawl *crawl.Crawler
	local *archive.Local
	arc   archive.Archive // this node's archive, or the network's when it is in one
	// exported is what an export reads: arc, with ranges gathered from
	// every node of a network.
	exported wacz.Archive
	start    time.Time

	// Listeners, opened by Open so that their addresses are known at once.
	peerLn, uiLn, contentLn net.Listener
	admin                   *adminServer

	// Network parts; nil for a single node.
	client  *peer.Client
	members *membership.Membership
	out     *outbox.Outbox
	router  *router

	received, refused atomic.Int64 // URLs accepted from peers, and turned down
	rate              rate
	net               *archive.Network // the network's archive (nil for a single node)
	past              pastRings        // recent rings, for page recovery
	departMu          sync.Mutex       // orders noteDepartures and forgetDeparture
	budget            *antientropy.Budget
	repairs           repairCounters
	scrubs            scrubCounters
	push              *replicate.Queue
	seen              *dedup.Registry // payload digests this node keeps for the network
	dedup             *dedup.Client
	contentSeen       *contentSeen // the crawler's view of dedup, which checks its hits
	registryPasses    registryPasses
	drain             drainState
	handoff           handoffRunner
	handedOver        atomic.Int64                  // captures of sites not held here, pushed to their replicas
	pushedOver        atomic.Int64                  // bytes queued by hand-overs and leave, charged to the repair budget
	pushing           atomic.Int32                  // hand-overs reading locations to queue (pushLocal)
	orphans           atomic.Int64                  // captures indexed here of sites this node does not hold
	releaseAfter      index.Position                // where the last release pass stopped (the repair loop's own)
	released          atomic.Int64                  // of those, taken out of the index once the replicas confirmed
	compacted         atomic.Int64                  // segments rewritten without released copies
	reclaimed         atomic.Int64                  // bytes those rewrites freed
	replicaStored     atomic.Int64                  // records stored from other nodes' pushes
	replay            atomic.Pointer[replay.Server] // once Run serves replay

	seedMu     sync.Mutex
	seedSynced map[string]bool // members whose seeds this node has
}

// Open opens the node's data directory and listeners, and joins its network.
func Open(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Crawl.Data == "" {
		return nil, errors.New("node: no data directory")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 1
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Capacity < 1 || cfg.Capacity > membership.MaxCapacity {
		return nil, fmt.Errorf("node: capacity %d out of range [1, %d]", cfg.Capacity, membership.MaxCapacity)
	}
	if cfg.Replicas < 1 || cfg.Replicas > membership.MaxReplicas {
		return nil, fmt.Errorf("node: replicas %d out of range [1, %d]", cfg.Replicas, membership.MaxReplicas)
	}
	if cfg.RediscoverAfter <= 0 {
		cfg.RediscoverAfter = DefaultRediscoverAfter
	}
	if cfg.RepairEvery <= 0 {
		cfg.RepairEvery = DefaultRepairEvery
	}
	if cfg.CompactMinDead <= 0 {
		cfg.CompactMinDead = DefaultCompactMinDead
	}
	if cfg.RepairRate <= 0 {
		cfg.RepairRate = DefaultRepairRate
	}
	if cfg.ScrubRate == 0 {
		cfg.ScrubRate = DefaultScrubRate
	}
	if cfg.LeaveTimeout == 0 {
		cfg.LeaveTimeout = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n = &Node{cfg: cfg, log: log, start: time.Now(), seedSynced: map[string]bool{}}
	opened := n // every "return nil, err" below sets n to nil before this runs
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	if err := os.MkdirAll(cfg.Crawl.Data, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if n.db, err = crawl.OpenDB(cfg.Crawl.Data); err != nil {
		return nil, err
	}
	n.local = archive.NewLocal(index.New(n.db), filepath.Join(cfg.Crawl.Data, "warc"))
	n.arc, n.exported = n.local, n.local
	if n.admin, err = listenAdmin(cfg.Crawl.Data); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "" {
		if n.uiLn, n.contentLn, err = replay.Listen(cfg.HTTPAddr, cfg.ContentAddr); err != nil {
			return nil, err
		}
	}
	if cfg.Credential != nil {
		if err := n.openNetwork(ctx); err != nil {
			return nil, err
		}
	}
	cc := cfg.Crawl
	cc.DB = n.db
	cc.Continuous = true
	cc.Recrawl = true
	cc.Logger = log
	if n.router != nil {
		cc.Router = n.router
		cc.Recover = n.recover
		cc.Replicator = replicator{n}
		cc.DropLost = true // what the disk lost, the replicas still hold
		n.contentSeen = newContentSeen(n.dedup, n.net, n.push.CopiesOf, n.log)
		cc.Dedup = n.contentSeen
	}
	if n.crawl, err = crawl.Open(cc); err != nil {
		return nil, err
	}
	return n, nil
}

// openNetwork opens the peer listener and the outbox, and starts membership.
func (n *Node) openNetwork(ctx context.Context) error {
	cfg := n.cfg
	if cfg.PeerAddr == "" {
		return errors.New("node: a network node needs a peer address (--peer)")
	}
	var err error
	if n.peerLn, err = net.Listen("tcp", cfg.PeerAddr); err != nil {
		return fmt.Errorf("node: peer listener: %w", err)
	}
	advertise := cfg.Advertise
	if advertise == "" {
		host, _, _ := net.SplitHostPort(cfg.PeerAddr)
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("node: --peer %s listens on every address: say with --advertise which one the other nodes reach", cfg.PeerAddr)
		}
		advertise = host
	}
	peerAddr := withHost(advertise, n.peerLn.Addr())
	httpAddr := peerAddr // a node without replay still advertises a valid address
	if n.uiLn != nil {
		httpAddr = withHost(advertise, n.uiLn.Addr())
	}
	gossip := cfg.GossipAddr
	if gossip == "" {
		host, _, _ := net.SplitHostPort(cfg.PeerAddr)
		port := n.peerLn.Addr().(*net.TCPAddr).Port + 1
		if _, p, _ := net.SplitHostPort(cfg.PeerAddr); p == "0" {
			port = 0
		}
		gossip = net.JoinHostPort(host, strconv.Itoa(port))
	}
	n.client = peer.NewClient(cfg.Credential)
	cfg.Faults.hookClient(cfg.Credential.ID(), peerAddr, n.client)
	join, err := n.resolveJoin(ctx, cfg.Join)
	if err != nil {
		return err
	}
	for _, a := range n.knownPeers() {
		if !slices.Contains(join, a) {
			join = append(join, a)
		}
	}
	n.router = &router{n: n, self: cfg.Credential.ID()}
	n.out, err = outbox.Open(outbox.Config{
		DB:      n.db,
		Client:  n.client,
		Resolve: n.resolve,
		Logger:  n.log,
	})
	if err != nil {
		return err
	}
	n.router.out = n.out
	n.push, err = replicate.Open(replicate.Config{
		DB:      n.db,
		Client:  n.client,
		WARCDir: filepath.Join(cfg.Crawl.Data, "warc"),
		Resolve: n.resolve,
		Logger:  n.log,
	})
	if err != nil {
		return err
	}
	gossipTransport, err := cfg.Faults.transport(cfg.Credential.ID(), gossip, n.log)
	if err != nil {
		return err
	}
	advertiseAt, err := advertiseGossip(ctx, advertise, gossip)
	if err != nil {
		return err
	}
	n.members, err = membership.Start(ctx, membership.Config{
		Credential:    cfg.Credential,
		BindAddr:      gossip,
		AdvertiseAddr: advertiseAt,
		Capacity:      cfg.Capacity,
		Replicas:      cfg.Replicas,
		HTTPAddr:      httpAddr,
		PeerAddr:      peerAddr,
		Join:          join,
		Verify: func(ctx context.Context, m membership.Member) error {
			return n.client.Hello(ctx, m.PeerAddr, m.ID)
		},
		Logger:    n.log,
		Tuning:    cfg.Tuning,
		Transport: gossipTransport,
	})
	if err != nil {
		return err
	}
	n.router.members = n.members
	n.seen = dedup.NewRegistry(n.db)
	n.dedup = dedup.NewClient(dedup.ClientConfig{
		Self:   cfg.Credential.ID(),
		Owner:  n.digestOwner,
		Local:  n.seen,
		Send:   n.sendDedup,
		Logger: n.log,
	})
	n.net = archive.NewNetwork(archive.NetworkConfig{
		Local:   n.local,
		Self:    cfg.Credential.ID(),
		Client:  n.client,
		Owner:   n.owner,
		Members: n.liveNodes,
		Damaged: n.dropDamaged,
		Logger:  n.log,
	})
	n.arc, n.exported = n.net, exportedNetwork{n.net}
	n.budget = antientropy.NewBudget(cfg.RepairRate)
	n.past.changed(n.members.Ring(), n.ID(), time.Now())
	return nil
}

// withHost is the address of a listener as the other nodes reach it.
func withHost(host string, a net.Addr) string {
	return net.JoinHostPort(host, strconv.Itoa(a.(*net.TCPAddr).Port))
}

// advertiseGossip is the gossip address to advertise when it is not the
// bind address ("" lets memberlist use the bind address). memberlist
// advertises IP addresses only: a name is resolved, once, at start. Left
// to itself with a wildcard bind address, memberlist would pick a private
// address of this machine, which nodes of other institutions cannot reach
// (or fail to start where there is none).
func advertiseGossip(ctx context.Context, advertise, bind string) (string, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil || advertise == "" || host == advertise || port == "0" {
		return "", nil
	}
	if net.ParseIP(advertise) != nil {
		return net.JoinHostPort(advertise, port), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", advertise)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("node: --advertise %s: gossip advertises an IP address, and the name does not resolve to one: %v", advertise, err)
	}
	ip := ips[0]
	for _, a := range ips {
		if a.Unmap().Is4() {
			ip = a.Unmap() // the address family other nodes most likely share
			break
		}
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// resolveJoin turns the peer addresses of --join into gossip addresses, by
// asking each node (over the authenticated channel) where it gossips. An
// address that does not answer now is tried later at the conventional
// gossip port, the peer port plus one. One that answers with a certificate
// of another network is a mistake to report: this node's credential, or
// the address, is wrong, and it would run as a network of its own.
func (n *Node) resolveJoin(ctx context.Context, peers []string) ([]string, error) {
	var out []string
	for _, addr := range peers {
		g, err := n.gossipOf(ctx, addr)
		if errors.As(err, new(x509.UnknownAuthorityError)) && !n.cfg.joinAnyway {
			return nil, fmt.Errorf("node: --join %s is a node of another network than this node's credential's (%s): %w", addr, n.cfg.Credential.Network(), err)
		}
		if err != nil {
			n.log.Warn("node: cannot ask a --join node for its gossip address; trying the peer port + 1", "addr", addr, "err", err)
			host, port, perr := net.SplitHostPort(addr)
			p, aerr := strconv.Atoi(port)
			if perr != nil || aerr != nil {
				n.log.Error("node: --join address is not host:port", "addr", addr)
				continue
			}
			g = net.JoinHostPort(host, strconv.Itoa(p+1))
		}
		out = append(out, g)
	}
	return out, nil
}

// resolve gives the peer address of a live member, for the outbox.
func (n *Node) resolve(id string) (string, bool) {
	for _, m := range n.members.Members() {
		if m.ID == id {
			return m.PeerAddr, true
		}
	}
	return "", false
}

// owner is the node that owns a site, for the network archive.
func (n *Node) owner(site string) (id, addr string, ok bool) {
	o, ok := n.members.Ring().Owner(site)
	if !ok {
		return "", "", false
	}
	addr, ok = n.resolve(o.ID)
	return o.ID, addr, ok
}

func (n *Node) liveNodes() []archive.Node {
	ms := n.members.Members()
	out := make([]archive.Node, 0, len(ms))
	for _, m := range ms {
		out = append(out, archive.Node{ID: m.ID, Addr: m.PeerAddr})
	}
	return out
}

// credentialWarning is how long before its credential expires a node
// says so in its log.
const credentialWarning = 7 * 24 * time.Hour

// untilExpired waits until the node's credential expires, then says so:
// the other nodes refuse it from then on, and a node they gossip with but
// will not talk to would hold its share of the ring, its URLs piling up
// in their outboxes. It warns a week ahead.
func (n *Node) untilExpired(ctx context.Context, cred *admission.Credential) error {
	left := time.Until(cred.NotAfter())
	if left < credentialWarning {
		n.log.Warn("node: this node's credential expires soon; renew it (waggle network admit --renew) and restart the node before then",
			"expires", cred.NotAfter().UTC().Format(time.RFC3339))
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
		return fmt.Errorf("%w: %s expired at %s; renew it (waggle network admit --renew) and start the node again",
			ErrCredentialExpired, cred.Name(), cred.NotAfter().UTC().Format(time.RFC3339))
	}
}

// ErrCredentialExpired is Run's error when the node stopped because its
// credential expired.
var ErrCredentialExpired = errors.New("node: the node's credential expired")

// replaySpoolDir is the directory of a data directory where replay keeps
// large payloads (replay.Config.SpoolDir).
const replaySpoolDir = "replay-spool"

// Run runs the node until ctx is done or a part of it fails, then shuts it
// down: the node leaves its network, stops crawling with everything
// fetched made durable, and closes its data directory.
func (n *Node) Run(ctx context.Context) error {
	defer n.close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n.drain.mu.Lock()
	n.drain.stop = func() { cancel(nil) }
	n.drain.mu.Unlock()
	var wg sync.WaitGroup
	fail := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("node: %s: %w", what, err))
		}
	}
	// The crawler must run before anything that feeds it.
	crawlDone := make(chan struct{})
	wg.Go(func() {
		defer close(crawlDone)
		_, err := n.crawl.Run(ctx)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		fail("crawl", err)
	})
	wg.Go(func() { fail("admin socket", n.admin.serve(ctx, n)) })
	wg.Go(func() { n.sampleRate(ctx) })
	if cred := n.cfg.Credential; cred != nil {
		wg.Go(func() { fail("credential", n.untilExpired(ctx, cred)) })
	}
	if n.uiLn != nil {
		srv := replay.New(replay.Config{
			Archive:           n.arc,
			UIAddr:            n.uiLn.Addr().String(),
			ContentAddr:       n.contentLn.Addr().String(),
			PayloadCacheBytes: n.cfg.ReplayCacheBytes,
			SpoolDir:          filepath.Join(n.cfg.Crawl.Data, replaySpoolDir),
			SpoolBytes:        n.cfg.ReplaySpoolBytes,
			Routes: map[string]http.Handler{
				"GET /api/status": n.statusHandler(),
				"GET /metrics":    n.metricsHandler(),
			},
			Logger: n.log,
		})
		n.replay.Store(srv)
		wg.Go(func() { fail("replay", replay.Serve(ctx, srv, n.uiLn, n.contentLn)) })
	}
	if n.members != nil {
		srv := peer.NewServer(n.cfg.Credential, n.peerHandler(), n.log)
		srv.MaxBodyBytes = replicate.MaxLargeBodyBytes
		wg.Go(func() { fail("peer server", srv.Serve(ctx, n.peerLn)) })
		wg.Go(func() { fail("outbox", n.out.Run(ctx)) })
		wg.Go(func() { fail("replication", n.push.Run(ctx)) })
		wg.Go(func() { fail("content-seen test", n.dedup.Run(ctx)) })
		if n.contentSeen != nil {
			wg.Go(func() { n.contentSeen.registerLoop(ctx) })
		}
		wg.Go(func() { n.watch(ctx) })
		wg.Go(func() { n.repair(ctx) })
		wg.Go(func() { n.rediscoverGone(ctx) })
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case err := <-n.members.Failed():
				fail("membership", err)
			}
		})
	}
	<-ctx.Done()
	if n.members != nil && n.cfg.LeaveTimeout > 0 && !n.drain.on.Load() {
		// Others stop routing here at once rather than after failure detection.
		if err := n.members.Leave(n.cfg.LeaveTimeout); err != nil {
			n.log.Warn("node: leaving the network", "err", err)
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// close releases what Open acquired.
// dropDamaged has a capture whose record here is damaged, while another
// node holds a good copy, copied back by repair (crawl.DropDamaged). It
// is called from a replay request, which does not wait for it.
func (n *Node) dropDamaged(c index.Capture) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.crawl.DropDamaged(ctx, c); err != nil {
			n.log.Warn("cannot drop a damaged capture for repair", "url", c.URL, "err", err)
		}
	}()
}

func (n *Node) close() {
	if n.members != nil {
		n.members.Close()
	}
	if n.client != nil {
		n.client.Close()
	}
	for _, ln := range []net.Listener{n.peerLn, n.uiLn, n.contentLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if n.admin != nil {
		n.admin.close()
	}
	if n.crawl != nil {
		n.crawl.Close()
	}
	if n.db != nil {
		n.db.Close()
		n.db = nil
	}
	if n.admin != nil {
		n.admin.remove()
	}
}

// Addrs are where a running node serves.
type Addrs struct {
	HTTP, Content, Peer, Gossip string
}

// Addrs returns the node's listening addresses ("" for a service it does not run).
func (n *Node) Addrs() Addrs {
	var a Addrs
	if n.uiLn != nil {
		a.HTTP, a.Content = n.uiLn.Addr().String(), n.contentLn.Addr().String()
	}
	if n.peerLn != nil {
		a.Peer = n.peerLn.Addr().String()
	}
	if n.members != nil {
		a.Gossip = n.members.Self().GossipAddr
	}
	return a
}

// ID returns the node's certified ID, or "" for a single node.
func (n *Node) ID() string {
	if n.cfg.Credential == nil {
		return ""
	}
	return n.cfg.Credential.ID()
}
