// Package fetch is the crawler's HTTP client. It records the exact bytes of
// each request sent and response received, which is what a WARC file holds,
// so it is written on net.Conn rather than on net/http's client, which hides
// them: requests are written by us, responses are parsed by http.ReadResponse
// from a reader that records everything read from the connection.
//
// HTTP/1.1 is spoken on plain and TLS connections with keep-alive per
// host. When a TLS server negotiates HTTP/2 (ALPN), golang.org/x/net/http2
// carries the exchange and the messages are recorded in HTTP/1.1 wire form
// (status line, headers as received, body as received), as warcprox and
// Browsertrix do, since WARC has no HTTP/2 framing.
package fetch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/net/http2"

	"github.com/waggle-archive/waggle/internal/connerr"
)

// ErrForbiddenAddress is returned for targets on loopback, private or other
// non-public networks when Config.AllowPrivate is off.
var ErrForbiddenAddress = errors.New("fetch: address not allowed")

// Transient reports whether a fetch failed for a reason that may pass: the
// server, or the proxy, could not be reached, broke the connection, or did
// not answer in time; a name server failed. A refusal, a name that does
// not exist, a response over the limits or malformed, too many redirects
// or a certificate that does not verify are not: asking again would give
// the same answer.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrForbiddenAddress):
		return false
	case connerr.Failed(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		return dns.IsTimeout || dns.IsTemporary
	}
	// Not any net.Error: *url.Error is one, and wraps every failure of an
	// HTTP request, permanent ones included.
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// Config configures a Fetcher; zero values mean the defaults listed.
type Config struct {
	UserAgent       string
	Proxy           *url.URL      // HTTP forward proxy: http URLs in absolute-form, https via CONNECT
	AllowPrivate    bool          // permit loopback/private/link-local targets
	ConnectTimeout  time.Duration // default 10s
	ReadTimeout     time.Duration // longest silence while reading (default 30s)
	TotalTimeout    time.Duration // whole request (default 2m)
	MaxBodySize     int64         // body bytes kept as sent, chunked framing included (default 50 MiB); the rest is cut, Truncated "length"
	MaxDecodedSize  int64         // cap when content-decoding for extraction (default 64 MiB)
	MaxHeaderBytes  int           // default DefaultMaxHeaderBytes
	MaxConnsPerHost int           // idle connections kept per host (default 2)
	// MaxProxyConns is the idle connections kept to the proxy, which every
	// http host shares: as many as requests run at once (default 64), or
	// each request beyond them would pay for a new connection.
	MaxProxyConns int
	RootCAs       *x509.CertPool // nil: the system's
}

// Request is one GET.
type Request struct {
	URL    string
	Header http.Header // extra headers, e.g. If-None-Match
}

// Response is a fetched response with its raw bytes.
type Response struct {
	URL         string
	RawRequest  []byte // the request in origin-form (also when sent to a proxy in absolute-form)
	Raw         []byte // the response as received, up to MaxBodySize bytes of body as sent
	StatusCode  int
	Header      http.Header
	Body        []byte // payload, de-chunked and content-decoded, bounded by MaxDecodedSize
	Truncated   string // "", "length", "time" or "disconnect" (WARC-Truncated)
	DecodeError error  // content decoding failed or hit its cap; Body holds what was decoded
	IP          string // remote address connected to (the proxy's when proxied)
	Start       time.Time
	Protocol    string // "HTTP/1.1" or "h2"
	Location    string // resolved Location of a 3xx, else ""
}

// Fetcher fetches URLs. It is safe for concurrent use.
type Fetcher struct {
	cfg    Config
	direct net.Dialer // to origin servers: checks the address dialled
	proxy  net.Dialer // to the configured proxy
	mu     sync.Mutex
	idle   map[string][]*conn
	h2     map[string]*http2.ClientConn
	gzips  sync.Pool // *gzip.Reader: each holds a 32 KiB window, worth reusing
}

type conn struct {
	nc  net.Conn
	rec *recorder
	br  *bufio.Reader
	ip  string
}

