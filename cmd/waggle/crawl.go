package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/replay"
	"github.com/waggle-archive/waggle/internal/schedule"
)

// crawlFlags registers the crawl flags on fs; the node command shares them.
func crawlFlags(fs *flag.FlagSet, cfg *crawl.Config) (scope *string, delay *string) {
	fs.StringVar(&cfg.Data, "data", "./waggle-data", "data directory (WARC segments, index, frontier)")
	scope = fs.String("scope", "", "which links to follow: host (the seeds' hosts), domain (their registrable domains), prefix (URLs under a seed's directory), any; default: as the data directory was last crawled, else host")
	fs.IntVar(&cfg.MaxPages, "max-pages", 0, "stop after this many captures in the data directory, revisits included (0: no limit)")
	fs.IntVar(&cfg.MaxDepth, "max-depth", 0, "follow links at most this many hops from a seed (0: no limit)")
	fs.IntVar(&cfg.MaxPagesPerHost, "max-host-pages", 100000, "trap limit: URLs queued per host (-1: no limit)")
	fs.IntVar(&cfg.PerHostConnections, "per-host-connections", 1, "requests in flight to one host")
	delay = fs.String("delay", "1s", "pause between requests to one host (0 allowed)")
	fs.DurationVar(&cfg.MaxCrawlDelay, "max-crawl-delay", 30*time.Second, "cap on a robots.txt Crawl-delay")
	fs.IntVar(&cfg.Workers, "workers", 64, "concurrent fetches over all hosts")
	fs.StringVar(&cfg.Proxy, "proxy", "", "HTTP forward proxy URL for all fetches")
	fs.StringVar(&cfg.UserAgent, "user-agent", crawl.DefaultUserAgent, "User-Agent header")
	fs.BoolVar(&cfg.AllowPrivate, "allow-private", false, "permit loopback and private-network targets (refused by default)")
	fs.BoolVar(&cfg.IgnoreRobots, "ignore-robots", false, "do not fetch or obey robots.txt")
	fs.BoolVar(&cfg.NoRequisites, "no-page-requisites", false, "do not fetch off-scope images, CSS, scripts and fonts of in-scope pages")
	fs.Int64Var(&cfg.MaxBodySize, "max-body-size", 50<<20, "archive at most this many body bytes per response (the rest is cut and marked WARC-Truncated)")
	fs.Int64Var(&cfg.SegmentSize, "segment-size", 1<<30, "start a new WARC file past this size")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "whole-request timeout")
	fs.IntVar(&cfg.Retries, "retries", 2, "times a crawl run, once nothing else is queued, tries again the URLs whose fetch failed for a reason that may pass (host or network down); the rest wait for the next run (a node retries hourly); a revisit that fails so waits for its schedule, which backs it off")
	fs.DurationVar(&cfg.RetryWait, "retry-wait", 30*time.Second, "pause before a run's first retry of failed fetches, doubled before each next up to an hour")
	var rules []recrawl.Rule
	fs.Func("revisit", "re-crawl schedule `[URL-PREFIX=]INTERVAL[,MIN,MAX]`, repeatable: URLs under the prefix (every URL without one) are revisited after INTERVAL at first, then adaptively within MIN..MAX (default: 24h,1h,720h; with INTERVAL alone, a 24th of it and 30 times it)", func(v string) error {
		r, err := recrawl.ParseRule(v)
		if err == nil {
			err = recrawl.Check(append(rules, r))
		}
		if err != nil {
			return err
		}
		rules = append(rules, r)
		cfg.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rules...)
		return nil
	})
	return scope, delay
}

// finishCrawlFlags turns the string flags into config values.
func finishCrawlFlags(cfg *crawl.Config, scope, delay string) error {
	var err error
	if cfg.Scope, err = crawl.ParseScope(scope); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	d, err := time.ParseDuration(delay)
	if delay == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return fmt.Errorf("%w: bad --delay %q", errUsage, delay)
	}
	cfg.Delay, cfg.NoDelay = d, d == 0
	if err := checkFlags(
		flagRange{cfg.Workers < 1, "workers", "at least 1", cfg.Workers},
		flagRange{cfg.PerHostConnections < 1, "per-host-connections", "at least 1", cfg.PerHostConnections},
		flagRange{cfg.Timeout <= 0, "timeout", "more than 0", cfg.Timeout},
		flagRange{cfg.Retries < 0 || cfg.Retries > maxRetries, "retries", fmt.Sprintf("0 to %d", maxRetries), cfg.Retries},
		flagRange{cfg.RetryWait <= 0 || cfg.RetryWait > time.Hour, "retry-wait", "more than 0, at most 1h", cfg.RetryWait},
		flagRange{cfg.MaxBodySize < 1, "max-body-size", "at least 1", cfg.MaxBodySize},
		flagRange{cfg.MaxPages < 0, "max-pages", "0 (no limit) or more", cfg.MaxPages},
		flagRange{cfg.MaxDepth < 0, "max-depth", "0 (no limit) or more", cfg.MaxDepth},
		flagRange{cfg.MaxPagesPerHost < -1, "max-host-pages", "-1 (no limit) or more", cfg.MaxPagesPerHost},
		flagRange{cfg.MaxCrawlDelay < 0, "max-crawl-delay", "0 or more", cfg.MaxCrawlDelay},
		flagRange{cfg.SegmentSize < minSegmentSize, "segment-size", "at least 1 MiB (1048576)", cfg.SegmentSize},
	); err != nil {
		return err
	}
	if cfg.Proxy != "" {
		u, err := url.Parse(cfg.Proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: --proxy %q: want an http:// or https:// URL of a forward proxy", errUsage, cfg.Proxy)
		}
	}
	return nil
}

