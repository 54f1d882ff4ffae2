package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/membership"
	"github.com/waggle-archive/waggle/internal/node"
	"github.com/waggle-archive/waggle/internal/replay"
)

func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "leave" {
		return runNodeLeave(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("node", "--data DIR [--network FILE --peer ADDR [--join ADDR,...]] [flags] [SEED...]", stderr)
	var cfg node.Config
	scope, delay := crawlFlags(fs, &cfg.Crawl)
	fs.StringVar(&cfg.HTTPAddr, "http", "127.0.0.1:8080", "address of the replay interface and /api/status (\"\" for none)")
	fs.StringVar(&cfg.ContentAddr, "content-http", "", "address replayed pages are served from (default: the --http host, next port)")
	network := fs.String("network", "", "credential `FILE` from 'waggle network admit' (none: a single node)")
	fs.StringVar(&cfg.PeerAddr, "peer", "", "address for peer RPC over mutual TLS, e.g. 0.0.0.0:7400 (with --network)")
	fs.StringVar(&cfg.GossipAddr, "gossip", "", "address for membership gossip, TCP and UDP (default: the --peer host, next port)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "host name or IP the other nodes reach this node at (default: the --peer host)")
	join := fs.String("join", "", "peer addresses of nodes of the network, comma-separated (none: start a new network)")
	fs.IntVar(&cfg.Capacity, "capacity", 1, fmt.Sprintf("relative capacity, 1 to %d: the node's share of hosts is in proportion", membership.MaxCapacity))
	fs.IntVar(&cfg.Replicas, "replicas", 3, "copies of each capture the network keeps")
	fs.DurationVar(&cfg.RepairEvery, "repair-every", node.DefaultRepairEvery, "interval of anti-entropy rounds with the other members")
	fs.Int64Var(&cfg.RepairRate, "repair-rate", node.DefaultRepairRate, "bytes per second anti-entropy may use (comparisons and copies)")
	fs.DurationVar(&cfg.RediscoverAfter, "rediscover-after", node.DefaultRediscoverAfter, "how long a member must stay away before the others take the URLs it had queued for lost and find its sites' links again")
	fs.Int64Var(&cfg.ScrubRate, "scrub-rate", node.DefaultScrubRate, "bytes per second of this node's records read back against their digests, to find damage (-1: none)")
	replayCache := fs.Int64("replay-cache", replay.DefaultPayloadCacheBytes, "bytes of large payloads (videos…) kept in memory for their range requests; 0 for none")
	replaySpool := fs.Int64("replay-spool", replay.DefaultSpoolBytes, "bytes of the payloads of captures over 64 MiB kept on disk (DIR/replay-spool) once replayed, for their range requests; 0 for none")
	localTiming := fs.Bool("local-timing", false, "fast failure detection for nodes on one machine (tests, demos)")
	verbose := fs.Bool("v", false, "log more (to stderr)")
	seeds, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := finishCrawlFlags(&cfg.Crawl, *scope, *delay); err != nil {
		return err
	}
	// The node takes zero for its defaults; a flag given zero is a mistake.
	if err := checkFlags(
		flagRange{cfg.Replicas < 1 || cfg.Replicas > membership.MaxReplicas, "replicas", fmt.Sprintf("1 to %d (and the same on every node of the network)", membership.MaxReplicas), cfg.Replicas},
		flagRange{cfg.Capacity < 1 || cfg.Capacity > membership.MaxCapacity, "capacity", fmt.Sprintf("1 to %d", membership.MaxCapacity), cfg.Capacity},
		flagRange{cfg.RepairEvery <= 0, "repair-every", "more than 0", cfg.RepairEvery},
		flagRange{cfg.RepairRate <= 0, "repair-rate", "more than 0", cfg.RepairRate},
		flagRange{cfg.RediscoverAfter <= 0, "rediscover-after", "more than 0", cfg.RediscoverAfter},
		flagRange{cfg.ScrubRate < -1 || cfg.ScrubRate == 0, "scrub-rate", "-1 (none) or more than 0", cfg.ScrubRate},
	); err != nil {
		return err
	}
	cfg.ReplayCacheBytes = replayCacheBytes(*replayCache)
	cfg.ReplaySpoolBytes = replayCacheBytes(*replaySpool)
	cfg.Crawl.Seeds = seeds
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
		for _, a := range cfg.Join {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return fmt.Errorf("%w: --join %q: want host:port addresses, comma-separated", errUsage, a)
			}
		}
	}
	if *network != "" {
		if cfg.Credential, err = admission.Load(*network); err != nil {
			return err
		}
	} else if cfg.PeerAddr != "" || len(cfg.Join) > 0 {
		return fmt.Errorf("%w: --peer and --join need --network (a credential from `waggle network admit`)", errUsage)
	}
	if *localTiming {
		cfg.Tuning = membership.LocalTuning()
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return err
	}
	a := n.Addrs()
	if cfg.Credential != nil {
		fmt.Fprintf(stdout, "Node %s (%s) of network %s: peer %s, gossip %s.\n", cfg.Credential.Name(), n.ID(), cfg.Credential.Network(), a.Peer, a.Gossip)
	} else {
		fmt.Fprintln(stdout, "Single node (no --network).")
	}
	if a.HTTP != "" {
		fmt.Fprintf(stdout, "Replay: http://%s/ (status: http://%s/api/status).\n", a.HTTP, a.HTTP)
	}
	fmt.Fprintf(stdout, "Add seeds with: waggle submit --data %s URL...\n", cfg.Crawl.Data)
	return n.Run(ctx)
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("submit", "--data DIR URL...", stderr)
	data := fs.String("data", "./waggle-data", "data directory of the running node")
	urls, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(urls) == 0 {
		fs.Usage()
		return errUsage
	}
	n, err := node.Submit(ctx, *data, urls)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "submitted %d seed(s); each goes to the node that owns its host\n", n)
	return nil
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "--data DIR [--json]", stderr)
	data := fs.String("data", "./waggle-data", "data directory of the running node")
	jsonOut := fs.Bool("json", false, "print the status as JSON (as /api/status serves it)")
	if rest, err := parseFlags(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, rest[0])
	}
	st, err := node.QueryStatus(ctx, *data)
	if err != nil {
		return err
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

func printStatus(w io.Writer, st node.Status) {
	name := st.Node.Name
	if name == "" {
		name = "single node"
	}
	fmt.Fprintf(w, "%s  data %s  up %s\n", name, st.Node.Data, (time.Duration(st.Node.UptimeSeconds) * time.Second).String())
	c := st.Crawl
	fmt.Fprintf(w, "crawl: %d captures  %s  %.1f pages/s  queue %d  hosts %d  errors %d (%d URLs waiting for the hourly retry)\n",
		c.Captures, humanBytes(c.Bytes), c.PagesPerSecond, c.Queued, c.Hosts, c.Errors, c.Deferred)
	if r := c.Revisits; c.RevisitsQueued+r.NotModified+r.Unchanged+r.Duplicate > 0 {
		fmt.Fprintf(w, "re-crawl since start: %d URLs fell due; revisits: not-modified %d, unchanged %d, duplicate %d\n",
			c.RevisitsQueued, r.NotModified, r.Unchanged, r.Duplicate)
	}
	if cs := st.ContentSeen; cs != nil && cs.Lookups > 0 {
		fmt.Fprintf(w, "content-seen: %d payloads asked about, %d found archived elsewhere; %d found not archived, %d whose holder proved nothing (stored again)\n",
			cs.Lookups, cs.Hits, cs.NotArchived, cs.Unproven)
		if cs.Unproven > 0 {
			fmt.Fprintln(w, "  a holder that cannot prove it has a payload it is named for is faulty or damaged: the log names it")
		}
	}
	if e := st.Exchange; e.Sent+e.Received > 0 {
		perURL := 0.0
		if e.Sent > 0 {
			perURL = float64(e.WireBytes) / float64(e.Sent)
		}
		fmt.Fprintf(w, "links: sent %d (%.1f B/URL on the wire, %.2f per page)  received %d  refused %d\n",
			e.Sent, perURL, e.URLsPerPage, e.Received, e.Refused)
	}
	if r, rp := st.Repair, st.Replication; r != nil && rp != nil {
		more := ""
		if r.LackingMore {
			more = " or more"
		}
		fmt.Fprintf(w, "copies: %d captures not yet pushed to every replica; last anti-entropy rounds: %d%s lacking here, %d%s lacking on members, %d members not compared yet\n",
			rp.UnderReplicated, r.Lacking, more, r.PeersLack, more, r.NotCompared)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nMEMBER\tSTATE\tSHARE\tCAPTURES\tQUEUE\tHOSTS\tPAGES/S\tHTTP")
	for _, m := range st.Members {
		mark := ""
		if m.Self {
			mark = " *"
		}
		if m.Crawl == nil {
			fmt.Fprintf(tw, "%s%s\t%s\t%.1f%%\t?\t?\t?\t?\t%s\n", m.Name, mark, m.State, 100*m.Share, m.HTTP)
			continue
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%.1f%%\t%d\t%d\t%d\t%.1f\t%s\n", m.Name, mark, m.State, 100*m.Share,
			m.Crawl.Captures, m.Crawl.Queued, m.Crawl.Hosts, m.Crawl.PagesPerSecond, m.HTTP)
	}
	tw.Flush()
}

func runNodeLeave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node leave", "--data DIR", stderr)
	data := fs.String("data", "./waggle-data", "data directory of the running node")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	// Asked first, so that nothing is announced when no node runs there,
	// or when it cannot leave.
	st, err := node.QueryStatus(ctx, *data)
	if err != nil {
		return err
	}
	switch {
	case st.Node.Network == "":
		return fmt.Errorf("the node on %s is a single node: it has no network to leave (stop it instead)", *data)
	case len(st.Members) < 2:
		return fmt.Errorf("%s is the last node of its network: leaving would lose the archive (stop it instead)", st.Node.Name)
	}
	fmt.Fprintf(stdout, "%s: handing captures and URLs over to the other nodes…\n", st.Node.Name)
	if err := node.Leave(ctx, *data); err != nil {
		return err
	}
	// The node answers once it has handed everything over; it then
	// closes its data directory, which is not free until it has.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := node.WaitStopped(wctx, *data); err != nil {
		return fmt.Errorf("%s has left the network but has not stopped within a minute (%w): see its log", st.Node.Name, err)
	}
	fmt.Fprintln(stdout, "the node has left the network and stopped; its data directory may be removed")
	return nil
}
