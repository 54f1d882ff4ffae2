// Package membership is a waggle node's view of the live network: which
// admitted nodes are up, where they serve, and the ring that assigns hosts
// to them.
//
// It runs hashicorp/memberlist (SWIM with Lifeguard's refinements), whose
// gossip is encrypted with the network's gossip key, so that a node without
// the network's credential can neither join nor read it. A node's memberlist
// name is its certified ID; its metadata carries its name, capacity and the
// addresses of its HTTP and peer services. Gossip alone is not trusted: a
// member enters the view only once Config.Verify has confirmed, over the
// authenticated peer channel, that the node at its peer address holds the
// certificate for its ID. Suspected members stay in the view (the ring does
// not churn on a late ping); dead and departed ones leave it.
package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/ring"
)

// State is a member's state as failure detection sees it.
type State int

const (
	Alive State = iota // answering probes, or suspected and not yet declared dead
	Dead               // declared failed
	Left               // left gracefully
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Member is a node of the network.
type Member struct {
	ID         string // certified identity (memberlist node name)
	Name       string // certified name, as the node announces it
	Capacity   int
	HTTPAddr   string // replay and API
	PeerAddr   string // peer RPC over mutual TLS
	GossipAddr string // memberlist
	State      State
}

// Config configures a node's membership.
type Config struct {
	// Credential is the node's admission credential: its ID becomes the
	// memberlist node name and its gossip key encrypts all gossip.
	Credential *admission.Credential
	// BindAddr is the host:port memberlist listens on, over TCP and UDP.
	// Port 0 picks a free port.
	BindAddr string
	// AdvertiseAddr is the IP:port other nodes reach the gossip service at,
	// if it is not BindAddr (behind NAT, or when binding to all interfaces).
	AdvertiseAddr string
	// Capacity is the node's relative capacity, 1 to MaxCapacity.
	Capacity int
	// Replicas is how many members keep each site, 1 to MaxReplicas. Every
	// member must use the same count, or each would place copies where the
	// others do not look for them: a member announcing another count is
	// excluded, and a node that finds every member it knows announcing
	// another fails — at Start, or later through Failed when it joined
	// late.
	Replicas int
	// HTTPAddr and PeerAddr are where this node serves replay and peer RPC,
	// as other nodes dial them.
	HTTPAddr, PeerAddr string
	// Join lists members of an existing network to contact; empty starts
	// a new network.
	Join []string
	// Verify is called for every newly seen member, and again when its
	// metadata changes, before the member is trusted: it should dial
	// m.PeerAddr over mutual TLS and check that the peer's certified ID is
	// m.ID (and its certified name m.Name, which the member only claims in
	// its metadata). Calls run concurrently with a timeout (Tuning.VerifyTimeout);
	// a failure excludes the member, is logged and is retried with backoff
	// for as long as the member is alive. Nil trusts gossip (tests only).
	Verify func(ctx context.Context, m Member) error
	// Logger receives membership events and memberlist's own log lines
	// (nil: slog.Default()).
	Logger *slog.Logger
	// Tuning overrides timing; zero fields take the defaults.
	Tuning Tuning
	// Transport, if not nil, carries the gossip instead of UDP and TCP
	// sockets on BindAddr: an in-process network, for simulations. The
	// transport gives the node its gossip address, so BindAddr and
	// AdvertiseAddr are ignored; the membership shuts it down when it stops.
	// Gossip is still encrypted with the credential's key.
	Transport memberlist.NodeAwareTransport
}

// Tuning sets the timing of failure detection, gossip and verification.
// Zero fields take memberlist.DefaultLANConfig's values, or the defaults
// given below. Every node of a network should use the same tuning.
type Tuning struct {
	ProbeInterval       time.Duration // between failure-detection probes
	ProbeTimeout        time.Duration // wait for a direct probe's ack
	SuspicionMult       int           // suspicion timeout, in probe intervals times log(N)
	GossipInterval      time.Duration // between gossip rounds
	PushPullInterval    time.Duration // between full state syncs
	TCPTimeout          time.Duration // for join, push/pull and TCP probes
	GossipToTheDeadTime time.Duration // keep gossiping to a dead node for this long

	// DeadNodeReclaimTime is how long after a member was declared dead it
	// may come back at another address (default 10s).
	DeadNodeReclaimTime time.Duration
	// RejoinInterval is how often a node that knows no other member retries
	// Config.Join (default 30s), and how often it tries to reach again a
	// member that failed (see ReconnectTimeout).
	RejoinInterval time.Duration
	// ReconnectTimeout is how long a node keeps trying, one member every
	// RejoinInterval, to reach members that failed (default 24h). Failure detection cannot tell a crash from a network
	// partition, and once the two sides of a partition have declared each
	// other dead, neither gossips to the other again: only these attempts
	// bring them back together when the network heals.
	ReconnectTimeout time.Duration
	// VerifyTimeout bounds one call of Config.Verify (default 10s).
	VerifyTimeout time.Duration
	// VerifyRetry is the delay before retrying a failed verification,
	// doubled after each failure up to 64 times itself (default 1s).
	VerifyRetry time.Duration
}

// LocalTuning returns timings for nodes on one host, such as tests: like
// memberlist.DefaultLocalConfig, with faster gossip and retries.
func LocalTuning() Tuning {
	return Tuning{
		ProbeInterval:       250 * time.Millisecond,
		ProbeTimeout:        200 * time.Millisecond,
		SuspicionMult:       3,
		GossipInterval:      50 * time.Millisecond,
		PushPullInterval:    2 * time.Second,
		TCPTimeout:          2 * time.Second,
		GossipToTheDeadTime: 2 * time.Second,
		DeadNodeReclaimTime: 100 * time.Millisecond,
		RejoinInterval:      500 * time.Millisecond,
		VerifyTimeout:       2 * time.Second,
		VerifyRetry:         200 * time.Millisecond,
	}
}

// maxConcurrentVerify bounds concurrent calls of Config.Verify, so that
// joining a large network does not open a connection to every member at once.
const maxConcurrentVerify = 16

// Membership is a running node's view of the network. Its methods are safe
// for concurrent use.
type Membership struct {
	logw     *logWriter
	self     Member
	selfID   string
	replicas int
	meta     []byte
	join     []string
	verify   func(context.Context, Member) error
	tuning   Tuning
	log      *slog.Logger
	ml       *memberlist.Memberlist
	ctx      context.Context // cancelled on Leave or Close
	cancel   context.CancelFunc
	sem      chan struct{}
	changes  chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	peers   map[string]*peer // by ID, every member memberlist knows alive
	members []Member         // the verified view, sorted by ID, State unset; never modified, only replaced
	stale   bool             // members must be rebuilt from peers (see viewLocked)
	version uint64           // incremented when the ring's member set changes
	joins   int              // failed join attempts, for tests
	// claimedAt is the gossip address of another node seen with this
	// node's ID, "" when none was.
	claimedAt string
	failedC   chan error         // see Failed
	failed    map[string]failure // by ID, verified members that failed, for ReconnectTimeout

	ringMu      sync.Mutex
	ringOpts    ring.Options // zero (the defaults) but in simulations, which cannot afford them
	ring        *ring.Ring
	ringVersion uint64
	stopOnce    sync.Once
	stopErr     error
}

// failure is a member that failed, as reconnect remembers it.
type failure struct {
	gossipAddr string
	at         time.Time
}

// peer is what a node knows of another member.
type peer struct {
	meta       []byte // as last seen, to tell real updates from repeats
	gossipAddr string
	member     Member
	valid      bool   // meta decoded, and its replica count this node's (or none)
	replicas   int    // as announced; 0 when none is (a version 1 node)
	name       string // as announced
	verified   bool   // Verify succeeded for this gen
	gen        uint64 // incremented on every change that needs verifying again
	failures   int
	cancel     context.CancelFunc // of the verification in flight
	retry      *time.Timer
}

// Start starts the node's membership: it listens for gossip at
// cfg.BindAddr and, if cfg.Join is not empty, joins the network through
// them. ctx bounds the start only; the membership runs until Leave or Close.
// If no member in cfg.Join can be reached, Start still succeeds, logs the
// failure and keeps trying every Tuning.RejoinInterval for as long as the
// node knows no other member.
func Start(ctx context.Context, cfg Config) (*Membership, error) {
	if cfg.Credential == nil {
		return nil, errors.New("membership: no credential")
	}
	nm := nodeMeta{Name: cfg.Credential.Name(), Capacity: cfg.Capacity, HTTPAddr: cfg.HTTPAddr, PeerAddr: cfg.PeerAddr, Replicas: cfg.Replicas}
	meta, err := encodeMeta(nm)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	t := cfg.Tuning.withDefaults()
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	id := cfg.Credential.ID()
	lg = lg.With("node", cfg.Credential.Name())

	mc := memberlist.DefaultLANConfig()
	mc.Name = id
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	} else {
		if mc.BindAddr, mc.BindPort, err = splitHostPort(cfg.BindAddr); err != nil {
			return nil, fmt.Errorf("membership: bind address: %w", err)
		}
		if cfg.AdvertiseAddr != "" {
			if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(cfg.AdvertiseAddr); err != nil {
				return nil, fmt.Errorf("membership: advertise address: %w", err)
			}
		} else {
			mc.AdvertisePort = mc.BindPort
		}
	}
	mc.SecretKey = cfg.Credential.GossipKey()
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.GossipInterval = t.GossipInterval
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	logw := &logWriter{log: lg}
	mc.Logger = log.New(logw, "", 0)

	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Membership{
		logw:     logw,
		self:     Member{ID: id, Name: nm.Name, Capacity: nm.Capacity, HTTPAddr: nm.HTTPAddr, PeerAddr: nm.PeerAddr},
		selfID:   id,
		replicas: nm.Replicas,
		meta:     meta,
		join:     slices.Clone(cfg.Join),
		verify:   cfg.Verify,
		tuning:   t,
		log:      lg,
		ctx:      bctx,
		cancel:   cancel,
		sem:      make(chan struct{}, maxConcurrentVerify),
		changes:  make(chan struct{}, 1),
		peers:    make(map[string]*peer),
		failed:   make(map[string]failure),
		failedC:  make(chan error, 1),
	}
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Conflict = (*conflicts)(m)

	ml, err := memberlist.Create(mc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("membership: %w", err)
	}
	// Memberlist calls observe, which takes m.mu, with its node lock
	// held, and LocalNode takes that lock: asked before m.mu, not under it.
	gossipAddr := ml.LocalNode().Address()
	m.mu.Lock()
	m.ml = ml
	m.self.GossipAddr = gossipAddr
	m.stale = true
	m.version++
	m.signal()
	m.mu.Unlock()
	lg.Info("membership: started", "id", id, "gossip", m.self.GossipAddr)

	if len(m.join) > 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.tryJoin()
		}()
		select {
		case <-done:
		case <-ctx.Done():
			m.stop(false, 0)
			<-done
			return nil, fmt.Errorf("membership: join: %w", ctx.Err())
		}
		// The join's exchange of state with the members is over: one
		// that runs with this credential already told of itself.
		m.mu.Lock()
		at := m.claimedAt
		m.mu.Unlock()
		if at != "" {
			m.stop(false, 0)
			return nil, fmt.Errorf("%w: it gossips from %s (if that is this node before a move to another address, start again once the others see it gone)", ErrCredentialInUse, at)
		}
		if err := m.outvoted(true); err != nil {
			// Leaving tells the members at once that this node is not
			// coming; they excluded it already.
			m.stop(true, m.tuning.ProbeTimeout)
			return nil, err
		}
	}
	m.wg.Add(1)
	go m.rejoinLoop()
	return m, nil
}

