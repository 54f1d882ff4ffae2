//go:build !windows

package connerr

import "syscall"

func refused() []syscall.Errno { return []syscall.Errno{syscall.ECONNREFUSED} }

func reset() []syscall.Errno { return []syscall.Errno{syscall.ECONNRESET} }

func failed() []syscall.Errno {
	return []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EPIPE}
}
