package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
)

func newNetwork(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func admit(t *testing.T, dir, name string) *admission.Credential {
	t.Helper()
	c, err := admission.Admit(dir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// expired returns a credential of the network in dir that has expired.
func expired(t *testing.T, dir, name string) *admission.Credential {
	t.Helper()
	c, err := admission.Admit(dir, name, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	// Certificates count whole seconds; wait for the end of this one.
	for !time.Now().After(c.NotAfter()) {
		time.Sleep(10 * time.Millisecond)
	}
	return &c
}

// countingListener counts the connections it accepts, each one TLS
// handshake.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// testServer is a running Server whose handler counts its calls.
type testServer struct {
	addr   string
	ln     *countingListener
	calls  atomic.Int64
	cancel context.CancelFunc
	done   chan error
}

// serve starts a server for cred on loopback with handler h (counted),
// after configure, if not nil, has set its fields.
func serve(t *testing.T, cred *admission.Credential, h http.HandlerFunc, configure func(*Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), ln: &countingListener{Listener: ln}, done: make(chan error, 1)}
	srv := NewServer(cred, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.calls.Add(1)
		h(w, r)
	}), nil)
	if configure != nil {
		configure(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() { ts.done <- srv.Serve(ctx, ts.ln) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// stop shuts the server down and checks that Serve returned nil.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	ts.cancel()
	if err, ok := <-ts.done; ok {
		close(ts.done)
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

// echo answers with the caller's name and ID and the request body.
func echo(w http.ResponseWriter, r *http.Request) {
	id, name, ok := Caller(r.Context())
	if !ok {
		http.Error(w, "no caller", http.StatusInternalServerError)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	io.WriteString(w, name+" "+id+" "+string(body))
}

func post(t *testing.T, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// call sends req with c and returns the response's status and body.
func call(t *testing.T, c *Client, addr, id string, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := c.Do(context.Background(), addr, id, req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("%s %s: protocol %s, want HTTP/2", req.Method, req.URL, resp.Proto)
	}
	return resp.StatusCode, string(body), nil
}

func TestRoundTrip(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)
	defer c.Close()

	if err := c.Hello(context.Background(), ts.addr, a.ID()); err != nil {
		t.Fatalf("Hello: %v", err)
	}
	if n := ts.calls.Load(); n != 0 {
		t.Errorf("Hello reached the handler (%d calls); the server answers it", n)
	}
	req := post(t, "/v1/echo", strings.NewReader("links"))
	status, body, err := call(t, c, ts.addr, a.ID(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := "beta " + b.ID() + " links"; status != http.StatusOK || body != want {
		t.Errorf("echo: %d %q; want 200 %q", status, body, want)
	}
	if req.URL.Host != "" || req.URL.Scheme != "" {
		t.Errorf("Do changed the caller's request URL to %s", req.URL)
	}
	// One connection, one handshake, for all three calls.
	if status, _, err := call(t, c, ts.addr, a.ID(), post(t, "/v1/echo", strings.NewReader("again"))); err != nil || status != http.StatusOK {
		t.Fatalf("second call: %d, %v", status, err)
	}
	if n := ts.ln.accepted.Load(); n != 1 {
		t.Errorf("%d connections (handshakes) for three calls, want 1", n)
	}
	if n := ts.calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}

	if _, _, ok := Caller(context.Background()); ok {
		t.Error("Caller of a context that no server made: ok")
	}
}

func TestHelloAnswer(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)
	defer c.Close()
	req, _ := http.NewRequest(http.MethodGet, "/v1/hello", nil)
	status, body, err := call(t, c, ts.addr, a.ID(), req)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || !strings.Contains(body, `"id":"`+a.ID()+`"`) || !strings.Contains(body, `"name":"alpha"`) {
		t.Errorf("hello: %d %s", status, body)
	}
	status, _, err = call(t, c, ts.addr, a.ID(), post(t, "/v1/hello", nil))
	if err != nil || status != http.StatusMethodNotAllowed {
		t.Errorf("POST hello: %d, %v; want 405", status, err)
	}
}

// rawClient returns a transport that presents what cfg presents and
// accepts any server, so that only the server can refuse it.
func rawClient(cfg *tls.Config) *http.Transport {
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = nil
	cfg.NextProtos = []string{"h2"}
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Transport{TLSClientConfig: cfg, Protocols: &p}
}

// rawGet returns the status of a GET of path at addr through tr.
func rawGet(tr *http.Transport, addr, path string) (string, error) {
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Status, nil
}

func TestRefused(t *testing.T) {
	dir := newNetwork(t)
	a := admit(t, dir, "alpha")
	stranger := admit(t, newNetwork(t), "beta") // of another network
	late := expired(t, dir, "late")
	ts := serve(t, a, echo, nil)

	// The raw client itself works with a valid credential.
	if status, err := rawGet(rawClient(admit(t, dir, "gamma").ClientTLS()), ts.addr, "/v1/hello"); err != nil || status != "200 OK" {
		t.Fatalf("GET /v1/hello as a member: %s, %v", status, err)
	}

	for _, tc := range []struct {
		name string
		tr   *http.Transport
	}{
		{"another network's node", rawClient(stranger.ClientTLS())},
		{"expired credential", rawClient(late.ClientTLS())},
		{"no certificate", rawClient(&tls.Config{MinVersion: tls.VersionTLS13})},
		{"TLS 1.2", rawClient(&tls.Config{MaxVersion: tls.VersionTLS12})},
	} {
		// The TLS 1.3 client learns of the refusal on its first read or
		// write, so the error's words vary: any failure will do.
		for _, path := range []string{"/v1/echo", "/v1/hello"} {
			if status, err := rawGet(tc.tr, ts.addr, path); err == nil {
				t.Errorf("%s: GET %s: %s; want the handshake refused", tc.name, path, status)
			}
		}
	}
	// Through Client, which refuses the server too.
	for _, cred := range []*admission.Credential{stranger, late} {
		c := NewClient(cred)
		if err := c.Hello(context.Background(), ts.addr, a.ID()); err == nil {
			t.Errorf("Hello from %s succeeded", cred.Name())
		}
		c.Close()
	}
	if n := ts.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times for refused clients", n)
	}
}

func TestExpiredServer(t *testing.T) {
	dir := newNetwork(t)
	late, b := expired(t, dir, "late"), admit(t, dir, "beta")
	ts := serve(t, late, echo, nil)
	c := NewClient(b)
	defer c.Close()
	if err := c.Hello(context.Background(), ts.addr, late.ID()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Hello to an expired server: %v", err)
	}
	_, _, err := call(t, c, ts.addr, late.ID(), post(t, "/v1/echo", strings.NewReader("x")))
	if err == nil {
		t.Error("call to an expired server succeeded")
	}
	if n := ts.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

func TestWrongPeer(t *testing.T) {
	dir := newNetwork(t)
	a, b, other := admit(t, dir, "alpha"), admit(t, dir, "beta"), admit(t, dir, "gamma")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)
	defer c.Close()

	// On a new connection, and on one the client already holds to the
	// right node.
	for _, when := range []string{"first call", "after a call"} {
		_, _, err := call(t, c, ts.addr, other.ID(), post(t, "/v1/echo", strings.NewReader("secret")))
		if !errors.Is(err, ErrWrongPeer) {
			t.Errorf("%s: call to the wrong node: %v; want ErrWrongPeer", when, err)
		}
		if err := c.Hello(context.Background(), ts.addr, other.ID()); !errors.Is(err, ErrWrongPeer) {
			t.Errorf("%s: Hello to the wrong node: %v; want ErrWrongPeer", when, err)
		}
		if n := ts.calls.Load(); n != 0 {
			t.Fatalf("%s: the handler ran %d times for the wrong node", when, n)
		}
		if status, _, err := call(t, c, ts.addr, a.ID(), post(t, "/v1/ok", strings.NewReader("x"))); err != nil || status != http.StatusOK {
			t.Fatalf("call to the right node: %d, %v", status, err)
		}
		ts.calls.Store(0)
	}
}

func TestBodyLimit(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	const limit = 1000
	ts := serve(t, a, echo, func(s *Server) { s.MaxBodyBytes = limit })
	c := NewClient(b)
	defer c.Close()

	status, body, err := call(t, c, ts.addr, a.ID(), post(t, "/v1/echo", bytes.NewReader(make([]byte, limit))))
	if err != nil || status != http.StatusOK || len(body) != len("beta ")+len(b.ID())+1+limit {
		t.Errorf("body at the limit: %d (%d bytes), %v", status, len(body), err)
	}
	status, _, err = call(t, c, ts.addr, a.ID(), post(t, "/v1/echo", bytes.NewReader(make([]byte, limit+1))))
	if err != nil || status != http.StatusRequestEntityTooLarge {
		t.Errorf("declared body over the limit: %d, %v; want 413", status, err)
	}
	if n := ts.calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (not for the declared body over the limit)", n)
	}
	// A body of undeclared length stops at the limit in the handler.
	undeclared := io.MultiReader(bytes.NewReader(make([]byte, limit)), strings.NewReader("!"))
	status, body, err = call(t, c, ts.addr, a.ID(), post(t, "/v1/echo", undeclared))
	if err != nil || status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too large") {
		t.Errorf("undeclared body over the limit: %d %q, %v; want 413", status, body, err)
	}
}

func TestDefaultBodyLimit(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)
	defer c.Close()
	// A reader that claims a length it never delivers: the server must
	// refuse it on the declared length alone.
	req := post(t, "/v1/echo", strings.NewReader("x"))
	req.ContentLength = DefaultMaxBodyBytes + 1
	req.GetBody = nil
	status, _, err := call(t, c, ts.addr, a.ID(), req)
	if err != nil || status != http.StatusRequestEntityTooLarge {
		t.Errorf("declared body over the default limit: %d, %v; want 413", status, err)
	}
	if n := ts.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

func TestGracefulShutdown(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	started, release := make(chan struct{}), make(chan struct{})
	ts := serve(t, a, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	}, nil)
	c := NewClient(b)
	defer c.Close()

	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := c.Do(context.Background(), ts.addr, a.ID(), post(t, "/v1/slow", nil))
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		res <- result{resp.StatusCode, string(body), err}
	}()
	<-started
	ts.cancel()
	select {
	case err := <-ts.done:
		t.Fatalf("Serve returned (%v) while a handler was running", err)
	default:
	}
	close(release)
	if err := <-ts.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	close(ts.done)
	r := <-res
	if r.err != nil || r.status != http.StatusOK || r.body != "done" {
		t.Errorf("request in flight at shutdown: %d %q, %v", r.status, r.body, r.err)
	}
	if err := c.Hello(context.Background(), ts.addr, a.ID()); err == nil {
		t.Error("Hello after shutdown succeeded")
	}
}

func TestShutdownCancels(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	started := make(chan struct{})
	var cancelled atomic.Bool
	ts := serve(t, a, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // a handler that would run for ever
		cancelled.Store(true)
	}, func(s *Server) { s.ShutdownGrace = time.Millisecond })
	c := NewClient(b)
	defer c.Close()
	go func() {
		if resp, err := c.Do(context.Background(), ts.addr, a.ID(), post(t, "/v1/stuck", nil)); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	ts.stop(t)
	if !cancelled.Load() {
		t.Error("Serve returned before the stuck handler saw its context cancelled")
	}
}

func TestClientErrors(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)

	for _, addr := range []string{"", "127.0.0.1", "[::1]"} {
		if err := c.Hello(context.Background(), addr, a.ID()); err == nil || !strings.HasPrefix(err.Error(), "peer: ") {
			t.Errorf("Hello to %q: %v", addr, err)
		}
	}
	if err := c.Hello(context.Background(), ts.addr, ""); err == nil {
		t.Error("Hello with no ID succeeded")
	}
	// Nothing listens on a closed listener's port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := c.Hello(context.Background(), ln.Addr().String(), a.ID()); err == nil || !strings.HasPrefix(err.Error(), "peer: ") {
		t.Errorf("Hello to a closed port: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Hello(ctx, ts.addr, a.ID()); !errors.Is(err, context.Canceled) {
		t.Errorf("Hello with a cancelled context: %v", err)
	}

	c.Close()
	if err := c.Hello(context.Background(), ts.addr, a.ID()); !errors.Is(err, ErrClosed) {
		t.Errorf("Hello after Close: %v; want ErrClosed", err)
	}
	if n := ts.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

// TestExpiryOnOpenConnection checks that a connection opened while both
// nodes' certificates were valid is not used past their expiry, on
// either side.
func TestExpiryOnOpenConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for certificates to expire")
	}
	dir := newNetwork(t)
	const validity = 3 * time.Second
	short := func(name string) *admission.Credential {
		c, err := admission.Admit(dir, name, validity)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	a, b := admit(t, dir, "alpha"), short("beta")  // b calls a
	s, c := short("sigma"), admit(t, dir, "gamma") // c calls s
	toA, toS := serve(t, a, echo, nil), serve(t, s, echo, nil)
	fromB, fromC := NewClient(b), NewClient(c)
	defer fromB.Close()
	defer fromC.Close()
	for _, x := range []struct {
		c    *Client
		ts   *testServer
		want string
	}{{fromB, toA, a.ID()}, {fromC, toS, s.ID()}} {
		if status, _, err := call(t, x.c, x.ts.addr, x.want, post(t, "/v1/echo", nil)); err != nil || status != http.StatusOK {
			t.Fatalf("call before expiry: %d, %v", status, err)
		}
	}
	expiry := b.NotAfter()
	if s.NotAfter().Before(expiry) {
		expiry = s.NotAfter()
	}
	if !time.Now().Before(expiry) {
		t.Skip("the machine took longer than the certificates' validity to make two calls")
	}
	for !time.Now().After(b.NotAfter()) || !time.Now().After(s.NotAfter()) {
		time.Sleep(50 * time.Millisecond)
	}

	// The server refuses a request from b on the open connection.
	status, _, err := call(t, fromB, toA.addr, a.ID(), post(t, "/v1/echo", nil))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("call from an expired client on an open connection: %d, %v; want 403", status, err)
	}
	// The client does not use its open connection to s.
	if err := fromC.Hello(context.Background(), toS.addr, s.ID()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Hello to an expired server with an open connection: %v", err)
	}
	if a, s := toA.calls.Load(), toS.calls.Load(); a != 1 || s != 1 {
		t.Errorf("handlers ran %d and %d times after expiry, want once each, before", a, s)
	}
	if a, s := toA.ln.accepted.Load(), toS.ln.accepted.Load(); a != 1 || s != 2 {
		t.Errorf("%d and %d connections, want 1 (the open one, refused per request) and 2 (a new one, refused)", a, s)
	}
}

