package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/waggle-archive/waggle/internal/crawl"
)

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", "[flags] FILE.warc[.gz]|FILE.wacz...", stderr)
	data := fs.String("data", "./waggle-data", "data directory (created if missing)")
	verbose := fs.Bool("v", false, "log every record imported but not indexed (to stderr)")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return errUsage
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	start := time.Now()
	s, err := crawl.Import(ctx, *data, files, log)
	fmt.Fprintf(stderr, "%d of %d files imported: %d records read, %d written, %d captures indexed, %d kept but not indexed (see the warnings), %d duplicates skipped, %d rejected (bad digest) in %s — archive in %s\n",
		s.Files, len(files), s.Records, s.Written, s.Captures, s.Unindexed, s.Duplicates, s.Rejected, time.Since(start).Round(time.Millisecond), *data)
	if s.Misdigested > 0 {
		fmt.Fprintf(stderr, "%d records had a WARC-Payload-Digest that is not their payload's: indexed by their payload's own digest (see the warnings)\n", s.Misdigested)
	}
	if s.Unresolved > 0 {
		fmt.Fprintf(stderr, "%d revisit records refer to a payload this archive does not hold: they replay once the records holding it are imported\n", s.Unresolved)
	}
	return err
}
