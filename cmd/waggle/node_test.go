//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/node"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/websim"
)

// TestNodeProcesses drives the built binary: each node is a separate
// process, started, stopped and killed as an operator (or the kernel)
// would, and everything is checked from outside, through the commands,
// /api/status, replay, and the index each node leaves on disk.
func TestNodeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several node processes; skipped with -short")
	}
	bin := buildWaggle(t)
	t.Run("stable", func(t *testing.T) { testStableNetwork(t, bin) })
	t.Run("kill-restart", func(t *testing.T) { testKillRestart(t, bin) })
	t.Run("leave", func(t *testing.T) { testLeaveCommand(t, bin) })
}

// testLeaveCommand has one node of two leave with `waggle node leave`: the
// command returns once the process has exited, its captures on the other
// node; the last node is refused, with nothing announced.
func testLeaveCommand(t *testing.T, bin string) {
	web, proxy := startSim(t, websim.Config{Seed: 9, Hosts: 4, Pages: 40})
	c := newCluster(t, bin)
	nodes := c.startNetwork(2, proxy, 1)
	c.submit(nodes[0], web.Seeds())
	var before int64 // captures the two nodes made (robots.txt aside)
	for _, st := range c.waitQuiet(nodes) {
		before += st.Crawl.Captures
	}
	out := c.waggle("node", "leave", "--data", nodes[1].data)
	if !strings.Contains(out, "has left the network and stopped") {
		t.Fatalf("node leave printed %q", out)
	}
	// Its data directory closed, the process has nothing left but to exit.
	select {
	case <-nodes[1].proc.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node that left is still running 30 s after node leave returned")
	}
	if code := nodes[1].proc.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the node that left exited with %d", code)
	}
	c.waitMembers(1, nodes[0])
	cmd := exec.Command(bin, "node", "leave", "--data", nodes[0].data)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil || stdout.Len() > 0 || !strings.Contains(stderr.String(), "last node") {
		t.Errorf("node leave on the last node: %v, stdout %q, stderr %q; want refused, nothing announced", err, stdout.String(), stderr.String())
	}
	c.stop(nodes[0].proc)
	var after int64
	for _, cp := range c.index(nodes[0].data) {
		if !strings.HasSuffix(cp.url, "/robots.txt") {
			after++
		}
	}
	if before == 0 || after < before {
		t.Errorf("the remaining node holds %d captures; the two had made %d before one left", after, before)
	}
}

// hostPages is the crawl's trap limit (URLs per host) in these tests: it
// is what stops websim's endless calendar.
const hostPages = 300