func (t Tuning) withDefaults() Tuning {
	d := memberlist.DefaultLANConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&t.ProbeInterval, d.ProbeInterval)
	set(&t.ProbeTimeout, d.ProbeTimeout)
	set(&t.GossipInterval, d.GossipInterval)
	set(&t.PushPullInterval, d.PushPullInterval)
	set(&t.TCPTimeout, d.TCPTimeout)
	set(&t.GossipToTheDeadTime, d.GossipToTheDeadTime)
	set(&t.DeadNodeReclaimTime, 10*time.Second)
	set(&t.RejoinInterval, 30*time.Second)
	set(&t.ReconnectTimeout, 24*time.Hour)
	set(&t.VerifyTimeout, 10*time.Second)
	set(&t.VerifyRetry, time.Second)
	if t.SuspicionMult <= 0 {
		t.SuspicionMult = d.SuspicionMult
	}
	return t
}

func splitHostPort(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%q: bad port", s)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, int(p), nil
}

// tryJoin contacts the members of Config.Join once.
func (m *Membership) tryJoin() (joined bool) {
	n, err := m.ml.Join(m.join)
	if err != nil && n == 0 {
		m.mu.Lock()
		m.joins++
		m.mu.Unlock()
		m.log.Warn("membership: cannot join the network", "join", m.join, "err", err)
		return false
	}
	m.log.Info("membership: joined", "contacted", n)
	return true
}

