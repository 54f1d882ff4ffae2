package main

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockExclusive locks f for this process alone, failing at once if
// another holds it; the lock goes with the process.
func lockExclusive(f *os.File) error {
	var whole windows.Overlapped
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, ^uint32(0), ^uint32(0), &whole)
}
