package websim

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// discard is a ResponseWriter that only counts, so that benchmarks measure
// websim and not a recorder.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkServePage serves the pages of a default-sized web from the cache,
// as a crawl does on its first visit after the page was rendered (and on
// every later one).
func BenchmarkServePage(b *testing.B) {
	for _, enc := range []string{"identity", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			w := New(Config{Seed: 1})
			pages := w.Pages()
			reqs := make([]*http.Request, len(pages))
			for i, p := range pages {
				reqs[i] = httptest.NewRequest(http.MethodGet, p, nil)
				reqs[i].Header.Set("Accept-Encoding", enc)
			}
			rw := &discard{h: http.Header{}}
			for _, r := range reqs {
				clear(rw.h)
				w.ServeHTTP(rw, r)
			}
			rw.n = 0
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				clear(rw.h)
				w.ServeHTTP(rw, reqs[n%len(reqs)])
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "pages/s")
			b.ReportMetric(float64(rw.n)/float64(n), "bytes/page")
		})
	}
}

// BenchmarkRenderPage measures generating a page for the first time.
func BenchmarkRenderPage(b *testing.B) {
	w := New(Config{Seed: 1})
	var pages []*page
	for _, h := range w.hosts {
		pages = append(pages, h.pages...)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		w.renderPage(pages[n%len(pages)], 0)
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "pages/s")
}

// BenchmarkProxyLoopback fetches pages through a real server used as a
// proxy, over keep-alive connections, from parallel clients: the ceiling
// websim puts on a crawl benchmark on this machine.
func BenchmarkProxyLoopback(b *testing.B) {
	w := New(Config{Seed: 1})
	srv, err := Start("127.0.0.1:0", w)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	pu, _ := url.Parse(srv.URL())
	tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	pages := w.Pages()
	var next atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, pages[next.Add(1)%int64(len(pages))], nil))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.ReportMetric(float64(next.Load())/time.Since(start).Seconds(), "pages/s")
}

// FuzzRequest sends arbitrary request targets and encodings to the
// ordinary hosts: every one must get a well-formed answer, never a panic.
func FuzzRequest(f *testing.F) {
	w := New(Config{Seed: 1, Hosts: 120, Pages: 600, SlowDelay: time.Nanosecond})
	index := func(feat feature) uint8 {
		for i, h := range w.hosts {
			if h.feat&feat != 0 && i < 256 {
				return uint8(i)
			}
		}
		return 0
	}
	f.Add(uint8(0), "/", "gzip")
	f.Add(uint8(0), strings.TrimPrefix(w.Pages()[3], "http://"+w.hosts[0].name), "")
	f.Add(index(featCalendar), "/calendar/2026/11", "gzip")
	f.Add(index(featCalendar), "/calendar/999999/12", "")
	f.Add(index(featJSession), "/shop/item-3;jsessionid=AB", "")
	f.Add(index(featSID), "/store?sid=1&item=2&utm_x=3", "gzip;q=0")
	f.Add(index(featDeep), "/a/a/a/", "")
	f.Add(index(featLoop), "/login?next=/account", "")
	f.Add(index(featSlow), w.hosts[index(featSlow)].slow[0], "")
	f.Add(uint8(1), "http://no-such.test/x", "")
	f.Add(uint8(2), "/%2e%2e/;jsessionid=/?sid=&&utm_", "*")
	f.Fuzz(func(t *testing.T, hi uint8, target, enc string) {
		raw := "GET " + target + " HTTP/1.1\r\nHost: " + w.hosts[int(hi)%len(w.hosts)].name + "\r\nAccept-Encoding: " + enc + "\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		if name := requestHost(req); name == hostileDomain || strings.HasSuffix(name, "."+hostileDomain) {
			return // some hostile pages never end, by design
		}
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req)
		switch {
		case rec.Code < 200 || rec.Code > 599:
			t.Fatalf("%q: status %d", target, rec.Code)
		case rec.Code == 200 && rec.Header().Get("Content-Type") == "":
			t.Fatalf("%q: 200 without Content-Type", target)
		case rec.Code >= 300 && rec.Code < 400 && rec.Header().Get("Location") == "":
			t.Fatalf("%q: %d without Location", target, rec.Code)
		}
	})
}
