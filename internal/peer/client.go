package peer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
)

// ErrWrongPeer is the error of a call that reached a valid node of the
// network, but not the one meant: another node answers at that address.
var ErrWrongPeer = errors.New("peer: wrong node")

// ErrClosed is the error of a call on a closed Client.
var ErrClosed = errors.New("peer: client closed")

const (
	dialTimeout  = 10 * time.Second // connection and TLS handshake
	maxHelloBody = 4 << 10
	// A route unused for this long loses its transport, so that a client
	// talking to a changing network does not grow without bound.
	routeIdle  = 10 * time.Minute
	sweepEvery = time.Minute
)

// A Client calls other nodes of its network. It keeps one HTTP/2
// connection per peer, opened on the first call and closed after a while
// without calls. It is safe for concurrent use.
type Client struct {
	// DialContext, if not nil, opens the TCP connections to peers in
	// place of a net.Dialer: tests use it to inject network faults. Set it
	// before the first call.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	cred *admission.Credential
	tls  *tls.Config

	mu        sync.Mutex
	routes    map[route]*link
	lastSweep time.Time
	closed    bool
}

// A route is a node meant at an address. Each has its own transport, every
// connection of which was verified at its handshake to reach that node, so
// a request is never written to a connection that reached another one.
// There is one route per peer, and so one connection, unless a peer moves
// or a call means the wrong node.
type route struct{ addr, id string }

type link struct {
	tr       *http.Transport
	expires  time.Time // the earliest expiry of a certificate the peer showed
	lastUsed time.Time
}

// NewClient returns a client that calls peers as the node holding cred.
func NewClient(cred *admission.Credential) *Client {
	cfg := cred.ClientTLS()
	cfg.NextProtos = []string{"h2"}
	return &Client{cred: cred, tls: cfg, routes: make(map[route]*link)}
}

// Do sends req to the node with the certified ID wantID at addr (host:port)
// and returns its response, which the caller must close. The request is
// written only once the node at addr has proved to be wantID; if it is
// another node, Do fails with ErrWrongPeer. ctx governs the call, not
// req's context; Do sets req's scheme and host (on a copy). Like
// http.Client.Do, Do closes req.Body, even on errors, and follows no
// redirects.
func (c *Client) Do(ctx context.Context, addr, wantID string, req *http.Request) (*http.Response, error) {
	tr, err := c.transport(addr, wantID)
	if err == nil && req.URL == nil {
		err = errors.New("peer: request has no URL")
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.WithContext(ctx)
	u := *req.URL
	u.Scheme, u.Host, u.User = "https", addr, nil
	r.URL, r.Host = &u, ""
	resp, err := tr.RoundTrip(r)
	if err != nil {
		return nil, fmt.Errorf("peer: %s %s to %s: %w", r.Method, u.Path, addr, err)
	}
	return resp, nil
}

// Hello checks that the node wantID answers at addr, with one cheap
// authenticated round trip (GET /v1/hello).
func (c *Client) Hello(ctx context.Context, addr, wantID string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, helloPath, nil)
	if err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	resp, err := c.Do(ctx, addr, wantID, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHelloBody+1))
	if err != nil {
		return fmt.Errorf("peer: hello to %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("peer: hello to %s: %s: %.200q", addr, resp.Status, strings.TrimSpace(string(body)))
	}
	if len(body) > maxHelloBody {
		return fmt.Errorf("peer: hello to %s: answer longer than %d bytes", addr, maxHelloBody)
	}
	var h hello
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("peer: hello to %s: %w", addr, err)
	}
	if h.ID != wantID {
		// The handshake proved the ID; a node saying otherwise is broken.
		return fmt.Errorf("%w: %s answers hello as %.70q, not %s", ErrWrongPeer, addr, h.ID, wantID)
	}
	return nil
}

// Identify connects to addr and returns the certified ID and name of the
// node there, which must belong to this client's network. It is how a node
// learns whom it reaches at an address it was given (such as --join) before
// calling it with Do.
func (c *Client) Identify(ctx context.Context, addr string) (id, name string, err error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	raw, err := c.dialTCP(ctx, "tcp", addr)
	if err != nil {
		return "", "", fmt.Errorf("peer: %w", err)
	}
	conn := tls.Client(raw, c.tls)
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		return "", "", fmt.Errorf("peer: %s: TLS handshake: %w", addr, err)
	}
	id, name, err = c.cred.PeerID(conn.ConnectionState())
	if err != nil {
		return "", "", fmt.Errorf("peer: %s: %w", addr, err)
	}
	return id, name, nil
}

// Close closes the client's idle connections; calls in flight finish, and
// their connections close once idle. Calls after Close fail with
// ErrClosed.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for r, l := range c.routes {
		l.tr.CloseIdleConnections()
		delete(c.routes, r)
	}
}

// transport returns the transport of the route to wantID at addr.
func (c *Client) transport(addr, wantID string) (*http.Transport, error) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return nil, fmt.Errorf("peer: address %.100q is not host:port", addr)
	}
	if wantID == "" {
		return nil, errors.New("peer: no node ID to call")
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if now.Sub(c.lastSweep) >= sweepEvery {
		c.lastSweep = now
		for r, l := range c.routes {
			if now.Sub(l.lastUsed) >= routeIdle {
				l.tr.CloseIdleConnections()
				delete(c.routes, r)
			}
		}
	}
	r := route{addr, wantID}
	l := c.routes[r]
	if l != nil && !l.expires.IsZero() && !now.Before(l.expires) {
		// A connection open since before the peer's certificate expired
		// must not be used: start afresh, with a handshake that checks
		// the certificate the peer has now.
		l.tr.CloseIdleConnections()
		l = nil
	}
	if l == nil {
		l = &link{}
		l.tr = c.newTransport(r, l)
		c.routes[r] = l
	}
	l.lastUsed = now
	return l.tr, nil
}

func (c *Client) newTransport(r route, l *link) *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	return &http.Transport{
		Proxy: nil, // peers are called directly, never through a proxy
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, notAfter, err := c.dial(ctx, network, addr, r.id)
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			if l.expires.IsZero() || notAfter.Before(l.expires) {
				l.expires = notAfter
			}
			c.mu.Unlock()
			return conn, nil
		},
		Protocols:              &protocols,
		IdleConnTimeout:        clientIdleTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
		// Callers see the bytes the peer sent: a peer compresses what it
		// chooses to, and says so.
		DisableCompression: true,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: pingAfter,
			PingTimeout:     pingTimeout,
		},
	}
}

// dial opens a TLS connection to addr and returns it only if the node
// there is wantID, with the expiry of its certificate.
func (c *Client) dial(ctx context.Context, network, addr, wantID string) (net.Conn, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	raw, err := c.dialTCP(ctx, network, addr)
	if err != nil {
		return nil, time.Time{}, err
	}
	conn := tls.Client(raw, c.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, time.Time{}, fmt.Errorf("TLS handshake: %w", err)
	}
	state := conn.ConnectionState()
	id, name, err := c.cred.PeerID(state)
	switch {
	case err != nil:
	case id != wantID:
		err = fmt.Errorf("%w: the node there is %s (%s), not %s", ErrWrongPeer, name, id, wantID)
	case state.NegotiatedProtocol != "h2":
		err = fmt.Errorf("node %s does not speak HTTP/2", name)
	}
	if err != nil {
		conn.Close()
		return nil, time.Time{}, err
	}
	return conn, state.PeerCertificates[0].NotAfter, nil
}

// dialTCP opens the connection a TLS session to a peer runs over.
func (c *Client) dialTCP(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.DialContext != nil {
		return c.DialContext(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
