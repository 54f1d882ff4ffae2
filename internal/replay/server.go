// Package replay serves an archive over HTTP the way users of web archives
// expect: a Wayback-style interface (/web/<timestamp>/<url>, capture
// calendars, a banner), Memento (RFC 7089) TimeGates and TimeMaps, and the
// CDX server API, with archived pages rewritten so that they load everything
// from the archive at the same moment and nothing from the live web.
//
// A Server has two handlers meant for two listeners, so that archived
// JavaScript never runs in the origin of the interface:
//
//   - UI: the home page, capture lists, the banner frame, Memento and CDX.
//     A replayed page is shown in an iframe whose source is the content origin.
//   - Content: the archived bytes (/web/<ts>mp_/<url>, im_, cs_, js_, id_ …),
//     rewritten, under a Content-Security-Policy that lets a page load only
//     from the content origin.
//
// Neither handler changes anything: a replay node has no mutating endpoint
// on either listener.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/cdx"
)

// Config says what a Server replays and where its two origins are.
type Config struct {
	// Archive is what is replayed: every capture and record is read
	// through it, so it may be this node's own or span the network.
	Archive archive.Archive

	// UIAddr and ContentAddr are the listeners' addresses. Links between
	// the two origins use the host name each request came in on with the
	// other listener's port; a listener on a loopback address answers only
	// to loopback host names (DNS-rebinding protection).
	UIAddr, ContentAddr string

	// Routes adds handlers to the interface listener, by ServeMux
	// pattern: a node's GET /api/status and GET /metrics.
	Routes map[string]http.Handler

	// PayloadCacheBytes bounds the payloads of large captures (a record of
	// 1 MiB or more) kept once loaded, for the many range requests of a
	// video player: DefaultPayloadCacheBytes if 0, none if negative.
	PayloadCacheBytes int64

	// SpoolDir is where the payloads of captures too large to hold in
	// memory (blocks over 64 MiB) are kept on disk once read and checked,
	// for their range requests: a directory of the server's own, emptied
	// when it starts; "" for none. SpoolBytes bounds them:
	// DefaultSpoolBytes if 0, none if negative.
	SpoolDir   string
	SpoolBytes int64

	Logger *slog.Logger
}

// Server replays one archive. It is safe for concurrent use.
type Server struct {
	arc    archive.Archive
	uiAddr string
	ctAddr string
	routes map[string]http.Handler
	log    *slog.Logger
	// payloads keeps loaded responses of large captures; they are shared,
	// so a response is never changed once loaded.
	payloads *payloadCache
	// verified are the large records whose blocks were read through and
	// matched their digests, which are streamed without a check first.
	verified *recordSet
	// spool keeps the payloads of those records on disk; nil for none.
	spool *payloadSpool

	summaryMu   sync.Mutex
	summary     *summary
	summarizing bool // a request is recomputing a stale summary
}

// New returns a Server for cfg. It panics if cfg.Archive is nil: a server
// with nothing to replay is a programming error, better found at once than
// at the first request.
func New(cfg Config) *Server {
	if cfg.Archive == nil {
		panic("replay: Config.Archive is nil")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cacheBytes := cfg.PayloadCacheBytes
	if cacheBytes == 0 {
		cacheBytes = DefaultPayloadCacheBytes
	}
	s := &Server{
		arc: cfg.Archive, uiAddr: cfg.UIAddr, ctAddr: cfg.ContentAddr, routes: cfg.Routes, log: log,
		payloads: newPayloadCache(cacheBytes),
		verified: &recordSet{},
	}
	switch spoolBytes := cmp.Or(cfg.SpoolBytes, DefaultSpoolBytes); {
	case cfg.SpoolDir != "" && spoolBytes > 0:
		sp, err := newPayloadSpool(cfg.SpoolDir, spoolBytes)
		if err != nil {
			log.Warn("replay: large payloads will not be kept on disk", "err", err)
		}
		s.spool = sp
	case cfg.SpoolDir != "":
		// Off now, perhaps to free the disk: what an earlier run kept goes.
		if err := emptySpool(cfg.SpoolDir); err != nil {
			log.Warn("replay: emptying the spool of large payloads", "err", err)
		}
	}
	return s
}

// CacheStats returns the figures of the server's payload cache.
func (s *Server) CacheStats() CacheStats {
	st := s.payloads.stats()
	if s.spool != nil {
		st.Spooled, st.SpooledEntries, st.SpoolHits, st.SpoolFills = s.spool.stats()
		st.SpoolLimit = s.spool.max
	}
	return st
}

// origin returns "http://host:port" for the listener at addr as the
// browser that sent r reaches it: the host name the request came in on, and
// the listener's port. The two origins then always share a host name, so the
// frame, its policy and its messages agree however the node is reached.
func origin(addr string, r *http.Request) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	return "http://" + net.JoinHostPort(requestHost(r), port)
}

