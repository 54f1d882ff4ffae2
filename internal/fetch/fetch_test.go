package fetch

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/waggle-archive/waggle/internal/warc"
)

func newFetcher(t testing.TB, cfg Config) *Fetcher {
	t.Helper()
	if cfg.UserAgent == "" {
		cfg.UserAgent = "waggle-test"
	}
	cfg.AllowPrivate = cfg.AllowPrivate || cfg.Proxy == nil
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// rawServer answers every request on each connection with fixed bytes.
func rawServer(t *testing.T, resp string, closeAfter bool) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					c.Write([]byte(resp))
					if closeAfter {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

func TestRawBytesExact(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\ncontent-TYPE: text/html\r\nX-Odd:   spaced  \r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
	base, conns := rawServer(t, resp, false)
	f := newFetcher(t, Config{})
	for range 3 {
		r, err := f.Fetch(context.Background(), Request{URL: base + "/p?q=1", Header: http.Header{"If-None-Match": {`"x"`}}})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Raw) != resp {
			t.Fatalf("raw response %q, want %q", r.Raw, resp)
		}
		if string(r.Body) != "hello world" || r.StatusCode != 200 || r.Truncated != "" {
			t.Fatalf("body %q status %d truncated %q", r.Body, r.StatusCode, r.Truncated)
		}
		if !bytes.HasPrefix(r.RawRequest, []byte("GET /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:")) ||
			!bytes.Contains(r.RawRequest, []byte("If-None-Match: \"x\"\r\n")) || !bytes.HasSuffix(r.RawRequest, []byte("\r\n\r\n")) {
			t.Fatalf("raw request %q", r.RawRequest)
		}
		if r.IP != "127.0.0.1" {
			t.Errorf("IP %q", r.IP)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 requests, want 1 (keep-alive)", n)
	}
}

func TestServerClosedIdleConnection(t *testing.T) {
	base, conns := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true)
	f := newFetcher(t, Config{})
	for range 3 {
		r, err := f.Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil || string(r.Body) != "ok" {
			t.Fatalf("%v %v", r, err)
		}
	}
	if conns.Load() != 3 {
		t.Errorf("conns %d", conns.Load())
	}
}

func TestRefusesPrivateAddresses(t *testing.T) {
	f, _ := New(Config{UserAgent: "x", ConnectTimeout: time.Second})
	for _, u := range []string{"http://127.0.0.1:1/", "http://[::1]:1/", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:127.0.0.1]:1/", "http://localhost:1/", "http://192.168.1.1/", "http://100.64.0.1/", "http://0.0.0.0:1/",
		"http://[::7f00:1]:1/", "http://[64:ff9b::7f00:1]:1/", "http://[2002:7f00:1::1]:1/"} {
		if _, err := f.Fetch(context.Background(), Request{URL: u}); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s: %v, want ErrForbiddenAddress", u, err)
		}
	}
	// Through a proxy, names resolve there; plainly local targets are still refused here.
	pf, _ := New(Config{UserAgent: "x", Proxy: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}})
	for _, u := range []string{"http://localhost/", "http://127.0.0.1/", "http://foo.localhost/", "http://[::1]/",
		"http://localhost./", "http://LOCALHOST.:8080/", "http://foo.localhost./", "http://[64:ff9b::a00:1]/"} {
		if _, err := pf.Fetch(context.Background(), Request{URL: u}); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("via proxy %s: %v, want ErrForbiddenAddress", u, err)
		}
	}
	// IPv6 addresses that carry a private or loopback IPv4 address reach it.
	for _, ip := range []string{"::7f00:1", "::a00:1", "64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",
		"2002:a00:1::1", "2002:7f00:1::1", "::ffff:0:7f00:1", "64:ff9b:1::808:808", "fec0::1", "2001:db8::1"} {
		if !Forbidden(netip.MustParseAddr(ip)) {
			t.Errorf("%s allowed", ip)
		}
	}
	for _, ip := range []string{"8.8.8.8", "2606:4700::1", "64:ff9b::808:808", "2002:808:808::1"} {
		if Forbidden(netip.MustParseAddr(ip)) {
			t.Errorf("%s refused", ip)
		}
	}
}

func TestHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "proto %s", r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	f := newFetcher(t, Config{RootCAs: pool})
	for range 2 {
		r, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/x"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Protocol != "h2" || string(r.Body) != "proto HTTP/2.0" {
			t.Fatalf("protocol %s body %q", r.Protocol, r.Body)
		}
		if !bytes.HasPrefix(r.Raw, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(r.Raw, []byte("\r\n\r\nproto HTTP/2.0")) ||
			!bytes.Contains(r.Raw, []byte("Content-Length: 14\r\n")) {
			t.Fatalf("synthesized raw %q", r.Raw)
		}
	}
}

func TestProxy(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin "+r.URL.Path) }))
	defer origin.Close()
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.RequestURI)
		if r.Method == http.MethodConnect {
			http.Error(w, "no tunnels", http.StatusMethodNotAllowed)
			return
		}
		resp, err := http.Get(r.RequestURI)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	f := newFetcher(t, Config{Proxy: pu, AllowPrivate: true})
	r, err := f.Fetch(context.Background(), Request{URL: origin.URL + "/a"})
	if err != nil || string(r.Body) != "origin /a" {
		t.Fatalf("%v %v", r, err)
	}
	if len(seen) != 1 || seen[0] != "GET "+origin.URL+"/a" {
		t.Errorf("proxy saw %v, want an absolute-form GET", seen)
	}
	if !bytes.HasPrefix(r.RawRequest, []byte("GET /a HTTP/1.1\r\n")) {
		t.Errorf("recorded request %q is not origin-form", r.RawRequest)
	}
	_, err = f.Fetch(context.Background(), Request{URL: "https://example.test/"})
	if err == nil || !strings.Contains(err.Error(), "405") || seen[len(seen)-1] != "CONNECT example.test:443" {
		t.Errorf("https via proxy: %v, proxy saw %v", err, seen)
	}
}

// Requests to many hosts through a proxy share its connections: with as
// many idle connections kept as requests run at once, no request needs a
// new one once each concurrent worker has its own.
func TestProxyConnectionsReused(t *testing.T) {
	var conns atomic.Int64
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond) // so that the workers' requests overlap
		fmt.Fprintf(w, "%s via the proxy", r.Host)
	}))
	proxy.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	proxy.Start()
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	const workers, each = 8, 25
	f := newFetcher(t, Config{Proxy: pu, AllowPrivate: true, MaxProxyConns: workers})
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				host := fmt.Sprintf("h%d.test", (w*each+i)%50)
				r, err := f.Fetch(context.Background(), Request{URL: "http://" + host + "/"})
				if err == nil && string(r.Body) != host+" via the proxy" {
					err = fmt.Errorf("%s: body %q", host, r.Body)
				}
				if err != nil {
					errs <- err
				}
				// A crawler's worker archives what it fetched before its
				// next fetch: meanwhile its connection waits idle.
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := conns.Load(); n > workers {
		t.Errorf("%d connections to the proxy for %d requests by %d workers; want at most %d", n, workers*each, workers, workers)
	}
}

