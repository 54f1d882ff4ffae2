package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A site's owner falls behind (the site is down, its revisits fail, no
// copy reaches the replica), and the replica's entries fall due while it
// does not hold the site. When the owner leaves, the replica takes the
// site over and revisits its pages as their schedule says, not a whole
// interval (a day, by default) late.
func TestTakeoverRevisitsOnSchedule(t *testing.T) {
	pages := []string{"/", "/a", "/b", "/c"}
	var down atomic.Bool
	var mu sync.Mutex
	fetched := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if down.Load() {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close() // a failure that may pass
			}
			return
		}
		mu.Lock()
		fetched[r.URL.Path]++
		mu.Unlock()
		etag := `"v1` + r.URL.Path + `"`
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body><p>page %s</p>", r.URL.Path)
		if r.URL.Path == "/" {
			for _, p := range pages[1:] {
				fmt.Fprintf(w, `<a href="%s">%s</a>`, p, p)
			}
		}
		fmt.Fprint(w, "</body></html>")
	}))
	defer srv.Close()
	fetches := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := map[string]int{}
		for k, v := range fetched {
			m[k] = v
		}
		return m
	}
	rule, err := recrawl.ParseRule("3s,1s,10s")
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := startNetwork(t, 2, "", func(c *Config) {
		c.Replicas = 2
		c.Crawl.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), rule)
	})
	seed := srv.URL + "/"
	if _, err := Submit(context.Background(), nodes[0].data, []string{seed}); err != nil {
		t.Fatal(err)
	}
	owner, replica := nodes[0], nodes[1]
	if owner.router.Owner(urlkey.Site(seed)) != "" {
		owner, replica = replica, owner
	}
	waitFor(t, "every page fetched and revisited", func() bool {
		f := fetches()
		for _, p := range pages {
			if f[p] < 2 {
				return false
			}
		}
		return true
	})
	waitCopies(t, 2, nodes...)

	down.Store(true)
	waitFor(t, "the replica's entries to fall due while it does not hold the site", func() bool {
		es, err := recrawl.Entries(replica.db, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		looked := 0
		for _, e := range es {
			// Looked at by queueDue once due: pushed past its due time.
			if !strings.HasSuffix(e.URL, "/robots.txt") && !e.Due.IsZero() && e.Due.Sub(e.State.LastVisit) > e.State.Interval*3/2 {
				looked++
			}
		}
		return looked == len(pages)
	})
	down.Store(false)
	before := fetches()
	leave(t, owner)
	waitMembers(t, 1, replica)
	waitFor(t, "the new owner to revisit every page (schedule: every 1 to 10 s)", func() bool {
		after := fetches()
		for _, p := range pages {
			if after[p] == before[p] {
				return false
			}
		}
		return true
	})
}

// A page robots.txt refused leaves an entry and no capture on the node
// that holds its site: when that node leaves, the URL goes to the new
// holder, which visits it once robots.txt allows it. No copy would take
// it there, and the pages linking to it route their links only once new.
func TestLeaveHandsOverURLsThatLeftNoCapture(t *testing.T) {
	var allowed atomic.Bool
	var private atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			if !allowed.Load() {
				fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
			}
		case "/private":
			private.Add(1)
			fmt.Fprint(w, "<html><body>now public</body></html>")
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><body><a href="/private">private</a></body></html>`)
		}
	}))
	defer srv.Close()
	nodes, _ := startNetwork(t, 2, "")
	seed := srv.URL + "/"
	if _, err := Submit(context.Background(), nodes[0].data, []string{seed}); err != nil {
		t.Fatal(err)
	}
	owner, other := nodes[0], nodes[1]
	if owner.router.Owner(urlkey.Site(seed)) != "" {
		owner, other = other, owner
	}
	waitFor(t, "/private to be refused by robots.txt", func() bool { return owner.crawl.Stats().Robots == 1 })
	allowed.Store(true)
	leave(t, owner)
	waitMembers(t, 1, other)
	waitFor(t, "the new holder to fetch /private", func() bool { return private.Load() == 1 })
	waitFor(t, "the new holder to archive /private", func() bool {
		key, err := urlkey.SURT(srv.URL + "/private")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = other.local.Index().Captures(context.Background(), key, false, func(index.Capture) (bool, error) { n++; return true, nil })
		return err == nil && n == 1
	})
}

// A node whose crawler has stopped (its page budget spent) cannot hand
// over the URLs whose visits left no capture: it leaves without them and
// does not tell the others it retired with its part handed over, so that
// they look for what it held, as after a crash.
func TestLeaveWithStoppedCrawlerKeepsUncapturedURLsFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><body><a href="/private">private</a> <a href="/b">b</a></body></html>`)
		}
	}))
	defer srv.Close()
	nodes, _ := startNetwork(t, 2, "", func(c *Config) { c.RepairEvery = time.Hour; c.Crawl.MaxPages = 2 })
	if _, err := Submit(context.Background(), nodes[0].data, []string{srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	var owner, other *testNode
	waitFor(t, "a crawler to refuse /private and stop", func() bool {
		for i, n := range nodes {
			if st := n.crawl.Stats(); st.Robots == 1 && st.Queued == 0 && st.Deferred == 0 && !n.crawl.Running() {
				owner, other = n, nodes[1-i]
				return true
			}
		}
		return false
	})
	leave(t, owner)
	waitFor(t, other.name+" to record the departure", func() bool {
		ds, err := other.departures()
		return err == nil && len(ds) == 1 && ds[0].Member.ID == owner.ID()
	})
	if ok, err := other.retired(owner.ID(), time.Now()); err != nil || ok {
		t.Errorf("%s was told that %s retired with its part handed over (%v); /private stayed behind", other.name, owner.name, err)
	}
}