// New returns a Fetcher.
func New(cfg Config) (*Fetcher, error) {
	if cfg.UserAgent == "" {
		return nil, errors.New("fetch: no User-Agent")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.TotalTimeout <= 0 {
		cfg.TotalTimeout = 2 * time.Minute
	}
	if cfg.MaxBodySize <= 0 {
		cfg.MaxBodySize = 50 << 20
	}
	if cfg.MaxDecodedSize <= 0 {
		cfg.MaxDecodedSize = DefaultMaxDecodedSize
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxConnsPerHost <= 0 {
		cfg.MaxConnsPerHost = 2
	}
	if cfg.MaxProxyConns <= 0 {
		cfg.MaxProxyConns = 64
	}
	f := &Fetcher{cfg: cfg, idle: map[string][]*conn{}, h2: map[string]*http2.ClientConn{}}
	f.direct = net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	f.proxy = f.direct
	if !cfg.AllowPrivate {
		f.direct.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil || Forbidden(ip) {
				return fmt.Errorf("%w: %s", ErrForbiddenAddress, host)
			}
			return nil
		}
	}
	return f, nil
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215)
	netip.MustParsePrefix("::/96"),          // IPv4-compatible, deprecated (RFC 4291)
	netip.MustParsePrefix("fec0::/10"),      // site-local, deprecated (RFC 3879)
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
}

// Prefixes whose addresses carry the IPv4 address that a packet to them
// reaches: NAT64 (RFC 6052) and IPv4-translated (RFC 2765) in their last
// 32 bits, 6to4 (RFC 3056) in the 32 after the prefix.
var (
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
)

// Forbidden reports whether ip is not a public unicast address: loopback,
// private (RFC 1918, fc00::/7), carrier-grade NAT, link-local (including the
// cloud metadata address 169.254.169.254), unspecified, multicast, reserved,
// or an IPv6 address that carries such an IPv4 address.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() || ip.IsInterfaceLocalMulticast() || !ip.IsValid() {
		return true
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return true
		}
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), ipv4Translated.Contains(ip):
		return Forbidden(netip.AddrFrom4([4]byte(b[12:])))
	case sixToFour.Contains(ip):
		return Forbidden(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return false
}

// Close closes idle connections.
func (f *Fetcher) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, cs := range f.idle {
		for _, c := range cs {
			c.nc.Close()
		}
		delete(f.idle, k)
	}
	for k, cc := range f.h2 {
		cc.Close()
		delete(f.h2, k)
	}
	return nil
}

// Fetch performs one GET. Redirects are not followed: they are captures too.
func (f *Fetcher) Fetch(ctx context.Context, req Request) (*Response, error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fetch: bad URL %q", req.URL)
	}
	if f.cfg.Proxy != nil && !f.cfg.AllowPrivate {
		// The proxy resolves names; refuse what is plainly local here
		// (a name with its trailing root dot is the same name).
		h := strings.TrimRight(strings.ToLower(u.Hostname()), ".")
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, h)
		}
		if ip, err := netip.ParseAddr(h); err == nil && Forbidden(ip) {
			return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, h)
		}
	}
	for _, vs := range req.Header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				return nil, errors.New("fetch: header value contains CR or LF")
			}
		}
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, f.cfg.TotalTimeout)
	defer cancel()
	start := time.Now()
	key := poolKey(u)
	for attempt := 0; ; attempt++ {
		// A pooled connection answers before a cancel hook that runs in a
		// goroutine of its own can stop it: a context done already is
		// looked at here.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fetch %s: %w", req.URL, err)
		}
		c, reused, h2c, err := f.connect(ctx, u, key)
		if err != nil {
			return nil, err
		}
		var resp *Response
		if h2c != nil {
			resp, err = f.roundTripH2(ctx, h2c, u, req)
		} else {
			resp, err = f.roundTrip(ctx, c, key, u, req)
		}
		if err != nil && reused && attempt == 0 && errors.Is(err, errStaleConn) {
			continue // the server closed an idle connection: once more on a new one
		}
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", req.URL, err)
		}
		if resp.Truncated != "" && caller.Err() != nil {
			// Cut short because the caller stopped (a crawl interrupted),
			// not by the timeout: not a capture, to be fetched again.
			return nil, fmt.Errorf("fetch %s: stopped part way: %w", req.URL, caller.Err())
		}
		resp.Start = start
		resp.URL = req.URL
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			if loc := resp.Header.Get("Location"); loc != "" {
				if lu, err := u.Parse(loc); err == nil {
					resp.Location = lu.String()
				}
			}
		}
		f.decode(resp)
		return resp, nil
	}
}

