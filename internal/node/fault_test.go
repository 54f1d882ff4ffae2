package node

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/websim"
)

// Fault (a) of the replication issue: five nodes keep three copies of every
// capture; two crash for good. Every capture still replays from the
// survivors, and three copies exist again, made by anti-entropy among the
// survivors.
func TestTwoOfFiveCrash(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	nodes, _ := startNetwork(t, 5, srv.URL(), func(c *Config) { c.LeaveTimeout = -1 })
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)

	type capture struct {
		url, ts string
		status  int
	}
	var all []capture
	seen := map[string]bool{}
	for _, n := range nodes {
		err := n.local.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
			if !seen[c.RecordID] {
				seen[c.RecordID] = true
				all = append(all, capture{c.URL, c.Timestamp14(), c.Status})
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	killed := time.Now()
	nodes[3].stop(t)
	nodes[4].stop(t)
	survivors := nodes[:3]
	waitMembers(t, 3, survivors...)
	detected := time.Since(killed)
	waitCopies(t, 3, survivors...)
	restored := time.Since(killed)

	// Every capture replays from a survivor, byte for byte as archived (id_).
	failed := 0
	for i, c := range all {
		n := survivors[i%3]
		resp, err := http.Get("http://" + n.Addrs().Content + "/web/" + c.ts + "id_/" + c.url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// An archived error replays as that error; an archived redirect as a
		// redirect, which the client follows to the archived target.
		ok := resp.StatusCode == c.status || c.status >= 300 && c.status < 400 || resp.StatusCode == http.StatusOK && c.status < 300
		if !ok {
			failed++
			if failed <= 5 {
				t.Errorf("%s at %s (archived %d) from %s: %s", c.url, c.ts, c.status, n.name, resp.Status)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d captures do not replay after two of five nodes crashed", failed, len(all))
	}
	t.Logf("%d captures, all replayed after 2 of 5 nodes crashed; failure detected in %v; 3 copies of every capture %v after the crash (anti-entropy every 200ms)",
		len(all), detected.Round(time.Millisecond), restored.Round(time.Millisecond))
}
