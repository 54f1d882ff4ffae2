package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/ring"
)

// simNet is an in-process network for memberlist. It is memberlist's
// MockNetwork with three differences a simulation of many nodes needs: it
// is safe to add nodes while others run; packets are queued and dropped
// when the receiver's queue is full, as UDP drops them, rather than
// handed over synchronously (two nodes pinging each other at once would
// deadlock); and a node that shuts down stops receiving instead of
// blocking its senders forever.
type simNet struct {
	mu     sync.RWMutex
	byAddr map[string]*simTransport
	byName map[string]*simTransport
	port   int
	side   map[string]int // address → side of a partition; empty when whole
	drops  atomic.Int64   // packets dropped on full queues
}

// simQueue is a node's packet queue, its socket buffer.
const simQueue = 256

func newSimNet() *simNet {
	return &simNet{byAddr: make(map[string]*simTransport), byName: make(map[string]*simTransport)}
}

// transport returns a new node's transport, at a new address.
func (n *simNet) transport(name string) *simTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.port++
	t := &simTransport{
		net:     n,
		addr:    simAddr("127.0.0.1:" + strconv.Itoa(n.port)),
		port:    n.port,
		packets: make(chan *memberlist.Packet, simQueue),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	n.byAddr[string(t.addr)] = t
	n.byName[name] = t
	return t
}

// split partitions the network: nodes on different sides (given by
// address) no longer reach each other; packets between them are lost and
// connections refused.
func (n *simNet) split(sides ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = make(map[string]int)
	for i, addrs := range sides {
		for _, a := range addrs {
			n.side[a] = i
		}
	}
}

// heal ends a partition.
func (n *simNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = nil
}

// cut reports whether a partition separates from and to.
func (n *simNet) cut(from, to simAddr) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	a, ok1 := n.side[string(from)]
	b, ok2 := n.side[string(to)]
	return ok1 && ok2 && a != b
}

func (n *simNet) lookup(a memberlist.Address) (*simTransport, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	t, ok := n.byName[a.Name]
	if !ok {
		t, ok = n.byAddr[a.Addr]
	}
	if !ok {
		return nil, fmt.Errorf("sim: no route to %s", a)
	}
	return t, nil
}

type simAddr string

func (a simAddr) Network() string { return "sim" }
func (a simAddr) String() string  { return string(a) }

type simTransport struct {
	net      *simNet
	addr     simAddr
	port     int
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	done     chan struct{}
	shutdown sync.Once
}

var _ memberlist.NodeAwareTransport = (*simTransport)(nil)

func (t *simTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), t.port, nil
}

func (t *simTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *simTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	dest, err := t.net.lookup(a)
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	if t.net.cut(t.addr, dest.addr) {
		return now, nil // lost, as on a network that drops it
	}
	dest.deliver(&memberlist.Packet{Buf: slices.Clone(b), From: t.addr, Timestamp: now})
	return now, nil
}

// deliver queues p, or drops it if the queue is full or t is shut down.
func (t *simTransport) deliver(p *memberlist.Packet) {
	select {
	case <-t.done:
		return
	default:
	}
	select {
	case t.packets <- p:
	default:
		t.net.drops.Add(1)
	}
}

func (t *simTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *simTransport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	if shouldClose {
		defer conn.Close()
	}
	buf, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("sim: reading a packet: %w", err)
	}
	if len(buf) == 0 {
		return errors.New("sim: empty packet")
	}
	t.deliver(&memberlist.Packet{Buf: buf, From: addr, Timestamp: now})
	return nil
}

func (t *simTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *simTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest, err := t.net.lookup(a)
	if err != nil {
		return nil, err
	}
	if t.net.cut(t.addr, dest.addr) {
		return nil, fmt.Errorf("sim: %s: network unreachable", a)
	}
	local, remote := net.Pipe()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case dest.streams <- remote:
		return local, nil
	case <-dest.done:
		err = fmt.Errorf("sim: %s: connection refused", a)
	case <-t.done:
		err = errors.New("sim: transport shut down")
	case <-tm.C:
		err = fmt.Errorf("sim: %s: dial timeout", a)
	}
	local.Close()
	remote.Close()
	return nil, err
}

func (t *simTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *simTransport) IngestStream(conn net.Conn) error {
	select {
	case t.streams <- conn:
		return nil
	case <-t.done:
		conn.Close()
		return errors.New("sim: transport shut down")
	}
}

func (t *simTransport) Shutdown() error {
	t.shutdown.Do(func() { close(t.done) })
	return nil
}

