package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoAndExport runs the demo (the README's first command) and exports
// its capture index, through the same entry point as the binary.
func TestDemoAndExport(t *testing.T) {
	data := filepath.Join(t.TempDir(), "demo")
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--data", data, "--max-pages", "60", "--hosts", "20", "--pages", "200"}, &out, &errs); code != 0 {
		t.Fatalf("demo exit %d\nstdout: %s\nstderr: %s", code, out.String(), errs.String())
	}
	if !strings.Contains(out.String(), "The archive is in") || !strings.Contains(errs.String(), "pages 60 (+60 new)") {
		t.Fatalf("demo output:\n%s\n%s", out.String(), errs.String())
	}
	if segs, _ := filepath.Glob(filepath.Join(data, "warc", "*.warc.gz")); len(segs) == 0 {
		t.Fatal("demo wrote no WARC file")
	}

	cdxj := filepath.Join(t.TempDir(), "index.cdxj")
	out.Reset()
	errs.Reset()
	if code := run(context.Background(), []string{"index", "export", "--data", data, "--out", cdxj}, &out, &errs); code != 0 {
		t.Fatalf("index export exit %d: %s", code, errs.String())
	}
	b, _ := os.ReadFile(cdxj)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 60 { // the 60 captures plus the robots.txt files
		t.Fatalf("%d CDXJ lines, want at least 60", len(lines))
	}
	for _, l := range lines {
		parts := strings.SplitN(l, " ", 3)
		var fields map[string]string
		if len(parts) != 3 || len(parts[1]) != 14 || json.Unmarshal([]byte(parts[2]), &fields) != nil || fields["filename"] == "" {
			t.Fatalf("bad CDXJ line %q", l)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"no-such-command"},
		{"crawl", "--scope", "galaxy", "http://example.com/"},
		{"crawl", "--delay", "soon", "http://example.com/"},
		{"index"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("waggle %v: exit %d, stderr %q; want 2 and an explanation", args, code, errs.String())
		}
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"index", "export", "--data", filepath.Join(t.TempDir(), "none")}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "no archive") {
		t.Errorf("export of a missing archive: exit %d, %q", code, errs.String())
	}
}
