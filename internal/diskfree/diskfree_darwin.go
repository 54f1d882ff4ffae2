package diskfree

import "syscall"

// Available returns the bytes free to an unprivileged user on path's
// filesystem, and whether it could tell.
func Available(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