// simConfig describes a simulated network.
type simConfig struct {
	creds    []*admission.Credential
	capacity func(i int) int
	seeds    int          // the first nodes, which the others join through
	workers  int          // nodes starting at once
	tuning   Tuning       // every node's
	ringOpts ring.Options // every node's
	deadline time.Duration
}

// simNetwork is a running simulated network.
type simNetwork struct {
	net   *simNet
	nodes []*Membership
	start time.Time
}

// startSim starts cfg's nodes on one in-process network: the seeds one
// after the other, then the rest, cfg.workers at a time.
func startSim(tb testing.TB, cfg simConfig) *simNetwork {
	tb.Helper()
	sn := &simNetwork{net: newSimNet(), nodes: make([]*Membership, len(cfg.creds))}
	tb.Cleanup(sn.close)
	// Info is too much from a thousand nodes; warnings tell of trouble.
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	startNode := func(i int, join []string) error {
		cred := cfg.creds[i]
		m, err := Start(context.Background(), Config{
			Credential: cred,
			Capacity:   cfg.capacity(i),
			Replicas:   3,
			HTTPAddr:   fmt.Sprintf("%s.sim:80", cred.Name()),
			PeerAddr:   fmt.Sprintf("%s.sim:81", cred.Name()),
			Join:       join,
			Logger:     logger,
			Tuning:     cfg.tuning,
			Transport:  sn.net.transport(cred.ID()),
		})
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		m.ringOpts = cfg.ringOpts // before anyone asks for the ring
		sn.nodes[i] = m
		return nil
	}
	sn.start = time.Now()
	seeds := max(1, min(cfg.seeds, len(cfg.creds)))
	var join []string
	for i := range seeds {
		if err := startNode(i, join); err != nil {
			tb.Fatal(err)
		}
		join = append(join, sn.nodes[i].Self().GossipAddr)
	}
	next := atomic.Int64{}
	next.Store(int64(seeds))
	errs := make(chan error, max(1, cfg.workers))
	var wg sync.WaitGroup
	for range max(1, cfg.workers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cfg.creds) {
					return
				}
				if err := startNode(i, join); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
	return sn
}

// converged reports whether every node sees every node; if not, it says
// how far they are.
func (sn *simNetwork) converged() error {
	n := len(sn.nodes)
	counts := make([]int, n)
	for i, m := range sn.nodes {
		// Count rather than ask for the view, which would be rebuilt for
		// every node on every poll.
		m.mu.Lock()
		counts[i] = 1
		for _, p := range m.peers {
			if _, ok := p.entry(); ok {
				counts[i]++
			}
		}
		m.mu.Unlock()
	}
	slices.Sort(counts)
	if counts[0] == n {
		return nil
	}
	full, _ := slices.BinarySearch(counts, n)
	short := full
	return fmt.Errorf("%d of %d nodes see fewer than %d members (min %d, median %d)", short, n, n, counts[0], counts[n/2])
}