// maxRetries bounds --retries: with the wait doubled each time up to an
// hour, ten rounds from the default wait already span about four hours.
const maxRetries = 10

// minSegmentSize is the smallest --segment-size: smaller, every record
// would roll a new WARC file.
const minSegmentSize = 1 << 20

func runCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("crawl", "[flags] SEED...", stderr)
	var cfg crawl.Config
	scope, delay := crawlFlags(fs, &cfg)
	jsonOut := fs.Bool("json", false, "print a JSON summary on stdout at the end")
	verbose := fs.Bool("v", false, "log every fetch problem (to stderr)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the crawl to this file (go tool pprof reads it)")
	memProfile := fs.String("memprofile", "", "write a profile of the crawl's allocations to this file at the end (go tool pprof -sample_index=alloc_space reads it)")
	httpAddr := fs.String("http", "", "also serve the archive's replay on this address while crawling (as waggle serve does)")
	replaySpool := fs.Int64("replay-spool", replay.DefaultSpoolBytes, "with --http: bytes of the payloads of captures over 64 MiB kept on disk (DIR/replay-spool) once replayed, for their range requests; 0 for none")
	fs.BoolVar(&cfg.Recrawl, "recrawl", false, "also revisit the archive's URLs that are due (see --revisit): conditional GETs, revisit records for unchanged pages")
	fs.BoolVar(&cfg.RecrawlAll, "recrawl-all", false, "revisit every URL in the archive now, due or not")
	seeds, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := finishCrawlFlags(&cfg, *scope, *delay); err != nil {
		return err
	}
	// A mistyped --data would otherwise start an empty archive, crawl
	// nothing and succeed: a daily --recrawl from cron would never say so.
	if err := crawl.CheckArchive(cfg.Data); errors.Is(err, os.ErrNotExist) {
		switch {
		case cfg.Recrawl || cfg.RecrawlAll:
			return fmt.Errorf("no archive at %s to re-crawl (a first crawl takes seeds)", cfg.Data)
		case len(seeds) == 0:
			return fmt.Errorf("%w: no seeds, and no archive at %s to go on with", errUsage, cfg.Data)
		}
	}
	cfg.Seeds = seeds
	level := slog.LevelError
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	mem := replayMemory{replay.DefaultPayloadCacheBytes, *replaySpool}
	if err := crawlAndReport(ctx, cfg, stdout, stderr, *jsonOut, *httpAddr, mem); err != nil {
		return err
	}
	return writeAllocProfile(*memProfile)
}

