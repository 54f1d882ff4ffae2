package fetch

import (
	"context"
	"net"
	"testing"
	"time"
)

// stallServer answers each request with head, then sends nothing more
// and keeps the connection open until the test ends.
func stallServer(t *testing.T, head string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Read(make([]byte, 4096))
				c.Write([]byte(head))
				<-done
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/"
}

// fetchReturns fetches u and fails the test if Fetch has not returned
// within a minute: the cases below must end long before the hour-long
// timeouts they run with, on their own.
func fetchReturns(t *testing.T, ctx context.Context, f *Fetcher, u string) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx, Request{URL: u})
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s: Fetch still waiting after a minute", u)
		return nil
	}
}

// A peer that is no HTTP server (one line, then silence) is refused on
// that line, as net/http refuses it, not after an idle timeout.
func TestNonHTTPBannerIsRefusedOnItsFirstLine(t *testing.T) {
	u := stallServer(t, "SSH-2.0-OpenSSH_9.6\r\n")
	f := newFetcher(t, Config{ReadTimeout: time.Hour, TotalTimeout: time.Hour})
	if err := fetchReturns(t, context.Background(), f, u); err == nil {
		t.Error("an SSH banner fetched as a response")
	}
}

// A cancelled request stops waiting for a server that stalls in its
// header section, although every read sets a fresh idle deadline.
func TestCancelEndsAStalledHeader(t *testing.T) {
	u := stallServer(t, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
	f := newFetcher(t, Config{ReadTimeout: time.Hour, TotalTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := fetchReturns(t, ctx, f, u); err == nil {
		t.Error("a cancelled fetch of a stalled response succeeded")
	}
}

// A request cancelled before it starts, on a connection from the pool,
// leaves nothing behind for the requests after it (run under -race too:
// its cancel hook runs while the next request sets the connection up).
func TestCancelledRequestsLeaveThePoolUsable(t *testing.T) {
	base, _ := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false)
	f := newFetcher(t, Config{})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		r, err := f.Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil || string(r.Body) != "hello" {
			t.Fatalf("request %d, after a cancelled one: %v", i, err)
		}
		if _, err := f.Fetch(done, Request{URL: base + "/"}); err == nil {
			t.Fatalf("request %d, cancelled before it started, succeeded", i)
		}
	}
}