// errStaleConn is a connection closed before any byte of a response: an
// idle one the server had closed (tried again at once on a new one), or a
// server going down (transient).
var errStaleConn = fmt.Errorf("connection closed before response: %w", io.ErrUnexpectedEOF)

func poolKey(u *url.URL) string {
	return u.Scheme + "://" + hostPort(u)
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// connect returns an idle or new connection for u.
func (f *Fetcher) connect(ctx context.Context, u *url.URL, key string) (*conn, bool, *http2.ClientConn, error) {
	key, _ = poolKeyFor(f, u, key)
	f.mu.Lock()
	if cc := f.h2[key]; cc != nil {
		if cc.CanTakeNewRequest() {
			f.mu.Unlock()
			return nil, true, cc, nil
		}
		delete(f.h2, key)
	}
	if cs := f.idle[key]; len(cs) > 0 {
		c := cs[len(cs)-1]
		f.idle[key] = cs[:len(cs)-1]
		f.mu.Unlock()
		return c, true, nil, nil
	}
	f.mu.Unlock()

	var nc net.Conn
	var err error
	switch {
	case f.cfg.Proxy != nil:
		nc, err = f.proxy.DialContext(ctx, "tcp", proxyAddr(f.cfg.Proxy))
		if err == nil && u.Scheme == "https" {
			err = connectTunnel(ctx, nc, hostPort(u), f.cfg.ConnectTimeout)
		}
	default:
		nc, err = f.direct.DialContext(ctx, "tcp", hostPort(u))
	}
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		return nil, false, nil, err
	}
	ip := ""
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	if u.Scheme == "https" {
		tc := tls.Client(nc, &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"h2", "http/1.1"}, RootCAs: f.cfg.RootCAs})
		hctx, cancel := context.WithTimeout(ctx, f.cfg.ConnectTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, false, nil, fmt.Errorf("tls: %w", err)
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			cc, err := (&http2.Transport{}).NewClientConn(tc)
			if err != nil {
				tc.Close()
				return nil, false, nil, fmt.Errorf("h2: %w", err)
			}
			f.mu.Lock()
			f.h2[key] = cc
			f.mu.Unlock()
			return nil, false, cc, nil
		}
		nc = tc
	}
	rec := &recorder{}
	c := &conn{nc: nc, rec: rec, ip: ip}
	rec.r = nc
	c.br = bufio.NewReaderSize(rec, 32<<10)
	return c, false, nil, nil
}

func proxyAddr(p *url.URL) string {
	if p.Port() != "" {
		return p.Host
	}
	return net.JoinHostPort(p.Hostname(), "80")
}