// testStableNetwork crawls websim with three node processes and no churn:
// together they archive what one `waggle crawl` archives (coverage 1),
// and no URL is archived by two nodes (overlap 0).
func testStableNetwork(t *testing.T, bin string) {
	c := newCluster(t, bin)
	web, proxy := startWebsim(t)

	// What one node archives, by SURT key: websim's session-ID trap hands
	// out new jsessionid URLs on every visit, which the keys leave out.
	single := filepath.Join(c.dir, "single")
	c.waggle(append([]string{"crawl", "--data", single, "--proxy", proxy, "--allow-private", "--delay", "0",
		"--scope", "any", "--max-host-pages", strconv.Itoa(hostPages), "--max-crawl-delay", "1ms", "--workers", "8", "--timeout", "10s"},
		web.Seeds()...)...)
	want := map[string]bool{}
	urls := map[string]map[string]bool{} // distinct URLs archived per host
	for _, cp := range c.index(single) {
		want[cp.key] = true
		h := urlkey.Host(cp.url)
		if urls[h] == nil {
			urls[h] = map[string]bool{}
		}
		urls[h][cp.url] = true
	}
	// The limit counts URLs queued per host, of which a few are not
	// archived (robots.txt forbids them): a host that came near it was cut.
	capped := map[string]bool{}
	for h, us := range urls {
		if len(us) >= hostPages*9/10 {
			capped[urlkey.Site("http://"+h+"/")] = true
		}
	}

	// One copy of each capture: the test is of the division of labour, and
	// of replay from the node that holds a page.
	nodes := c.startNetwork(3, proxy, 1)
	c.submit(nodes[1], web.Seeds())
	final := c.waitQuiet(nodes)
	var sent int64
	for _, st := range final {
		sent += st.Exchange.Sent
	}
	c.checkAPIStatus(nodes)
	// Through every node: with one copy of each capture, at least two of
	// them replay pages that only a peer holds, whichever sites each owns.
	replayed := map[*procNode][]string{}
	for _, n := range nodes {
		replayed[n] = c.checkReplay(n, web.Pages())
	}
	netWACZ := filepath.Join(c.dir, "network.wacz")
	c.waggle("export", "wacz", "--data", nodes[2].data, "--out", netWACZ)
	for _, n := range nodes {
		c.stop(n.proc)
	}

	holders, got, fetches := c.holdings(nodes)
	compareCoverage(t, want, got, web.Pages(), capped)
	c.checkNetworkExport(netWACZ, nodes)
	if o := overlapOf(fetches); o != 0 {
		for u, ts := range fetches {
			if len(ts) > 1 && !strings.HasSuffix(u, "/robots.txt") {
				t.Errorf("%s fetched %d times (held by %v)", u, len(ts), holders[u])
			}
		}
		t.Errorf("overlap: %d URLs fetched more than once", o)
	}
	if sent == 0 {
		t.Error("the nodes exchanged no URL")
	}
	fromPeer := 0
	for n, pages := range replayed {
		if replayedFromPeer(n, pages, holders) {
			fromPeer++
		}
	}
	if fromPeer < 2 {
		t.Errorf("%d nodes replayed a page only a peer holds, want at least 2 of 3: replay from a peer's archive went untested", fromPeer)
	}
	t.Logf("coverage %d/%d keys, overlap 0, %d captures (%s), %d URLs exchanged",
		len(want), len(want), total(fetches), capturesPerNode(nodes, holders), sent)
}

// checkNetworkExport checks a WACZ exported through a running node against
// the stopped nodes' own archives: it holds every capture of every node,
// and an export of one stopped node's data directory only that node's.
func (c *cluster) checkNetworkExport(path string, nodes []*procNode) {
	c.t.Helper()
	all := map[string]bool{}
	for _, n := range nodes {
		for _, cp := range c.index(n.data) {
			all[cp.key+" "+cp.ts] = true
		}
	}
	exported := exportedCaptures(c.t, path)
	for k := range all {
		if !exported[k] {
			c.t.Errorf("%s is archived on a node but not in the export through the running node", k)
		}
	}
	for k := range exported {
		if !all[k] {
			c.t.Errorf("%s is in the export but archived on no node", k)
		}
	}
	// A node's place on the ring comes from its random credential, so a
	// node may, now and then, own none of the sites, or all of them:
	// export the last one holding some of the captures but not all (an
	// empty archive has nothing to export, and a full one would not show
	// that only its own are exported), or, failing that, one holding any.
	var n *procNode
	var held map[string]bool
	for i := len(nodes) - 1; i >= 0; i-- {
		h := map[string]bool{}
		for _, cp := range c.index(nodes[i].data) {
			h[cp.key+" "+cp.ts] = true
		}
		if len(h) > 0 && (n == nil || len(h) < len(all)) {
			n, held = nodes[i], h
		}
		if len(h) > 0 && len(h) < len(all) {
			break
		}
	}
	ownWACZ := filepath.Join(c.dir, n.name+".wacz")
	c.waggle("export", "wacz", "--data", n.data, "--out", ownWACZ)
	own := exportedCaptures(c.t, ownWACZ)
	if !maps.Equal(own, held) {
		c.t.Errorf("the export of %s's stopped data directory holds %d captures; it holds %d, the network %d", n.name, len(own), len(held), len(all))
	}
	c.t.Logf("export through a running node: %d captures, all the network's; of stopped %s: %d", len(exported), n.name, len(own))
}