func TestHostileResponses(t *testing.T) {
	// Bombs: 16 MiB of zeros, a few KB compressed — four times the decode cap below.
	zeros := make([]byte, 16<<20)
	var gz, br bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(zeros)
	zw.Close()
	bw := brotli.NewWriterLevel(&br, 1)
	bw.Write(zeros)
	bw.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/gzip-bomb", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(gz.Bytes())
	})
	mux.HandleFunc("/br-bomb", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		w.Write(br.Bytes())
	})
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/slowloris", func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		defer c.Close()
		c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		for r.Context().Err() == nil {
			if _, err := c.Write([]byte("X")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"))
		c.Close()
	})
	long := make([]byte, 2<<20)
	for i := range long {
		long[i] = byte(i * 7 % 251)
	}
	mux.HandleFunc("/long", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(long)))
		w.Write(long)
	})
	mux.HandleFunc("/huge-headers", func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		defer c.Close()
		c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		for i := 0; i < 100_000; i++ {
			if _, err := fmt.Fprintf(c, "X-H%d: %s\r\n", i, strings.Repeat("v", 100)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "../next?a=1", http.StatusFound) })
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Write([]byte("\x00\x01 this is not http\r\n\r\n"))
		c.Close()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := newFetcher(t, Config{MaxBodySize: 1 << 20, MaxDecodedSize: 4 << 20, TotalTimeout: 2 * time.Second, ReadTimeout: time.Second, MaxHeaderBytes: 64 << 10})
	get := func(p string) (*Response, error) { return f.Fetch(context.Background(), Request{URL: srv.URL + p}) }

	for _, p := range []string{"/gzip-bomb", "/br-bomb"} {
		r, err := get(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r.DecodeError == nil || len(r.Body) != 4<<20 || r.Truncated != "" {
			t.Errorf("%s: decode error %v, body %d bytes, truncated %q", p, r.DecodeError, len(r.Body), r.Truncated)
		}
	}
	// The rest of a cut body is not read: the raw response, what the WARC
	// holds, is the headers and the body up to the cap as sent (chunked
	// here, in 64 KiB chunks: the framing takes a few bytes of the cap).
	if r, err := get("/endless"); err != nil || r.Truncated != "length" || len(r.Body) > 1<<20 || len(r.Body) < 1<<20-1<<10 || len(r.Raw) > 1<<20+1<<10 {
		t.Errorf("endless: %v, truncated %q, body %d bytes, raw %d bytes", err, r.Truncated, len(r.Body), len(r.Raw))
	}
	if _, err := get("/slowloris"); err == nil {
		t.Error("slowloris: no error")
	}
	// A body with a Content-Length is cut at the cap too, and is the bytes
	// sent, which end the raw response.
	if r, err := get("/long"); err != nil || r.Truncated != "length" || !bytes.Equal(r.Body, long[:1<<20]) {
		t.Errorf("long: %v, truncated %q, body %d bytes", err, r.Truncated, len(r.Body))
	} else if head := bytes.Index(r.Raw, []byte("\r\n\r\n")) + 4; !bytes.Equal(r.Raw[head:], long[:1<<20]) {
		t.Errorf("long: the raw response holds %d body bytes, want the first %d sent", len(r.Raw)-head, 1<<20)
	}
	if r, err := get("/cut"); err != nil || r.Truncated != "disconnect" || string(r.Body) != "only this" {
		t.Errorf("cut: %+v %v", r, err)
	}
	if _, err := get("/huge-headers"); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("huge headers: %v", err)
	}
	if r, err := get("/redirect"); err != nil || r.Location != srv.URL+"/next?a=1" || r.StatusCode != 302 {
		t.Errorf("redirect: %+v %v", r, err)
	}
	if _, err := get("/garbage"); err == nil {
		t.Error("garbage response: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := f.Fetch(ctx, Request{URL: srv.URL + "/slowloris"}); err == nil {
		t.Error("cancelled fetch: no error")
	}
	if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/", Header: http.Header{"X": {"a\r\nInjected: 1"}}}); err == nil {
		t.Error("CRLF in a header value was sent")
	}
}

