package admission

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// A Credential is what a node needs to be a member of a network: its
// certificate and private key, the network's certificate, and the gossip
// key. Its file is one PEM file holding, in order, the node's certificate,
// the network's certificate, the node's PKCS #8 private key and the gossip
// key ("WAGGLE GOSSIP KEY"); text outside the blocks is ignored.
type Credential struct {
	name   string
	id     string
	cert   *x509.Certificate
	ca     *x509.Certificate
	roots  *x509.CertPool // just ca
	key    crypto.Signer
	gossip []byte
	// verified holds the peer certificates that verified, so that each
	// request on a connection does not repeat the chain check of its
	// handshake (a signature verification: the largest cost of a small
	// peer request).
	verified *verifiedCache
}

func newCredential(cert, ca *x509.Certificate, key crypto.Signer, gossip []byte) *Credential {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &Credential{
		name:     cert.Subject.CommonName,
		id:       certID(cert),
		cert:     cert,
		ca:       ca,
		roots:    roots,
		key:      key,
		gossip:   gossip,
		verified: &verifiedCache{},
	}
}

// certID is a node's identity: the hex SHA-256 of its certified public key
// (the certificate's SubjectPublicKeyInfo).
func certID(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// Load reads and verifies a credential file: its certificate is signed by
// the network certificate it holds, is a node's, and is valid now, and its
// private key matches it.
func Load(path string) (*Credential, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parse(data)
	if err == nil {
		err = c.checkTime(time.Now())
	}
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// parse parses a credential file and checks everything but the time.
func parse(data []byte) (*Credential, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("admission: credential is larger than %d bytes", maxFileSize)
	}
	var certs [][]byte
	var keyDER, gossip []byte
	blocks := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks++
		switch b.Type {
		case "CERTIFICATE":
			certs = append(certs, b.Bytes)
		case "PRIVATE KEY":
			if keyDER != nil {
				return nil, errors.New("admission: credential holds two private keys")
			}
			keyDER = b.Bytes
		case gossipPEMType:
			if gossip != nil {
				return nil, errors.New("admission: credential holds two gossip keys")
			}
			gossip = b.Bytes
		default:
			return nil, fmt.Errorf("admission: credential holds an unexpected %.40q PEM block", b.Type)
		}
	}
	// pem.Decode skips a damaged block silently; count what it should have seen.
	if n := bytes.Count(data, []byte("-----BEGIN ")); n != blocks {
		return nil, fmt.Errorf("admission: credential has %d damaged PEM blocks", n-blocks)
	}
	switch {
	case blocks == 0:
		return nil, errors.New("admission: not a credential file (no PEM blocks)")
	case len(certs) != 2:
		return nil, fmt.Errorf("admission: credential holds %d certificates, want 2 (the node's, then the network's)", len(certs))
	case keyDER == nil:
		return nil, errors.New("admission: credential holds no private key")
	case gossip == nil:
		return nil, errors.New("admission: credential holds no gossip key")
	case len(gossip) != GossipKeySize:
		return nil, fmt.Errorf("admission: credential's gossip key is %d bytes, want %d", len(gossip), GossipKeySize)
	}
	ca, err := x509.ParseCertificate(certs[1])
	if err != nil {
		return nil, fmt.Errorf("admission: network certificate: %w", err)
	}
	if err := checkCA(ca); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certs[0])
	if err != nil {
		return nil, fmt.Errorf("admission: node certificate: %w", err)
	}
	if err := checkNode(cert); err != nil {
		return nil, err
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("admission: the node certificate of %q is not signed by %s (altered, or from another network): %w",
			cert.Subject.CommonName, ca.Subject.CommonName, err)
	}
	key, err := parseKey(keyDER, cert)
	if err != nil {
		return nil, err
	}
	return newCredential(cert, ca, key, gossip), nil
}