// connectTunnel asks an HTTP proxy for a tunnel to hostport.
func connectTunnel(ctx context.Context, nc net.Conn, hostport string, timeout time.Duration) error {
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	fmt.Fprintf(nc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("proxy CONNECT: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("proxy CONNECT %s: %s", hostport, resp.Status)
	}
	if br.Buffered() > 0 {
		return errors.New("proxy CONNECT: unexpected bytes after response")
	}
	return ctx.Err()
}

// requestBytes renders the request in origin-form; target is the
// request-target actually sent (absolute-form for a proxy).
func (f *Fetcher) requestBytes(u *url.URL, target string, h http.Header) []byte {
	var b bytes.Buffer
	b.Grow(256 + len(target) + len(f.cfg.UserAgent))
	b.WriteString("GET " + target + " HTTP/1.1\r\n")
	b.WriteString("Host: " + u.Host + "\r\n")
	b.WriteString("User-Agent: " + f.cfg.UserAgent + "\r\n")
	b.WriteString("Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n")
	b.WriteString("Accept-Encoding: gzip, br\r\n")
	b.WriteString("Connection: keep-alive\r\n")
	h.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}

func (f *Fetcher) roundTrip(ctx context.Context, c *conn, key string, u *url.URL, req Request) (*Response, error) {
	origin := u.RequestURI()
	raw := f.requestBytes(u, origin, req.Header)
	wire := raw
	if f.cfg.Proxy != nil && u.Scheme == "http" {
		wire = f.requestBytes(u, u.String(), req.Header)
	}
	keep := false
	defer func() {
		if !keep {
			c.nc.Close()
		}
	}()
	c.rec.cancelled.Store(false) // a connection kept was not cancelled: it would not have been kept
	nc, cancelled := c.nc, &c.rec.cancelled
	stop := context.AfterFunc(ctx, func() {
		cancelled.Store(true)
		nc.SetDeadline(time.Unix(1, 0))
	})
	defer stop()
	deadline, _ := ctx.Deadline()
	c.nc.SetWriteDeadline(deadline)
	if _, err := c.nc.Write(wire); err != nil {
		return nil, errStaleConn
	}
	c.rec.start(c.nc, f.cfg.ReadTimeout, deadline, f.cfg.MaxHeaderBytes)
	passOverBadHeaderLines(c.br)
	hresp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	// An interim response (103 Early Hints, a stray 100 Continue) comes
	// before the one that answers: it is passed over, and the record
	// starts after it.
	skip := 0
	for err == nil && hresp.StatusCode >= 100 && hresp.StatusCode < 200 && hresp.StatusCode != http.StatusSwitchingProtocols {
		skip = c.consumed()
		passOverBadHeaderLines(c.br)
		hresp, err = http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	}
	if err != nil {
		if c.rec.n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || connerr.Reset(err)) {
			return nil, errStaleConn
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no response headers: %w", ctx.Err())
		}
		if c.rec.over {
			return nil, fmt.Errorf("response headers exceed %d bytes", f.cfg.MaxHeaderBytes)
		}
		return nil, fmt.Errorf("reading response: %w", err)
	}
	resp := &Response{RawRequest: raw, StatusCode: hresp.StatusCode, Header: hresp.Header, IP: c.ip, Protocol: "HTTP/1.1"}
	var bodyLen int64
	var consumed int
	if len(hresp.TransferEncoding) == 0 {
		// Not chunked: the body is the last bytes read, and is taken from
		// the raw response below rather than copied.
		c.rec.limit = -1
		bodyLen, resp.Truncated = countBody(ctx, hresp.Body, f.cfg.MaxBodySize)
		consumed = c.consumed()
	} else {
		resp.Body, consumed, resp.Truncated = c.readChunked(ctx, hresp.Body, int(f.cfg.MaxBodySize))
	}
	if resp.Truncated == "" {
		hresp.Body.Close()
	} // else the connection is closed unread: closing the body would read the rest of it, into Raw
	resp.Raw = c.rec.buf[skip:consumed:consumed]
	if bodyLen > 0 {
		// A cut body ends at the cap in Raw too: the byte past it, read
		// to learn that there was more, is not archived.
		start := consumed - skip - int(bodyLen)
		end := start + int(min(bodyLen, f.cfg.MaxBodySize))
		resp.Raw = resp.Raw[:end:end]
		resp.Body = resp.Raw[start:end:end]
	}
	// A connection is kept only if the cancel hook can no longer run
	// (stop), which would end the next request's reads on it, and not
	// after 101 Switching Protocols, when it speaks something else.
	if resp.Truncated == "" && !hresp.Close && c.br.Buffered() == 0 && hresp.StatusCode != http.StatusSwitchingProtocols && !announcesUnreadBody(hresp) && stop() {
		keep = true
		c.rec.buf = nil
		c.nc.SetDeadline(time.Time{})
		k, max := poolKeyFor(f, u, key)
		f.mu.Lock()
		if len(f.idle[k]) < max {
			f.idle[k] = append(f.idle[k], c)
		} else {
			keep = false
		}
		f.mu.Unlock()
	}
	return resp, nil
}

// poolKeyFor returns the idle pool a connection for u belongs to, and how
// many connections that pool keeps: plain http through a proxy shares one
// pool of connections to the proxy, whatever the host.
func poolKeyFor(f *Fetcher, u *url.URL, key string) (string, int) {
	if f.cfg.Proxy != nil && u.Scheme == "http" {
		return "proxy|" + f.cfg.Proxy.Host, f.cfg.MaxProxyConns
	}
	return key, f.cfg.MaxConnsPerHost
}

