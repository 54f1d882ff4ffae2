package connerr

import (
	"syscall"

	"golang.org/x/sys/windows"
)

// The POSIX names are kept too: Go's own code returns some of them on
// Windows.

func refused() []syscall.Errno {
	return []syscall.Errno{syscall.ECONNREFUSED, windows.WSAECONNREFUSED}
}

func reset() []syscall.Errno {
	return []syscall.Errno{syscall.ECONNRESET, windows.WSAECONNRESET}
}

func failed() []syscall.Errno {
	return []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EPIPE,
		windows.WSAECONNREFUSED, windows.WSAECONNRESET, windows.WSAECONNABORTED, windows.WSAENETRESET,
		windows.WSAEHOSTUNREACH, windows.WSAENETUNREACH, windows.WSAETIMEDOUT, windows.ERROR_BROKEN_PIPE}
}
