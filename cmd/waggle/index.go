package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
)

func runIndex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprintln(stderr, "usage: waggle index export [--data DIR] [--out FILE]")
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
