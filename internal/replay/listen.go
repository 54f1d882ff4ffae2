package replay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
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

// Serve serves s on the two listeners until ctx is done, then shuts down:
// it stops accepting, lets requests in flight finish for a few seconds,
// cancels the rest, and returns only when no handler is running, so that the
// caller may close the database behind the index.
func Serve(ctx context.Context, s *Server, ui, content net.Listener) error {
	base, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	var running sync.WaitGroup
	track := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			running.Add(1)
			defer running.Done()
			h.ServeHTTP(w, r)
		})
	}
	servers := []*http.Server{
		{Handler: track(s.UI()), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10},
		{Handler: track(s.Content()), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10},
	}
	errc := make(chan error, 2)
	for i, ln := range []net.Listener{ui, content} {
		servers[i].BaseContext = func(net.Listener) context.Context { return base }
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
	cancelRequests() // index scans and streams stop at their next check
	for _, srv := range servers {
		srv.Close()
	}
	running.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