// exportedCaptures verifies a WACZ and returns the "key timestamp" of each
// line of its index.
func exportedCaptures(t *testing.T, path string) map[string]bool {
	t.Helper()
	r, err := wacz.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := r.Open("indexes/index.cdxj")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	caps := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 3)
		if len(parts) != 3 {
			t.Fatalf("bad CDXJ line %q", sc.Text())
		}
		caps[parts[0]+" "+parts[1]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return caps
}

// compareCoverage checks that the network archived what one node archives
// (want). On a site whose trap filled the per-host limit (capped), which
// trap URLs make it under the limit depends on the order links arrive in —
// with one node as with many — so there the network must archive every
// real page the single node did and fill the limit too, not archive the
// same calendar months.
func compareCoverage(t *testing.T, want, got map[string]bool, pages []string, capped map[string]bool) {
	t.Helper()
	real := map[string]bool{}
	for _, p := range pages {
		if k, err := urlkey.SURT(p); err == nil {
			real[k] = true
		}
	}
	full := func(k string) bool { return capped[urlkey.SiteOfKey(k)] }
	for k := range want {
		if !got[k] && (!full(k) || real[k]) {
			t.Errorf("%s was archived by a single node but by no node of the network", k)
		}
	}
	for k := range got {
		if !want[k] && !full(k) {
			t.Errorf("%s was archived by the network but not by a single node", k)
		}
	}
	perSite := func(keys map[string]bool) map[string]int {
		n := map[string]int{}
		for k := range keys {
			n[urlkey.SiteOfKey(k)]++
		}
		return n
	}
	wantN, gotN := perSite(want), perSite(got)
	for site := range capped {
		if gotN[site] < wantN[site]*9/10 {
			t.Errorf("site %s: a single node archived %d keys (its trap filled the limit), the network only %d", site, wantN[site], gotN[site])
		}
	}
}

// testKillRestart kills a node with SIGKILL in the middle of a crawl and
// starts it again on its data directory: it loses none of the captures it
// had acknowledged, rejoins, and the network still archives every page.
func testKillRestart(t *testing.T, bin string) {
	c := newCluster(t, bin)
	web, proxy := startWebsim(t)
	nodes := c.startNetwork(3, proxy, 3)
	n3 := nodes[2]
	c.submit(nodes[1], web.Seeds())

	// Kill n3 once it has archived a little, or — should it own too few
	// hosts to get there — once the crawl is over.
	var acked int64
	busy := false
	c.waitFor("n3 to archive some pages", time.Minute, func() (bool, string) {
		st, err := c.status(n3)
		if err != nil {
			return false, err.Error()
		}
		acked, busy = st.Crawl.Captures, st.Crawl.Queued > 0
		var captures int64
		queued := 0
		for _, m := range st.Members {
			if m.Crawl != nil {
				captures += m.Crawl.Captures
				queued += m.Crawl.Queued
			}
		}
		return acked >= 20 || captures > 0 && queued == 0, fmt.Sprintf("n3 has %d captures; the network %d, %d queued", acked, captures, queued)
	})
	c.kill(n3.proc)
	t.Logf("killed n3 with %d acknowledged captures (frontier busy: %v)", acked, busy)
	c.waitMembers(2, nodes[:2]...)

	c.startNode(n3)
	c.waitMembers(3, nodes...)
	if st, err := c.status(n3); err != nil {
		t.Fatal(err)
	} else if st.Crawl.Captures < acked {
		t.Errorf("n3 reports %d captures after its restart; it had acknowledged %d", st.Crawl.Captures, acked)
	}
	c.waitQuiet(nodes)
	c.waitRepaired(nodes)
	c.checkAPIStatus(nodes)
	replayed := c.checkReplay(nodes[0], web.Pages())
	for _, n := range nodes {
		c.stop(n.proc)
	}

	holders, _, fetches := c.holdings(nodes)
	for _, p := range web.Pages() {
		if len(holders[p]) == 0 {
			t.Errorf("page %s was archived by no node", p)
		}
	}
	if kept := int64(len(c.index(n3.data))); kept < acked {
		t.Errorf("n3's index holds %d captures after SIGKILL and restart; it had acknowledged %d", kept, acked)
	}
	// Three nodes keeping three copies: each holds every capture.
	for _, n := range nodes {
		held := 0
		for _, hs := range holders {
			if slices.Contains(hs, n.name) {
				held++
			}
		}
		if held != len(holders) {
			t.Errorf("%s holds captures of %d of the %d URLs; with --replicas 3 on three nodes it should hold all", n.name, held, len(holders))
		}
	}
	if len(replayed) == 0 {
		t.Error("nothing was replayed")
	}
	t.Logf("after SIGKILL and restart: coverage 1, overlap %d of %d captures (%s)", overlapOf(fetches), total(fetches), capturesPerNode(nodes, holders))
}

