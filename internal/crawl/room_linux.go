package crawl

import "syscall"

// freeSpace returns the bytes available to this user on path's filesystem.
func freeSpace(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	// f_bavail counts fragments (f_frsize); f_bsize is only the preferred
	// I/O size, 256 times larger on ZFS.
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return int64(st.Bavail) * unit, true
}
