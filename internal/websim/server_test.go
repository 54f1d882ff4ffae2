package websim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/andybalholm/brotli"
	"golang.org/x/text/encoding/japanese"
)

func start(t *testing.T, cfg Config) (*Web, *Server) {
	t.Helper()
	w := New(cfg)
	srv, err := Start("127.0.0.1:0", w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return w, srv
}

// proxyClient sends every request through srv as a forward proxy.
func proxyClient(t *testing.T, srv *Server, raw bool) *http.Client {
	t.Helper()
	pu, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), DisableCompression: raw}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// waitIdle waits until no handler of w is running. A handler that never
// returns fails the test by the test binary's timeout.
func waitIdle(t *testing.T, w *Web) {
	t.Helper()
	for w.active.Load() != 0 {
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProxy(t *testing.T) {
	w, srv := start(t, Config{Seed: 11, Hosts: 20, Pages: 100})
	c := proxyClient(t, srv, false)
	reused := 0
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Reused {
			reused++
		}
	}}
	for _, p := range w.Pages()[:20] {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, p, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !resp.Uncompressed {
			t.Errorf("%s through the proxy: %d, transparently gunzipped %v", p, resp.StatusCode, resp.Uncompressed)
		}
		if want := get(w, p).Body.Bytes(); !bytes.Equal(body, want) {
			t.Errorf("%s through the proxy differs from a direct request", p)
		}
	}
	if reused == 0 {
		t.Error("no connection was reused: keep-alive does not work")
	}
	resp, err := c.Get("http://no-such-host.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("unknown host through the proxy: %d", resp.StatusCode)
	}

	// Origin-form requests with a Host header work too.
	req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/robots.txt", nil)
	req.Host = w.Hosts()[0]
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("origin-form request: %d", resp.StatusCode)
	}

	// An https URL makes the transport send CONNECT, which is refused.
	if _, err := c.Get("https://" + w.Hosts()[0] + "/"); err == nil || !strings.Contains(err.Error(), "Method Not Allowed") {
		t.Errorf("https through the proxy: %v", err)
	}
}

func TestCloseStopsHandlers(t *testing.T) {
	w := New(Config{Seed: 12, Hosts: 120, Pages: 600, SlowDelay: time.Hour})
	srv, err := Start("127.0.0.1:0", w)
	if err != nil {
		t.Fatal(err)
	}
	var slow string
	for _, h := range w.hosts {
		if len(h.slow) > 0 {
			slow = "http://" + h.name + h.slow[0]
		}
	}
	hostile := w.HostileURLs()
	c := proxyClient(t, srv, true)
	targets := []string{slow, hostile["slowloris"], hostile["endless"], hostile["robots-slow"] + "robots.txt"}
	errs := make(chan error, len(targets))
	for _, u := range targets {
		go func() {
			resp, err := c.Get(u)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for w.active.Load() < int64(len(targets)) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waits for handlers, so none is left.
	if n := w.active.Load(); n != 0 {
		t.Errorf("%d handlers still running after Close", n)
	}
	for range targets {
		if err := <-errs; err == nil {
			t.Error("a request to a stalled URL succeeded after Close")
		}
	}
}

func TestSlowlorisStopsWhenClientLeaves(t *testing.T) {
	w, srv := start(t, Config{Seed: 13, Hosts: 3, Pages: 10})
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET http://hostile.test/slowloris HTTP/1.1\r\nHost: hostile.test\r\n\r\n")
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || line != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("status line %q, %v", line, err)
	}
	// The header trickles in a byte at a time and never ends.
	got := make([]byte, len("X-Slowloris: z"))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "X-Slowloris: z" {
		t.Fatalf("read %q, %v", got, err)
	}
	if w.active.Load() != 1 {
		t.Fatalf("%d handlers running, want the slowloris one", w.active.Load())
	}
	conn.Close()
	waitIdle(t, w)
}

func TestEndlessStopsWhenClientLeaves(t *testing.T) {
	w, srv := start(t, Config{Seed: 14, Hosts: 3, Pages: 10})
	c := proxyClient(t, srv, true)
	resp, err := c.Get(w.HostileURLs()["endless"])
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.CopyN(io.Discard, resp.Body, 4<<20)
	if n != 4<<20 || err != nil {
		t.Fatalf("read %d bytes of the endless body: %v", n, err)
	}
	resp.Body.Close()
	c.Transport.(*http.Transport).CloseIdleConnections()
	waitIdle(t, w)
}

// inflatedPrefix decodes as much of a compressed prefix as it can and
// returns how many bytes that gave, checking they are all zeros.
func inflatedPrefix(t *testing.T, r io.Reader) int64 {
	t.Helper()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := r.Read(buf)
		if bytes.ContainsFunc(buf[:m], func(r rune) bool { return r != 0 }) {
			t.Fatal("a bomb inflated to something other than zeros")
		}
		n += int64(m)
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("decoding the bomb prefix: %v", err)
			}
			return n
		}
	}
}