// announcesUnreadBody reports a response that has no body by its status
// (204, 304) but whose head announces one. The parser rightly reads none,
// yet a broken server may still send it, perhaps after a pause: on a kept
// connection those bytes would be read as the next URL's response.
func announcesUnreadBody(r *http.Response) bool {
	if r.StatusCode != http.StatusNoContent && r.StatusCode != http.StatusNotModified {
		return false
	}
	if len(r.TransferEncoding) > 0 || len(r.Header.Values("Transfer-Encoding")) > 0 {
		return true
	}
	for _, v := range r.Header.Values("Content-Length") {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || n != 0 {
			return true
		}
	}
	return false
}

// consumed is how many of the bytes recorded the response parser has taken.
func (c *conn) consumed() int {
	return len(c.rec.buf) - c.br.Buffered()
}

// readChunked reads a chunked body whose raw bytes, framing included, are
// held to max, as a body with a Content-Length is, so that a record holds
// at most that many bytes of body however it was sent (1-byte chunks take
// 6 bytes each on the wire). It returns the body, where the raw response
// ends (after the last byte read: a cut chunk is a truncated message), and
// why it stopped early, as readBody does.
func (c *conn) readChunked(ctx context.Context, body io.Reader, max int) ([]byte, int, string) {
	start := c.consumed()
	c.rec.limit = start + max
	var buf bytes.Buffer
	_, err := io.Copy(&buf, body)
	end := c.consumed()
	switch {
	case end > start+max:
		// More than max bytes were read ahead with the header, before the
		// recorder's limit: cut there, and take the body from what is kept.
		end = start + max
		payload, _ := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(c.rec.buf[start:end])))
		return payload, end, "length"
	case c.rec.over:
		return buf.Bytes(), end, "length"
	}
	return buf.Bytes(), end, readFailure(ctx, err)
}

// readBody reads a de-chunked body up to max bytes and says why it stopped early.
func readBody(ctx context.Context, r io.Reader, max int64) ([]byte, string) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, max+1))
	if n > max {
		buf.Truncate(int(max))
	}
	return buf.Bytes(), stopReason(ctx, n, max, err)
}

// countBody reads a body as readBody does, keeping only its length (which
// may be max+1).
func countBody(ctx context.Context, r io.Reader, max int64) (int64, string) {
	n, err := io.Copy(io.Discard, io.LimitReader(r, max+1))
	return n, stopReason(ctx, n, max, err)
}

// stopReason says why reading n bytes of a body capped at max stopped
// early (WARC-Truncated), or "".
func stopReason(ctx context.Context, n, max int64, err error) string {
	if n > max {
		return "length"
	}
	return readFailure(ctx, err)
}

// readFailure says what cut short a read that ended with err: "" (nothing),
// "time" or "disconnect".
func readFailure(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case ctx.Err() != nil || isTimeout(err):
		return "time"
	}
	return "disconnect"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// roundTripH2 fetches over HTTP/2 and renders the exchange in HTTP/1.1 form.
func (f *Fetcher) roundTripH2(ctx context.Context, cc *http2.ClientConn, u *url.URL, req Request) (*Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("User-Agent", f.cfg.UserAgent)
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	hreq.Header.Set("Accept-Encoding", "gzip, br") // set by us: no transparent decompression
	hresp, err := cc.RoundTrip(hreq)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	payload, truncated := readBody(ctx, hresp.Body, f.cfg.MaxBodySize)
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "HTTP/1.1 %d %s\r\n", hresp.StatusCode, http.StatusText(hresp.StatusCode))
	h := hresp.Header.Clone()
	h.Del("Transfer-Encoding")
	if truncated == "" {
		h.Set("Content-Length", strconv.Itoa(len(payload)))
	}
	h.Write(&raw)
	raw.WriteString("\r\n")
	raw.Write(payload)
	return &Response{
		RawRequest: f.requestBytes(u, u.RequestURI(), req.Header),
		Raw:        raw.Bytes(), StatusCode: hresp.StatusCode, Header: hresp.Header,
		Body: payload, Truncated: truncated, Protocol: "h2",
	}, nil
}

