package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/replay"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// ReplayOptions configure the replay benchmark.
type ReplayOptions struct {
	Dir         string        // scratch directory for the archive
	Hosts       int           // hosts in the synthetic archive
	URLsPerHost int           // URLs per host
	Captures    int           // captures of each URL
	Concurrency int           // concurrent clients
	Duration    time.Duration // how long each request kind is measured
}

func (o *ReplayOptions) defaults() {
	if o.Hosts <= 0 {
		o.Hosts = 500
	}
	if o.URLsPerHost <= 0 {
		o.URLsPerHost = 40
	}
	if o.Captures <= 0 {
		o.Captures = 5
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
}

// Latency is the outcome of measuring one kind of request.
type Latency struct {
	Name     string
	Requests int
	Errors   int
	Wall     time.Duration
	P50, P99 time.Duration
	Max      time.Duration
}

func (l Latency) String() string {
	return fmt.Sprintf("%-44s %7d req %8.0f req/s  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  errors %d",
		l.Name, l.Requests, float64(l.Requests)/l.Wall.Seconds(), ms(l.P50), ms(l.P99), ms(l.Max), l.Errors)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// Replay builds a synthetic archive of Hosts × URLsPerHost × Captures
// captures (each host's home page is a 50 KB page with 300 links), serves it
// with the replay server on loopback, and measures requests of each kind
// from Concurrency clients in the same process.
func Replay(ctx context.Context, opts ReplayOptions, out io.Writer) ([]Latency, error) {
	opts.defaults()
	start := time.Now()
	arch, err := buildArchive(opts)
	if err != nil {
		return nil, err
	}
	defer arch.db.Close()
	fmt.Fprintf(out, "archive: %d captures of %d URLs on %d hosts, %.0f MiB of WARC, built in %.1fs\n",
		arch.captures, opts.Hosts*opts.URLsPerHost, opts.Hosts, float64(arch.warcBytes)/(1<<20), time.Since(start).Seconds())

	uiLn, contentLn, err := replay.Listen("127.0.0.1:0", "")
	if err != nil {
		return nil, err
	}
	srv := replay.New(replay.Config{Archive: archive.NewLocal(index.New(arch.db), arch.warcDir), UIAddr: uiLn.Addr().String(), ContentAddr: contentLn.Addr().String()})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go replay.Serve(sctx, srv, uiLn, contentLn)
	ui, content := "http://"+uiLn.Addr().String(), "http://"+contentLn.Addr().String()

	pick := func(r *rand.Rand) (host string, u string, ts string) {
		h := r.IntN(opts.Hosts)
		host = fmt.Sprintf("site%d.example", h)
		u = pageURL(host, r.IntN(opts.URLsPerHost))
		return host, u, timestampOf(opts, h, r.IntN(opts.Captures))
	}
	kinds := []struct {
		name string
		url  func(r *rand.Rand) string
	}{
		{"home page (summary of the archive, cached 30 s)", func(*rand.Rand) string { return ui + "/" }},
		{"capture list (calendar) /web/*/<url>", func(r *rand.Rand) string { _, u, _ := pick(r); return ui + "/web/*/" + u }},
		{"CDX exact, output=json", func(r *rand.Rand) string { _, u, _ := pick(r); return ui + "/cdx?output=json&url=" + u }},
		{"CDX host prefix, limit=100", func(r *rand.Rand) string { h, _, _ := pick(r); return ui + "/cdx?limit=100&url=" + h + "/*" }},
		{"banner frame /web/<ts>/<url>", func(r *rand.Rand) string { _, u, ts := pick(r); return ui + "/web/" + ts + "/" + u }},
		{"replay 50 KB page, rewritten (mp_)", func(r *rand.Rand) string {
			h, _, ts := pick(r)
			return content + "/web/" + ts + "mp_/" + pageURL(h, 0)
		}},
		{"replay 50 KB page, original bytes (id_)", func(r *rand.Rand) string {
			h, _, ts := pick(r)
			return content + "/web/" + ts + "id_/" + pageURL(h, 0)
		}},
	}
	var results []Latency
	fmt.Fprintf(out, "%d concurrent clients, %s per kind of request:\n", opts.Concurrency, opts.Duration)
	for _, k := range kinds {
		l, err := measure(ctx, k.name, k.url, opts)
		if err != nil {
			return results, err
		}
		fmt.Fprintln(out, l)
		results = append(results, l)
	}
	return results, nil
}

// measure sends requests of one kind for opts.Duration.
func measure(ctx context.Context, name string, next func(*rand.Rand) string, opts ReplayOptions) (Latency, error) {
	client := &http.Client{
		Transport:     &http.Transport{MaxIdleConnsPerHost: opts.Concurrency, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var samples []time.Duration
	var errs atomic.Int64
	deadline := time.Now().Add(opts.Duration)
	began := time.Now()
	var wg sync.WaitGroup
	for w := range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			var mine []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				resp, err := client.Get(next(r))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	l := Latency{Name: name, Requests: len(samples), Errors: int(errs.Load()), Wall: time.Since(began)}
	if len(samples) == 0 {
		return l, fmt.Errorf("bench: %s: no request succeeded (%d errors)", name, l.Errors)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	l.P50 = samples[len(samples)/2]
	l.P99 = samples[len(samples)*99/100]
	l.Max = samples[len(samples)-1]
	return l, ctx.Err()
}

type builtArchive struct {
	db        *pebble.DB
	warcDir   string
	captures  int
	warcBytes int64
}

func pageURL(host string, i int) string {
	if i == 0 {
		return "http://" + host + "/"
	}
	return fmt.Sprintf("http://%s/section-%d/page-%d.html", host, i%7, i)
}

// timestampOf spreads a URL's captures over two years, a month apart per
// capture and an hour apart per host.
func timestampOf(opts ReplayOptions, host, capture int) string {
	t := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(capture) * 30 * 24 * time.Hour).Add(time.Duration(host) * time.Hour)
	return index.Timestamp(t)
}

// page renders a synthetic HTML page with n links and about size bytes.
func page(host string, i, n, size int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html><html><head><title>%s page %d</title><link rel=\"stylesheet\" href=\"/css/site.css\"></head><body><h1>Page %d</h1>\n", host, i, i)
	for j := 0; j < n; j++ {
		fmt.Fprintf(&b, "<p>Paragraph %d of the archive benchmark <a href=\"%s\">link %d</a> <img src=\"/img/pic-%d.png\" alt=\"\"></p>\n", j, pageURL(host, (i+j)%1000), j, j%50)
	}
	for b.Len() < size {
		b.WriteString("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.</p>\n")
	}
	b.WriteString("</body></html>\n")
	return []byte(b.String())
}

func buildArchive(opts ReplayOptions) (*builtArchive, error) {
	data := filepath.Join(opts.Dir, "replay-archive")
	db, err := crawl.OpenDB(data)
	if err != nil {
		return nil, err
	}
	warcDir := filepath.Join(data, "warc")
	if err := os.MkdirAll(warcDir, 0o755); err != nil {
		db.Close()
		return nil, err
	}
	w, err := warc.NewWriter(warcDir, warc.WriterOptions{})
	if err != nil {
		db.Close()
		return nil, err
	}
	arch := &builtArchive{db: db, warcDir: warcDir}
	fail := func(err error) (*builtArchive, error) {
		w.Close()
		db.Close()
		return nil, err
	}
	for h := range opts.Hosts {
		host := fmt.Sprintf("site%d.example", h)
		b := db.NewBatch()
		var recs []*warc.Record
		var caps []index.Capture
		for u := range opts.URLsPerHost {
			url := pageURL(host, u)
			key, err := urlkey.SURT(url)
			if err != nil {
				return fail(err)
			}
			for c := range opts.Captures {
				body := page(host, u+c, 10, 2000)
				if u == 0 {
					body = page(host, c, 300, 50_000)
				}
				raw := append([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n\r\n", len(body))), body...)
				when, _ := index.ParseTimestamp(timestampOf(opts, h, c), false)
				rec, err := warc.NewResponse(url, when, raw)
				if err != nil {
					return fail(err)
				}
				recs = append(recs, rec)
				caps = append(caps, index.Capture{URLKey: key, Time: when, URL: url, Type: warc.TypeResponse, Status: 200, MIME: "text/html",
					Digest: rec.Header.Get("WARC-Payload-Digest"), RecordID: rec.ID()})
			}
		}
		locs, err := w.WriteGroup(recs)
		if err != nil {
			return fail(err)
		}
		for i, c := range caps {
			c.Segment, c.Offset, c.Length = locs[i].Segment, locs[i].Offset, locs[i].Length
			arch.warcBytes += c.Length
			if err := index.Put(b, c); err != nil {
				return fail(err)
			}
		}
		arch.captures += len(caps)
		if err := b.Commit(nil); err != nil {
			return fail(err)
		}
	}
	if err := w.Close(); err != nil {
		db.Close()
		return nil, err
	}
	return arch, nil
}
