//go:build linux

package replay

import "syscall"

// freeBytes returns the bytes free to an unprivileged user on the
// filesystem of dir, and whether it could tell.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}
