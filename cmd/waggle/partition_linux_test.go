package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/ring"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// netnsLab is a set of Linux network namespaces joined by a bridge in this
// process's namespace: one namespace per node, each with one address, so
// that links between nodes can be cut as a network would cut them.
type netnsLab struct {
	t      *testing.T
	bridge string
	subnet string // "10.213.N."
	spaces []string
	veths  []string // this namespace's ends of the namespaces' links
}

// newNetnsLab makes n namespaces, or skips the test when this machine
// cannot (not root, no iproute2, no namespaces in this container).
func newNetnsLab(t *testing.T, n int) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root; the partition is tested with fault injection in internal/node (TestPartitionHeal)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2); the partition is tested with fault injection in internal/node (TestPartitionHeal)")
	}
	id, err := freeLabID(os.Getpid() % 100000)
	if err != nil {
		t.Fatal(err)
	}
	lab := &netnsLab{t: t, bridge: fmt.Sprintf("wgb%05d", id), subnet: fmt.Sprintf("10.213.%d.", id%250)}
	t.Cleanup(lab.remove)
	if out, err := exec.Command("ip", "link", "add", lab.bridge, "type", "bridge").CombinedOutput(); err != nil {
		t.Skipf("cannot make a bridge here (%v: %s); the partition is tested with fault injection in internal/node (TestPartitionHeal)", err, strings.TrimSpace(string(out)))
	}
	lab.ip("addr", "add", lab.subnet+"1/24", "dev", lab.bridge)
	lab.ip("link", "set", lab.bridge, "up")
	for i := range n {
		ns := fmt.Sprintf("wg%05d-%d", id, i+1)
		veth := fmt.Sprintf("wgv%05d%d", id, i+1)
		lab.ip("netns", "add", ns)
		lab.spaces = append(lab.spaces, ns)
		lab.veths = append(lab.veths, veth)
		lab.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		lab.ip("link", "set", veth, "master", lab.bridge, "up")
		lab.ip("-n", ns, "addr", "add", lab.addr(i)+"/24", "dev", "eth0")
		lab.ip("-n", ns, "link", "set", "eth0", "up")
		lab.ip("-n", ns, "link", "set", "lo", "up")
	}
	return lab
}

// freeLabID returns the first ID from start on whose bridge name and
// subnet no interface here has: a lab left behind by a test process that
// was killed keeps both, and a second bridge on the same subnet would
// take the nodes' traffic to the web away from this one.
func freeLabID(start int) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	names, subnets := map[string]bool{}, map[string]bool{}
	for _, i := range ifs {
		names[i.Name] = true
		addrs, err := i.Addrs()
		if err != nil {
			return 0, err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				subnets[n.IP.Mask(net.CIDRMask(24, 32)).String()] = true
			}
		}
	}
	for id := start; id < start+250; id++ {
		id := id % 100000
		if !names[fmt.Sprintf("wgb%05d", id)] && !subnets[fmt.Sprintf("10.213.%d.0", id%250)] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no free lab: every 10.213.N.0/24 subnet is in use here (labs left behind? ip -br addr)")
}

// addr is the address of namespace i; the bridge is .1.
func (l *netnsLab) addr(i int) string { return fmt.Sprintf("%s%d", l.subnet, 11+i) }

