package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/membership"
	"github.com/waggle-archive/waggle/internal/node"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/websim"
)

// ClusterOptions configure `waggle bench cluster`.
type ClusterOptions struct {
	Bin     string        // the waggle binary, to run websim as a child process
	Dir     string        // scratch directory
	Web     websim.Config // the synthetic web every network crawls
	Sizes   []int         // network sizes to measure (default 1, 3, 5)
	Workers int           // fetch workers per node
	// HostPages is the trap limit on URLs per host (websim's traps are
	// endless; default 300).
	HostPages int
}

// ClusterRun is one network crawling the whole web.
type ClusterRun struct {
	Nodes     int
	Captures  int64
	Wall      time.Duration
	CPU       time.Duration // user + system CPU of this process (all nodes; websim runs apart)
	Exchanged int64         // URLs sent from node to node
	WireBytes int64         // their compressed batches
	TextBytes int64         // the URLs' own length
	// Duplicates are the revisit records of another URL's payload (found
	// by the node's index or the network's content-seen test); Stored is
	// the WARC bytes the nodes wrote for their own captures.
	Duplicates int64
	Stored     int64
	// The whole archive exported as a WACZ through the first node, each
	// record read from the node holding it.
	Exported    int   // captures in the WACZ
	ExportBytes int64 // its size
	ExportWall  time.Duration
}

func (r ClusterRun) String() string {
	perURL, ratio, text := 0.0, 0.0, 0.0
	if r.Exchanged > 0 {
		perURL = float64(r.WireBytes) / float64(r.Exchanged)
		text = float64(r.TextBytes) / float64(r.Exchanged)
	}
	if r.Captures > 0 {
		ratio = float64(r.Exchanged) / float64(r.Captures)
	}
	return fmt.Sprintf("%d node(s): %7d captures %7.2fs wall %8.1f pages/s %7.0fµs CPU/page  exchanged %6d URLs (%.2f per page) %5.1f B/URL on the wire vs %5.1f B of URL\n"+
		"            stored %.1f MB, %d revisits of another URL's payload\n"+
		"            export through n1: %d captures, %.1f MB in %.2fs (%.0f captures/s, %.1f MB/s)",
		r.Nodes, r.Captures, r.Wall.Seconds(), float64(r.Captures)/r.Wall.Seconds(),
		float64(r.CPU.Microseconds())/float64(max(r.Captures, 1)), r.Exchanged, ratio, perURL, text,
		float64(r.Stored)/1e6, r.Duplicates,
		r.Exported, float64(r.ExportBytes)/1e6, r.ExportWall.Seconds(),
		float64(r.Exported)/r.ExportWall.Seconds(), float64(r.ExportBytes)/1e6/r.ExportWall.Seconds())
}

// Cluster crawls the same synthetic web with local networks of each size
// (nodes in this process on loopback, websim in a child process) and
// reports, per size, throughput, CPU per page and the cost of exchanging
// links. On one machine the nodes share its cores, so this measures the
// per-page cost of being a network, not speed-up.
func Cluster(ctx context.Context, opts ClusterOptions, out io.Writer) ([]ClusterRun, error) {
	if len(opts.Sizes) == 0 {
		opts.Sizes = []int{1, 3, 5}
	}
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.HostPages <= 0 {
		opts.HostPages = 300
	}
	proxy, stop, err := startWebsim(ctx, Options{Bin: opts.Bin, Web: opts.Web})
	if err != nil {
		return nil, err
	}
	defer stop()
	seeds := websim.New(opts.Web).Seeds()
	fmt.Fprintf(out, "websim: %d hosts, %d pages, seed %d; %d seeds; %d workers per node; at most %d URLs per host\n",
		opts.Web.Hosts, opts.Web.Pages, opts.Web.Seed, len(seeds), opts.Workers, opts.HostPages)
	var runs []ClusterRun
	for _, size := range opts.Sizes {
		r, err := clusterRun(ctx, opts, size, proxy, seeds)
		if err != nil {
			return runs, err
		}
		fmt.Fprintln(out, r)
		runs = append(runs, r)
	}
	return runs, nil
}

func clusterRun(ctx context.Context, opts ClusterOptions, size int, proxy string, seeds []string) (ClusterRun, error) {
	dir := filepath.Join(opts.Dir, fmt.Sprintf("cluster-%d", size))
	if err := os.RemoveAll(dir); err != nil {
		return ClusterRun{}, err
	}
	netDir := filepath.Join(dir, "net")
	if err := admission.Init(netDir); err != nil {
		return ClusterRun{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nodes []*node.Node
	done := make(chan error, size)
	defer func() {
		cancel()
		for range nodes {
			<-done
		}
	}()
	for i := range size {
		cred, err := admission.Admit(netDir, fmt.Sprintf("n%d", i+1), 0)
		if err != nil {
			return ClusterRun{}, err
		}
		var join []string
		if i > 0 {
			join = []string{nodes[0].Addrs().Peer}
		}
		n, err := node.Open(ctx, node.Config{
			Crawl: crawl.Config{
				Data: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Scope: crawl.ScopeAny, NoDelay: true,
				Proxy: proxy, AllowPrivate: true, MaxCrawlDelay: time.Millisecond, Workers: opts.Workers,
				MaxPagesPerHost: opts.HostPages,
			},
			Credential: &cred,
			PeerAddr:   "127.0.0.1:0",
			Join:       join,
			Tuning:     membership.LocalTuning(),
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return ClusterRun{}, err
		}
		nodes = append(nodes, n)
		go func() { done <- n.Run(ctx) }()
	}
	// Wait until every node sees every other, so that the crawl starts on
	// one view of the network.
	for deadline := time.Now().Add(time.Minute); ; {
		ok := true
		for _, n := range nodes {
			if len(n.Status(ctx).Members) != size {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return ClusterRun{}, fmt.Errorf("bench: %d nodes did not see each other in a minute", size)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cpu0 := cpuTime()
	start := time.Now()
	if _, err := node.Submit(ctx, filepath.Join(dir, "n1"), seeds); err != nil {
		return ClusterRun{}, err
	}
	captures, quietAt, err := node.WaitIdle(ctx, nodes, time.Second)
	if err != nil {
		return ClusterRun{}, err
	}
	r := ClusterRun{Nodes: size, Captures: captures, Wall: quietAt.Sub(start), CPU: cpuTime() - cpu0}
	for _, n := range nodes {
		st := n.Status(ctx)
		e := st.Exchange
		r.Exchanged += e.Sent
		r.WireBytes += e.WireBytes
		r.TextBytes += e.TextBytes
		r.Duplicates += st.Crawl.Revisits.Duplicate
		r.Stored += st.Crawl.Stored
	}
	var out countingWriter
	exportStart := time.Now()
	es, err := node.Export(ctx, filepath.Join(dir, "n1"), wacz.Selection{}, &out)
	if err != nil {
		return r, fmt.Errorf("bench: export: %w", err)
	}
	r.Exported, r.ExportBytes, r.ExportWall = es.Captures, out.n, time.Since(exportStart)
	return r, nil
}

// countingWriter counts and discards what is written.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}