func TestBombs(t *testing.T) {
	w, srv := start(t, Config{Seed: 15, Hosts: 3, Pages: 10})
	c := proxyClient(t, srv, true)
	for _, tc := range []struct {
		name, enc string
		prefix    int64
		ratio     int64
		decode    func(io.Reader) (io.Reader, error)
	}{
		{"gzip-bomb", "gzip", 64 << 10, 900, func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
		{"br-bomb", "br", 2 << 10, 50_000, func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil }},
	} {
		resp, err := c.Get(w.HostileURLs()[tc.name])
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Content-Encoding") != tc.enc {
			t.Errorf("%s: Content-Encoding %q", tc.name, resp.Header.Get("Content-Encoding"))
		}
		prefix, err := io.ReadAll(io.LimitReader(resp.Body, tc.prefix))
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := tc.decode(bytes.NewReader(prefix))
		if err != nil {
			t.Fatal(err)
		}
		n := inflatedPrefix(t, dec)
		t.Logf("%s: %d compressed bytes (of %d) inflate to %d: ratio %d; whole bomb inflates to %d", tc.name, len(prefix), resp.ContentLength, n, n/int64(len(prefix)), int64(bombSize))
		if n/int64(len(prefix)) < tc.ratio {
			t.Errorf("%s: ratio %d, want at least %d", tc.name, n/int64(len(prefix)), tc.ratio)
		}
	}
	waitIdle(t, w)

	// The whole gzip bomb, read raw, declares 10 GiB in its trailer.
	resp, err := c.Get(w.HostileURLs()["gzip-bomb"])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || int64(len(raw)) != resp.ContentLength {
		t.Fatalf("read %d of %d bytes: %v", len(raw), resp.ContentLength, err)
	}
	if size := binary.LittleEndian.Uint32(raw[len(raw)-4:]); int64(size) != bombSize%(1<<32) {
		t.Errorf("gzip trailer size %d", size)
	}
	if crc := binary.LittleEndian.Uint32(raw[len(raw)-8:]); crc != crc32Zeros(bombSize) {
		t.Errorf("gzip trailer CRC %08x", crc)
	}
}

