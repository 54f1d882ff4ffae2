package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/node"
)

func runIndex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "verify" {
		return runIndexVerify(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprintln(stderr, "usage: waggle index export [--data DIR] [--out FILE]\n       waggle index verify [--data DIR]")
		return errUsage
	}
	fs := newFlagSet("index export", "[flags]", stderr)
	data := fs.String("data", "./waggle-data", "data directory")
	out := fs.String("out", "-", "CDXJ file to write (- for stdout)")
	if _, err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	db, err := crawl.OpenExistingDB(*data)
	if err != nil {
		return err
	}
	defer db.Close()
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	n, err := index.New(db).WriteCDXJ(ctx, w)
	if err != nil {
		return err
	}
	if f, ok := w.(*os.File); ok && f != os.Stdout {
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "%d captures written\n", n)
	return nil
}

// runIndexVerify reads every capture's record back and reports those that
// are not as written: a fixity check of the archive.
func runIndexVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("index verify", "[flags]", stderr)
	data := fs.String("data", "./waggle-data", "data directory")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	db, err := crawl.OpenExistingDB(*data)
	if err != nil {
		return err
	}
	defer db.Close()
	start := time.Now()
	local := archive.NewLocal(index.New(db), filepath.Join(*data, "warc"))
	var damaged []index.Capture
	st, err := local.Verify(ctx, func(c index.Capture, err error) error {
		damaged = append(damaged, c)
		_, werr := fmt.Fprintf(stdout, "damaged: %s %s %s:%d: %v\n", c.URL, c.Timestamp14(), c.Segment, c.Offset, err)
		return werr
	}, func(c index.Capture, err error) error {
		_, werr := fmt.Fprintf(stdout, "no payload: %s %s %s:%d: %v\n", c.URL, c.Timestamp14(), c.Segment, c.Offset, err)
		return werr
	})
	// The next re-crawl fetches their pages whole, and stores their
	// payloads again when met, rather than pointing at bytes that cannot
	// be read.
	if ferr := crawl.ForgetDamagedPayloads(db, damaged); ferr != nil && err == nil {
		err = ferr
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stderr, "%d captures checked, %s of blocks, %d damaged, in %s (%.1f MiB/s); %d revisits followed, %d lead to no payload here\n",
		st.Captures, humanBytes(st.Bytes), st.Damaged, elapsed.Round(time.Millisecond), float64(st.Bytes)/(1<<20)/max(elapsed.Seconds(), 1e-9), st.Revisits, st.Unresolved)
	if err != nil {
		return err
	}
	networked, err := node.Networked(db)
	if err != nil {
		return err
	}
	switch {
	case st.Damaged > 0:
		return fmt.Errorf("%d of %d captures are damaged: restore their segments from a backup (a node of a network with replicas gets them back from the others when it reads them); meanwhile the next re-crawl fetches their pages whole", st.Damaged, st.Captures)
	case st.Unresolved > 0 && networked:
		fmt.Fprintf(stderr, "this node has been part of a network: the payloads of those %d revisits may be on other nodes, which this check does not ask\n", st.Unresolved)
	case st.Unresolved > 0:
		return fmt.Errorf("%d of %d revisits lead to no payload in this archive and cannot be replayed: import the WARC files that hold the captures they name", st.Unresolved, st.Revisits)
	}
	return nil
}