// buildWaggle builds the waggle binary into a temporary directory.
func buildWaggle(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "waggle")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startWebsim serves the synthetic web from this process; only the nodes
// need to be processes of their own. It returns the proxy URL.
func startWebsim(t *testing.T) (*websim.Web, string) {
	t.Helper()
	return startSim(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
}

// cluster runs waggle processes for a test and cleans up after it.
type cluster struct {
	t      *testing.T
	bin    string
	dir    string
	procs  []*childProc
	ports  map[int]bool // ports handed out, so that no two pairs overlap
	netDir string
}

// childProc is a running (or finished) waggle process.
type childProc struct {
	name string
	cmd  *exec.Cmd
	log  string        // its stdout and stderr
	done chan struct{} // closed once it has exited
}

// procNode is a node process and the flags it is (re)started with.
type procNode struct {
	name, data, cred string
	peer, http, join string
	proxy            string
	replicas         int
	netns            string   // the network namespace it runs in ("": this process's)
	extra            []string // flags after the usual ones, which they override
	proc             *childProc
}

func newCluster(t *testing.T, bin string) *cluster {
	c := &cluster{t: t, bin: bin, dir: t.TempDir(), ports: map[int]bool{}}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if !p.exited() {
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("--- last lines of %s (%s):\n%s", p.name, p.log, logTail(p.log, 40))
			}
		}
	})
	return c
}

// waggle runs a short waggle command and returns its standard output; it
// fails the test unless the command succeeds within a minute.
func (c *cluster) waggle(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("waggle %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errs.String())
	}
	return out.String()
}

// start starts a long-running waggle process logging to a file.
func (c *cluster) start(name string, args ...string) *childProc {
	c.t.Helper()
	return c.startCmd(name, c.bin, args...)
}

