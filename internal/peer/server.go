// Package peer is the authenticated transport between the nodes of a
// network: HTTP/2 over mutual TLS, where each end presents the certificate
// its network's admission key issued it (see package admission), so every
// request a node serves comes from an admitted node, and every call a node
// makes reaches the admitted node it meant to reach.
//
// A Server serves a node's peer handlers; Caller tells a handler which node
// is calling. A Client calls other nodes, keeping one connection per peer.
package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
)

// DefaultMaxBodyBytes is the default limit on the size of a request body.
const DefaultMaxBodyBytes = 32 << 20

// DefaultShutdownGrace is how long, by default, a server that is shutting
// down lets requests in flight finish before cancelling them.
const DefaultShutdownGrace = 10 * time.Second

// helloPath is the path of the handler every Server mounts itself.
const helloPath = "/v1/hello"

// Timeouts shared by both ends. The client closes an idle connection before
// the server would, so that a request is rarely sent on a connection the
// server is closing.
const (
	readHeaderTimeout = 10 * time.Second
	serverIdleTimeout = 3 * time.Minute
	clientIdleTimeout = 2 * time.Minute
	pingAfter         = 30 * time.Second // of silence, to find a dead peer
	pingTimeout       = 15 * time.Second
	maxHeaderBytes    = 64 << 10
)

// A Server serves peer RPC over HTTP/2 with mutual TLS. A request reaches
// its handler only if the client presented a valid certificate of the
// server's network; the handler learns which node it is with Caller.
//
// Besides its handler, a Server answers GET /v1/hello itself, with the
// server's ID and name as JSON, for Client.Hello.
type Server struct {
	// MaxBodyBytes limits the size of request bodies (DefaultMaxBodyBytes
	// if 0). A request that declares a larger body is answered 413
	// without reaching the handler; a handler reading past the limit of
	// a body of undeclared length gets an *http.MaxBytesError, and should
	// answer 413 (http.StatusRequestEntityTooLarge).
	MaxBodyBytes int64

	// ShutdownGrace is how long Serve, once its context is done, lets
	// requests in flight finish before it cancels their contexts
	// (DefaultShutdownGrace if 0).
	ShutdownGrace time.Duration

	cred *admission.Credential
	h    http.Handler
	log  *slog.Logger
}

// NewServer returns a server for the node holding cred that passes
// authenticated requests to h (if nil, it serves only /v1/hello). log may
// be nil to log nothing. Set the Server's fields, if at all, before
// calling Serve.
func NewServer(cred *admission.Credential, h http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if h == nil {
		h = http.NotFoundHandler()
	}
	return &Server{cred: cred, h: h, log: log}
}

// Serve accepts TLS connections on ln and serves peer requests on them
// until ctx is done. Then it stops accepting, lets requests in flight
// finish for ShutdownGrace, cancels the contexts of those still running,
// and returns only once no handler is running. Serve closes ln. It returns
// nil after a shutdown, or the error that stopped it serving.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	grace := s.ShutdownGrace
	if grace <= 0 {
		grace = DefaultShutdownGrace
	}
	limit := s.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	// Requests outlive ctx by the grace period: their contexts derive
	// from base, cancelled after it.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	var run tracker

	var protocols http.Protocols
	protocols.SetHTTP2(true) // and nothing else: peers are this program
	srv := &http.Server{
		Handler:           s.handler(&run, limit),
		TLSConfig:         s.cred.ServerTLS(),
		Protocols:         &protocols,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: pingAfter,
			PingTimeout:     pingTimeout,
		},
		// Refused handshakes are logged here: they are nodes of other
		// networks, expired credentials, or strangers.
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shut, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if srv.Shutdown(shut) != nil {
		s.log.Warn("peer: requests still running after the shutdown grace period; cancelling them", "grace", grace)
	}
	cancelRequests()
	srv.Close()
	run.closeAndWait()
	if ctx.Err() != nil && err == nil {
		err = <-errc // ServeTLS has returned, or will at once, since the server is closed
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("peer: serving on %s: %w", ln.Addr(), err)
}

// handler authenticates each request, limits its body and passes it on.
func (s *Server) handler(run *tracker, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !run.enter() {
			http.Error(w, "peer: shutting down", http.StatusServiceUnavailable)
			return
		}
		defer run.leave()
		// The handshake has verified the client; verifying again here
		// gives the caller's identity and refuses a certificate that has
		// expired since the connection was opened.
		if r.TLS == nil {
			http.Error(w, "peer: TLS required", http.StatusForbidden)
			return
		}
		id, name, err := s.cred.PeerID(*r.TLS)
		if err != nil {
			s.log.Warn("peer: refused request", "remote", r.RemoteAddr, "err", err)
			http.Error(w, "peer: not a member of this network: "+err.Error(), http.StatusForbidden)
			return
		}
		if r.ContentLength > limit {
			http.Error(w, fmt.Sprintf("peer: request body of %d bytes is over the limit of %d", r.ContentLength, limit),
				http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller{id, name}))
		if r.URL.Path == helloPath {
			s.hello(w, r)
			return
		}
		s.h.ServeHTTP(w, r)
	})
}

// hello is the body of a /v1/hello answer.
type hello struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Network string `json:"network"`
}

func (s *Server) hello(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "peer: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b, err := json.Marshal(hello{ID: s.cred.ID(), Name: s.cred.Name(), Network: s.cred.Network()})
	if err != nil {
		panic("peer: " + err.Error()) // strings always marshal
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}

type callerKey struct{}

type caller struct{ id, name string }

// Caller returns the certified ID and name of the node that sent the
// request whose context is ctx, as set by Server; ok is false for a
// context that did not come from a Server.
func Caller(ctx context.Context) (id, name string, ok bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c.id, c.name, ok
}

// tracker counts running handlers, so that Serve can wait for them, and
// refuses new ones once closed.
type tracker struct {
	mu      sync.Mutex
	idle    *sync.Cond
	running int
	closed  bool
}

func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.running++
	return true
}

func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.running == 0 && t.idle != nil {
		t.idle.Broadcast()
	}
}

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.idle == nil {
		t.idle = sync.NewCond(&t.mu)
	}
	for t.running > 0 {
		t.idle.Wait()
	}
}
