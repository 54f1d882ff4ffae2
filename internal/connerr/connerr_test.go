package connerr

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The failures the loopback can produce, as the net package reports them.
func TestFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	_, err = net.DialTimeout("tcp", addr, 5*time.Second)
	if err == nil {
		t.Skip("a closed loopback port accepted a connection")
	}
	if !Refused(err) || !Failed(err) || Reset(err) {
		t.Errorf("dial to a closed port: %v: Refused %v, Failed %v, Reset %v; want refused and failed", err, Refused(err), Failed(err), Reset(err))
	}

	// A server that resets the connection (SO_LINGER 0) once the request
	// is in.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(make([]byte, 1))
	if !Reset(err) || !Failed(err) || Refused(err) {
		t.Errorf("read from a reset connection: %v: Reset %v, Failed %v, Refused %v; want reset and failed", err, Reset(err), Failed(err), Refused(err))
	}

	for _, err := range []error{nil, errors.New("connection refused"), context.DeadlineExceeded} {
		if Refused(err) || Reset(err) || Failed(err) {
			t.Errorf("%v is taken for a connection failure", err)
		}
	}
}
