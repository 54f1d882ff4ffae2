package crawl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckRoom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Two logs: one live, one kept for recycling, more than the bound.
	const logSize, maxLog = 10 << 20, 16 << 20
	for _, name := range []string{"000004.log", "000006.log"} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, logSize), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "000005.sst"), make([]byte, 50<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	freeIs := func(n int64) func(string) (int64, bool) {
		return func(string) (int64, bool) { return n, true }
	}
	for _, tc := range []struct {
		name  string
		dir   string
		free  func(string) (int64, bool)
		fails bool
	}{
		{"room for the log and more", dir, freeIs(minRoom + maxLog), false},
		{"room for one log only", dir, freeIs(minRoom + logSize), true},
		{"a full disk", dir, freeIs(0), true},
		{"free space unknown", dir, func(string) (int64, bool) { return 0, false }, false},
		{"a new archive, room", filepath.Join(t.TempDir(), "db"), freeIs(minRoom), false},
		{"a new archive, none", filepath.Join(t.TempDir(), "db"), freeIs(minRoom - 1), true},
	} {
		err := checkRoom(tc.dir, maxLog, tc.free)
		if (err != nil) != tc.fails {
			t.Errorf("%s: %v, want failure %v", tc.name, err, tc.fails)
		}
		if err != nil && !strings.Contains(err.Error(), "MiB free") {
			t.Errorf("%s: %q does not say how much is free", tc.name, err)
		}
	}
}
