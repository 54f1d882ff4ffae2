package bench

import (
	"syscall"
	"time"
)

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var creation, exit, kernel, user syscall.Filetime
	if err := syscall.GetProcessTimes(syscall.Handle(^uintptr(0)), &creation, &exit, &kernel, &user); err != nil {
		return 0
	}
	// Filetime counts 100 ns intervals; Nanoseconds would subtract the
	// 1601 epoch, which a duration has not.
	ticks := func(f syscall.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ticks(kernel) + ticks(user)) * 100)
}