// crawlAndReport runs a crawl with a live progress line on a terminal and a
// one-line summary at the end, serving replay on httpAddr meanwhile unless
// it is empty.
func crawlAndReport(ctx context.Context, cfg crawl.Config, stdout, stderr io.Writer, jsonOut bool, httpAddr string, mem replayMemory) error {
	c, err := crawl.Open(cfg)
	if err != nil {
		return err
	}
	if (cfg.Recrawl || cfg.RecrawlAll) && c.ScopeIsEmpty() {
		fmt.Fprintln(stderr, "waggle: note: this archive has no seeds (its captures were imported), so no link is in scope:"+
			" the new links of changed pages are not followed. Give the sites as seeds, or --scope any, to follow them.")
	}
	stopServing := func() {}
	if httpAddr != "" {
		ui, content, err := replay.Listen(httpAddr, "")
		if err != nil {
			c.Close()
			return err
		}
		serveCtx, cancel := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := serveArchive(serveCtx, c.Index(), cfg.Data, ui, content, mem, stderr, stderr); err != nil {
				fmt.Fprintln(stderr, "waggle: replay:", err)
			}
		}()
		stopServing = func() {
			cancel()
			<-served // the database stays open until replay is done with it
		}
	}
	done := make(chan struct{})
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					fmt.Fprintf(stderr, "\r\033[K%s", progressLine(c.Stats()))
				}
			}
		}()
	}
	if from, to, ok := c.Rescoping(); ok {
		fmt.Fprintf(stderr, "the scope widened from %s to %s: following again the links of the archived pages first (once; it reads each page's metadata record)\n", from, to)
	}
	s, runErr := c.Run(ctx)
	close(done)
	stopServing()
	closeErr := c.Close()
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "\r\033[K")
	}
	fmt.Fprintf(stderr, "%s — archive in %s\n", progressLine(s), cfg.Data)
	if (cfg.Recrawl || cfg.RecrawlAll) && runErr == nil {
		fmt.Fprintf(stderr, "re-crawl: %d URLs were due and queued for a visit; %s\n", s.RevisitsQueued, nextDue(s.NextDue, time.Now()))
	}
	if s.Deferred > 0 && runErr == nil {
		what := fmt.Sprintf("%d URLs", s.Deferred)
		if s.Deferred == 1 {
			what = "1 URL"
		}
		fmt.Fprintf(stderr, "%s could not be fetched for a reason that may pass (host or network down): run the same command again to retry\n", what)
	}
	if s.Truncated > 0 {
		fmt.Fprintf(stderr, "%d captures were archived cut short (WARC-Truncated: over --max-body-size, past --timeout, or the server closed the connection early); -v names them\n", s.Truncated)
	}
	if s.Forbidden > 0 && !cfg.AllowPrivate {
		fmt.Fprintf(stderr, "%d URLs were not fetched: their hosts have loopback or private addresses, which a crawl refuses unless given --allow-private; the next run takes them up\n", s.Forbidden)
	}
	if cfg.MaxPages > 0 && s.Captures >= int64(cfg.MaxPages) && s.Queued > 0 && runErr == nil {
		fmt.Fprintf(stderr, "stopped at --max-pages %d: the archive holds %d captures, revisits included; %d URLs are still queued (raise --max-pages to go on)\n", cfg.MaxPages, s.Captures, s.Queued)
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(summaryJSON(s, cfg.Data)); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	return closeErr
}

func progressLine(s crawl.Stats) string {
	line := fmt.Sprintf("pages %d (+%d new)  %s fetched  %s stored  %.1f pages/s  queue %d  hosts %d  errors %d",
		s.Captures, s.New, humanBytes(s.Bytes), humanBytes(s.Stored), s.PerSec, s.Queued, s.Hosts, s.Errors)
	switch {
	case s.Deferred > 0 && !s.RetryAt.IsZero():
		line += fmt.Sprintf(" (%d to retry in %s)", s.Deferred, max(0, time.Until(s.RetryAt)).Round(time.Second))
	case s.Deferred > 0:
		line += fmt.Sprintf(" (%d to retry later)", s.Deferred)
	}
	line += fmt.Sprintf("  robots-blocked %d", s.Robots)
	if s.Retried > 0 {
		line += fmt.Sprintf("  retried %d", s.Retried)
	}
	if r := s.NotModified + s.Unchanged + s.Duplicates; r > 0 {
		line += fmt.Sprintf("  revisits %d (not-modified %d, unchanged %d, duplicate %d)", r, s.NotModified, s.Unchanged, s.Duplicates)
	}
	return line + "  " + s.Elapsed.Round(time.Second).String()
}

// nextDue says when the next URL falls due, for the summary.
func nextDue(at, now time.Time) string {
	switch {
	case at.IsZero():
		return "no URL is scheduled"
	case !at.After(now):
		return "some are due now, not visited by this run"
	}
	in := strings.TrimSuffix(max(0, at.Sub(now)).Round(time.Minute).String(), "0s")
	if in == "" {
		in = "under a minute"
	}
	return fmt.Sprintf("the next falls due at %s (in %s)", at.UTC().Format("2006-01-02 15:04 MST"), in)
}

func summaryJSON(s crawl.Stats, data string) map[string]any {
	return map[string]any{
		"data":             data,
		"captures":         s.Captures,
		"new":              s.New,
		"bytes":            s.Bytes,
		"errors":           s.Errors,
		"deferred":         s.Deferred,
		"retried":          s.Retried,
		"robots_blocked":   s.Robots,
		"forbidden":        s.Forbidden,
		"truncated":        s.Truncated,
		"queued":           s.Queued,
		"hosts":            s.Hosts,
		"elapsed_seconds":  s.Elapsed.Seconds(),
		"pages_per_second": s.PerSec,
		"stored_bytes":     s.Stored,
		"revisits_queued":  s.RevisitsQueued,
		"next_due":         nextDueJSON(s.NextDue),
		"revisits": map[string]int64{
			"not_modified": s.NotModified,
			"unchanged":    s.Unchanged,
			"duplicate":    s.Duplicates,
		},
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// startCPUProfile profiles the process into path until the returned stop
// is called; with an empty path it does nothing.
// writeAllocProfile writes the allocations since the start, sampled as
// the runtime does by default, to path ("": nothing).
func writeAllocProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// nextDueJSON is Stats.NextDue in the JSON summary: RFC 3339, or null.
func nextDueJSON(at time.Time) any {
	if at.IsZero() {
		return nil
	}
	return at.UTC().Format(time.RFC3339)
}
