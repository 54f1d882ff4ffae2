package replay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Listen opens the interface listener on uiAddr and the content listener
// on contentAddr; an empty contentAddr means uiAddr's host and the next port
// (port 0, any free port, stays 0).
func Listen(uiAddr, contentAddr string) (ui, content net.Listener, err error) {
	ui, err = net.Listen("tcp", uiAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	if contentAddr == "" {
		host, port, err := net.SplitHostPort(uiAddr)
		if err != nil {
			ui.Close()
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
		if p, _ := strconv.Atoi(port); p != 0 {
			port = strconv.Itoa(ui.Addr().(*net.TCPAddr).Port + 1)
		}
		contentAddr = net.JoinHostPort(host, port)
	}
	content, err = net.Listen("tcp", contentAddr)
	if err != nil {
		ui.Close()
		return nil, nil, fmt.Errorf("replay: content listener: %w", err)
	}
	return ui, content, nil
}

// Serve serves s on the two listeners until ctx is done, then shuts down
// gracefully.
func Serve(ctx context.Context, s *Server, ui, content net.Listener) error {
	servers := []*http.Server{
		{Handler: s.UI(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10},
		{Handler: s.Content(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10},
	}
	errc := make(chan error, 2)
	for i, ln := range []net.Listener{ui, content} {
		go func() { errc <- servers[i].Serve(ln) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		srv.Shutdown(shut)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
