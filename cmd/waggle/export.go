package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/node"
	"github.com/waggle-archive/waggle/internal/wacz"
)

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "wacz" {
		fmt.Fprintln(stderr, "usage: waggle export wacz --out FILE.wacz [--data DIR] [--host HOST | --prefix URL] [--from TS] [--to TS]")
		return errUsage
	}
	fs := newFlagSet("export wacz", "--out FILE.wacz [flags]", stderr)
	data := fs.String("data", "./waggle-data", "data directory")
	out := fs.String("out", "", "WACZ file to write (required)")
	host := fs.String("host", "", "only captures of this host (www. ignored, as in SURT keys)")
	prefix := fs.String("prefix", "", "only captures of URLs under this prefix (as a pywb prefix query)")
	from := fs.String("from", "", "only captures at or after this 1-14 digit timestamp (yyyyMMddhhmmss, padded like Wayback)")
	to := fs.String("to", "", "only captures up to the end of this 1-14 digit timestamp")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *out == "" {
		return fmt.Errorf("%w: --out FILE.wacz is required", errUsage)
	}
	if *host != "" && *prefix != "" {
		return fmt.Errorf("%w: --host and --prefix cannot be combined", errUsage)
	}
	if fi, err := os.Stat(*out); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: --out %s is a directory; name the file to write", errUsage, *out)
	}
	sel := wacz.Selection{Host: *host, Prefix: *prefix}
	if sel.Prefix != "" && !strings.Contains(sel.Prefix, "://") {
		sel.Prefix = "http://" + sel.Prefix // scheme does not matter in a SURT prefix
	}
	if *from != "" {
		if sel.From, err = index.ParseTimestamp(*from, false); err != nil {
			return fmt.Errorf("%w: --from: %v", errUsage, err)
		}
	}
	if *to != "" {
		last, err := index.ParseTimestamp(*to, true)
		if err != nil {
			return fmt.Errorf("%w: --to: %v", errUsage, err)
		}
		sel.To = last.Add(time.Second) // the selection's end is exclusive
	}
	if *from != "" && *to != "" && !sel.From.Before(sel.To) {
		return fmt.Errorf("%w: --from %s is after --to %s", errUsage, *from, *to)
	}
	// Write beside the destination and rename at the end, so an interrupted
	// export leaves no partial WACZ under the name asked for. The partial
	// file is named after the destination and locked while written: the
	// next export to that name takes over what a killed one left, and two
	// at once are refused.
	dir := filepath.Dir(*out)
	tmp, err := openPartial(*out)
	if err != nil {
		return err
	}
	renamed := false
	defer func() { closePartial(tmp, renamed) }()
	start := time.Now()
	// A running node holds the data directory, and knows the network: the
	// export goes through it and takes in every node's captures.
	source := "the node running on " + *data + " (the captures of its whole network)"
	s, err := node.Export(ctx, *data, sel, tmp)
	if errors.Is(err, node.ErrNotRunning) {
		source = *data + " (the captures in this data directory; for a node of a network, start the node to export the whole network's)"
		s, err = exportStopped(ctx, *data, dir, sel, tmp)
	}
	if err != nil {
		return err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return err
	}
	if err := publishPartial(tmp, *out); err != nil {
		return err
	}
	renamed = true
	fmt.Fprintf(stderr, "%d captures (%d pages), %d payload records for their revisits, %d WARC records, %s in %s from %s — %s\n",
		s.Captures, s.Pages, s.Originals, s.Records, humanBytes(fi.Size()), time.Since(start).Round(time.Millisecond), source, *out)
	if s.Missing > 0 {
		fmt.Fprintf(stderr, "warning: %d revisit records refer to payloads that are not in the archive; they will not replay\n", s.Missing)
	}
	if s.Incomplete > 0 {
		fmt.Fprintf(stderr, "warning: %d captures are in it without their request or metadata records, which could not be read; the first: %s\n", s.Incomplete, s.FirstIncomplete)
	}
	if s.Unasked != "" {
		fmt.Fprintf(stderr, "warning: written from the nodes that answered: %s\n", s.Unasked)
	}
	if s.Unresolved > 0 {
		fmt.Fprintf(stderr, "warning: %d revisit records are in it, but where their payloads are archived could not be looked up (a node could not be reached): unless the selection holds them, they will not replay from it; the first: %s\n", s.Unresolved, s.FirstUnresolved)
	}
	if s.Unreadable > 0 {
		return fmt.Errorf("%s is written, but without %d captures whose records could not be read (damaged, or on a node that could not be reached); the first: %s", *out, s.Unreadable, s.FirstError)
	}
	if s.Unasked != "" || s.Unresolved > 0 {
		return fmt.Errorf("%s is written, but may lack captures held only by nodes that could not be asked", *out)
	}
	return nil
}

// exportStopped exports from the data directory of a node that is not
// running: its own captures only.
func exportStopped(ctx context.Context, data, tempDir string, sel wacz.Selection, w io.Writer) (wacz.Stats, error) {
	db, err := crawl.OpenExistingDB(data)
	if err != nil {
		return wacz.Stats{}, err
	}
	defer db.Close()
	arc := archive.NewLocal(index.New(db), filepath.Join(data, "warc"))
	return wacz.Export(ctx, w, wacz.Source{Archive: arc, TempDir: tempDir}, sel)
}

// openPartial opens, locked and empty, the file an export to out is
// written to before it is renamed to out.
func openPartial(out string) (*os.File, error) {
	name := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".partial")
	f, err := openShared(name)
	if err != nil {
		return nil, err
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("another export to %s is running (%s is locked): %w", out, name, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// publishPartial makes a finished partial file out, while it is still
// locked: an export to the same name that starts now makes a new partial
// file, and cannot truncate this one.
func publishPartial(f *os.File, out string) error {
	if err := f.Sync(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

// closePartial ends an export's hold on its partial file, removing it if
// it was not published — while still locked, so that it is this export's
// file, not one another export made since.
func closePartial(f *os.File, published bool) {
	if !published {
		os.Remove(f.Name())
	}
	f.Close()
}