// A body cut short by the caller stopping (a crawl interrupted) is not a
// capture cut by the timeout: Fetch fails, so that the URL is fetched
// again; one cut by the fetcher's own timeout is a truncated capture.
func TestInterruptedBodyIsNoCapture(t *testing.T) {
	partSent := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.Write(bytes.Repeat([]byte("v"), 1000))
		w.(http.Flusher).Flush()
		select {
		case partSent <- struct{}{}:
		default:
		}
		<-r.Context().Done() // the rest never comes
	}))
	defer srv.Close()
	f := newFetcher(t, Config{TotalTimeout: time.Minute, ReadTimeout: time.Minute})
	// The cancel must land once the headers are read, which the server
	// cannot see: it comes a while after they were sent, and an attempt
	// where it still came first is made again.
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-partSent; time.Sleep(200 * time.Millisecond); cancel() }()
		r, err := f.Fetch(ctx, Request{URL: srv.URL})
		cancel()
		if err != nil && strings.Contains(err.Error(), "no response headers") {
			if attempt == 4 {
				t.Skip("the cancel came before the headers were read, five times")
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a body cut by the caller's cancel: %v (a response: %v); want context.Canceled", err, r != nil)
		}
		break
	}
	quick := newFetcher(t, Config{TotalTimeout: 300 * time.Millisecond, ReadTimeout: time.Minute})
	if r, err := quick.Fetch(context.Background(), Request{URL: srv.URL}); err != nil || r.Truncated != "time" || len(r.Body) != 1000 {
		t.Errorf("a body cut by the timeout: %v; want it kept, truncated \"time\"", err)
	}
}

// BenchmarkFetch compares our recording client with a plain net/http loop
// over keep-alive connections to the same local server.
func BenchmarkFetch(b *testing.B) {
	body := bytes.Repeat([]byte("<p>page text</p>\n"), 1200) // ~20 KB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	b.Run("waggle", func(b *testing.B) {
		f := newFetcher(b, Config{MaxConnsPerHost: 8})
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("net-http", func(b *testing.B) {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, TLSClientConfig: &tls.Config{}}}
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := c.Get(srv.URL + "/")
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	})
}

// gzipped returns b gzip-compressed.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestDecodeReusesReaders decodes gzip bodies one after another through
// one pool of readers — whole, cut short, with a lying size trailer, and
// bombs — and checks each result and error against a decoding with fresh
// readers: a reused reader carries nothing over.
func TestDecodeReusesReaders(t *testing.T) {
	var bodies [][]byte
	for i := range 40 {
		page := bytes.Repeat([]byte(fmt.Sprintf("<p>page %d</p>\n", i)), 10+i*37)
		whole := gzipped(page)
		bodies = append(bodies, whole)
		switch i % 4 {
		case 1:
			bodies = append(bodies, whole[:len(whole)/2]) // cut short
		case 2:
			lying := bytes.Clone(whole)
			copy(lying[len(lying)-4:], []byte{0xff, 0xff, 0xff, 0x7f}) // claims 2 GiB
			bodies = append(bodies, lying)
		case 3:
			bodies = append(bodies, gzipped(make([]byte, 1<<20))) // decodes past the cap below
		}
	}
	var pool sync.Pool
	const max = 256 << 10
	// A reader back in the pool holds an empty stream, not the last body.
	zr, _ := gzip.NewReader(bytes.NewReader(bodies[0]))
	if err := zr.Reset(bytes.NewReader(emptyGzip())); err != nil {
		t.Fatalf("emptyGzip is not a gzip member: %v", err)
	}
	if b, err := io.ReadAll(zr); err != nil || len(b) != 0 {
		t.Fatalf("emptyGzip decodes to %q, %v", b, err)
	}
	for i, b := range bodies {
		got, gotErr := decodeContent(b, "gzip", max, &pool, true)
		want, wantErr := DecodeContent(b, "gzip", max)
		if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("body %d: pooled decoding gave %d bytes (%v), fresh %d bytes (%v)", i, len(got), gotErr, len(want), wantErr)
		}
		if len(got) > max {
			t.Fatalf("body %d: %d bytes decoded, cap %d", i, len(got), max)
		}
	}
}