// checkTime checks that the credential is valid at now, and the chain
// by the standard verifier too.
func (c *Credential) checkTime(now time.Time) error {
	for _, cert := range []*x509.Certificate{c.cert, c.ca} {
		what := fmt.Sprintf("the credential of node %q", c.name)
		if cert == c.ca {
			what = "the network certificate " + c.ca.Subject.CommonName
		}
		if now.After(cert.NotAfter) {
			return fmt.Errorf("admission: %s expired on %s; the network's operator can renew it", what, cert.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(cert.NotBefore) {
			return fmt.Errorf("admission: %s is not valid before %s; is this machine's clock right?", what, cert.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	return c.verify(c.cert, now, x509.ExtKeyUsageAny)
}

// checkNode checks that cert is shaped like a node's certificate: not an
// authority, named by a valid node name that its URI SAN repeats, and good
// for both ends of a TLS connection.
func checkNode(cert *x509.Certificate) error {
	name := cert.Subject.CommonName
	if cert.IsCA {
		return fmt.Errorf("admission: certificate %q is an authority's, not a node's", name)
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("admission: certificate's %s", strings.TrimPrefix(err.Error(), "admission: "))
	}
	want := nodeURI(name).String()
	if len(cert.URIs) != 1 || cert.URIs[0].String() != want {
		var got []string
		for _, u := range cert.URIs {
			got = append(got, u.String())
		}
		return fmt.Errorf("admission: certificate of %q names URIs %q, want just %s", name, got, want)
	}
	var server, client bool
	for _, u := range cert.ExtKeyUsage {
		server = server || u == x509.ExtKeyUsageServerAuth
		client = client || u == x509.ExtKeyUsageClientAuth
	}
	if !server || !client {
		return fmt.Errorf("admission: certificate of %q is not valid for both TLS server and client", name)
	}
	return nil
}

// verify checks leaf against the network's certificate at now, for usage,
// with the standard verifier and checkNode. Nodes' certificates are signed
// by the network's directly, so no intermediate is accepted.
func (c *Credential) verify(leaf *x509.Certificate, now time.Time, usage x509.ExtKeyUsage) error {
	if c.verified != nil && c.verified.holds(leaf, usage, now) {
		return nil
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       c.roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	}); err != nil {
		return fmt.Errorf("admission: certificate of %.70q is not valid in network %s: %w", leaf.Subject.CommonName, c.Network(), err)
	}
	if err := checkNode(leaf); err != nil {
		return err
	}
	if c.verified != nil {
		c.verified.add(leaf, usage, c.ca)
	}
	return nil
}

// verifiedCache remembers certificates that verified against the network,
// each for the time its chain is valid: within that time the same bytes
// verify again, since the network's certificate does not change under a
// Credential.
type verifiedCache struct {
	mu sync.Mutex
	m  map[verifiedKey]validity
}

type verifiedKey struct {
	raw   [sha256.Size]byte
	usage x509.ExtKeyUsage
}

type validity struct{ notBefore, notAfter time.Time }

// maxVerified bounds the cache; a network has far fewer members.
const maxVerified = 4096

func (v *verifiedCache) holds(leaf *x509.Certificate, usage x509.ExtKeyUsage, now time.Time) bool {
	k := verifiedKey{sha256.Sum256(leaf.Raw), usage}
	v.mu.Lock()
	w, ok := v.m[k]
	v.mu.Unlock()
	return ok && !now.Before(w.notBefore) && !now.After(w.notAfter)
}

func (v *verifiedCache) add(leaf *x509.Certificate, usage x509.ExtKeyUsage, ca *x509.Certificate) {
	w := validity{leaf.NotBefore, leaf.NotAfter}
	if ca.NotBefore.After(w.notBefore) {
		w.notBefore = ca.NotBefore
	}
	if ca.NotAfter.Before(w.notAfter) {
		w.notAfter = ca.NotAfter
	}
	k := verifiedKey{sha256.Sum256(leaf.Raw), usage}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerified {
		v.m = make(map[verifiedKey]validity)
	}
	v.m[k] = w
}

// Name returns the node's name, as certified.
func (c *Credential) Name() string { return c.name }

// ID returns the node's certified identity: the hex SHA-256 of the public
// key in its certificate. It is the same for every copy of the credential,
// and for its renewals.
func (c *Credential) ID() string { return c.id }

// Network returns the network's random identifier, from its certificate.
func (c *Credential) Network() string {
	return strings.TrimPrefix(c.ca.Subject.CommonName, networkCNPrefix)
}

// NotAfter returns when the node's certificate expires.
func (c *Credential) NotAfter() time.Time { return c.cert.NotAfter }

// GossipKey returns a copy of the network's gossip key, for memberlist's
// SecretKey (AES-256).
func (c *Credential) GossipKey() []byte { return bytes.Clone(c.gossip) }

// WriteFile writes the credential to a new file at path, with mode 0600;
// it refuses to overwrite an existing file.
func (c *Credential) WriteFile(path string) error {
	return writeNew(path, c.marshal(), 0o600)
}

func (c *Credential) marshal() []byte {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		panic("admission: " + err.Error()) // the key was parsed from or made as PKCS #8
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "waggle node credential: node %s of network %s\n", c.name, c.Network())
	fmt.Fprintf(&b, "node ID %s, valid until %s\n", c.id, c.cert.NotAfter.UTC().Format(time.RFC3339))
	b.WriteString("SECRET: holds the node's private key and the network's gossip key. Keep it mode 0600.\n\n")
	pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
	pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.ca.Raw})
	pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pem.Encode(&b, &pem.Block{Type: gossipPEMType, Bytes: c.gossip})
	return b.Bytes()
}
