package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

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

// The gossip address advertised is an IP address, a name given to
// --advertise resolved to one, since memberlist advertises only those.
func TestAdvertiseGossip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, tc := range []struct{ advertise, bind, want string }{
		{"192.0.2.7", "0.0.0.0:7401", "192.0.2.7:7401"},
		{"localhost", "0.0.0.0:7401", "127.0.0.1:7401"},
		{"127.0.0.1", "127.0.0.1:7401", ""}, // the bind address does
		{"", "0.0.0.0:7401", ""},
		{"192.0.2.7", "0.0.0.0:0", ""}, // a port chosen at start: memberlist knows it
	} {
		got, err := advertiseGossip(ctx, tc.advertise, tc.bind)
		if err != nil || got != tc.want {
			t.Errorf("advertiseGossip(%q, %q) = %q, %v; want %q", tc.advertise, tc.bind, got, err, tc.want)
		}
	}
	if got, err := advertiseGossip(ctx, "no-such-host.invalid", "0.0.0.0:7401"); err == nil {
		t.Errorf("a name that does not resolve gave %q", got)
	}
}
