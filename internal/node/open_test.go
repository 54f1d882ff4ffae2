package node

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/crawl"
)

// A node that cannot start says why, and releases what it had opened:
// a port in use, a data directory another process holds.
func TestOpenErrorIsReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"port in use", Config{Crawl: crawl.Config{Data: data}, HTTPAddr: ln.Addr().String()}, "address already in use"},
		{"port in use again", Config{Crawl: crawl.Config{Data: data}, HTTPAddr: ln.Addr().String()}, "address already in use"},
	} {
		n, err := Open(context.Background(), tc.cfg)
		if err == nil {
			n.close()
			t.Fatalf("%s: Open succeeded", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
	// The failed Opens released the data directory: it opens.
	held, err := Open(context.Background(), Config{Crawl: crawl.Config{Data: data}})
	if err != nil {
		t.Fatalf("after two failed starts: %v", err)
	}
	defer held.close()
	if _, err := Open(context.Background(), Config{Crawl: crawl.Config{Data: data}}); err == nil {
		t.Error("a second node opened a data directory in use")
	}
}
