package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Transient tells the failures worth trying again later from those that
// would fail again, on errors as an HTTP client really returns them.
func TestTransient(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens on its port now
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close() // no response at all
	}))
	defer hangup.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer slow.Close()
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	}))
	defer loop.Close()

	get := func(c *http.Client, u string) error {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			return errors.New("no error")
		}
		return err
	}
	quick := &http.Client{Timeout: 50 * time.Millisecond}
	f, err := New(Config{AllowPrivate: true, UserAgent: "waggle-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fetch := func(u string) error {
		if _, err := f.Fetch(context.Background(), Request{URL: u}); err != nil {
			return err
		}
		return errors.New("no error")
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", get(http.DefaultClient, closed.URL), true},
		{"closed before a response", get(http.DefaultClient, hangup.URL), true},
		{"closed before a response, to the crawler's fetcher", fetch(hangup.URL), true},
		{"connection refused, to the crawler's fetcher", fetch(closed.URL), true},
		{"no answer in time", get(quick, slow.URL), true},
		{"name server failure", &net.DNSError{Err: "server misbehaving", Name: "x.test", IsTemporary: true}, true},
		{"no such host", &net.DNSError{Err: "no such host", Name: "x.test", IsNotFound: true}, false},
		{"too many redirects", get(http.DefaultClient, loop.URL), false},
		{"forbidden address", fmt.Errorf("dial: %w", ErrForbiddenAddress), false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s (%v): Transient = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
