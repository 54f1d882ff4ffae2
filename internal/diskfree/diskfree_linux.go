package diskfree

import "syscall"

// Available returns the bytes free to an unprivileged user on path's
// filesystem, and whether it could tell.
func Available(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	// f_bavail counts fragments (f_frsize); f_bsize is only the preferred
	// I/O size, 256 times larger on ZFS.
	unit := int64(st.Frsize)
	if unit <= 0 {
		unit = int64(st.Bsize)
	}
	return int64(st.Bavail) * unit, true
}
