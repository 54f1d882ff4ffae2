//go:build unix

package main

import (
	"os"
	"syscall"
)

// openShared opens name for reading and writing, creating it if need be;
// the file may be renamed or removed while open.
func openShared(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
}

// lockExclusive locks f for this process alone, failing at once if
// another holds it; the lock goes with the process.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
