package admission

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// seen is what one end of a connection learnt of the other.
type seen struct {
	id, name string
	err      error
	inPeerID bool // err came from PeerID, after a handshake that succeeded
}

// refused reports whether s is a refusal by the TLS handshake itself.
func (s seen) refused() bool { return s.err != nil && !s.inPeerID }

// connect runs one TLS connection over loopback between a server
// configured with srvCfg and a client configured with cliCfg, and returns
// what each end saw of the other through PeerID of srvCred and cliCred
// (cliCred may be nil, for a client that is no node). The server writes a
// byte once it accepts the client, because in TLS 1.3 the client's
// handshake ends before the server has checked the client's certificate:
// a refused client learns of it on its first read.
func connect(t *testing.T, srvCred *Credential, srvCfg *tls.Config, cliCred *Credential, cliCfg *tls.Config) (srv, cli seen) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan seen, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- seen{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute)) // against a hang, not a measure
		tc := tls.Server(conn, srvCfg)
		var s seen
		if s.err = tc.Handshake(); s.err == nil {
			s.id, s.name, s.err = srvCred.PeerID(tc.ConnectionState())
			s.inPeerID = s.err != nil
			if s.err == nil {
				_, s.err = tc.Write([]byte{'!'})
			}
		}
		done <- s
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	tc := tls.Client(conn, cliCfg)
	if cli.err = tc.Handshake(); cli.err == nil {
		if _, cli.err = io.ReadFull(tc, make([]byte, 1)); cli.err == nil && cliCred != nil {
			cli.id, cli.name, cli.err = cliCred.PeerID(tc.ConnectionState())
			cli.inPeerID = cli.err != nil
		}
	}
	conn.Close() // so that a server waiting to read gives up
	return <-done, cli
}

func TestHandshake(t *testing.T) {
	dir := newNetwork(t)
	a, b := admit(t, dir, "alpha"), admit(t, dir, "beta")
	// Through files, as nodes will.
	a, err := Load(save(t, a))
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := connect(t, a, a.ServerTLS(), b, b.ClientTLS())
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if srv.id != b.ID() || srv.name != "beta" {
		t.Errorf("server saw %s %s; want beta %s", srv.name, srv.id, b.ID())
	}
	if cli.id != a.ID() || cli.name != "alpha" {
		t.Errorf("client saw %s %s; want alpha %s", cli.name, cli.id, a.ID())
	}
	// A node can talk to itself (one process running two roles).
	if srv, cli := connect(t, a, a.ServerTLS(), a, a.ClientTLS()); srv.err != nil || cli.err != nil || srv.id != a.ID() {
		t.Errorf("self connection: %+v %+v", srv, cli)
	}

	if _, _, err := a.PeerID(tls.ConnectionState{}); err == nil {
		t.Error("PeerID of an unfinished handshake succeeded")
	}
}

func TestConfigs(t *testing.T) {
	c := admit(t, newNetwork(t), "n")
	s, cl := c.ServerTLS(), c.ClientTLS()
	if s.MinVersion != tls.VersionTLS13 || cl.MinVersion != tls.VersionTLS13 {
		t.Error("not TLS 1.3 only")
	}
	if s.ClientAuth != tls.RequireAndVerifyClientCert || s.ClientCAs == nil || cl.RootCAs != nil || cl.VerifyConnection == nil {
		t.Error("server does not require client certificates of the network, or the client trusts more than it")
	}
	if c.ServerTLS() == s {
		t.Error("ServerTLS shares its result")
	}
}

func TestHandshakeOtherNetwork(t *testing.T) {
	a := admit(t, newNetwork(t), "alpha")
	x := admit(t, newNetwork(t), "alpha") // same name, another network

	// Both ends refuse: the client first, as it checks the server first.
	srv, cli := connect(t, a, a.ServerTLS(), x, x.ClientTLS())
	if !srv.refused() || !cli.refused() || !strings.Contains(cli.err.Error(), "not valid in network "+x.Network()) {
		t.Errorf("client of another network: server %+v, client %+v", srv, cli)
	}
	// A client of another network that would accept the server is refused
	// by the server.
	trusting := x.ClientTLS()
	trusting.VerifyConnection = nil
	srv, cli = connect(t, a, a.ServerTLS(), nil, trusting)
	if !srv.refused() || srv.id != "" || !cli.refused() {
		t.Errorf("client of another network: server %+v, client %+v", srv, cli)
	} else if !strings.Contains(srv.err.Error(), "unknown authority") {
		t.Errorf("server's error %v; want an unknown authority", srv.err)
	}

	srv, cli = connect(t, x, x.ServerTLS(), nil, a.ClientTLS()) // nil: the handshake itself must fail
	if !cli.refused() || cli.id != "" || !srv.refused() {
		t.Errorf("server of another network: server %+v, client %+v", srv, cli)
	} else if !strings.Contains(cli.err.Error(), "not valid in network "+a.Network()) {
		t.Errorf("client's error %v", cli.err)
	}
}

func TestHandshakeNoClientCertificate(t *testing.T) {
	a := admit(t, newNetwork(t), "alpha")
	anon := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	srv, cli := connect(t, a, a.ServerTLS(), nil, anon)
	if !srv.refused() || !cli.refused() {
		t.Fatalf("client without a certificate: server %+v, client %+v", srv, cli)
	}
	if !strings.Contains(srv.err.Error(), "didn't provide a certificate") {
		t.Errorf("server's error %v", srv.err)
	}
}

func TestHandshakeExpired(t *testing.T) {
	dir := newNetwork(t)
	ok := admit(t, dir, "ok")
	now := time.Now()
	old, err := authorityOf(t, dir).issue("old", newKey(t), now.Add(-2*DefaultValidity), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := connect(t, ok, ok.ServerTLS(), old, old.ClientTLS())
	if !srv.refused() || !cli.refused() || !strings.Contains(srv.err.Error(), "expired") {
		t.Errorf("expired client: server %+v, client %+v", srv, cli)
	}
	srv, cli = connect(t, old, old.ServerTLS(), nil, ok.ClientTLS())
	if !cli.refused() || !strings.Contains(cli.err.Error(), "expired") {
		t.Errorf("expired server: server %+v, client %+v", srv, cli)
	}
}

// TestHandshakeNotANode: a certificate signed by the network's key but not
// shaped like a node's (here without its URI) is refused at both ends.
func TestHandshakeNotANode(t *testing.T) {
	dir := newNetwork(t)
	ok := admit(t, dir, "ok")
	a := authorityOf(t, dir)
	bare, err := a.issue("bare", newKey(t), time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Re-sign without the URI SAN.
	tmpl := *bare.cert
	tmpl.URIs = nil
	bare = sign(t, a, &tmpl)
	srv, cli := connect(t, ok, ok.ServerTLS(), bare, bare.ClientTLS())
	if !srv.refused() || !cli.refused() || !strings.Contains(srv.err.Error(), "waggle:node/bare") {
		t.Errorf("client without the node URI: server %+v, client %+v", srv, cli)
	}
	srv, cli = connect(t, bare, bare.ServerTLS(), nil, ok.ClientTLS())
	if !cli.refused() || !strings.Contains(cli.err.Error(), "waggle:node/bare") {
		t.Errorf("server without the node URI: server %+v, client %+v", srv, cli)
	}
}
