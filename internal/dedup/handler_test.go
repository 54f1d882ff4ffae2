package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/peer"
)

// pair is two admitted nodes: a asks, b serves a registry.
type pair struct {
	a, b   *admission.Credential
	addr   string // b's peer server
	client *peer.Client
	reg    *Registry
}

func newPair(t *testing.T) *pair {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	p := &pair{reg: newRegistry(t)}
	for name, c := range map[string]**admission.Credential{"a": &p.a, "b": &p.b} {
		cred, err := admission.Admit(dir, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		*c = &cred
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, p.reg.Handler())
	srv := peer.NewServer(p.b, mux, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	p.client = peer.NewClient(p.a)
	t.Cleanup(func() {
		p.client.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	p.addr = ln.Addr().String()
	return p
}

// statusError is a non-200 answer.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.code, e.msg) }

// post sends body to path on b and returns the answer, as a node's Send does.
func (p *pair) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(ctx, p.addr, p.b.ID(), req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{resp.StatusCode, string(answer)}
	}
	return answer, nil
}

// send is p.post as a ClientConfig.Send for node b.
func (p *pair) send(ctx context.Context, node, path string, body []byte) ([]byte, error) {
	if node != p.b.ID() {
		return nil, fmt.Errorf("no route to %s", node)
	}
	return p.post(ctx, path, body)
}

func TestHandlerRoundTrip(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	answer, err := p.post(ctx, registerPath, encodeRefs(kindRefs, []Ref{ref(1, 1), ref(2, 1), ref(1, 2)}))
	if err != nil {
		t.Fatal(err)
	}
	if added, err := decodeAdded(answer); err != nil || added != 2 {
		t.Fatalf("register answer = %d, %v; want 2", added, err)
	}
	answer, err = p.post(ctx, lookupPath, encodeLookup([]string{digest(3), digest(2), digest(1)}))
	if err != nil {
		t.Fatal(err)
	}
	found, err := decodeRefs(answer, kindFound)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || !equalRef(found[0], ref(2, 1)) || !equalRef(found[1], ref(1, 1)) {
		t.Errorf("lookup answer = %+v, want refs 2 and 1 of capture 1", found)
	}
}

// TestClientOverPeer runs a Client against a registry behind a real peer
// server: what one node registers, another finds.
func TestClientOverPeer(t *testing.T) {
	p := newPair(t)
	c := NewClient(ClientConfig{
		Self:  p.a.ID(),
		Owner: func(string) (string, bool) { return p.b.ID(), true },
		Local: newRegistry(t),
		Send:  p.send,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	c.Register([]Ref{ref(1, 1)})
	waitFor(t, func() bool { return c.Stats().Registered == 1 })
	got, ok, err := c.Lookup(ctx, digest(1))
	if err != nil || !ok || !equalRef(got, ref(1, 1)) {
		t.Errorf("Lookup = %+v, %v, %v; want ref 1", got, ok, err)
	}
	if _, ok, err := c.Lookup(ctx, digest(2)); err != nil || ok {
		t.Errorf("Lookup(unregistered) = %v, %v; want a miss", ok, err)
	}
}

func TestHandlerRefusesGarbage(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("a", n) }
	tooMany := encodeLookup(make([]string, MaxEntries+1)) // empty digests, but the count fails first
	cases := []struct {
		name string
		path string
		body []byte
		code int
	}{
		{"empty", lookupPath, nil, 400},
		{"bad magic", lookupPath, []byte("GET / HTTP/1.1\r\n"), 400},
		{"newer version", lookupPath, []byte{'W', 'G', 'D', 2, kindLookup, 0}, 400},
		{"wrong kind", lookupPath, encodeRefs(kindRefs, []Ref{ref(1, 1)}), 400},
		{"refs as lookup answer", registerPath, encodeRefs(kindFound, []Ref{ref(1, 1)}), 400},
		{"truncated", lookupPath, encodeLookup([]string{digest(1)})[:10], 400},
		{"trailing byte", lookupPath, append(encodeLookup([]string{digest(1)}), 0), 400},
		{"count beyond body", lookupPath, []byte{'W', 'G', 'D', 1, kindLookup, 0xff, 0x1f}, 400},
		{"too many entries", lookupPath, tooMany, 400},
		{"bad varint", lookupPath, []byte{'W', 'G', 'D', 1, kindLookup, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 400},
		{"invalid digest", lookupPath, encodeLookup([]string{"nocolon"}), 400},
		{"long digest", lookupPath, encodeLookup([]string{"sha1:" + long(MaxDigestBytes)}), 400},
		{"long URL", registerPath, encodeRefs(kindRefs, []Ref{{Digest: digest(1), URL: "http://a/" + long(MaxURLBytes), Time: t0, RecordID: "<x>"}}), 400},
		{"control in URL", registerPath, encodeRefs(kindRefs, []Ref{{Digest: digest(1), URL: "http://a/\x00", Time: t0, RecordID: "<x>"}}), 400},
		{"empty record ID", registerPath, encodeRefs(kindRefs, []Ref{{Digest: digest(1), URL: "http://a/", Time: t0}}), 400},
		{"replacing a record ID with a space", registerPath, encodeRegistrations([]registration{{Ref: ref(1, 1), replaces: "<a b>"}}), 400},
		{"truncated replacement", registerPath, encodeRegistrations([]registration{{Ref: ref(1, 1), replaces: "<x>"}})[:20], 400},
		{"oversized body", registerPath, append(encodeRefs(kindRefs, nil), make([]byte, MaxBodyBytes)...), 413},
	}
	for _, tc := range cases {
		_, err := p.post(ctx, tc.path, tc.body)
		var se *statusError
		if !errors.As(err, &se) || se.code != tc.code {
			t.Errorf("%s: err = %v, want status %d", tc.name, err, tc.code)
			continue
		}
		if !strings.HasPrefix(se.msg, "dedup: ") {
			t.Errorf("%s: message %q does not say what is wrong", tc.name, se.msg)
		}
	}
	// Nothing of the refused registrations was kept.
	if got, err := p.reg.Lookup([]string{digest(1)}); err != nil || len(got) != 0 {
		t.Errorf("after refused requests Lookup = %v, %v", got, err)
	}
	// The server still works.
	if _, err := p.post(ctx, lookupPath, encodeLookup([]string{digest(1)})); err != nil {
		t.Errorf("a good request after the bad ones: %v", err)
	}
}

func TestHandlerRequiresPeerAndPost(t *testing.T) {
	h := newRegistry(t).Handler()
	body := encodeLookup([]string{digest(1)})
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodPost, lookupPath, http.StatusForbidden}, // not through a peer.Server
		{http.MethodGet, lookupPath, http.StatusMethodNotAllowed},
		{http.MethodPost, Path + "other", http.StatusNotFound},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, bytes.NewReader(body)))
		if w.Code != tc.code {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, w.Code, tc.code)
		}
	}
}

// waitFor waits until cond holds; the deadline is for a hang, not a
// speed limit.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
}
