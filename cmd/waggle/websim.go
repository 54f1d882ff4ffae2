package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/waggle-archive/waggle/internal/websim"
)

func websimFlags(fs *flag.FlagSet, cfg *websim.Config) {
	fs.Int64Var(&cfg.Seed, "seed", 1, "generator seed: the same seed serves the same web")
	fs.IntVar(&cfg.Hosts, "hosts", 300, "number of hosts")
	fs.IntVar(&cfg.Pages, "pages", 6000, "number of HTML pages over all hosts")
	fs.IntVar(&cfg.Version, "version", 0, "content version: each step changes about 1% of the pages")
	fs.IntVar(&cfg.TextKB, "text-kb", 0, "add about this many KiB of article text to every HTML page (0: short pages)")
}

func runWebsim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("websim", "[flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address (also usable as an HTTP proxy: --proxy http://ADDR)")
	var cfg websim.Config
	websimFlags(fs, &cfg)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	web := websim.New(cfg)
	srv, err := websim.Start(*addr, web)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "websim: %d hosts on %s\n", len(web.Hosts()), srv.URL())
	fmt.Fprintf(stdout, "crawl it:  waggle crawl --proxy %s --allow-private --delay 0 %s\n", srv.URL(), web.Seeds()[0])
	<-ctx.Done()
	return nil
}
