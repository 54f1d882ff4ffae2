package admission

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"
)

// ServerTLS returns a new TLS 1.3 configuration for a node's peer listener:
// it presents the node's certificate and accepts only clients that present
// a valid node certificate of the same network. Get the client's identity
// with PeerID.
func (c *Credential) ServerTLS() *tls.Config {
	cert := c.tlsCertificate()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.roots, // the network's certificate only, never the system's roots
		// The handshake has verified the chain; this adds what is
		// particular to nodes (the URI SAN, no intermediates), and runs
		// on resumed sessions too.
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, _, err := c.peer(cs, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// ClientTLS returns a new TLS 1.3 configuration for connections to peers:
// it presents the node's certificate and accepts only servers that present
// a valid node certificate of the same network, whatever their address.
// Check that the server is the node meant with PeerID.
func (c *Credential) ClientTLS() *tls.Config {
	cert := c.tlsCertificate()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Always present the certificate, even to a server of another
		// network, so that its refusal says why.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		},
		// Peers are dialled by IP address and port, and their
		// certificates name nodes, not hosts, so the standard
		// verification, which checks a host name, cannot be used. It is
		// turned off here only to be replaced by VerifyConnection, which
		// verifies the full chain against the network's certificate alone
		// (not the system's roots), the validity period, the server usage
		// and the node's URI SAN, on every handshake, resumed or not.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, _, err := c.peer(cs, x509.ExtKeyUsageServerAuth)
			return err
		},
	}
}

// PeerID returns the ID and name of the node at the other end of a
// connection configured by ServerTLS or ClientTLS, after its handshake. It
// verifies the peer's certificate against the network again, so it is
// safe on any connection state, and fails once that certificate expires.
func (c *Credential) PeerID(state tls.ConnectionState) (id, name string, err error) {
	if !state.HandshakeComplete {
		return "", "", errors.New("admission: TLS handshake not complete")
	}
	return c.peer(state, x509.ExtKeyUsageAny)
}

func (c *Credential) peer(cs tls.ConnectionState, usage x509.ExtKeyUsage) (id, name string, err error) {
	if len(cs.PeerCertificates) == 0 {
		return "", "", errors.New("admission: the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if err := c.verify(leaf, time.Now(), usage); err != nil {
		return "", "", err
	}
	return certID(leaf), leaf.Subject.CommonName, nil
}

func (c *Credential) tlsCertificate() tls.Certificate {
	return tls.Certificate{
		Certificate: [][]byte{c.cert.Raw},
		PrivateKey:  c.key,
		Leaf:        c.cert,
	}
}