func (l *netnsLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// split cuts every link between the namespaces of a and those of b, both
// ways, leaving each group and the bridge's address (the web) reachable.
func (l *netnsLab) split(a, b []int) {
	l.t.Helper()
	l.routes("add", a, b)
}

// heal undoes split.
func (l *netnsLab) heal(a, b []int) {
	l.t.Helper()
	l.routes("del", a, b)
}

func (l *netnsLab) routes(op string, a, b []int) {
	l.t.Helper()
	for _, i := range a {
		for _, j := range b {
			l.ip("-n", l.spaces[i], "route", op, "blackhole", l.addr(j)+"/32")
			l.ip("-n", l.spaces[j], "route", op, "blackhole", l.addr(i)+"/32")
		}
	}
}

func (l *netnsLab) remove() {
	// Each link is deleted here: a namespace's deletion takes its end along
	// only later, and the same names come back in a test run again
	// (-count).
	for _, veth := range l.veths {
		exec.Command("ip", "link", "del", veth).Run()
	}
	for _, ns := range l.spaces {
		exec.Command("ip", "netns", "del", ns).Run()
	}
	exec.Command("ip", "link", "del", l.bridge).Run()
}

// Fault (d) of the replication issue on a real network: four `waggle node`
// processes, each in its own Linux network namespace, crawl websim (3
// copies of every capture); mid-crawl the links between two pairs of them
// are cut (blackhole routes, both ways) while both groups still
// reach the web; each group declares the other dead and crawls on alone.
// Then the links come back: the groups find each other, and the network
// converges — every node sees every member, every page is archived, every
// capture has 3 copies, no node's count of acknowledged captures went
// down. The URLs fetched on both sides while apart are reported.
func TestPartitionNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes in network namespaces; skipped with -short")
	}
	lab := newNetnsLab(t, 4)
	bin := buildWaggle(t)
	c := newCluster(t, bin)
	web := websim.New(websim.Config{Seed: 11, Hosts: 16, Pages: 400}) // no host above the trap limit
	srv, err := websim.Start(lab.subnet+"1:0", web)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	nodes := c.startNetworkWith(4, srv.URL(), 3, func(i int, pn *procNode) {
		pn.netns = lab.spaces[i]
		pn.peer, pn.http = lab.addr(i)+":7000", lab.addr(i)+":8000"
		// A crawl long enough to go on on both sides of the partition.
		pn.extra = []string{"--delay", "100ms"}
	})
	c.submit(nodes[0], web.Seeds())

	captures := func(side []*procNode) (total int64, per map[string]int64) {
		per = map[string]int64{}
		for _, n := range side {
			st, err := c.status(n)
			if err != nil {
				t.Fatal(err)
			}
			per[n.name] = st.Crawl.Captures
			total += st.Crawl.Captures
		}
		return total, per
	}
	// Node IDs are random, so which sites a pair of nodes owns is too: of
	// the three ways to pair the four, cut the one whose sides own the
	// most pages each, so that both have work to go on with while apart.
	// (A fixed {n1,n2} | {n3,n4} left a side under 75 captures of work
	// about once in 430 runs.)
	a, b := c.balancedSplit(nodes, web.Pages())
	sides := [][]*procNode{pick(nodes, a), pick(nodes, b)}
	// Mid-crawl on both sides: the seeds went to n1, and the other side
	// gets its URLs only when n1's outbox sends a batch (up to 2 s), by
	// when n1's side alone may have archived a great deal.
	c.waitFor("each side to archive 75 captures", time.Minute, func() (bool, string) {
		k1, _ := captures(sides[0])
		k2, _ := captures(sides[1])
		return k1 >= 75 && k2 >= 75, fmt.Sprintf("%d and %d captures", k1, k2)
	})
	_, acked := captures(nodes)
	lab.split(a, b)
	split := time.Now()
	c.waitMembers(2, sides[0]...)
	c.waitMembers(2, sides[1]...)
	detected := time.Since(split)
	var apartFrom [2]int64
	for i, side := range sides {
		apartFrom[i], _ = captures(side)
	}
	c.waitFor("both sides to crawl while apart", time.Minute, func() (bool, string) {
		var desc []string
		ok := true
		for i, side := range sides {
			k, _ := captures(side)
			desc = append(desc, fmt.Sprintf("side %d: %d captures since it was cut off", i+1, k-apartFrom[i]))
			ok = ok && k > apartFrom[i]+20
		}
		return ok, strings.Join(desc, "; ")
	})

	lab.heal(a, b)
	healed := time.Now()
	c.waitMembers(4, nodes...)
	rejoined := time.Since(healed)
	c.waitQuiet(nodes)
	c.waitRepaired(nodes)
	_, after := captures(nodes)
	for name, k := range acked {
		if after[name] < k {
			t.Errorf("%s reports %d captures after the heal; it had acknowledged %d before the split", name, after[name], k)
		}
	}
	c.checkAPIStatus(nodes)
	c.checkReplay(nodes[2], web.Pages())
	for _, n := range nodes {
		c.stop(n.proc)
	}

	copies := map[string]int{} // URL and time of a capture → nodes holding it
	holders, _, fetches := c.holdings(nodes)
	for _, n := range nodes {
		for _, cp := range c.index(n.data) {
			copies[cp.url+" "+cp.ts]++
		}
	}
	for _, p := range web.Pages() {
		if len(holders[p]) == 0 {
			t.Errorf("page %s was archived by no node", p)
		}
	}
	short := 0
	for k, n := range copies {
		if n < 3 {
			short++
			if short <= 5 {
				t.Errorf("capture %s has %d copies, want 3", k, n)
			}
		}
	}
	if short > 5 {
		t.Errorf("... %d captures in all have fewer than 3 copies", short)
	}
	t.Logf("netns partition {%s,%s} | {%s,%s} mid-crawl: each side saw the other gone %v after the cut; "+
		"all 4 members again %v after the heal; %d captures, 3 copies each once quiet; coverage 1, nothing acknowledged lost; "+
		"overlap %d URLs fetched more than once over the whole crawl",
		sides[0][0].name, sides[0][1].name, sides[1][0].name, sides[1][1].name,
		detected.Round(time.Millisecond), rejoined.Round(time.Millisecond), len(copies), overlapOf(fetches))
}

