package node

import (
	"context"
	"net"
	"os"
	"syscall"
)

// checkOwner closes admin connections from any user but the node's own, in
// case the socket's mode was loosened.
func checkOwner(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		c.Close()
		return ctx
	}
	var cred *syscall.Ucred
	var credErr error
	raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if credErr != nil || cred == nil || int(cred.Uid) != os.Getuid() {
		c.Close()
	}
	return ctx
}