// requestHost is the host name (no port, no brackets) a request was sent to.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.Trim(host, "[]")
}

// allowedHost guards a node that listens on loopback only against DNS
// rebinding: a web page elsewhere could otherwise give its own host name
// the address 127.0.0.1 and read the archive through the visitor's browser.
// Such a node answers only to loopback addresses and "localhost".
func allowedHost(listenAddr string, r *http.Request) bool {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return true
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return true // reachable from elsewhere by whatever name the operator gave it
	}
	h := requestHost(r)
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(h, "localhost")
}

func (s *Server) uiOrigin(r *http.Request) string      { return origin(s.uiAddr, r) }
func (s *Server) contentOrigin(r *http.Request) string { return origin(s.ctAddr, r) }

// UI returns the handler for the interface listener.
func (s *Server) UI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("GET /search", s.search)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS)))
	mux.HandleFunc("GET /cdx", s.cdx)
	for pattern, h := range s.routes {
		mux.Handle(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.errorPage(w, r, http.StatusNotFound, "No such page", "There is nothing at "+r.URL.Path+". Start from the home page.")
	})
	return s.guard(s.uiAddr, securityHeaders(archivePaths(s.web, mux)))
}

// Content returns the handler for the content listener.
func (s *Server) Content() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_waggle/inject.js", serveInjectJS)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS))) // the not-found page's style
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not an archived URL: replayed content lives under /web/<timestamp><modifier>/<url>", http.StatusNotFound)
	})
	return s.guard(s.ctAddr, archivePaths(s.content, mux))
}

// guard refuses requests for a host name the listener at addr must not
// answer to (see allowedHost).
func (s *Server) guard(addr string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowedHost(addr, r) {
			http.Error(w, "this archive answers on loopback only; use 127.0.0.1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// archivePaths sends GET and HEAD requests for /web/... to h and the rest to
// mux. ServeMux would clean the archived URL in the path ("http://" has a
// double slash) and redirect; these paths must reach h as they came.
func archivePaths(h http.HandlerFunc, mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/web/") {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, "an archive is read-only: only GET and HEAD", http.StatusMethodNotAllowed)
				return
			}
			h(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// securityHeaders sets the interface's own policy: its pages load only from
// their origin (the replay frame comes from the content origin).
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func (s *Server) cdx(w http.ResponseWriter, r *http.Request) {
	cdx.Handler(s.arc).ServeHTTP(w, r)
}

// requestTarget returns the part of the request URI after prefix, raw, with
// the query string: an archived URL's own query and escaping.
func requestTarget(r *http.Request, prefix string) string {
	uri := r.RequestURI
	if i := strings.Index(uri, prefix); i >= 0 && !strings.HasPrefix(uri, "/") {
		uri = uri[i:] // absolute-form request URI
	}
	return strings.TrimPrefix(uri, prefix)
}

// isCanceled reports an error from a cancelled or expired context.
func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// clientGone reports a request that failed because its client gave up on
// it: there is no one left to answer.
func clientGone(r *http.Request, err error) bool {
	return isCanceled(err) && r.Context().Err() != nil
}

// unreachable reports an error that says nothing about the archived data:
// the node that holds it could not be asked (archive.ErrUnavailable, which
// a network archive wraps such failures with, or a bare network error), or
// the asking ran out of time. Such a capture is not damaged; it may be
// replayed once the node is back.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, archive.ErrUnavailable) || isCanceled(err) || errors.As(err, &ne)
}

// redirect answers with a redirect to loc as given: http.Redirect would
// clean the path and so break the archived URL in it.
func redirect(w http.ResponseWriter, loc string, code int) {
	w.Header().Set("Location", loc)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, "see", loc)
}