func TestConcurrentCalls(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	c := NewClient(b)
	defer c.Close()
	// One call first, so that the others share its connection.
	if err := c.Hello(context.Background(), ts.addr, a.ID()); err != nil {
		t.Fatal(err)
	}
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		go func() {
			body := strings.Repeat("x", i)
			resp, err := c.Do(context.Background(), ts.addr, a.ID(), post(t, "/v1/echo", strings.NewReader(body)))
			if err == nil {
				var got []byte
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && string(got) != "beta "+b.ID()+" "+body {
					err = errors.New("wrong echo: " + string(got))
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := ts.ln.accepted.Load(); got != 1 {
		t.Errorf("%d connections for %d concurrent calls, want 1", got, n)
	}
}

func TestIdentify(t *testing.T) {
	dir := newNetwork(t)
	server, client := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, server, nil, nil)
	c := NewClient(client)
	defer c.Close()
	id, name, err := c.Identify(context.Background(), ts.addr)
	if err != nil || id != server.ID() || name != "alpha" {
		t.Fatalf("Identify = %q, %q, %v; want %q, alpha", id, name, err, server.ID())
	}
	// A node of another network is not identified as one of ours.
	stranger := serve(t, admit(t, newNetwork(t), "gamma"), nil, nil)
	if id, _, err := c.Identify(context.Background(), stranger.addr); err == nil {
		t.Fatalf("Identify of another network's node = %q, want an error", id)
	}
}

// TestDialContext checks that every connection the client opens goes
// through Client.DialContext, so that a test can cut the network: a
// refused dial fails the call with the dialer's error, and a connection
// closed under the client is replaced through the dialer.
func TestDialContext(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	ts := serve(t, a, echo, nil)
	errCut := errors.New("network unreachable")
	var (
		dials atomic.Int64
		cut   atomic.Bool
		last  atomic.Pointer[net.Conn]
	)
	c := NewClient(b)
	defer c.Close()
	c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if addr != ts.addr {
			t.Errorf("dialled %s, want %s", addr, ts.addr)
		}
		if cut.Load() {
			return nil, errCut
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			last.Store(&conn)
		}
		return conn, err
	}
	ctx := context.Background()
	if _, _, err := c.Identify(ctx, ts.addr); err != nil {
		t.Fatal(err)
	}
	if err := c.Hello(ctx, ts.addr, a.ID()); err != nil {
		t.Fatal(err)
	}
	if got := dials.Load(); got != 2 {
		t.Errorf("%d dials for Identify and Hello, want 2", got)
	}

	// The connection breaks and the network is cut: the call fails with
	// the dialer's error. (A call made before the HTTP/2 transport's read
	// loop has seen the connection close may fail writing to it instead;
	// none may succeed.)
	cut.Store(true)
	(*last.Load()).Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := c.Hello(ctx, ts.addr, a.ID())
		if errors.Is(err, errCut) {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("Hello over a cut network: %v, want %v", err, errCut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := c.Identify(ctx, ts.addr); !errors.Is(err, errCut) {
		t.Fatalf("Identify over a cut network: %v, want %v", err, errCut)
	}

	// The network is back: the next call dials again and succeeds.
	cut.Store(false)
	before := dials.Load()
	if status, _, err := call(t, c, ts.addr, a.ID(), post(t, "/v1/echo", strings.NewReader("back"))); err != nil || status != http.StatusOK {
		t.Fatalf("call after the network came back: %d, %v", status, err)
	}
	if dials.Load() == before {
		t.Error("the call after the network came back did not dial")
	}
}
