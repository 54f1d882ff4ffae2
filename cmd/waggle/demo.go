package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/websim"
)

// runDemo shows the whole single-node pipeline with no network: it starts the
// synthetic web on loopback and crawls part of it through it as a proxy.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[flags]", stderr)
	data := fs.String("data", "./waggle-demo", "data directory for the demo archive")
	maxPages := fs.Int("max-pages", 1500, "captures to make")
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
	if err := crawlAndReport(ctx, cfg, stdout, stderr, false); err != nil {
		return err
	}
	abs, _ := filepath.Abs(*data)
	fmt.Fprintf(stdout, "\nThe archive is in %s:\n", abs)
	fmt.Fprintf(stdout, "  WARC files:   %s\n", filepath.Join(abs, "warc"))
	fmt.Fprintf(stdout, "  capture index: waggle index export --data %s\n", *data)
	fmt.Fprintf(stdout, "Next:\n")
	fmt.Fprintf(stdout, "  go run ./cmd/waggle demo --max-pages %d   continues the same crawl: nothing archived is fetched again\n", 2**maxPages)
	fmt.Fprintf(stdout, "  open the WARC files with any WARC tool (warcio, pywb, ReplayWeb.page); replay in waggle itself is the next issue\n")
	return nil
}