// startCmd starts a long-running process of program logging to a file.
func (c *cluster) startCmd(name, program string, args ...string) *childProc {
	c.t.Helper()
	logs := filepath.Join(c.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		c.t.Fatal(err)
	}
	runs := 1
	for _, p := range c.procs {
		if p.name == name {
			runs++
		}
	}
	p := &childProc{name: name, log: filepath.Join(logs, fmt.Sprintf("%s.%d.log", name, runs)), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		c.t.Fatal(err)
	}
	p.cmd = exec.Command(program, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		c.t.Fatal(err)
	}
	c.procs = append(c.procs, p)
	go func() {
		p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

func (p *childProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop stops a process with SIGTERM, as an operator would: it must exit 0.
func (c *cluster) stop(p *childProc) {
	c.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		c.t.Fatalf("%s did not exit within a minute of SIGTERM", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		c.t.Errorf("%s exited with %s after SIGTERM; want exit status 0", p.name, p.cmd.ProcessState)
	}
}

// kill kills a process with SIGKILL: it gets no chance to tidy up.
func (c *cluster) kill(p *childProc) {
	c.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("%s: SIGKILL: %v", p.name, err)
	}
	<-p.done
}

// portPair returns a loopback address whose port and the next one are
// free, over TCP and UDP: a node listens on both (peer and gossip, replay
// and content).
func (c *cluster) portPair() string {
	c.t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		var closers []io.Closer
		closers = append(closers, ln)
		ok := !c.ports[p] && !c.ports[p+1] && p < 65535
		if ok {
			next := fmt.Sprintf("127.0.0.1:%d", p+1)
			if l, err := net.Listen("tcp", next); err == nil {
				closers = append(closers, l)
			} else {
				ok = false
			}
			if u, err := net.ListenPacket("udp", next); err == nil {
				closers = append(closers, u)
			} else {
				ok = false
			}
		}
		for _, cl := range closers {
			cl.Close()
		}
		if ok {
			c.ports[p], c.ports[p+1] = true, true
			return fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	c.t.Fatal("found no two free consecutive ports")
	return ""
}

// startNetwork creates a network, admits n nodes, starts them (each one
// after the first joining the first) and waits until all see each other.
func (c *cluster) startNetwork(n int, proxy string, replicas int) []*procNode {
	c.t.Helper()
	return c.startNetworkWith(n, proxy, replicas, func(_ int, pn *procNode) {
		pn.peer, pn.http = c.portPair(), c.portPair()
	})
}

// startNetworkWith is startNetwork with place setting each node's
// addresses (and whatever else differs from the defaults) before it starts.
func (c *cluster) startNetworkWith(n int, proxy string, replicas int, place func(i int, pn *procNode)) []*procNode {
	c.t.Helper()
	c.netDir = filepath.Join(c.dir, "net")
	c.waggle("network", "init", "--dir", c.netDir)
	var nodes []*procNode
	for i := range n {
		pn := &procNode{
			name:     fmt.Sprintf("n%d", i+1),
			proxy:    proxy,
			replicas: replicas,
		}
		place(i, pn)
		pn.data = filepath.Join(c.dir, pn.name)
		pn.cred = filepath.Join(c.dir, pn.name+".pem")
		if i > 0 {
			pn.join = nodes[0].peer
		}
		c.waggle("network", "admit", "--dir", c.netDir, "--name", pn.name, "--out", pn.cred)
		c.startNode(pn)
		nodes = append(nodes, pn)
	}
	c.waitMembers(n, nodes...)
	return nodes
}

// startNode starts (or restarts) a node process with its flags.
func (c *cluster) startNode(n *procNode) {
	c.t.Helper()
	args := []string{"node", "--data", n.data, "--network", n.cred, "--peer", n.peer, "--http", n.http,
		"--local-timing", "-v", "--proxy", n.proxy, "--allow-private", "--delay", "0", "--scope", "any",
		"--max-host-pages", strconv.Itoa(hostPages), "--max-crawl-delay", "1ms", "--workers", "8", "--timeout", "10s",
		"--replicas", strconv.Itoa(n.replicas), "--repair-every", "500ms"}
	if n.join != "" {
		args = append(args, "--join", n.join)
	}
	args = append(args, n.extra...)
	if n.netns != "" {
		// ip execs the binary in the namespace: the process is waggle's.
		args = append([]string{"netns", "exec", n.netns, c.bin}, args...)
		n.proc = c.startCmd(n.name, "ip", args...)
		return
	}
	n.proc = c.start(n.name, args...)
}

// waitRepaired waits until anti-entropy has nothing left to copy: every
// node has run a round with each other member since the last poll, and all
// those rounds found the two sides equal.
func (c *cluster) waitRepaired(nodes []*procNode) {
	c.t.Helper()
	type counts struct{ rounds, equal int64 }
	last := map[string]counts{}
	c.waitFor("anti-entropy to find every pair equal", 2*time.Minute, func() (bool, string) {
		done := true
		var why string
		for _, n := range nodes {
			st, err := c.status(n)
			if err != nil || st.Repair == nil {
				return false, fmt.Sprintf("%s: no repair figures (%v)", n.name, err)
			}
			now := counts{st.Repair.Rounds, st.Repair.EqualRounds}
			prev, seen := last[n.name]
			last[n.name] = now
			rounds, equal := now.rounds-prev.rounds, now.equal-prev.equal
			if !seen || rounds < int64(len(nodes)-1) || rounds != equal {
				done = false
				why = fmt.Sprintf("%s: %d rounds since the last look, %d equal", n.name, rounds, equal)
			}
		}
		if !done {
			time.Sleep(time.Second)
		}
		return done, why
	})
}

// status runs waggle status --json for a node.
func (c *cluster) status(n *procNode) (node.Status, error) {
	if n.proc.exited() {
		c.t.Fatalf("%s exited: %s", n.name, n.proc.cmd.ProcessState)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin, "status", "--data", n.data, "--json")
	cmd.Stdout, cmd.Stderr = &out, &errs
	var st node.Status
	if err := cmd.Run(); err != nil {
		return st, fmt.Errorf("waggle status of %s: %v: %s", n.name, err, strings.TrimSpace(errs.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return st, fmt.Errorf("waggle status --json of %s: %v\n%s", n.name, err, out.String())
	}
	return st, nil
}

// waitFor polls cond until it holds, failing the test with cond's last
// description after timeout.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("waited %v for %s: %s", timeout, what, desc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMembers waits until each node's status lists exactly want alive members.
func (c *cluster) waitMembers(want int, nodes ...*procNode) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("%d members", want), 30*time.Second, func() (bool, string) {
		var desc []string
		ok := true
		for _, n := range nodes {
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			alive := 0
			for _, m := range st.Members {
				if m.State == "alive" {
					alive++
				}
			}
			desc = append(desc, fmt.Sprintf("%s sees %d members, %d alive", n.name, len(st.Members), alive))
			ok = ok && len(st.Members) == want && alive == want
		}
		return ok, strings.Join(desc, "; ")
	})
}

// submit adds seeds through a node's admin socket.
func (c *cluster) submit(n *procNode, seeds []string) {
	c.t.Helper()
	out := c.waggle(append([]string{"submit", "--data", n.data}, seeds...)...)
	if !strings.Contains(out, fmt.Sprintf("submitted %d seed", len(seeds))) {
		c.t.Fatalf("waggle submit: %q", out)
	}
}

// waitQuiet waits until the network has nothing left to do: no URL
// queued in any frontier or outbox, and no new capture for 2 seconds. It
// returns the nodes' last statuses.
func (c *cluster) waitQuiet(nodes []*procNode) []node.Status {
	c.t.Helper()
	var last int64 = -1
	quietSince := time.Now()
	sts := make([]node.Status, len(nodes))
	c.waitFor("the network to finish crawling", 2*time.Minute, func() (bool, string) {
		var total int64
		busy := false
		var desc []string
		for i, n := range nodes {
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			sts[i] = st
			pending := 0
			for _, k := range st.Exchange.Pending {
				pending += k
			}
			total += st.Crawl.Captures
			busy = busy || st.Crawl.Queued > 0 || pending > 0
			desc = append(desc, fmt.Sprintf("%s: %d captures, %d queued, %d to send", n.name, st.Crawl.Captures, st.Crawl.Queued, pending))
		}
		if busy || total != last {
			last, quietSince = total, time.Now()
			return false, strings.Join(desc, "; ")
		}
		return time.Since(quietSince) >= 2*time.Second, strings.Join(desc, "; ")
	})
	return sts
}

// checkAPIStatus checks that each node's /api/status lists every node as
// an alive member that answered with its figures.
func (c *cluster) checkAPIStatus(nodes []*procNode) {
	c.t.Helper()
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.http + "/api/status")
		if err != nil {
			c.t.Fatal(err)
		}
		var st node.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			c.t.Fatalf("%s: GET /api/status: %s, %v", n.name, resp.Status, err)
		}
		if st.Node.Name != n.name || len(st.Members) != len(nodes) {
			c.t.Errorf("%s: /api/status is of %q and lists %d members, want %d", n.name, st.Node.Name, len(st.Members), len(nodes))
		}
		for _, m := range st.Members {
			if m.State != "alive" || m.Crawl == nil || m.Share <= 0 {
				c.t.Errorf("%s: /api/status of member %s: state %s, share %.3f, figures %v, error %q", n.name, m.Name, m.State, m.Share, m.Crawl != nil, m.Error)
			}
		}
	}
}