// waitConverged waits until every node sees every node, polling every
// 250ms, and returns the time since the first node started.
func (sn *simNetwork) waitConverged(tb testing.TB, deadline time.Duration) time.Duration {
	tb.Helper()
	end := time.Now().Add(deadline)
	report := time.Now().Add(10 * time.Second)
	for {
		err := sn.converged()
		if err == nil {
			return time.Since(sn.start)
		}
		if time.Now().After(report) {
			tb.Logf("after %v: %v (%d packets dropped)", time.Since(sn.start).Round(time.Second), err, sn.net.drops.Load())
			report = report.Add(10 * time.Second)
		}
		if time.Now().After(end) {
			tb.Fatalf("simulated network of %d nodes: not converged %v after the first start: %v (%d packets dropped)",
				len(sn.nodes), time.Since(sn.start).Round(time.Millisecond), err, sn.net.drops.Load())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// agreement returns the fraction of nodes whose ring is node 0's, and the
// number of (node, host) pairs for which a node's ring names another owner
// of host than node 0's.
func (sn *simNetwork) agreement(hosts []string) (agree float64, disagreements int) {
	ref := sn.nodes[0].Ring()
	owners := make([]string, len(hosts))
	for i, h := range hosts {
		m, _ := ref.Owner(h)
		owners[i] = m.ID
	}
	same := 0
	for _, n := range sn.nodes {
		r := n.Ring()
		if r.Digest() == ref.Digest() {
			same++
		}
		for i, h := range hosts {
			if m, _ := r.Owner(h); m.ID != owners[i] {
				disagreements++
			}
		}
	}
	return float64(same) / float64(len(sn.nodes)), disagreements
}

// close stops every node at once.
func (sn *simNetwork) close() {
	var wg sync.WaitGroup
	for _, m := range sn.nodes {
		if m != nil {
			wg.Go(func() { m.Close() })
		}
	}
	wg.Wait()
}

// simHosts returns n distinct host names, the same for the same seed.
func simHosts(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, seed))
	hs := make([]string, n)
	for i := range hs {
		hs[i] = fmt.Sprintf("www.h%d-%x.example", i, rng.Uint64())
	}
	return hs
}

// simCredentials admits n nodes to a new network, several at a time.
func simCredentials(tb testing.TB, n int) []*admission.Credential {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "net")
	if err := admission.Init(dir); err != nil {
		tb.Fatal(err)
	}
	creds := make([]*admission.Credential, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				c, err := admission.Admit(dir, fmt.Sprintf("sim-%d", i), 0)
				creds[i], errs[i] = &c, err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	return creds
}

// simCapacity gives the nodes capacities 1, 2 and 4 in equal thirds.
func simCapacity(i int) int { return []int{1, 2, 4}[i%3] }

// TestSimulatedNetwork runs a small network in process and checks that it
// converges and that every node has the same ring.
func TestSimulatedNetwork(t *testing.T) {
	const n = 5
	sn := startSim(t, simConfig{
		creds:    simCredentials(t, n),
		capacity: simCapacity,
		seeds:    2,
		workers:  n,
		tuning:   LocalTuning(),
	})
	var all []string
	for _, m := range sn.nodes {
		all = append(all, m.Self().ID)
	}
	waitFor(t, "simulated network converges", func() error { return agree(sn.nodes, all) })
	for _, m := range sn.nodes {
		for _, x := range m.Members() {
			if x.Capacity != simCapacity(slices.Index(all, x.ID)) || x.GossipAddr == "" || x.State != Alive {
				t.Errorf("%s sees %+v", m.Self().Name, x)
			}
		}
	}
	hosts := simHosts(1, 1000)
	if frac, dis := sn.agreement(hosts); frac != 1 || dis != 0 {
		t.Errorf("agreement %v, %d owner disagreements", frac, dis)
	}
	// A node that leaves is dropped by the others, over the simulated
	// transport as over sockets.
	if err := sn.nodes[n-1].Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "departed node dropped", func() error { return agree(sn.nodes[:n-1], all[:n-1]) })
}

// TestPartitionHeals splits a network in two halves of two nodes, which
// declare each other dead, and heals it: each half goes on by itself (a
// half of two never retries its --join, since it knows a member), and when
// the network heals the halves find each other again by reconnecting to
// the members that failed.
func TestPartitionHeals(t *testing.T) {
	const n = 4
	tuning := LocalTuning()
	// memberlist stops gossiping to a dead member at once, as after a
	// partition longer than GossipToTheDeadTime: only reconnecting can
	// reunite the halves.
	tuning.GossipToTheDeadTime = time.Millisecond
	sn := startSim(t, simConfig{
		creds:    simCredentials(t, n),
		capacity: func(int) int { return 1 },
		seeds:    1,
		workers:  n,
		tuning:   tuning,
	})
	var ids, addrs []string
	for _, m := range sn.nodes {
		ids = append(ids, m.Self().ID)
		addrs = append(addrs, m.Self().GossipAddr)
	}
	waitFor(t, "network converges", func() error { return agree(sn.nodes, ids) })

	sn.net.split(addrs[:2], addrs[2:])
	waitFor(t, "first half alone", func() error { return agree(sn.nodes[:2], ids[:2]) })
	waitFor(t, "second half alone", func() error { return agree(sn.nodes[2:], ids[2:]) })
	for _, m := range sn.nodes {
		m.mu.Lock()
		failed := len(m.failed)
		m.mu.Unlock()
		if failed != 2 {
			t.Errorf("%s remembers %d failed members, want the 2 of the other half", m.Self().Name, failed)
		}
	}

	sn.net.heal()
	waitFor(t, "halves reunited", func() error { return agree(sn.nodes, ids) })
	for _, m := range sn.nodes {
		m.mu.Lock()
		failed := len(m.failed)
		m.mu.Unlock()
		if failed != 0 {
			t.Errorf("%s still remembers %d failed members after the heal", m.Self().Name, failed)
		}
	}
}

