package wacz_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/wacz"
)

// BenchmarkExportLargeRecords exports an archive holding a 200 MiB video
// (random bytes: its gzip member is as large) and a 200 MiB disk image
// (zeros: its member is 200 KiB), with their members waiting for the
// writer in memory (held: MaxHeld above their size) or in a temporary
// file (spooled: the default MaxHeld). B/op is the bytes allocated per
// export; peak-heap-MiB the heap in use at its highest during an export,
// sampled every 10 ms.
func BenchmarkExportLargeRecords(b *testing.B) {
	video := make([]byte, 200<<20)
	rand.NewChaCha8([32]byte{5}).Read(video)
	files := map[string][]byte{"/film.mp4": video, "/disk.img": make([]byte, 200<<20)}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	data := b.TempDir()
	c, err := crawl.Open(crawl.Config{
		Data: data, Seeds: []string{web.URL + "/film.mp4", web.URL + "/disk.img"}, Scope: crawl.ScopeAny, NoDelay: true,
		AllowPrivate: true, MaxCrawlDelay: time.Millisecond, Timeout: time.Minute, MaxBodySize: 256 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	video, files = nil, nil
	db, err := crawl.OpenDB(data)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	local := archive.NewLocal(index.New(db), filepath.Join(data, "warc"))
	for _, mode := range []struct {
		name    string
		maxHeld int64
	}{{"held", 1 << 30}, {"spooled", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			src := wacz.Source{Archive: local, TempDir: b.TempDir(), MaxHeld: mode.maxHeld}
			b.ReportAllocs()
			var s wacz.Stats
			var peak uint64
			for b.Loop() {
				runtime.GC()
				done := make(chan struct{})
				sampled := make(chan uint64)
				go func() { sampled <- peakHeap(done) }()
				s, err = wacz.Export(context.Background(), io.Discard, src, wacz.Selection{})
				close(done)
				peak = max(peak, <-sampled)
				if err != nil || s.Captures < 2 || s.Unreadable > 0 {
					b.Fatalf("export: %+v, %v", s, err)
				}
			}
			b.SetBytes(s.WARCBytes)
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// peakHeap samples the heap in use until done is closed, and returns the
// highest sample.
func peakHeap(done <-chan struct{}) uint64 {
	var peak uint64
	var ms runtime.MemStats
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}