// checkReplay replays every eighth page from a node's content address, and
// returns the pages replayed.
func (c *cluster) checkReplay(n *procNode, pages []string) []string {
	c.t.Helper()
	st, err := c.status(n)
	if err != nil {
		c.t.Fatal(err)
	}
	content := st.Node.Content
	var replayed []string
	for i := 0; i < len(pages); i += 8 {
		resp, err := http.Get("http://" + content + "/web/2id_/" + pages[i])
		if err != nil {
			c.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("<html")) {
			c.t.Errorf("%s replaying %s: %s %.100q", n.name, pages[i], resp.Status, body)
		}
		replayed = append(replayed, pages[i])
	}
	return replayed
}

// replayedFromPeer reports whether some page n replayed is archived only
// by other nodes: replay answered from a peer's archive.
func replayedFromPeer(n *procNode, replayed []string, holders map[string][]string) bool {
	for _, p := range replayed {
		if len(holders[p]) > 0 && !slices.Contains(holders[p], n.name) {
			return true
		}
	}
	return false
}

// cdxjCapture is what the tests need of a CDXJ line.
type cdxjCapture struct{ key, ts, url string }

// index exports the capture index of a stopped node's data directory.
func (c *cluster) index(data string) []cdxjCapture {
	c.t.Helper()
	var caps []cdxjCapture
	sc := bufio.NewScanner(strings.NewReader(c.waggle("index", "export", "--data", data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 3)
		var f struct {
			URL string `json:"url"`
		}
		if len(parts) != 3 || json.Unmarshal([]byte(parts[2]), &f) != nil || f.URL == "" {
			c.t.Fatalf("bad CDXJ line %q", sc.Text())
		}
		caps = append(caps, cdxjCapture{key: parts[0], ts: parts[1], url: f.URL})
	}
	return caps
}

// holdings reads the indexes of stopped nodes: where each URL was
// archived (URL → names of the nodes holding a capture of it), and the
// SURT keys archived.
func (c *cluster) holdings(nodes []*procNode) (holders map[string][]string, keys map[string]bool, fetches map[string]map[string]bool) {
	c.t.Helper()
	holders, keys, fetches = map[string][]string{}, map[string]bool{}, map[string]map[string]bool{}
	for _, n := range nodes {
		for _, cp := range c.index(n.data) {
			holders[cp.url] = append(holders[cp.url], n.name)
			keys[cp.key] = true
			if fetches[cp.url] == nil {
				fetches[cp.url] = map[string]bool{}
			}
			fetches[cp.url][cp.ts] = true
		}
	}
	return holders, keys, fetches
}

// overlapOf counts the fetches beyond the first of each URL: captures of
// it at distinct times (copies on replicas share their time). robots.txt
// files are left out: two origins of one site (example.com and
// www.example.com) each need their robots.txt, and when one redirects to
// the other the same URL is archived for both, by one node as by many.
func overlapOf(fetches map[string]map[string]bool) int {
	n := 0
	for u, ts := range fetches {
		if !strings.HasSuffix(u, "/robots.txt") {
			n += len(ts) - 1
		}
	}
	return n
}

// total counts the distinct captures.
func total(fetches map[string]map[string]bool) int {
	n := 0
	for _, ts := range fetches {
		n += len(ts)
	}
	return n
}

// capturesPerNode describes how many captures each node holds.
func capturesPerNode(nodes []*procNode, holders map[string][]string) string {
	count := map[string]int{}
	for _, hs := range holders {
		for _, h := range hs {
			count[h]++
		}
	}
	var s []string
	for _, n := range nodes {
		s = append(s, fmt.Sprintf("%s %d", n.name, count[n.name]))
	}
	return strings.Join(s, ", ")
}

// logTail returns the last n lines of a file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
