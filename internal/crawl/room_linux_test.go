package crawl

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/waggle-archive/waggle/internal/diskfree"
)

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
	free, ok := diskfree.Available(mnt)
	if !ok || free < 40<<20 {
		t.Fatalf("the space free on an empty 48 MiB tmpfs: %d, %v", free, ok)
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
