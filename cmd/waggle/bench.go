package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: waggle bench crawl|replay|cluster|churn|recrawl [flags]")
		return errUsage
	}
	switch args[0] {
	case "crawl":
		return benchCrawl(ctx, args[1:], stdout, stderr)
	case "replay":
		return benchReplay(ctx, args[1:], stdout, stderr)
	case "cluster":
		return benchCluster(ctx, args[1:], stdout, stderr)
	case "churn":
		return benchChurn(ctx, args[1:], stdout, stderr)
	case "recrawl":
		return benchRecrawl(ctx, args[1:], stdout, stderr)
	case "fetchloop":
		return benchFetchLoop(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "waggle bench: unknown benchmark %q\n", args[0])
	return errUsage
}

func benchCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench crawl", "[flags]", stderr)
	var opts bench.Options
	websimFlags(fs, &opts.Web)
	fs.IntVar(&opts.Workers, "workers", 64, "concurrency of waggle and of the plain loop")
	fs.BoolVar(&opts.Wget, "wget", true, "also compare CPU per archived object with wget --warc-file")
	fs.BoolVar(&opts.ColdServer, "cold-server", false, "give the crawl and the plain loop each a fresh websim, which renders every page on its first request, instead of a warmed one")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	opts.Bin = bin
	if opts.Dir, err = os.MkdirTemp("", "waggle-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(opts.Dir)
	_, err = bench.Crawl(ctx, opts, stdout)
	return err
}

// benchFetchLoop is the plain-loop contender of `bench crawl`, run as its
// own process so that its CPU time is measured alone.
func benchFetchLoop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench fetchloop", "--proxy URL --urls FILE [flags]", stderr)
	proxy := fs.String("proxy", "", "HTTP proxy")
	list := fs.String("urls", "", "file with one URL per line")
	workers := fs.Int("workers", 64, "concurrency")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	b, err := os.ReadFile(*list)
	if err != nil {
		return err
	}
	urls := strings.Fields(string(b))
	n, bytes, err := bench.FetchLoop(ctx, *proxy, *workers, urls)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]int64{"requests": n, "bytes": bytes})
}

func benchReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench replay", "[flags]", stderr)
	var opts bench.ReplayOptions
	fs.IntVar(&opts.Hosts, "hosts", 500, "hosts in the synthetic archive")
	fs.IntVar(&opts.URLsPerHost, "urls", 40, "URLs per host")
	fs.IntVar(&opts.Captures, "captures", 5, "captures of each URL")
	fs.IntVar(&opts.Concurrency, "concurrency", 8, "concurrent clients")
	fs.DurationVar(&opts.Duration, "duration", 5*time.Second, "how long each kind of request is measured")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "waggle-bench-replay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts.Dir = dir
	_, err = bench.Replay(ctx, opts, stdout)
	return err
}

func benchCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench cluster", "[flags]", stderr)
	var opts bench.ClusterOptions
	websimFlags(fs, &opts.Web)
	sizes := fs.String("nodes", "1,3,5", "network sizes to measure, comma-separated")
	fs.IntVar(&opts.Workers, "workers", 16, "fetch workers per node")
	fs.IntVar(&opts.HostPages, "max-host-pages", 300, "trap limit: URLs per host")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the nodes (and the benchmark's own work) to this file")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: bad --nodes %q", errUsage, *sizes)
		}
		opts.Sizes = append(opts.Sizes, n)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	opts.Bin = bin
	if opts.Dir, err = os.MkdirTemp("", "waggle-bench-cluster-"); err != nil {
		return err
	}
	defer os.RemoveAll(opts.Dir)
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	_, err = bench.Cluster(ctx, opts, stdout)
	return err
}

func benchChurn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench churn", "[flags]", stderr)
	var opts bench.ChurnOptions
	websimFlags(fs, &opts.Web)
	fs.IntVar(&opts.Nodes, "nodes", 5, "network size")
	fs.IntVar(&opts.Replicas, "replicas", 3, "copies of each capture")
	fs.IntVar(&opts.Events, "crashes", 6, "crashes, one node at a time, each followed by a restart")
	fs.DurationVar(&opts.Down, "down", 3*time.Second, "how long a crashed node stays down")
	fs.Int64Var(&opts.RepairRate, "repair-rate", 8<<20, "anti-entropy byte budget per node per second")
	fs.DurationVar(&opts.Delay, "delay", 20*time.Millisecond, "per-host delay, so that the crawl lasts through the churn")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	opts.Bin = bin
	if opts.Dir, err = os.MkdirTemp("", "waggle-bench-churn-"); err != nil {
		return err
	}
	defer os.RemoveAll(opts.Dir)
	return bench.Churn(ctx, opts, stdout)
}

func benchRecrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench recrawl", "[flags]", stderr)
	var opts bench.RecrawlOptions
	websimFlags(fs, &opts.Web)
	fs.IntVar(&opts.Workers, "workers", 16, "fetch workers")
	fs.IntVar(&opts.HostPages, "max-host-pages", 300, "trap limit: URLs per host")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if opts.Dir, err = os.MkdirTemp("", "waggle-bench-recrawl-"); err != nil {
		return err
	}
	defer os.RemoveAll(opts.Dir)
	_, err = bench.Recrawl(ctx, opts, stdout)
	return err
}
