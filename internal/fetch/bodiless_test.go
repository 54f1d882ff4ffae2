package fetch

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A 304 or 204 has no body, whatever its head says; a broken server that
// sends one anyway, after a pause, must not have it read as the answer to
// the next request on the connection.
func TestBodyAfterBodilessResponseIsNotTheNextResponse(t *testing.T) {
	for _, head := range []string{
		"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: LEN\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: LEN\r\n\r\n",
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		smuggled := "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 8\r\n\r\nSMUGGLED"
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					br := bufio.NewReader(c)
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						if req.URL.Path == "/first" {
							c.Write([]byte(strings.Replace(head, "LEN", strconv.Itoa(len(smuggled)), 1)))
							time.Sleep(50 * time.Millisecond) // the body flushed on its own
							c.Write([]byte(smuggled))
							continue
						}
						c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal"))
					}
				}()
			}
		}()
		f := newFetcher(t, Config{})
		base := "http://" + ln.Addr().String()
		if _, err := f.Fetch(context.Background(), Request{URL: base + "/first", Header: http.Header{"If-None-Match": {`"v1"`}}}); err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		r, err := f.Fetch(context.Background(), Request{URL: base + "/second"})
		if err != nil {
			t.Fatalf("%q: the next fetch: %v", head, err)
		}
		if r.StatusCode != http.StatusOK || string(r.Body) != "real" {
			t.Errorf("%q: the next URL got %d %q, want 200 \"real\"", head, r.StatusCode, r.Body)
		}
		ln.Close()
	}
}