// decode content-decodes resp.Body for extraction, within MaxDecodedSize.
func (f *Fetcher) decode(resp *Response) {
	out, err := decodeContent(resp.Body, resp.Header.Get("Content-Encoding"), f.cfg.MaxDecodedSize, &f.gzips, resp.Truncated == "")
	// A cut-off body fails to decode at its end; that is not news, but a
	// decoded size past the cap always is.
	if err != nil && (resp.Truncated == "" || errors.Is(err, ErrDecodedTooLarge)) {
		resp.DecodeError = err
	}
	resp.Body = out
}

// DefaultMaxDecodedSize is the default Config.MaxDecodedSize.
const DefaultMaxDecodedSize = 64 << 20

// DefaultMaxHeaderBytes is the default limit on a response's header section.
const DefaultMaxHeaderBytes = 1 << 20

// ErrDecodedTooLarge reports a body that decodes to more than the caller's
// cap: a compression bomb, or simply too big to process.
var ErrDecodedTooLarge = errors.New("decoded body too large")

// maxCodings is the most content codings DecodeContent undoes: servers
// send one, rarely two, and each coding is a decoder with its own window,
// so a header listing thousands would cost gigabytes for a body of a byte.
const maxCodings = 4

// DecodeContent undoes the content codings ce (a Content-Encoding value) of
// body, giving at most max bytes. When it cannot decode all of body it
// returns what it decoded with an error; a coding it does not know, or
// more than maxCodings of them, leaves body as it is.
func DecodeContent(body []byte, ce string, max int64) ([]byte, error) {
	return decodeContent(body, ce, max, nil, false)
}

// decodeContent is DecodeContent taking gzip readers from gzips, and
// putting them back, when it is not nil; whole says body is a complete
// message, whose gzip trailer may size the output.
func decodeContent(body []byte, ce string, max int64, gzips *sync.Pool, whole bool) ([]byte, error) {
	if len(body) == 0 {
		return body, nil
	}
	codings, err := contentCodings(ce)
	if err != nil {
		return body, err
	}
	if len(codings) == 0 {
		return body, nil
	}
	ce = strings.Join(codings, ", ") // for errors: what is decoded, not the header as sent
	var r io.Reader = bytes.NewReader(body)
	var inner []*errorKeeper // the output of each decoder under another, innermost first
	for i := len(codings) - 1; i >= 0; i-- {
		if i < len(codings)-1 {
			k := &errorKeeper{r: r}
			inner = append(inner, k)
			r = k
		}
		var err error
		switch codings[i] {
		case "gzip", "x-gzip":
			var release func()
			r, release, err = gzipReader(gzips, r)
			defer release()
		case "br":
			r = brotli.NewReader(r)
		case "deflate":
			r = deflateReader(r)
		case "zstd":
			var d *zstd.Decoder
			d, err = zstd.NewReader(r, zstd.WithDecoderMaxMemory(uint64(max)), zstd.WithDecoderConcurrency(1))
			if d != nil {
				defer d.Close()
			}
			r = d
		}
		if err != nil {
			return body, fmt.Errorf("content-encoding %s: %w", codings[i], err)
		}
	}
	var out bytes.Buffer
	if whole && (ce == "gzip" || ce == "x-gzip") && len(body) >= 18 {
		// A gzip stream ends with its decoded size (mod 2^32): room for it
		// at once, bounded by the cap and by a ratio a hostile trailer
		// cannot push past. (The last bytes of a body cut short are not a
		// trailer.)
		size := int64(binary.LittleEndian.Uint32(body[len(body)-4:]))
		out.Grow(int(min(size, max, 64*int64(len(body)))) + 1)
	}
	n, err := io.Copy(&out, io.LimitReader(r, max+1))
	if err == nil && n <= max && len(inner) > 0 {
		// The coding undone last can end before the output of the one
		// under it does: a cut or damage there is met only reading on.
		_, err = io.Copy(io.Discard, io.LimitReader(inner[len(inner)-1], max))
	}
	for _, k := range inner {
		if err != nil {
			break
		}
		err = k.err
	}
	switch {
	case n > max:
		out.Truncate(int(max))
		return out.Bytes(), fmt.Errorf("content-encoding %s: %w: more than %d bytes (a compression bomb?)", ce, ErrDecodedTooLarge, max)
	case err != nil:
		return out.Bytes(), fmt.Errorf("content-encoding %s: %w", ce, err)
	}
	return out.Bytes(), nil
}