// rejoinLoop retries Config.Join while the node knows no other member
// (after a failed first join, or when every other member has gone), and
// tries to reach a member that failed, so that a network split by an
// outage or a partition comes back together.
func (m *Membership) rejoinLoop() {
	defer m.wg.Done()
	tk := time.NewTicker(m.tuning.RejoinInterval)
	defer tk.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tk.C:
		}
		joined := len(m.join) > 0 && m.ml.NumMembers() <= 1 && m.tryJoin()
		m.reconnect()
		// The odd one out, joined late (its network out of reach at
		// Start) or reached by its network (reconnect) since. One member
		// against one is ambiguous — a node alone that an odd one joins
		// sees that too —: the node that joined is taken for the odd one.
		if err := m.outvoted(joined); err != nil {
			m.log.Error("membership: this node keeps another number of copies than its network; it must stop", "err", err)
			select {
			case m.failedC <- err:
			default:
			}
		}
	}
}

// reconnect tries to reach one member, chosen at random, of those that
// failed within Tuning.ReconnectTimeout and have not come back. A member
// that answers merges its view of the network with this node's (a join's
// push-pull), which is enough to reunite the two sides of a partition.
// One member per round bounds the cost when many failed for good.
func (m *Membership) reconnect() {
	now := time.Now()
	m.mu.Lock()
	var ids []string
	for id, f := range m.failed {
		if now.Sub(f.at) > m.tuning.ReconnectTimeout {
			delete(m.failed, id)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		m.mu.Unlock()
		return
	}
	id := ids[rand.IntN(len(ids))]
	addr := m.failed[id].gossipAddr
	m.mu.Unlock()
	if _, err := m.ml.Join([]string{addr}); err != nil {
		m.log.Debug("membership: failed member still unreachable", "id", id, "gossip", addr, "err", err)
		return
	}
	m.log.Info("membership: reached a failed member again", "id", id, "gossip", addr)
}

// Members returns the verified members memberlist has not declared dead
// or gone, this node included, sorted by ID: suspected members stay (and
// memberlist does not say which are suspected: its Node.State is never
// set). A member whose metadata changes leaves the list until it is
// verified again. After Leave or Close, Members returns the last view.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.viewLocked())
}

