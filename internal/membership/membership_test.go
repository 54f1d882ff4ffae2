package membership

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/ring"
)

// deadline bounds how long a test waits for the network to converge. It is
// generous on purpose: tests assert where the network ends up, not how fast.
const deadline = 30 * time.Second

func newNetwork(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "net")
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func admit(t *testing.T, netDir, name string) *admission.Credential {
	t.Helper()
	c, err := admission.Admit(netDir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

type nodeOpts struct {
	join     []string
	capacity int
	replicas int // 0: 3
	verify   func(context.Context, Member) error
}

func start(t *testing.T, cred *admission.Credential, o nodeOpts) *Membership {
	t.Helper()
	if o.capacity == 0 {
		o.capacity = 1
	}
	if o.replicas == 0 {
		o.replicas = 3
	}
	m, err := Start(context.Background(), Config{
		Credential: cred,
		BindAddr:   "127.0.0.1:0",
		Capacity:   o.capacity,
		Replicas:   o.replicas,
		HTTPAddr:   "127.0.0.1:8080",
		PeerAddr:   "localhost:9090",
		Join:       o.join,
		Verify:     o.verify,
		Logger:     testLogger(),
		Tuning:     LocalTuning(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func ids(ms []Member) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID)
	}
	return s
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not reached after %v: %v", what, deadline, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agree checks that every node in nodes sees exactly the members want,
// and that their rings are the ring of want.
func agree(nodes []*Membership, want []string) error {
	want = slices.Sorted(slices.Values(want))
	var digest uint64
	for i, n := range nodes {
		got := ids(n.Members())
		if !slices.Equal(got, want) {
			return fmt.Errorf("node %s sees %v, want %v", n.self.Name, got, want)
		}
		d := n.Ring().Digest()
		if i > 0 && d != digest {
			return fmt.Errorf("node %s ring digest %x, node %s %x", n.self.Name, d, nodes[0].self.Name, digest)
		}
		digest = d
	}
	return nil
}

func TestNetworkLifecycle(t *testing.T) {
	netDir := newNetwork(t)
	creds := make([]*admission.Credential, 4)
	for i := range creds {
		creds[i] = admit(t, netDir, fmt.Sprintf("node-%d", i))
	}
	seed := start(t, creds[0], nodeOpts{})
	join := []string{seed.self.GossipAddr}
	nodes := []*Membership{seed}
	for i := 1; i < len(creds); i++ {
		nodes = append(nodes, start(t, creds[i], nodeOpts{join: join, capacity: i}))
	}
	all := []string{creds[0].ID(), creds[1].ID(), creds[2].ID(), creds[3].ID()}
	waitFor(t, "all four converge", func() error { return agree(nodes, all) })

	// Every node sees the others as they announced themselves, and the ring
	// is the ring of those members.
	var rms []ring.Member
	for _, m := range seed.Members() {
		var n *Membership
		for _, x := range nodes {
			if x.self.ID == m.ID {
				n = x
			}
		}
		want := n.self
		want.State = Alive
		if m != want {
			t.Errorf("seed sees %+v, want %+v", m, want)
		}
		rms = append(rms, ring.Member{ID: m.ID, Capacity: m.Capacity})
	}
	r, err := ring.New(rms, ring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if seed.Ring().Digest() != r.Digest() {
		t.Errorf("seed's ring is not the ring of its members")
	}
	if first, again := seed.Ring(), seed.Ring(); first != again {
		t.Errorf("Ring is rebuilt although the members did not change")
	}
	select {
	case <-nodes[1].Changes():
	default:
		t.Errorf("no change signalled on a node that saw others join")
	}

	// A crash: the others drop the node and agree.
	crashed := nodes[2]
	crashed.Close()
	rest := []*Membership{nodes[0], nodes[1], nodes[3]}
	waitFor(t, "crashed node dropped", func() error {
		return agree(rest, []string{all[0], all[1], all[3]})
	})

	// Restarted on the same credential (on another port), it is back with
	// the same ID.
	restarted := start(t, creds[2], nodeOpts{join: join, capacity: 2})
	if restarted.self.GossipAddr == crashed.self.GossipAddr {
		t.Logf("restarted on the same address %s", restarted.self.GossipAddr)
	}
	nodes[2] = restarted
	waitFor(t, "restarted node back", func() error { return agree(nodes, all) })

	// A graceful leave: dropped by everyone.
	if err := nodes[3].Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "departed node dropped", func() error {
		return agree(nodes[:3], all[:3])
	})
	// Leave and Close after Leave are harmless.
	if err := nodes[3].Close(); err != nil {
		t.Errorf("Close after Leave: %v", err)
	}
}

func TestForeignNetworkCannotJoin(t *testing.T) {
	netA, netB := newNetwork(t), newNetwork(t)
	seed := start(t, admit(t, netA, "seed"), nodeOpts{})
	other := start(t, admit(t, netA, "other"), nodeOpts{join: []string{seed.self.GossipAddr}})
	members := []*Membership{seed, other}
	waitFor(t, "network A converges", func() error {
		return agree(members, []string{seed.self.ID, other.self.ID})
	})

	outsider := start(t, admit(t, netB, "outsider"), nodeOpts{join: []string{seed.self.GossipAddr}})
	// Wait for the outsider to have tried, and failed, a few times (its
	// first attempt is in Start, the others in the background).
	waitFor(t, "outsider's join attempts", func() error {
		outsider.mu.Lock()
		defer outsider.mu.Unlock()
		if outsider.joins < 3 {
			return fmt.Errorf("%d failed attempts", outsider.joins)
		}
		return nil
	})
	if got := ids(outsider.Members()); !slices.Equal(got, []string{outsider.self.ID}) {
		t.Errorf("outsider sees %v, want only itself", got)
	}
	if err := agree(members, []string{seed.self.ID, other.self.ID}); err != nil {
		t.Error(err)
	}
	// Not even memberlist heard of it.
	for _, m := range members {
		for _, n := range m.ml.Members() {
			if n.Name == outsider.self.ID {
				t.Errorf("%s's memberlist knows the outsider", m.self.Name)
			}
		}
	}
}

// rejecter is a Verify func that refuses one ID and counts its refusals
// per observer.
type rejecter struct {
	bad string
	mu  sync.Mutex
	n   int
}

func (r *rejecter) verify(ctx context.Context, m Member) error {
	if m.ID == r.bad {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
		return errors.New("certificate does not match")
	}
	return nil
}

func (r *rejecter) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func TestVerifyRejects(t *testing.T) {
	netDir := newNetwork(t)
	seedCred, goodCred, badCred := admit(t, netDir, "seed"), admit(t, netDir, "good"), admit(t, netDir, "bad")
	seedV, goodV := &rejecter{bad: badCred.ID()}, &rejecter{bad: badCred.ID()}
	var badCalls sync.Map
	badV := func(ctx context.Context, m Member) error {
		badCalls.Store(m.ID, true)
		return nil
	}

	seed := start(t, seedCred, nodeOpts{verify: seedV.verify})
	join := []string{seed.self.GossipAddr}
	good := start(t, goodCred, nodeOpts{join: join, verify: goodV.verify})
	bad := start(t, badCred, nodeOpts{join: join, verify: badV})

	// The bad node is let in by nobody; the others agree without it.
	waitFor(t, "seed and good agree", func() error {
		return agree([]*Membership{seed, good}, []string{seedCred.ID(), goodCred.ID()})
	})
	// The bad node itself sees and accepts the others, so gossip reached it
	// and it is in the others' memberlist.
	waitFor(t, "bad node sees all", func() error {
		return agree([]*Membership{bad}, []string{seedCred.ID(), goodCred.ID(), badCred.ID()})
	})
	// Both honest nodes refused it more than once: the refusal is retried.
	waitFor(t, "refusals retried", func() error {
		if a, b := seedV.refusals(), goodV.refusals(); a < 2 || b < 2 {
			return fmt.Errorf("refusals: seed %d, good %d", a, b)
		}
		return nil
	})
	for _, n := range []*Membership{seed, good} {
		if slices.Contains(ids(n.Members()), badCred.ID()) {
			t.Errorf("%s lists the rejected member", n.self.Name)
		}
		if n.Ring().Len() != 2 {
			t.Errorf("%s's ring has %d members, want 2", n.self.Name, n.Ring().Len())
		}
		found := false
		for _, x := range n.ml.Members() {
			found = found || x.Name == badCred.ID()
		}
		if !found {
			t.Errorf("%s's memberlist does not know the bad node: the test proves nothing", n.self.Name)
		}
	}
	if _, ok := badCalls.Load(seedCred.ID()); !ok {
		t.Errorf("bad node never verified the seed")
	}
}

// TestBadPeerMetadata feeds a running node members with malformed names and
// metadata, as a buggy or newer peer might gossip them.
func TestBadPeerMetadata(t *testing.T) {
	netDir := newNetwork(t)
	m := start(t, admit(t, netDir, "solo"), nodeOpts{})
	good, err := encodeMeta(nodeMeta{Name: "peer", Capacity: 2, HTTPAddr: "10.0.0.2:80", PeerAddr: "10.0.0.2:81", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	otherCount, err := encodeMeta(nodeMeta{Name: "peer", Capacity: 2, HTTPAddr: "10.0.0.2:80", PeerAddr: "10.0.0.2:81", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	id := "ab" + m.self.ID[2:]
	if id == m.self.ID {
		id = "cd" + m.self.ID[2:]
	}
	for _, n := range []*memberlist.Node{
		{Name: id, Meta: nil},
		{Name: id, Meta: []byte{1, 0xff}},
		{Name: id, Meta: good[:len(good)-1]},
		{Name: id, Meta: append(slices.Clone(good), 0)},
		{Name: id, Meta: otherCount},
		{Name: "not-an-id", Meta: good},
		{Name: "", Meta: good},
	} {
		m.observe(n)
		if got := ids(m.Members()); !slices.Equal(got, []string{m.self.ID}) {
			t.Errorf("after a member with name %q, meta %x: members %v", n.Name, n.Meta, got)
		}
	}
	// Valid metadata admits it (no Verify); garbage in an update drops it again.
	m.observe(&memberlist.Node{Name: id, Meta: good})
	if got := m.Members(); len(got) != 2 {
		t.Fatalf("valid member not admitted: %v", got)
	}
	r1 := m.Ring()
	m.observe(&memberlist.Node{Name: id, Meta: []byte{1, 1}})
	if got := m.Members(); len(got) != 1 {
		t.Errorf("member kept after garbage update: %v", got)
	}
	if m.Ring() == r1 || m.Ring().Len() != 1 {
		t.Errorf("ring not rebuilt after the member was dropped")
	}
	// So does an update to another replica count.
	m.observe(&memberlist.Node{Name: id, Meta: good})
	m.observe(&memberlist.Node{Name: id, Meta: otherCount})
	if got := m.Members(); len(got) != 1 {
		t.Errorf("member kept after it announced another replica count: %v", got)
	}
	m.forget(&memberlist.Node{Name: id, State: memberlist.StateDead})
}

// A node started with another replica count than the network's fails to
// start, naming a member and both counts, and the network goes on without
// it; one with the network's count then joins.
func TestJoinWithOtherReplicasFails(t *testing.T) {
	netDir := newNetwork(t)
	a := start(t, admit(t, netDir, "alpha"), nodeOpts{replicas: 2})
	b := start(t, admit(t, netDir, "beta"), nodeOpts{replicas: 2, join: []string{a.self.GossipAddr}})
	waitFor(t, "alpha and beta agree", func() error { return agree([]*Membership{a, b}, []string{a.self.ID, b.self.ID}) })

	odd := admit(t, netDir, "odd")
	m, err := Start(context.Background(), Config{
		Credential: odd, BindAddr: "127.0.0.1:0", Capacity: 1, Replicas: 3,
		HTTPAddr: "127.0.0.1:8080", PeerAddr: "localhost:9090",
		Join: []string{a.self.GossipAddr}, Logger: testLogger(), Tuning: LocalTuning(),
	})
	if err == nil {
		m.Close()
		t.Fatal("a node keeping 3 copies joined a network keeping 2")
	}
	if !errors.Is(err, ErrReplicasDisagree) || !strings.Contains(err.Error(), "keeps 2 copies") || !strings.Contains(err.Error(), "this node 3") {
		t.Errorf("Start: %v; want ErrReplicasDisagree with both counts", err)
	}
	for _, n := range []*Membership{a, b} {
		if got := ids(n.Members()); slices.Contains(got, odd.ID()) {
			t.Errorf("%s lets the odd node in: %v", n.self.Name, got)
		}
	}

	c := start(t, admit(t, netDir, "gamma"), nodeOpts{replicas: 2, join: []string{b.self.GossipAddr}})
	waitFor(t, "all three agree", func() error {
		return agree([]*Membership{a, b, c}, []string{a.self.ID, b.self.ID, c.self.ID})
	})
}

// A node whose network is out of reach at start runs alone; when it joins
// later a network keeping another number of copies, Failed says it must
// stop. An odd member does not keep nodes with the network's count out.
func TestLateJoinWithOtherReplicasFails(t *testing.T) {
	netDir := newNetwork(t)
	alphaCred := admit(t, netDir, "alpha")
	first := start(t, alphaCred, nodeOpts{replicas: 2})
	addr := first.self.GossipAddr
	first.Close()

	odd, err := Start(context.Background(), Config{
		Credential: admit(t, netDir, "odd"), BindAddr: "127.0.0.1:0", Capacity: 1, Replicas: 3,
		HTTPAddr: "127.0.0.1:8080", PeerAddr: "localhost:9090",
		Join: []string{addr}, Logger: testLogger(), Tuning: LocalTuning(),
	})
	if err != nil {
		t.Fatalf("a node whose network is out of reach: %v; want it to start alone", err)
	}
	t.Cleanup(func() { odd.Close() })
	select {
	case err := <-odd.Failed():
		t.Fatalf("failed alone: %v", err)
	default:
	}

	// The network comes back where the odd node looks for it.
	m, err := Start(context.Background(), Config{
		Credential: alphaCred, BindAddr: addr, Capacity: 1, Replicas: 2,
		HTTPAddr: "127.0.0.1:8080", PeerAddr: "localhost:9090", Logger: testLogger(), Tuning: LocalTuning(),
	})
	if err != nil {
		t.Skipf("cannot listen at %s again: %v", addr, err)
	}
	t.Cleanup(func() { m.Close() })
	select {
	case err := <-odd.Failed():
		if !errors.Is(err, ErrReplicasDisagree) || !strings.Contains(err.Error(), "keeps 2 copies") {
			t.Errorf("Failed: %v; want ErrReplicasDisagree with the network's count", err)
		}
	case <-time.After(deadline):
		t.Fatal("the odd node joined a network keeping another count and was not told to stop")
	}
	// Alone too, and joined by the odd node, alpha sees one member against
	// it as well; it did not join, so it is not the one to stop.
	stillRuns(t, m, "the node the odd one joined")
	beta := start(t, admit(t, netDir, "beta"), nodeOpts{replicas: 2, join: []string{addr}})
	// While it still gossips, a node with the network's count joins.
	gamma := start(t, admit(t, netDir, "gamma"), nodeOpts{replicas: 2, join: []string{addr}})
	waitFor(t, "the network of three, without the odd node", func() error {
		return agree([]*Membership{m, beta, gamma}, []string{m.self.ID, beta.self.ID, gamma.self.ID})
	})
}

// A node running alone with another replica count (no network to join
// named) that its network reaches — as reconnect does a member it knew —
// is told to stop; the network's members are not.
func TestOddNodeReachedByItsNetworkFails(t *testing.T) {
	netDir := newNetwork(t)
	a := start(t, admit(t, netDir, "alpha"), nodeOpts{replicas: 2})
	b := start(t, admit(t, netDir, "beta"), nodeOpts{replicas: 2, join: []string{a.self.GossipAddr}})
	waitFor(t, "alpha and beta agree", func() error { return agree([]*Membership{a, b}, []string{a.self.ID, b.self.ID}) })
	odd := start(t, admit(t, netDir, "odd"), nodeOpts{replicas: 3})
	if _, err := a.ml.Join([]string{odd.self.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-odd.Failed():
		if !errors.Is(err, ErrReplicasDisagree) {
			t.Errorf("Failed: %v; want ErrReplicasDisagree", err)
		}
	case <-time.After(deadline):
		t.Fatal("the odd node, reached by a network keeping another count, was not told to stop")
	}
	for _, n := range []*Membership{a, b} {
		select {
		case err := <-n.Failed():
			t.Errorf("%s, of the network, was told to stop: %v", n.self.Name, err)
		default:
		}
	}
}

// Two odd nodes that found each other first do not outvote a node whose
// partner, trusted before, is away: it keeps running.
func TestTwoOddNodesDoNotStopAMemberAlone(t *testing.T) {
	netDir := newNetwork(t)
	a := start(t, admit(t, netDir, "alpha"), nodeOpts{replicas: 2})
	b := start(t, admit(t, netDir, "beta"), nodeOpts{replicas: 2, join: []string{a.self.GossipAddr}})
	waitFor(t, "alpha and beta agree", func() error { return agree([]*Membership{a, b}, []string{a.self.ID, b.self.ID}) })
	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	b.Close()
	waitFor(t, "alpha alone", func() error { return agree([]*Membership{a}, []string{a.self.ID}) })
	odd1 := start(t, admit(t, netDir, "odd1"), nodeOpts{replicas: 3})
	start(t, admit(t, netDir, "odd2"), nodeOpts{replicas: 3, join: []string{odd1.self.GossipAddr, a.self.GossipAddr}})
	waitFor(t, "alpha to know both odd nodes", func() error {
		if n := a.ml.NumMembers(); n < 3 {
			return fmt.Errorf("alpha's memberlist knows %d nodes", n)
		}
		return nil
	})
	stillRuns(t, a, "alpha, whose partner is away,")
}

// stillRuns fails the test if m is told to stop (Failed) within four
// rounds of its rejoin loop, where the replica count is checked.
func stillRuns(t *testing.T, m *Membership, who string) {
	t.Helper()
	for range 4 {
		time.Sleep(LocalTuning().RejoinInterval)
		select {
		case err := <-m.Failed():
			t.Fatalf("%s was told to stop: %v", who, err)
		default:
		}
	}
}

func TestStartErrors(t *testing.T) {
	netDir := newNetwork(t)
	cred := admit(t, netDir, "n")
	base := Config{Credential: cred, BindAddr: "127.0.0.1:0", Capacity: 1, Replicas: 3, HTTPAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2", Logger: testLogger()}
	if m, err := Start(context.Background(), base); err != nil {
		t.Fatalf("the base configuration fails: %v", err)
	} else {
		m.Close()
	}
	long := "h" + fmt.Sprintf("%0250d", 0) + ":1"
	for name, mod := range map[string]func(*Config){
		"no credential":     func(c *Config) { c.Credential = nil },
		"capacity 0":        func(c *Config) { c.Capacity = 0 },
		"capacity too big":  func(c *Config) { c.Capacity = MaxCapacity + 1 },
		"replicas 0":        func(c *Config) { c.Replicas = 0 },
		"replicas too big":  func(c *Config) { c.Replicas = MaxReplicas + 1 },
		"no peer address":   func(c *Config) { c.PeerAddr = "" },
		"unspecified host":  func(c *Config) { c.HTTPAddr = "0.0.0.0:80" },
		"no port":           func(c *Config) { c.PeerAddr = "127.0.0.1" },
		"port 0":            func(c *Config) { c.PeerAddr = "127.0.0.1:0" },
		"address too long":  func(c *Config) { c.PeerAddr = "hhhhh" + long },
		"bad bind address":  func(c *Config) { c.BindAddr = "127.0.0.1" },
		"bad advertise":     func(c *Config) { c.AdvertiseAddr = "x:y" },
		"metadata too long": func(c *Config) { c.HTTPAddr, c.PeerAddr = long, long },
	} {
		c := base
		mod(&c)
		m, err := Start(context.Background(), c)
		if err == nil {
			m.Close()
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

// servePeer serves cred's peer TLS endpoint on loopback, completing
// handshakes only, and returns its address.
func servePeer(t *testing.T, cred *admission.Credential) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cred.ServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.(*tls.Conn).Handshake()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// tlsVerifier is the Verify a node uses: dial the member's peer address
// over mutual TLS and check that the certified ID is the member's.
func tlsVerifier(cred *admission.Credential) func(context.Context, Member) error {
	return func(ctx context.Context, m Member) error {
		d := tls.Dialer{Config: cred.ClientTLS()}
		c, err := d.DialContext(ctx, "tcp", m.PeerAddr)
		if err != nil {
			return err
		}
		defer c.Close()
		id, name, err := cred.PeerID(c.(*tls.Conn).ConnectionState())
		if err != nil {
			return err
		}
		if id != m.ID || name != m.Name {
			return fmt.Errorf("peer at %s is %s (%s), not %s (%s)", m.PeerAddr, id, name, m.ID, m.Name)
		}
		return nil
	}
}

// TestVerifyMutualTLS runs the intended Verify: a node whose gossip claims
// a peer address served by another node's certificate is never trusted.
func TestVerifyMutualTLS(t *testing.T) {
	netDir := newNetwork(t)
	names := []string{"alpha", "beta", "liar"}
	creds := make([]*admission.Credential, len(names))
	peers := make([]string, len(names))
	for i, n := range names {
		creds[i] = admit(t, netDir, n)
		peers[i] = servePeer(t, creds[i])
	}
	peers[2] = peers[1] // the liar announces beta's peer service as its own

	var nodes []*Membership
	for i, cred := range creds {
		cfg := Config{
			Credential: cred, BindAddr: "127.0.0.1:0", Capacity: 1, Replicas: 3,
			HTTPAddr: "127.0.0.1:8080", PeerAddr: peers[i],
			Verify: tlsVerifier(cred), Logger: testLogger(), Tuning: LocalTuning(),
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].self.GossipAddr}
		}
		m, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		nodes = append(nodes, m)
	}
	waitFor(t, "alpha and beta agree, without the liar", func() error {
		return agree(nodes[:2], []string{creds[0].ID(), creds[1].ID()})
	})
	waitFor(t, "the liar is known to memberlist and refused", func() error {
		for _, n := range nodes[:2] {
			n.mu.Lock()
			p := n.peers[creds[2].ID()]
			failures := 0
			if p != nil {
				failures = p.failures
			}
			n.mu.Unlock()
			if failures < 1 {
				return fmt.Errorf("%s has not refused the liar yet", n.self.Name)
			}
		}
		return nil
	})
	for _, n := range nodes[:2] {
		if slices.Contains(ids(n.Members()), creds[2].ID()) {
			t.Errorf("%s trusts the liar", n.self.Name)
		}
	}
}
