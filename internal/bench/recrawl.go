package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/websim"
)

// RecrawlOptions configure the re-crawl benchmark.
type RecrawlOptions struct {
	Dir       string        // scratch directory
	Web       websim.Config // the synthetic web
	Workers   int
	HostPages int // trap limit: URLs per host
}

// RecrawlRun is what one crawl of the benchmark fetched and stored.
type RecrawlRun struct {
	Name  string
	Stats crawl.Stats
}

// RecrawlResult is the benchmark's outcome.
type RecrawlResult struct {
	First, Same, Changed RecrawlRun
	// ChangedPages is how many of the web's pages the version step
	// changed; ChangedStored the WARC bytes of the response records the
	// third crawl wrote for them, and NewResponses how many response
	// records it wrote in all.
	ChangedPages, Pages int
	ChangedStored       int64
	NewResponses        int
	// Payloads are the WARC bytes of the response records each crawl
	// wrote (payloads stored, as opposed to revisit records).
	Payloads [3]int64
}

// Recrawl crawls a synthetic web, crawls it again unchanged, then changes
// about 1% of its pages and crawls it a third time, and reports the bytes
// each crawl fetched and stored.
func Recrawl(ctx context.Context, opts RecrawlOptions, out io.Writer) (RecrawlResult, error) {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.HostPages <= 0 {
		opts.HostPages = 300
	}
	web := websim.New(opts.Web)
	srv, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		return RecrawlResult{}, err
	}
	defer srv.Close()
	fmt.Fprintf(out, "websim: %d hosts, %d pages, seed %d, %d KiB of article text per page; %d workers, %d URLs per host at most\n",
		opts.Web.Hosts, len(web.Pages()), opts.Web.Seed, opts.Web.TextKB, opts.Workers, opts.HostPages)
	cfg := crawl.Config{
		Data:            filepath.Join(opts.Dir, "data"),
		Seeds:           web.Seeds(),
		Scope:           crawl.ScopeAny,
		Proxy:           srv.URL(),
		AllowPrivate:    true,
		NoDelay:         true,
		MaxCrawlDelay:   time.Millisecond,
		Workers:         opts.Workers,
		MaxPagesPerHost: opts.HostPages,
		Timeout:         10 * time.Second,
	}
	run := func(name string, recrawl bool) (RecrawlRun, error) {
		c := cfg
		c.RecrawlAll = recrawl
		cr, err := crawl.Open(c)
		if err != nil {
			return RecrawlRun{}, err
		}
		s, err := cr.Run(ctx)
		if cerr := cr.Close(); err == nil {
			err = cerr
		}
		return RecrawlRun{Name: name, Stats: s}, err
	}
	var res RecrawlResult
	var starts [3]time.Time
	starts[0] = time.Now()
	if res.First, err = run("first crawl", false); err != nil {
		return res, err
	}
	starts[1] = time.Now()
	if res.Same, err = run("re-crawl, web unchanged", true); err != nil {
		return res, err
	}
	web.SetVersion(opts.Web.Version + 1)
	changed := web.ChangedPages(opts.Web.Version, opts.Web.Version+1)
	res.ChangedPages, res.Pages = len(changed), len(web.Pages())
	starts[2] = time.Now()
	if res.Changed, err = run("re-crawl, 1% of pages changed", true); err != nil {
		return res, err
	}
	if err := res.countResponses(cfg.Data, starts, changed); err != nil {
		return res, err
	}
	res.print(out)
	return res, nil
}

// countResponses adds up the response records each crawl wrote (each
// began at its start), and finds those of the changed pages among the
// third crawl's.
func (r *RecrawlResult) countResponses(data string, starts [3]time.Time, changed []string) error {
	db, err := crawl.OpenExistingDB(data)
	if err != nil {
		return err
	}
	defer db.Close()
	want := map[string]bool{}
	for _, u := range changed {
		want[u] = true
	}
	return index.New(db).Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		if c.Type != "response" {
			return true, nil
		}
		run := 0
		for i, t := range starts {
			if !c.Time.Before(t) {
				run = i
			}
		}
		r.Payloads[run] += c.Length
		if run < 2 {
			return true, nil
		}
		r.NewResponses++
		if want[c.URL] {
			r.ChangedStored += c.Length
		}
		return true, nil
	})
}

func (r *RecrawlResult) print(out io.Writer) {
	first := r.First.Stats
	fmt.Fprintf(out, "%-32s %12s %12s %9s %9s %13s %10s %10s\n", "", "fetched", "stored", "captures", "revisits", "not-modified", "unchanged", "duplicate")
	for _, run := range []RecrawlRun{r.First, r.Same, r.Changed} {
		s := run.Stats
		fetched := fmt.Sprintf("%.2f MiB", float64(s.Bytes)/(1<<20))
		stored := fmt.Sprintf("%.2f MiB", float64(s.Stored)/(1<<20))
		if run.Name != r.First.Name {
			fetched = fmt.Sprintf("%.2f%%", 100*float64(s.Bytes)/float64(first.Bytes))
			stored = fmt.Sprintf("%.2f%%", 100*float64(s.Stored)/float64(first.Stored))
		}
		fmt.Fprintf(out, "%-32s %12s %12s %9d %9d %13d %10d %10d\n", run.Name, fetched, stored, s.New,
			s.NotModified+s.Unchanged+s.Duplicates, s.NotModified, s.Unchanged, s.Duplicates)
	}
	fmt.Fprintln(out, "(re-crawl figures are percentages of the first crawl's)")
	same, changed := r.Same.Stats, r.Changed.Stats
	fmt.Fprintf(out, "response records (payloads) stored: first crawl %.2f MiB; re-crawl of the unchanged web %.1f KiB (%.2f%%); after the change %.1f KiB (%.2f%%)\n",
		float64(r.Payloads[0])/(1<<20), float64(r.Payloads[1])/1024, 100*float64(r.Payloads[1])/float64(max(r.Payloads[0], 1)),
		float64(r.Payloads[2])/1024, 100*float64(r.Payloads[2])/float64(max(r.Payloads[0], 1)))
	fmt.Fprintf(out, "per revisit: %.0f B fetched, %.0f B stored (revisit and request records)\n",
		float64(same.Bytes)/float64(max(same.New, 1)), float64(same.Stored)/float64(max(same.New, 1)))
	fmt.Fprintf(out, "changed pages: %d of %d; the third crawl wrote %d response records, %.1f KiB for the changed pages, and stored %.1f KiB more than the unchanged re-crawl\n",
		r.ChangedPages, r.Pages, r.NewResponses, float64(r.ChangedStored)/1024, float64(changed.Stored-same.Stored)/1024)
}
