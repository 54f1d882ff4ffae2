package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replay"
	"github.com/waggle-archive/waggle/internal/websim"
)

// runDemo shows the whole single-node pipeline with no network: it starts the
// synthetic web on loopback and crawls part of it through it as a proxy.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[flags]", stderr)
	data := fs.String("data", "./waggle-demo", "data directory for the demo archive")
	maxPages := fs.Int("max-pages", 1500, "captures to make")
	httpAddr := fs.String("http", "127.0.0.1:8080", "address to serve the replay interface on when the crawl is done (\"\" to stop after the crawl)")
	var wcfg websim.Config
	websimFlags(fs, &wcfg)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	web := websim.New(wcfg)
	srv, err := websim.Start("127.0.0.1:0", web)
	if err != nil {
		return err
	}
	defer srv.Close()
	seeds := web.Seeds()
	fmt.Fprintf(stdout, "websim: %d simulated hosts at %s; crawling from %d seeds through it\n", len(web.Hosts()), srv.URL(), len(seeds))
	cfg := crawl.Config{
		Data:         *data,
		Seeds:        seeds,
		Scope:        crawl.ScopeAny,
		MaxPages:     *maxPages,
		NoDelay:      true,
		Proxy:        srv.URL(),
		AllowPrivate: true,
		Logger:       slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if err := crawlAndReport(ctx, cfg, stdout, stderr, false, "", defaultReplayMemory); err != nil {
		return err
	}
	abs, _ := filepath.Abs(*data)
	fmt.Fprintf(stdout, "\nThe archive is in %s:\n", abs)
	fmt.Fprintf(stdout, "  WARC files:   %s\n", filepath.Join(abs, "warc"))
	fmt.Fprintf(stdout, "  capture index: waggle index export --data %s\n", *data)
	fmt.Fprintf(stdout, "Next:\n")
	fmt.Fprintf(stdout, "  go run ./cmd/waggle demo --data %s --max-pages %d   continues the same crawl: nothing archived is fetched again\n", *data, 2**maxPages)
	fmt.Fprintf(stdout, "  open the WARC files with any WARC tool (warcio, pywb, ReplayWeb.page), or export them: waggle export wacz --data %s --out demo.wacz\n", *data)
	if *httpAddr != "" {
		fmt.Fprintf(stdout, "  (the index and export commands need the data directory to themselves: stop the demo's replay first)\n")
	}
	if *httpAddr == "" {
		return nil
	}
	srv.Close() // replay never reaches the live (here: simulated) web
	db, err := crawl.OpenDB(*data)
	if err != nil {
		return err
	}
	defer db.Close()
	ui, content, err := replay.Listen(*httpAddr, "")
	if err != nil {
		// The usual ports are taken: any free ones will do.
		if ui, content, err = replay.Listen("127.0.0.1:0", ""); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nServing the archive; start from its home page, or see a seed's captures at /web/*/%s\n", seeds[0])
	return serveArchive(ctx, index.New(db), *data, ui, content, defaultReplayMemory, stdout, stderr)
}
