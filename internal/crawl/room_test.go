package crawl

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCheckRoom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const logSize = 10 << 20
	if err := os.WriteFile(filepath.Join(dir, "000004.log"), make([]byte, logSize), 0o644); err != nil {
		t.Fatal(err)
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
		{"room for the log and more", dir, freeIs(minRoom + logSize + 1), false},
		{"no room for the log", dir, freeIs(minRoom + logSize - 1), true},
		{"a full disk", dir, freeIs(0), true},
		{"free space unknown", dir, func(string) (int64, bool) { return 0, false }, false},
		{"a new archive, room", filepath.Join(t.TempDir(), "db"), freeIs(minRoom), false},
		{"a new archive, none", filepath.Join(t.TempDir(), "db"), freeIs(minRoom - 1), true},
	} {
		err := checkRoom(tc.dir, tc.free)
		if (err != nil) != tc.fails {
			t.Errorf("%s: %v, want failure %v", tc.name, err, tc.fails)
		}
		if err != nil && !strings.Contains(err.Error(), "MiB free") {
			t.Errorf("%s: %q does not say how much is free", tc.name, err)
		}
	}
}

// An archive on a full filesystem is refused at once with the reason, not
// left to pebble, which retries writing out its log for ever inside Open.
// Needs root, for a small tmpfs.
func TestOpenOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small filesystem")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=48m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	data := filepath.Join(mnt, "archive")
	db, err := OpenDB(data)
	if err != nil {
		t.Fatalf("an empty 48 MiB filesystem: %v", err)
	}
	db.Close()
	free, ok := freeSpace(mnt)
	if !ok || free < 40<<20 {
		t.Fatalf("freeSpace of an empty 48 MiB tmpfs: %d, %v", free, ok)
	}
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 1<<20)); err != nil {
			break // full
		}
	}
	filler.Close()
	if _, err := OpenDB(data); err == nil || !strings.Contains(err.Error(), "free some space") {
		t.Fatalf("OpenDB on a full disk: %v; want the reason", err)
	}
	// Room again: the archive opens.
	if err := os.Truncate(filepath.Join(mnt, "filler"), 0); err != nil {
		t.Fatal(err)
	}
	db, err = OpenDB(data)
	if err != nil {
		t.Fatalf("once space is freed: %v", err)
	}
	db.Close()
}