// balancedSplit returns the pairing of four nodes whose sides' owners, by
// the ring of the members the first node sees, hold the most of pages
// each: the indexes of one side's nodes, then the other's.
func (c *cluster) balancedSplit(nodes []*procNode, pages []string) (a, b []int) {
	c.t.Helper()
	st, err := c.status(nodes[0])
	if err != nil {
		c.t.Fatal(err)
	}
	var rms []ring.Member
	for _, m := range st.Members {
		rms = append(rms, ring.Member{ID: m.ID, Capacity: m.Capacity})
	}
	r, err := ring.New(rms, ring.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	index := map[string]int{} // node ID → its place in nodes
	for i, n := range nodes {
		st, err := c.status(n)
		if err != nil {
			c.t.Fatal(err)
		}
		index[st.Node.ID] = i
	}
	owned := make([]int, len(nodes)) // pages whose site each node owns
	for _, p := range pages {
		o, ok := r.Owner(urlkey.Site(p))
		if i, known := index[o.ID]; ok && known {
			owned[i]++
		}
	}
	best := -1
	for _, pairing := range [][2][]int{{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0, 3}, {1, 2}}} {
		if least := min(owned[pairing[0][0]]+owned[pairing[0][1]], owned[pairing[1][0]]+owned[pairing[1][1]]); least > best {
			best, a, b = least, pairing[0], pairing[1]
		}
	}
	c.t.Logf("pages owned by %v; the sides %v | %v own at least %d each", owned, a, b, best)
	return a, b
}

// pick returns the nodes at indexes.
func pick(nodes []*procNode, indexes []int) []*procNode {
	out := make([]*procNode, len(indexes))
	for i, x := range indexes {
		out[i] = nodes[x]
	}
	return out
}

// A lab left behind (a test process killed) keeps its bridge and subnet:
// a new lab takes the next ID whose subnet is free.
func TestFreeLabIDSkipsSubnetsInUse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	start := os.Getpid()%100000 + 1
	first, err := freeLabID(start)
	if err != nil {
		t.Fatal(err)
	}
	const name = "wgbprobe"
	if out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput(); err != nil {
		t.Skipf("cannot make a bridge here: %v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", name).Run()
	if out, err := exec.Command("ip", "addr", "add", fmt.Sprintf("10.213.%d.1/24", first%250), "dev", name).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, err := freeLabID(start); err != nil || got == first || fmt.Sprint(got%250) == fmt.Sprint(first%250) {
		t.Errorf("with 10.213.%d.0/24 in use, freeLabID = %d, %v; want another subnet", first%250, got, err)
	}
}
