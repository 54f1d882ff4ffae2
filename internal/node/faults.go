package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/waggle-archive/waggle/internal/peer"
)

// Faults injects network faults between the nodes of a network running in
// one process, for tests where Linux network namespaces are not available:
// every node of the network gets the same Faults in its Config. It sits
// under both of a node's channels, gossip and peer RPC, so that the nodes
// see the faults as they would see a real network's. A node with Faults
// gossips through a transport of its own on Config.GossipAddr's host,
// which must therefore be a specific address.
type Faults struct {
	mu    sync.Mutex
	owner map[string]string // peer and gossip address → node ID
	side  map[string]int    // node ID → its side of a partition; nil when whole
	conns map[*faultConn]struct{}
}

// NewFaults returns Faults that inject none until told to.
func NewFaults() *Faults {
	return &Faults{owner: make(map[string]string), conns: make(map[*faultConn]struct{})}
}

// Split partitions the network: nodes (by ID) in different groups no
// longer reach each other. Gossip between them is lost, new connections
// are refused, and those open are closed. A node in no group reaches
// every node. Split replaces any partition in place.
func (f *Faults) Split(groups ...[]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.side = make(map[string]int)
	for i, g := range groups {
		for _, id := range g {
			f.side[id] = i
		}
	}
	for c := range f.conns {
		if f.cutLocked(c.from, c.to) {
			c.Conn.Close()
			delete(f.conns, c)
		}
	}
}

// Heal ends the partition.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.side = nil
}

// cutLocked reports whether the partition separates two nodes.
func (f *Faults) cutLocked(from, to string) bool {
	a, ok1 := f.side[from]
	b, ok2 := f.side[to]
	return ok1 && ok2 && a != b
}

// unreachable is the error of a dial across a partition.
func unreachable(addr string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: faultAddr(addr), Err: fmt.Errorf("network unreachable (injected partition)")}
}

type faultAddr string

func (a faultAddr) Network() string { return "tcp" }
func (a faultAddr) String() string  { return string(a) }

// dial opens a connection from the node self to addr unless a partition
// separates them, and tracks it so that a partition can close it.
func (f *Faults) dial(self, addr string, open func() (net.Conn, error)) (net.Conn, error) {
	f.mu.Lock()
	to := f.owner[addr]
	cut := f.cutLocked(self, to)
	f.mu.Unlock()
	if cut {
		return nil, unreachable(addr)
	}
	c, err := open()
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, f: f, from: self, to: to}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cutLocked(self, to) { // split while dialling
		c.Close()
		return nil, unreachable(addr)
	}
	f.conns[fc] = struct{}{}
	return fc, nil
}

// hookClient makes the node's peer client dial through f, and records the
// node's peer address. A nil f does nothing.
func (f *Faults) hookClient(self, peerAddr string, c *peer.Client) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.owner[peerAddr] = self
	f.mu.Unlock()
	c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return f.dial(self, addr, func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
	}
}

// transport returns the node's gossip transport, listening at bind: the
// sockets memberlist opens by default, under f. A nil f returns nil, for
// memberlist's own.
func (f *Faults) transport(self, bind string, log *slog.Logger) (memberlist.NodeAwareTransport, error) {
	if f == nil {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return nil, fmt.Errorf("node: gossip address: %w", err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if ip := net.ParseIP(host); err != nil || ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("node: injecting faults needs a gossip address of a specific IP, not %q", bind)
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  int(p),
		Logger:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
	if err != nil {
		return nil, fmt.Errorf("node: gossip transport: %w", err)
	}
	f.mu.Lock()
	f.owner[net.JoinHostPort(host, strconv.Itoa(nt.GetAutoBindPort()))] = self
	f.mu.Unlock()
	return &faultTransport{NetTransport: nt, f: f, self: self}, nil
}

// faultTransport is memberlist's network transport under Faults: packets
// across a partition are lost, streams refused.
type faultTransport struct {
	*memberlist.NetTransport
	f    *Faults
	self string
}

func (t *faultTransport) cut(addr string) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.cutLocked(t.self, t.f.owner[addr])
}

func (t *faultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *faultTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.cut(a.Addr) {
		return time.Now(), nil // sent, and lost on the way
	}
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *faultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *faultTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.f.dial(t.self, a.Addr, func() (net.Conn, error) {
		return t.NetTransport.DialAddressTimeout(a, timeout)
	})
}

// faultConn is a connection a partition closes.
type faultConn struct {
	net.Conn
	f        *Faults
	from, to string
}

func (c *faultConn) Close() error {
	c.f.mu.Lock()
	delete(c.f.conns, c)
	c.f.mu.Unlock()
	return c.Conn.Close()
}