// Self returns this node as the others see it.
func (m *Membership) Self() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Ring returns the ring of Members(). It is rebuilt only when the set of
// IDs and capacities changes.
func (m *Membership) Ring() *ring.Ring {
	m.ringMu.Lock()
	defer m.ringMu.Unlock()
	m.mu.Lock()
	version, ms := m.version, m.viewLocked()
	m.mu.Unlock()
	if m.ring != nil && m.ringVersion == version {
		return m.ring
	}
	rms := make([]ring.Member, len(ms))
	for i, x := range ms {
		rms[i] = ring.Member{ID: x.ID, Capacity: x.Capacity}
	}
	r, err := ring.New(rms, m.ringOpts)
	if err != nil {
		// Members are validated, so only the ring's overall bound on virtual
		// nodes can refuse them. Keep the last good ring rather than none.
		m.log.Error("membership: cannot build the ring; keeping the previous one", "members", len(rms), "err", err)
		if m.ring == nil {
			m.ring, _ = ring.New(nil, ring.Options{})
		}
		return m.ring
	}
	m.ring, m.ringVersion = r, version
	return r
}

// Changes returns a channel that receives a value when Members() has
// changed. Signals are coalesced: a receiver learns that something changed
// since it last looked, and should call Members or Ring. The channel is
// never closed.
func (m *Membership) Changes() <-chan struct{} { return m.changes }

// Leave announces the node's departure, waits up to timeout for it to
// spread, and shuts the membership down. The others drop the node at once
// rather than after failure detection.
func (m *Membership) Leave(timeout time.Duration) error {
	return m.stop(true, timeout)
}

// Close shuts the membership down without announcing it, as a crash would:
// the others drop the node when they detect the failure.
func (m *Membership) Close() error {
	return m.stop(false, 0)
}

func (m *Membership) stop(leave bool, timeout time.Duration) error {
	m.stopOnce.Do(func() {
		var errs []error
		if leave {
			if err := m.ml.Leave(timeout); err != nil {
				errs = append(errs, fmt.Errorf("membership: leave: %w", err))
			}
		}
		m.mu.Lock()
		m.closed = true
		for _, p := range m.peers {
			p.stopVerify()
		}
		m.mu.Unlock()
		m.cancel()
		// memberlist's goroutines report the sockets closing under them
		// as errors; on a shutdown they are not.
		m.logw.quiet.Store(true)
		if err := m.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("membership: shutdown: %w", err))
		}
		m.wg.Wait()
		m.stopErr = errors.Join(errs...)
	})
	return m.stopErr
}