// TestDecodeRefusesCodingChains: a Content-Encoding listing a coding
// thousands of times, with a body of a byte, is refused before any decoder
// is built (each costs its window: gigabytes in all), with an error that
// does not repeat the header; "identity" is no coding and does not count.
func TestDecodeRefusesCodingChains(t *testing.T) {
	for _, c := range []string{"deflate", "gzip", "br", "zstd"} {
		ce := strings.Repeat(c+", ", 1000) + c
		out, err := DecodeContent([]byte("x"), ce, 1<<20)
		if err == nil || !strings.Contains(err.Error(), "more than 4 codings") || len(err.Error()) > 200 || string(out) != "x" {
			t.Errorf("%s ×1001: %q, error %.300v", c, out, err)
		}
	}
	if _, err := DecodeContent([]byte("x"), strings.Repeat("x", 10000), 1<<20); err == nil || len(err.Error()) > 200 {
		t.Errorf("a long unknown coding: error %.300v", err)
	}
	four := gzipped(gzipped(gzipped(gzipped([]byte("page")))))
	ce := "gzip, Identity," + strings.Repeat(" identity,", 1000) + " gzip, x-gzip, GZIP, identity"
	if out, err := DecodeContent(four, ce, 1<<20); err != nil || string(out) != "page" {
		t.Errorf("four gzips among identities: %q, %v", out, err)
	}

	// The crawler keeps such a response as received, with the error.
	resp := "HTTP/1.1 200 OK\r\nContent-Encoding: " + strings.Repeat("deflate,", 2000) + "deflate\r\nContent-Length: 1\r\n\r\nx"
	base, _ := rawServer(t, resp, true)
	r, err := newFetcher(t, Config{}).Fetch(context.Background(), Request{URL: base + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Raw) != resp || string(r.Body) != "x" || r.DecodeError == nil || len(r.DecodeError.Error()) > 200 {
		t.Errorf("raw %d bytes, body %q, decode error %.300v", len(r.Raw), r.Body, r.DecodeError)
	}
}

// TestDecodeReportsInnerFailures: when a decoder under another fails, the
// failure is reported, though the decoder above may take it for the end of
// its input (zstd reading a failed zstd decoder's output saw an empty
// stream: an empty body and no error) or end its own stream before
// reading that far (a gzip body cut in its trailer, under deflate).
func TestDecodeReportsInnerFailures(t *testing.T) {
	encoders := map[string]func(io.Writer) io.WriteCloser{
		"gzip":    func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		"br":      func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) },
		"deflate": func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) },
		"zstd": func(w io.Writer) io.WriteCloser {
			zw, _ := zstd.NewWriter(w)
			return zw
		},
	}
	encode := func(b []byte, coding string) []byte {
		var buf bytes.Buffer
		w := encoders[coding](&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	page := bytes.Repeat([]byte("<p><a href=/x>hello</a></p>\n"), 200)
	once := encode(page, "zstd")
	if out, err := DecodeContent(once[:len(once)-5], "zstd, zstd", 1<<20); err == nil {
		t.Errorf("zstd, zstd over a cut zstd stream: %d bytes, no error", len(out))
	}
	for inner := range encoders {
		for outer := range encoders {
			ce := inner + ", " + outer
			body := encode(encode(page, inner), outer)
			if out, err := DecodeContent(body, ce, 1<<20); err != nil || !bytes.Equal(out, page) {
				t.Errorf("%s: %d bytes, %v", ce, len(out), err)
			}
			for _, cut := range []int{1, 5, len(body) / 2} {
				if out, err := DecodeContent(body[:len(body)-cut], ce, 1<<20); err == nil {
					t.Errorf("%s cut by %d bytes: %d bytes, no error", ce, cut, len(out))
				}
			}
			// Coded once, declared twice: the inner decoder fails at once.
			if out, err := DecodeContent(encode(page, outer), ce, 1<<20); err == nil {
				t.Errorf("%s over one %s coding: %d bytes, no error", ce, outer, len(out))
			}
		}
	}
}

// TestChunkedRawBounded: a chunked body is held to the body cap as sent,
// framing included, as a body with a Content-Length is, and the raw
// response ends with the last byte read, so that the archived payload is
// the body returned. Chunks of 1 byte took 6 raw bytes for each byte of
// body, all of them kept, and a body cut at the cap kept a byte past it.
func TestChunkedRawBounded(t *testing.T) {
	const max = 64 << 10
	page := make([]byte, 2*max)
	for i := range page {
		page[i] = 'a' + byte(i%26)
	}
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunked := func(body []byte, size int) string {
		var b strings.Builder
		b.WriteString(head)
		for len(body) > 0 {
			c := body[:min(size, len(body))]
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
			body = body[len(c):]
		}
		b.WriteString("0\r\nX-Trailer: t\r\n\r\n")
		return b.String()
	}
	fits := max // the longest body that is max bytes as one chunk
	for len(chunked(page[:fits], fits))-len(head) > max {
		fits--
	}
	for _, tc := range []struct {
		name      string
		resp      string
		truncated string
		body      int // bytes of page returned; -1: some
	}{
		{"half the cap in 1-byte chunks", chunked(page[:max/2], 1), "length", -1},
		{"90% of the cap in 100-byte chunks", chunked(page[:max*9/10], 100), "", max * 9 / 10},
		{"past the cap in 1 KiB chunks", chunked(page, 1<<10), "length", -1},
		{"past the cap in one chunk", chunked(page, len(page)), "length", -1},
		{"the cap in one chunk", chunked(page[:fits], fits), "", fits},
		{"a byte past the cap in one chunk", chunked(page[:fits+1], fits+1), "length", -1},
	} {
		base, _ := rawServer(t, tc.resp, false)
		r, err := newFetcher(t, Config{MaxBodySize: max}).Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		payload, _ := warc.HTTPPayload(r.Raw)
		switch {
		case r.Truncated != tc.truncated:
			t.Errorf("%s: truncated %q, want %q", tc.name, r.Truncated, tc.truncated)
		case !bytes.Equal(payload, r.Body):
			t.Errorf("%s: the raw response's payload is %d bytes, the body %d", tc.name, len(payload), len(r.Body))
		case tc.body >= 0 && !bytes.Equal(r.Body, page[:tc.body]):
			t.Errorf("%s: body %d bytes, want the first %d", tc.name, len(r.Body), tc.body)
		case tc.body < 0 && (len(r.Body) == 0 || !bytes.HasPrefix(page, r.Body)):
			t.Errorf("%s: body %d bytes, not the start of the page", tc.name, len(r.Body))
		case !strings.HasPrefix(string(r.Raw), head) || len(r.Raw)-len(head) > max:
			t.Errorf("%s: %d raw bytes of body for a cap of %d", tc.name, len(r.Raw)-len(head), max)
		case tc.truncated == "" && string(r.Raw) != tc.resp:
			t.Errorf("%s: the raw response is not the one sent", tc.name)
		}
	}
	// A cap under what is read ahead with the header (the whole response here).
	base, _ := rawServer(t, chunked(page[:10<<10], 1<<10), false)
	r, err := newFetcher(t, Config{MaxBodySize: 100}).Fetch(context.Background(), Request{URL: base + "/"})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := warc.HTTPPayload(r.Raw)
	if r.Truncated != "length" || len(r.Raw) != len(head)+100 || !bytes.Equal(payload, r.Body) || !bytes.Equal(r.Body, page[:len(r.Body)]) {
		t.Errorf("a cap of 100 bytes: truncated %q, %d raw bytes of body, payload %d bytes, body %d", r.Truncated, len(r.Raw)-len(head), len(payload), len(r.Body))
	}
}