// TestBombsAreValid decodes small bombs built the same way to the end:
// the streams are well formed, checksums included.
func TestBombsAreValid(t *testing.T) {
	const chunks = 40 // past brotli's 4 MiB window
	gz, err := newGzipBomb(chunks)
	if err != nil {
		t.Fatal(err)
	}
	br, err := newBrotliBomb(chunks)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*bomb{"gzip": &gz, "brotli": &br} {
		var buf bytes.Buffer
		if err := b.writeTo(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		if int64(buf.Len()) != b.size() {
			t.Errorf("%s: size %d, wrote %d", name, b.size(), buf.Len())
		}
		var r io.Reader = brotli.NewReader(&buf)
		if name == "gzip" {
			if r, err = gzip.NewReader(&buf); err != nil {
				t.Fatal(err)
			}
		}
		n, err := io.Copy(io.Discard, r)
		if err != nil || n != chunks*bombChunk {
			t.Errorf("%s: decoded %d bytes, want %d: %v", name, n, chunks*bombChunk, err)
		}
	}
	for _, n := range []int64{0, 1, 1000, 1 << 20, 3<<20 + 7} {
		if got, want := crc32Zeros(n), crc32.ChecksumIEEE(make([]byte, n)); got != want {
			t.Errorf("crc32Zeros(%d) = %08x, want %08x", n, got, want)
		}
	}
}

func TestHostilePages(t *testing.T) {
	w, srv := start(t, Config{Seed: 16, Hosts: 3, Pages: 10, SlowDelay: time.Hour})
	hostile := w.HostileURLs()
	if len(hostile) != 17 {
		t.Errorf("%d hostile URLs", len(hostile))
	}
	for _, h := range w.Hosts() {
		if strings.Contains(h, "hostile") {
			t.Errorf("hostile host %s among the ordinary ones", h)
		}
	}
	c := proxyClient(t, srv, true)
	fetch := func(name string) (*http.Response, []byte) {
		resp, err := c.Get(hostile[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return resp, body
	}
	if _, body := fetch("deep"); bytes.Count(body, []byte("<div>")) != deepNesting || bytes.Count(body, []byte("</div>")) != deepNesting {
		t.Errorf("deep: %d opening divs", bytes.Count(body, []byte("<div>")))
	}
	if _, body := fetch("giant-attr"); len(body) < giantAttrSize || !bytes.Contains(body, []byte(`data-payload="xxxx`)) {
		t.Errorf("giant-attr: %d bytes", len(body))
	}
	if resp, body := fetch("bad-utf8"); utf8.Valid(body) || !strings.Contains(resp.Header.Get("Content-Type"), "utf-8") {
		t.Errorf("bad-utf8: valid UTF-8 or type %q", resp.Header.Get("Content-Type"))
	}
	if resp, body := fetch("latin1"); !strings.Contains(resp.Header.Get("Content-Type"), "ISO-8859-1") || utf8.Valid(body) || !bytes.Contains(body, []byte("Caf\xe9")) {
		t.Errorf("latin1: type %q", resp.Header.Get("Content-Type"))
	}
	_, body := fetch("shiftjis")
	text, err := japanese.ShiftJIS.NewDecoder().Bytes(body)
	if err != nil || !bytes.Contains(body, []byte(`charset="Shift_JIS"`)) || !strings.Contains(string(text), japaneseText) || utf8.Valid(body) {
		t.Errorf("shiftjis: %v", err)
	}
	if resp, body := fetch("binary-as-html"); resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || utf8.Valid(body) || len(body) != noiseSize {
		t.Errorf("binary-as-html: %q, %d bytes", resp.Header.Get("Content-Type"), len(body))
	}
	if resp, _ := fetch("redirect-loop"); resp.StatusCode != http.StatusFound {
		t.Errorf("redirect-loop: %d", resp.StatusCode)
	}
	follow := &http.Client{Transport: c.Transport}
	if _, err := follow.Get(hostile["redirect-loop"]); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Errorf("following redirect-loop: %v", err)
	}
	if _, err := c.Get(hostile["huge-headers"]); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("huge-headers with Go's default limit: %v", err)
	}
	big := &http.Client{Transport: &http.Transport{Proxy: c.Transport.(*http.Transport).Proxy, MaxResponseHeaderBytes: 64 << 20}}
	resp, err := big.Get(hostile["huge-headers"])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.Header) < hugeHeaderCount {
		t.Errorf("huge-headers: %d headers", len(resp.Header))
	}

	robots := func(variant string) (*http.Response, []byte, error) {
		resp, err := c.Get(hostile["robots-"+variant] + "robots.txt")
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	if _, body, err := robots("huge"); err != nil || len(body) < hugeRobotsSize || !bytes.HasSuffix(body, []byte("Disallow: /page2\n")) {
		t.Errorf("robots-huge: %d bytes, %v", len(body), err)
	}
	if _, body, err := robots("binary"); err != nil || utf8.Valid(body) {
		t.Errorf("robots-binary: %v", err)
	}
	if resp, _, err := robots("500"); err != nil || resp.StatusCode != 500 {
		t.Errorf("robots-500: %v", err)
	}
	for _, v := range robotsVariants {
		resp, err := c.Get(hostile["robots-"+v])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`href="/page1"`)) {
			t.Errorf("robots-%s home: %d", v, resp.StatusCode)
		}
	}
	// robots-slow stalls (SlowDelay is an hour) until the client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hostile["robots-slow"]+"robots.txt", nil)
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("robots-slow: %v", err)
	}
	waitIdle(t, w)

	// HEAD of a streamed page answers at once, without a body.
	for _, name := range []string{"endless", "gzip-bomb", "giant-attr"} {
		resp, err := c.Head(hostile[name])
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("HEAD %s: %v", name, err)
			continue
		}
		resp.Body.Close()
	}
}