// observe records a member memberlist reports alive, new or updated.
func (m *Membership) observe(n *memberlist.Node) {
	if n.Name == m.selfID {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	delete(m.failed, n.Name)
	addr := n.Address()
	p := m.peers[n.Name]
	if p != nil && bytes.Equal(p.meta, n.Meta) && p.gossipAddr == addr {
		return // a repeat: nothing to verify again
	}
	if p == nil {
		p = &peer{}
		m.peers[n.Name] = p
	}
	was, wasIn := p.entry()
	defer m.updateLocked(was, wasIn, p)
	p.stopVerify()
	p.gen++
	p.meta = bytes.Clone(n.Meta)
	p.gossipAddr = addr
	p.verified = false
	p.valid = false
	p.replicas, p.name = 0, ""
	p.failures = 0

	if !validID(n.Name) {
		m.log.Warn("membership: ignoring a member whose name is not an ID", "id", n.Name, "gossip", addr)
		return
	}
	nm, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("membership: ignoring a member with bad metadata", "id", n.Name, "gossip", addr, "err", err)
		return
	}
	p.replicas, p.name = nm.Replicas, nm.Name
	if nm.Replicas != 0 && nm.Replicas != m.replicas {
		m.log.Error("membership: ignoring a member that keeps another number of copies of each site; every member must use the same",
			"id", n.Name, "name", nm.Name, "gossip", addr, "replicas", nm.Replicas, "ours", m.replicas)
		return
	}
	p.valid = true
	p.member = Member{ID: n.Name, Name: nm.Name, Capacity: nm.Capacity, HTTPAddr: nm.HTTPAddr, PeerAddr: nm.PeerAddr, GossipAddr: addr}
	if m.verify == nil {
		p.verified = true
		return
	}
	// An update drops the member until it is verified again.
	m.startVerifyLocked(p)
}

// forget removes a member memberlist reports dead or gone.
func (m *Membership) forget(n *memberlist.Node) {
	if n.Name == m.selfID {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[n.Name]
	if p == nil || m.closed {
		return
	}
	p.stopVerify()
	was, wasIn := p.entry()
	delete(m.peers, n.Name)
	state := Dead
	if n.State == memberlist.StateLeft {
		state = Left
	}
	// memberlist's events do not say whether a member left or failed, so
	// reconnect tries departed members too: one dial per round at most.
	if _, trusted := p.entry(); trusted {
		m.failed[n.Name] = failure{gossipAddr: p.gossipAddr, at: time.Now()}
	}
	m.log.Info("membership: member gone", "id", n.Name, "name", p.member.Name, "state", state)
	m.updateLocked(was, wasIn, nil)
}

func (p *peer) stopVerify() {
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
	if p.retry != nil {
		p.retry.Stop()
		p.retry = nil
	}
}

// startVerifyLocked verifies p's current generation in the background.
func (m *Membership) startVerifyLocked(p *peer) {
	ctx, cancel := context.WithCancel(m.ctx)
	p.cancel = cancel
	gen, mem := p.gen, p.member
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		err := m.callVerify(ctx, mem)
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed || m.peers[mem.ID] != p || p.gen != gen {
			return // superseded
		}
		p.cancel = nil
		if err == nil {
			was, wasIn := p.entry()
			p.verified = true
			p.failures = 0
			m.log.Info("membership: member verified", "id", mem.ID, "name", mem.Name, "peer", mem.PeerAddr)
			m.updateLocked(was, wasIn, p)
			return
		}
		p.failures++
		delay := m.tuning.VerifyRetry << min(p.failures-1, 6)
		m.log.Warn("membership: member not verified; excluded", "id", mem.ID, "name", mem.Name, "peer", mem.PeerAddr, "retry", delay, "err", err)
		p.retry = time.AfterFunc(delay, func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.closed || m.peers[mem.ID] != p || p.gen != gen || p.verified {
				return
			}
			p.retry = nil
			m.startVerifyLocked(p)
		})
	}()
}

// callVerify runs Config.Verify with the concurrency limit and timeout.
func (m *Membership) callVerify(ctx context.Context, mem Member) error {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.sem }()
	ctx, cancel := context.WithTimeout(ctx, m.tuning.VerifyTimeout)
	defer cancel()
	return m.verify(ctx, mem)
}

