// Package connerr says which connection failure a network error is, the
// same on every platform: on Windows the socket calls fail with WinSock
// codes (WSAECONNREFUSED …), which the syscall package's POSIX names
// (ECONNREFUSED …) do not match.
package connerr

import (
	"errors"
	"syscall"
)

// Refused reports a connection refused: nobody listens at the address.
func Refused(err error) bool { return isAny(err, refused()) }

// Reset reports a connection reset by the other end.
func Reset(err error) bool { return isAny(err, reset()) }

// Failed reports a connection that could not be made or broke, for a
// reason that may pass: refused, reset or aborted, a host or network
// unreachable, a connect that timed out, a broken pipe.
func Failed(err error) bool { return isAny(err, failed()) }

func isAny(err error, codes []syscall.Errno) bool {
	for _, c := range codes {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}