// contentCodings lists the codings of a Content-Encoding value in the
// order applied, lower-cased and without "identity", which changes
// nothing. It refuses a coding it does not know and more than maxCodings,
// quoting at most the start of the header.
func contentCodings(ce string) ([]string, error) {
	var codings []string
	for rest := ce; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, ",")
		c = strings.TrimSpace(c)
		if c == "" || strings.EqualFold(c, "identity") {
			continue
		}
		switch c = strings.ToLower(c); c {
		case "gzip", "x-gzip", "br", "deflate", "zstd":
		default:
			return nil, fmt.Errorf("unknown content-encoding %q", clip(c, 64))
		}
		if len(codings) == maxCodings {
			return nil, fmt.Errorf("content-encoding %q: more than %d codings", clip(ce, 64), maxCodings)
		}
		codings = append(codings, c)
	}
	return codings, nil
}

// errorKeeper remembers the first error other than io.EOF read from r. A
// decoder reading another's output may take that decoder's failure for the
// end of its input (zstd does: a stream of no frames is a valid one), and
// so hide it.
type errorKeeper struct {
	r   io.Reader
	err error
}

func (k *errorKeeper) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if err != nil && err != io.EOF && k.err == nil {
		k.err = err
	}
	return n, err
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// gzipReader reads r's gzip stream through a reader from pool (a new one
// when pool is nil or empty); release puts it back, holding nothing of r.
func gzipReader(pool *sync.Pool, r io.Reader) (zr *gzip.Reader, release func(), err error) {
	if pool != nil {
		zr, _ = pool.Get().(*gzip.Reader)
	}
	if zr == nil {
		zr, err = gzip.NewReader(r)
	} else {
		err = zr.Reset(r)
	}
	if pool == nil || zr == nil {
		return zr, func() {}, err
	}
	return zr, func() {
		zr.Reset(bytes.NewReader(emptyGzip())) // so that the pooled reader keeps no body alive
		pool.Put(zr)
	}, err
}

// emptyGzip is a gzip member of no bytes.
func emptyGzip() []byte {
	return []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
}

// deflateReader reads "deflate", which servers send both zlib-wrapped (as
// the RFC says) and raw.
func deflateReader(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if h, err := br.Peek(2); err == nil && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 && h[0]&0x0f == 8 {
		if zr, err := zlib.NewReader(br); err == nil {
			return zr
		}
	}
	return flate.NewReader(br)
}

// recorder is the connection reader under the response parser: it keeps
// every byte read, bounds the header section, and applies the read timeouts.
type recorder struct {
	r        net.Conn
	buf      []byte
	n        int  // bytes read for the current response
	limit    int  // bytes the current response may read (its header, or header and chunked body); -1: any
	over     bool // the limit was met
	idle     time.Duration
	deadline time.Time
	// err is the first error a Read met: every later Read returns it, so
	// that a reader that asks again (bufio hands an error out once) does
	// not wait a second idle timeout.
	err error
	// cancelled is set when the request's context ends (roundTrip's
	// AfterFunc, which also ends the Read in progress): no Read waits
	// after it, though each sets a fresh deadline.
	cancelled atomic.Bool
}

func (r *recorder) start(nc net.Conn, idle time.Duration, deadline time.Time, headerLimit int) {
	r.r, r.buf, r.n, r.limit, r.over, r.idle, r.deadline, r.err = nc, r.buf[:0], 0, headerLimit, false, idle, deadline, nil
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.limit >= 0 {
		if r.n >= r.limit {
			r.over = true
			r.err = errors.New("read limit")
			return 0, r.err
		}
		p = p[:min(len(p), r.limit-r.n)]
	}
	d := time.Now().Add(r.idle)
	if !r.deadline.IsZero() && r.deadline.Before(d) {
		d = r.deadline
	}
	r.r.SetReadDeadline(d)
	if r.cancelled.Load() {
		// Cancelled before, or while, the deadline above was set.
		r.r.SetReadDeadline(time.Unix(1, 0))
	}
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	r.n += n
	r.err = err
	return n, err
}
