//go:build unix

package main

import (
	"os"
	"syscall"
)

// lockExclusive locks f for this process alone, failing at once if
// another holds it; the lock goes with the process.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