// entry returns p's entry in the verified view, if it has one.
func (p *peer) entry() (Member, bool) {
	if p != nil && p.valid && p.verified {
		return p.member, true
	}
	return Member{}, false
}

// updateLocked records that a member's entry in the verified view may have
// changed from was (absent if !wasIn) to p's (p nil: removed), and signals
// a change if it did. The view itself is rebuilt only when next read, by
// viewLocked: a node joining a network of N members sees N of them arrive
// one by one, and sorting N members for each would cost O(N² log N).
func (m *Membership) updateLocked(was Member, wasIn bool, p *peer) {
	cur, in := p.entry()
	if in == wasIn && cur == was {
		return
	}
	m.stale = true
	if in != wasIn || cur.Capacity != was.Capacity {
		m.version++
	}
	m.signal()
}

// viewLocked returns the verified view, rebuilding it if it is stale.
func (m *Membership) viewLocked() []Member {
	if !m.stale {
		return m.members
	}
	ms := make([]Member, 1, len(m.peers)+1)
	ms[0] = m.self
	for _, p := range m.peers {
		if e, ok := p.entry(); ok {
			ms = append(ms, e)
		}
	}
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	m.members, m.stale = ms, false
	return ms
}

// signal tells Changes' receiver that the view changed.
func (m *Membership) signal() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

// delegate gives memberlist the node's metadata. Memberlist calls it with
// its own locks held, so it must not call back into memberlist.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil // cannot happen: Start checked memberlist.MetaMaxSize
	}
	return d.meta
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// ErrCredentialInUse is Start's answer when a member of the network runs
// with the credential already: two nodes with one identity would claim the
// same sites, and each would take the other's messages for its own.
var ErrCredentialInUse = errors.New("membership: another node runs with this node's credential")

// ErrReplicasDisagree is Start's answer when the network being joined keeps
// another number of copies of each site than Config.Replicas.
var ErrReplicasDisagree = errors.New("membership: the network keeps another number of copies")

// outvoted returns ErrReplicasDisagree, naming one of them, when every
// other member this node knows announces another Replicas count than its
// own — two or more, or one when this node is the one that joined: the
// network keeps another, and this node is the odd one out. A member with
// this node's count (or none announced), alive or trusted before and gone
// for now, makes it the others' problem: they are excluded, and fail
// themselves.
func (m *Membership) outvoted(joined bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failed) > 0 {
		// Members this node trusted, gone for now, kept its count: two odd
		// nodes that found each other first do not outvote it.
		return nil
	}
	var odd *peer
	against := 0
	for _, p := range m.peers {
		if p.valid {
			return nil
		}
		if p.replicas != 0 && p.replicas != m.replicas {
			odd = p
			against++
		}
	}
	if odd == nil || against < 2 && !joined {
		return nil
	}
	return fmt.Errorf("%w: member %s (%s) keeps %d copies of each site, this node %d", ErrReplicasDisagree, odd.name, odd.gossipAddr, odd.replicas, m.replicas)
}

// Failed receives an error when this node cannot go on as a member of its
// network: it joined late (its network out of reach at Start) a network
// that keeps another number of copies (ErrReplicasDisagree).
func (m *Membership) Failed() <-chan error { return m.failedC }

// conflicts hears of another node gossiping under a member's name from
// another address. Memberlist keeps the node it knew and ignores the
// other; when the name is this node's, Start fails if it is joining (the
// node already running is the other), and a running node says so.
type conflicts Membership

func (c *conflicts) NotifyConflict(existing, other *memberlist.Node) {
	m := (*Membership)(c)
	if existing.Name != m.selfID {
		m.log.Warn("membership: a node claims a member's credential from another address; ignored", "member", existing.Name, "at", existing.Address(), "claimed from", other.Address())
		return
	}
	m.mu.Lock()
	m.claimedAt = other.Address()
	m.mu.Unlock()
	m.log.Error("membership: another node gossips with this node's credential; it is ignored, but two nodes must not share one", "other", other.Address())
}

// events follows memberlist's view. Memberlist calls it with its node lock
// held, so it records and returns; verification runs in other goroutines.
type events Membership

func (e *events) NotifyJoin(n *memberlist.Node)   { (*Membership)(e).observe(n) }
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).observe(n) }
func (e *events) NotifyLeave(n *memberlist.Node)  { (*Membership)(e).forget(n) }
