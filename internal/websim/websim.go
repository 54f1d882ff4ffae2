// Package websim is a deterministic synthetic web for tests, benchmarks and
// demos of the crawler.
//
// A Web is hundreds of simulated hosts in the reserved .test top-level domain
// with linked HTML pages, page requisites on sibling hosts, robots.txt rules,
// redirects, errors, slow responses, crawler traps and content that changes
// with a version knob, plus a separate hostile host for bad-input tests.
// Everything derives from Config.Seed: two Webs with the same Seed and
// Version serve the same bytes. A Web is an http.Handler that answers as
// whichever host a request names, so it also works as an HTTP forward proxy
// for crawlers that cannot resolve the simulated names.
package websim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes a synthetic web. The zero value of each field means its
// default, listed with the field.
type Config struct {
	Seed      int64         // everything derives from it: same Seed and Version serve the same bytes
	Hosts     int           // number of ordinary hosts (default 300)
	Pages     int           // ordinary HTML pages over all hosts, Zipf-distributed (default 6000; at least one per page-bearing host)
	Version   int           // content version: each step up changes about 1% of the pages
	SlowDelay time.Duration // how long slow URLs stall (default 3s)
	// TextKB adds about this many KiB of article text to every HTML page
	// (0: short pages of about 2 KiB), for a web of realistic page weight.
	TextKB int
}

// Web is a synthetic web. It is safe for concurrent use.
type Web struct {
	cfg    Config
	seed   uint64
	hosts  []*host
	byHost map[string]*host
	seeds  []string
	pages  []string

	version  atomic.Int64
	requests atomic.Int64
	active   atomic.Int64 // handlers running, for tests of prompt exit

	gzw sync.Pool // *gzip.Writer

	bombOnce sync.Once
	bombs    bombs
	bombErr  error
}

// New builds the web described by cfg. It generates the structure eagerly
// (hosts, pages, links) and the bytes of each resource lazily, on first
// request.
func New(cfg Config) *Web {
	if cfg.Hosts <= 0 {
		cfg.Hosts = 300
	}
	if cfg.Pages <= 0 {
		cfg.Pages = 6000
	}
	if cfg.SlowDelay <= 0 {
		cfg.SlowDelay = 3 * time.Second
	}
	if cfg.Version < 0 {
		cfg.Version = 0
	}
	w := &Web{cfg: cfg, seed: uint64(cfg.Seed)}
	w.version.Store(int64(cfg.Version))
	w.build()
	return w
}

// SetVersion changes the content version. Each step changes a deterministic
// ~1% of the pages (their text, ETag and Last-Modified) and nothing else.
func (w *Web) SetVersion(v int) {
	w.version.Store(int64(max(v, 0)))
}

// Seeds returns the home pages of the biggest hosts, as "http://host/".
func (w *Web) Seeds() []string { return append([]string(nil), w.seeds...) }

// Hosts returns the names of all ordinary hosts (not the hostile ones).
func (w *Web) Hosts() []string {
	names := make([]string, len(w.hosts))
	for i, h := range w.hosts {
		names[i] = h.name
	}
	return names
}

// Pages returns the URL of every ordinary HTML page: each answers 200
// text/html, is allowed by its host's robots.txt and is reachable by
// following links from Seeds. Traps, redirects, errors, slow URLs and
// robots-disallowed pages are not included.
func (w *Web) Pages() []string { return append([]string(nil), w.pages...) }

// ChangedPages returns the URLs, among Pages, whose content differs
// between versions from and to.
func (w *Web) ChangedPages(from, to int) []string {
	var urls []string
	for _, h := range w.hosts {
		for _, p := range h.pages {
			if w.lastChange(p.id, from) != w.lastChange(p.id, to) {
				urls = append(urls, p.url())
			}
		}
	}
	return urls
}

// Requests returns the number of requests served so far.
func (w *Web) Requests() int64 { return w.requests.Load() }

// ServeHTTP answers r as the host it names, in origin form (Host header) or
// absolute form (as a forward proxy sees it). Unknown hosts get 502, as from
// a proxy that cannot reach them; CONNECT gets 405, as every site is http.
func (w *Web) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.requests.Add(1)
	w.active.Add(1)
	defer w.active.Add(-1)
	if r.Method == http.MethodConnect {
		rw.Header().Set("Allow", "GET, HEAD")
		http.Error(rw, "websim: CONNECT is not supported: every simulated site is plain http, so send requests to this proxy in absolute form (http://host/path)", http.StatusMethodNotAllowed)
		return
	}
	name := requestHost(r)
	if h := w.byHost[name]; h != nil {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "405 method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.serveHost(rw, r, h)
		return
	}
	if name == hostileDomain || strings.HasSuffix(name, "."+hostileDomain) {
		w.serveHostile(rw, r, name)
		return
	}
	http.Error(rw, fmt.Sprintf("websim: unknown host %q: this server answers only for its simulated .test hosts; use it as an HTTP proxy or send their name in the Host header", name), http.StatusBadGateway)
}

// requestHost returns the lower-case host name r is for, without port.
func requestHost(r *http.Request) string {
	h := r.URL.Host
	if h == "" {
		h = r.Host
	}
	if strings.IndexByte(h, ':') >= 0 {
		if name, _, err := net.SplitHostPort(h); err == nil {
			h = name
		}
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// Server serves a Web on a TCP listener.
type Server struct {
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve returns

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup // handlers in flight
}

// Start listens on addr (for example "127.0.0.1:0") and serves w until
// Close. The server speaks HTTP/1.1 with keep-alive and accepts both origin-
// and absolute-form requests, so URL() works as a proxy URL.
func Start(addr string, w *Web) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("websim: listen: %w", err)
	}
	// Request contexts derive from ctx so that Close also stops handlers
	// that hijacked their connection, which http.Server.Close does not.
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, cancel: cancel, done: make(chan struct{})}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { s.serve(w, rw, r) }),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: time.Minute,
	}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *Server) serve(w *Web, rw http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(rw, "websim: shutting down", http.StatusServiceUnavailable)
		return
	}
	s.active.Add(1)
	s.mu.Unlock()
	defer s.active.Done()
	w.ServeHTTP(rw, r)
}

// Addr returns the listening address, host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns "http://" + Addr(), usable as a proxy URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops the server and returns once every handler has returned.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	// Close the connections before cancelling the handlers' contexts, so
	// that a stalled handler cannot answer with an empty response.
	err := s.srv.Close()
	s.cancel()
	<-s.done
	s.active.Wait()
	if err != nil {
		return fmt.Errorf("websim: close: %w", err)
	}
	return nil
}
