package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replay"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A capture too large for a replication batch (a video crawled with
// --max-body-size raised) is pushed to its replicas like any other, and
// handed over when a node holding it leaves. Anti-entropy runs hourly here,
// so only the pushes can have made the copies.
func TestLargeCaptureReplicatedAndHandedOver(t *testing.T) {
	video := make([]byte, replicate.MaxBodyBytes+(2<<20))
	rand.NewChaCha8([32]byte{3}).Read(video)
	// A disk image that compresses to a small member, and a photo whose
	// member is over the size at which replay looks at a header first.
	image := make([]byte, 80<<20)
	photo := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{4}).Read(photo)
	files := map[string][]byte{"/film.mp4": video, "/disk.img": image, "/photo.jpg": photo}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<html><body><video src="/film.mp4"></video><img src="/photo.jpg"><a href="/disk.img">disk</a></body></html>`))
			return
		}
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer web.Close()

	nodes, _ := startNetwork(t, 3, "", func(c *Config) {
		c.Replicas = 2
		c.RepairEvery = time.Hour
		c.Crawl.MaxBodySize = 2 * int64(len(video))
		c.Crawl.Timeout = time.Minute
	})
	if _, err := Submit(context.Background(), nodes[0].data, []string{web.URL + "/", web.URL + "/film.mp4"}); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 2, nodes...)
	if rc := nodes[0].localStatus().ReplayCache; rc == nil || rc.Limit != replay.DefaultPayloadCacheBytes {
		t.Errorf("status replay_cache = %+v, want the default limit", rc)
	}

	// The film is archived whole, in a member too large for a batch.
	var film index.Capture
	var holders []*testNode
	for _, n := range nodes {
		n.LocalCaptures(context.Background(), func(c index.Capture) bool {
			if c.URL == web.URL+"/film.mp4" && c.Status == http.StatusOK {
				film = c
				holders = append(holders, n)
			}
			return true
		})
	}
	if len(holders) != 2 {
		t.Fatalf("the film is held by %d nodes, want 2", len(holders))
	}
	if film.Length <= replicate.MaxBodyBytes {
		t.Fatalf("the film's member is %d bytes, not over a batch's %d: the test shows nothing", film.Length, replicate.MaxBodyBytes)
	}
	rec, err := holders[1].net.Record(context.Background(), film)
	if err != nil {
		t.Fatal(err)
	}
	if end := warc.HTTPHeaderEnd(rec.Block); end < 0 || len(rec.Block)-end != len(video) {
		t.Fatalf("the film's record is a block of %d bytes (header end %d), want a body of %d", len(rec.Block), end, len(video))
	}

	// The node without a copy replays it from a holder as it arrives, never
	// holding the film in memory; ranges and all.
	var other *testNode
	for _, n := range nodes {
		if !slices.Contains(holders, n) {
			other = n
		}
	}
	replay := func(path string) (alloc uint64) {
		t.Helper()
		body := files[path]
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, err := http.Get("http://" + other.Addrs().Content + "/web/" + film.Timestamp14() + "id_/" + web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		runtime.ReadMemStats(&after)
		if want := sha256.Sum256(body); err != nil || resp.StatusCode != http.StatusOK || n != int64(len(body)) || !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("%s replaying %s held elsewhere: %d, %d of %d bytes (%v)", other.name, path, resp.StatusCode, n, len(body), err)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	for _, path := range []string{"/film.mp4", "/film.mp4", "/disk.img"} { // the first replay also reads a capture through once, to check it
		size := uint64(len(files[path]))
		alloc := replay(path)
		if alloc > size/4 {
			t.Errorf("replaying %s, %d bytes held on another node, allocated %d bytes: it was read whole", path, size, alloc)
		}
		t.Logf("replay of %s, %d bytes held on another node: %d bytes allocated", path, size, alloc)
	}
	replay("/photo.jpg") // read whole, from the answer that showed its size
	u := "http://" + other.Addrs().Content + "/web/" + film.Timestamp14() + "id_/" + film.URL
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	from := len(video) - 1000
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", from))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(tail, video[from:]) {
		t.Errorf("range from %d of the film held elsewhere: %d, %d bytes (%v)", from, resp.StatusCode, len(tail), err)
	}
	// The film and the image were each read across the network once, to
	// be checked, and kept in the node's spool: the film's second replay
	// and its range came from there.
	if rc := other.localStatus().ReplayCache; rc == nil || rc.SpoolFills != 2 || rc.SpooledEntries != 2 || rc.SpoolHits < 2 {
		t.Errorf("%s's replay spool: %+v; want the film and the image filled once each, the film's second replay and range read from it", other.name, rc)
	}

	// A WACZ exported through the node without a copy: each large record
	// is copied from a holder through a temporary file as it is checked,
	// never held in memory.
	out := filepath.Join(t.TempDir(), "site.wacz")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st, err := Export(context.Background(), other.data, wacz.Selection{Host: urlkey.Host(web.URL)}, f)
	runtime.ReadMemStats(&after)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || st.Unreadable != 0 || st.Captures < len(files)+1 {
		t.Fatalf("export through %s: %+v, %v; want the page and its %d files, all readable", other.name, st, err, len(files))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(video))/4 {
		t.Errorf("exporting the film (%d bytes) held on another node allocated %d bytes: it was read whole", len(video), alloc)
	} else {
		t.Logf("export of the site through a node holding none of its large records: %d bytes allocated", alloc)
	}
	zr, err := wacz.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := zr.Verify(context.Background()); err != nil {
		t.Errorf("the exported WACZ does not verify: %v", err)
	}
	zr.Close()

	// One holder leaves: the third node must get the film from it.
	leaving := holders[0]
	leave(t, leaving)
	var rest []*testNode
	for _, n := range nodes {
		if n != leaving {
			rest = append(rest, n)
		}
	}
	waitMembers(t, 2, rest...)
	waitCopies(t, 2, rest...)
}

// When its ctx ends while its commit is queued, crawl.Update (and Store)
// returns only once the committer is done with what it was given: pushLocal
// empties its batch as soon as Update returns, and a committer running the
// update later would find nothing (or, had it appended, other captures).
func TestUpdateReturnsWhenTheCommitterIsDone(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("hello"))
	}))
	defer web.Close()
	nodes, _ := startNetwork(t, 1, "", func(c *Config) { c.RepairEvery = time.Hour })
	if _, err := Submit(context.Background(), nodes[0].data, []string{web.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	n := nodes[0].Node

	// Hold the committer inside a commit past pushLocal's cancellation.
	entered, gate := make(chan struct{}), make(chan struct{})
	go n.crawl.Update(context.Background(), func(*pebble.Batch) error { close(entered); <-gate; return nil })
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	time.AfterFunc(300*time.Millisecond, func() { close(gate) })
	var staged atomic.Int64
	found := 0
	_, err := n.pushLocal(ctx, func(index.Capture) []string { found++; return []string{"nobody"} },
		func(*pebble.Batch, index.Capture) error { staged.Add(1); return nil })
	if !errors.Is(err, context.Canceled) || found == 0 {
		t.Fatalf("pushLocal: %v, %d captures found; want it cancelled with captures queued", err, found)
	}
	if got := staged.Load(); got != int64(found) {
		t.Errorf("when pushLocal returned, its update had staged %d captures, want the %d it was given", got, found)
	}
}