// simSizes returns the network sizes BenchmarkSimulatedNetwork runs:
// WAGGLE_SIM_NODES (comma-separated), or 100 and 1000.
func simSizes(b *testing.B) []int {
	s := os.Getenv("WAGGLE_SIM_NODES")
	if s == "" {
		return []int{100, 1000}
	}
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("WAGGLE_SIM_NODES: bad size %q", f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// BenchmarkSimulatedNetwork starts networks of many nodes in one process,
// over an in-process transport with encrypted gossip, and reports how long
// they take to converge, whether every node ends up with the same ring, how
// evenly the ring spreads hosts, and the memory a node takes. Run it once:
//
//	go test -run '^$' -bench SimulatedNetwork -benchtime 1x ./internal/membership/
//
// Each node builds its own ring with a few virtual nodes per capacity (a
// ring at the default 4,000 takes ~140 MB and ~0.75 s for 1,000 members,
// which a thousand nodes in one process cannot afford); agreement does not
// depend on that number. Balance is measured on the ring of node 0's
// members at the default options, as a real node would build it.
func BenchmarkSimulatedNetwork(b *testing.B) {
	for _, n := range simSizes(b) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchSim(b, n) })
	}
}

func benchSim(b *testing.B, n int) {
	t0 := time.Now()
	creds := simCredentials(b, n)
	admit := time.Since(t0)
	hosts := simHosts(1, 100_000)
	sample := hosts[:1000]
	for b.Loop() {
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()

		sn := startSim(b, simConfig{
			creds:    creds,
			capacity: simCapacity,
			seeds:    3,
			workers:  8,
			tuning:   simTuning(),
			ringOpts: ring.Options{VnodesPerCapacity: 40},
		})
		converge := sn.waitConverged(b, 3*time.Minute)

		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		heapPerNode := (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(n)
		goroutinesPerNode := float64(runtime.NumGoroutine()-goroutines) / float64(n)

		frac, dis := sn.agreement(sample)
		maxDev, meanDev, maxShareDev, meanShareDev := balance(b, sn.nodes[0].Members(), hosts)

		b.ReportMetric(admit.Seconds(), "admit-s")
		b.ReportMetric(converge.Seconds(), "converge-s")
		b.ReportMetric(frac, "agreement")
		b.ReportMetric(float64(dis), "owner-disagreements")
		b.ReportMetric(maxDev, "max-dev")
		b.ReportMetric(meanDev, "mean-dev")
		b.ReportMetric(maxShareDev, "max-share-dev")
		b.ReportMetric(meanShareDev, "mean-share-dev")
		b.ReportMetric(heapPerNode, "heap-B/node")
		b.ReportMetric(goroutinesPerNode, "goroutines/node")
		b.ReportMetric(float64(sn.net.drops.Load()), "drops")
		sn.close()
		if frac != 1 || dis != 0 {
			b.Errorf("nodes disagree: agreement %v, %d owner disagreements", frac, dis)
		}
	}
}

// balance builds the default ring of members and returns, over members,
// the max and mean relative deviation of the fraction of hosts each owns
// from its capacity's share, and the same for its exact share of the
// key space.
func balance(b *testing.B, members []Member, hosts []string) (maxDev, meanDev, maxShareDev, meanShareDev float64) {
	rms := make([]ring.Member, len(members))
	total := 0
	for i, m := range members {
		rms[i] = ring.Member{ID: m.ID, Capacity: m.Capacity}
		total += m.Capacity
	}
	r, err := ring.New(rms, ring.Options{})
	if err != nil {
		b.Fatal(err)
	}
	owned := make(map[string]int)
	for _, h := range hosts {
		m, _ := r.Owner(h)
		owned[m.ID]++
	}
	for _, m := range rms {
		want := float64(m.Capacity) / float64(total)
		dev := abs(float64(owned[m.ID])/float64(len(hosts))-want) / want
		shareDev := abs(r.Share(m.ID)-want) / want
		maxDev, meanDev = max(maxDev, dev), meanDev+dev
		maxShareDev, meanShareDev = max(maxShareDev, shareDev), meanShareDev+shareDev
	}
	return maxDev, meanDev / float64(len(rms)), maxShareDev, meanShareDev / float64(len(rms))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// simTuning is the tuning of BenchmarkSimulatedNetwork's nodes: memberlist's
// LAN defaults, but with probes slow enough for a node that has a
// thousandth of two cores. (LocalTuning's 200ms probe timeout makes the
// nodes suspect each other as soon as the process is busy, and the
// suspicions' gossip keeps it busy.)
func simTuning() Tuning {
	return Tuning{ProbeInterval: 2 * time.Second, ProbeTimeout: time.Second}
}
