package main

import (
	"os"
	"path/filepath"
	"testing"
)

// An export's partial file is published (renamed to its destination)
// while still locked, and its end removes nothing it does not own: an
// export to the same name that starts meanwhile neither truncates the
// finished file nor loses its own partial file, and a third is refused.
func TestExportPublishesWhileLocked(t *testing.T) {
	out := filepath.Join(t.TempDir(), "a.wacz")
	a, err := openPartial(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteString("a finished WACZ"); err != nil {
		t.Fatal(err)
	}
	if b, err := openPartial(out); err == nil {
		b.Close()
		t.Fatal("a second export was not refused while the first writes")
	}
	if err := publishPartial(a, out); err != nil {
		t.Fatal(err)
	}
	b, err := openPartial(out) // a second export starts before the first has ended
	if err != nil {
		t.Fatalf("an export after the first was published: %v", err)
	}
	defer b.Close()
	closePartial(a, true) // the first export ends
	if got, err := os.ReadFile(out); err != nil || string(got) != "a finished WACZ" {
		t.Errorf("%s holds %q (%v) after a second export started: want the first export's", out, got, err)
	}
	if _, err := os.Stat(b.Name()); err != nil {
		t.Errorf("the second export's partial file is gone: %v", err)
	}
	if c, err := openPartial(out); err == nil {
		c.Close()
		t.Error("a third export to the same name was not refused while the second writes")
	}
}
