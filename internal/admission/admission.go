// Package admission is a waggle network's admission control: the network's
// admission key, the credentials it issues to nodes, and the mutual-TLS
// configuration with which admitted nodes, and only they, talk to each other.
//
// An operator creates a network once with Init, which writes the admission
// key to a directory that must stay private (whoever holds it can admit
// nodes), and issues each node a credential file with Admit. A node Loads
// its file and uses ServerTLS and ClientTLS for every peer connection and
// GossipKey to encrypt memberlist's gossip. A node's ID is the hash of its
// certified public key: the network's operator certifies it and the node
// cannot choose it, so neither can it choose its place on the ring.
package admission

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultValidity is how long a node's credential is valid when Admit or
// Renew is given no validity.
const DefaultValidity = 365 * 24 * time.Hour

// GossipKeySize is the length of the gossip key: AES-256, the largest key
// memberlist accepts.
const GossipKeySize = 32

// Files of a network directory. The certificate is public; the other two
// are secrets.
const (
	caCertFile    = "ca.crt"
	caKeyFile     = "ca.key"
	gossipKeyFile = "gossip.key"
	logFile       = "admitted.log" // one line per credential issued
)

const (
	networkCNPrefix = "waggle network "
	nodeURIPrefix   = "node/" // opaque part of the node's URI SAN waggle:node/<name>
	uriScheme       = "waggle"
	gossipPEMType   = "WAGGLE GOSSIP KEY"

	// caValidity is long: a network's certificate cannot be replaced
	// without admitting every node again.
	caValidity = 100 * 365 * 24 * time.Hour
	// backdate makes a certificate valid a little before it is issued, so
	// that a node whose clock is slightly behind the operator's can use its
	// credential at once.
	backdate = time.Hour
)

// Init creates a network's admission key in dir (created with mode 0700 if
// missing): a self-signed Ed25519 CA certificate (ca.crt), its private key
// (ca.key, mode 0600) and a random 32-byte gossip key (gossip.key, mode
// 0600). It refuses to touch a directory that already holds any of them.
func Init(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	for _, f := range []string{caCertFile, caKeyFile, gossipKeyFile} {
		_, err := os.Lstat(filepath.Join(dir, f))
		if err == nil {
			return fmt.Errorf("admission: %s already holds a network (%s exists); refusing to overwrite it", dir, f)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("admission: %w", err)
		}
	}
	var id [8]byte
	rand.Read(id[:])
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: networkCNPrefix + hex.EncodeToString(id[:])},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // nodes only, no intermediate authorities
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	gossip := make([]byte, GossipKeySize)
	rand.Read(gossip)

	// The certificate comes last: a directory is a network once it exists.
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{gossipKeyFile, pem.EncodeToMemory(&pem.Block{Type: gossipPEMType, Bytes: gossip}), 0o600},
		{caKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{caCertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
	}
	for i, f := range files {
		if err := writeNew(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			for _, g := range files[:i] { // leave no half network behind
				os.Remove(filepath.Join(dir, g.name))
			}
			return err
		}
	}
	return nil
}

// Admit issues a credential for a new node called name from the network in
// dir: a fresh Ed25519 key pair and a certificate for it signed by the
// network's key, valid for validity (DefaultValidity if 0). The name is a
// DNS label: 1 to 63 lower-case letters, digits and hyphens, not starting
// or ending with a hyphen. Each credential issued is recorded in the
// directory's admitted.log. Write the credential with WriteFile.
func Admit(dir, name string, validity time.Duration) (Credential, error) {
	if err := checkName(name); err != nil {
		return Credential{}, err
	}
	a, err := loadAuthority(dir)
	if err != nil {
		return Credential{}, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Credential{}, fmt.Errorf("admission: %w", err)
	}
	return a.admit("admitted", name, key, validity)
}

// Renew issues a new certificate for the node whose credential file is at
// path (which may have expired) from the network in dir, keeping the node's
// name and key pair, and so its ID and its place on the ring. The old
// credential must belong to this network.
func Renew(dir, path string, validity time.Duration) (Credential, error) {
	a, err := loadAuthority(dir)
	if err != nil {
		return Credential{}, err
	}
	data, err := readFile(path)
	if err != nil {
		return Credential{}, err
	}
	old, err := parse(data)
	if err != nil {
		return Credential{}, fmt.Errorf("%w (in %s)", err, path)
	}
	if !old.ca.Equal(a.cert) {
		return Credential{}, fmt.Errorf("admission: %s is a credential of %s, not of the network in %s (%s)",
			path, old.ca.Subject.CommonName, dir, a.cert.Subject.CommonName)
	}
	return a.admit("renewed", old.name, old.key, validity)
}

// authority is a network's admission key, as read from its directory.
type authority struct {
	dir    string
	cert   *x509.Certificate
	key    crypto.Signer
	gossip []byte
}

func loadAuthority(dir string) (*authority, error) {
	read := func(name, typ string) ([]byte, error) {
		path := filepath.Join(dir, name)
		b, err := readFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("admission: no network in %s (%s is missing; create one with init)", dir, name)
		}
		if err != nil {
			return nil, err
		}
		block, rest := pem.Decode(b)
		if block == nil || block.Type != typ || strings.TrimSpace(string(rest)) != "" {
			return nil, fmt.Errorf("admission: %s does not hold a single PEM %s block", path, typ)
		}
		return block.Bytes, nil
	}
	a := &authority{dir: dir}
	der, err := read(caCertFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	if a.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("admission: %s: %w", filepath.Join(dir, caCertFile), err)
	}
	if err := checkCA(a.cert); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, filepath.Join(dir, caCertFile))
	}
	keyDER, err := read(caKeyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	if a.key, err = parseKey(keyDER, a.cert); err != nil {
		return nil, fmt.Errorf("%w (%s does not go with %s)", err, caKeyFile, caCertFile)
	}
	if a.gossip, err = read(gossipKeyFile, gossipPEMType); err != nil {
		return nil, err
	}
	if len(a.gossip) != GossipKeySize {
		return nil, fmt.Errorf("admission: %s: gossip key is %d bytes, want %d", filepath.Join(dir, gossipKeyFile), len(a.gossip), GossipKeySize)
	}
	now := time.Now()
	if now.After(a.cert.NotAfter) {
		return nil, fmt.Errorf("admission: the network's certificate expired on %s; it can admit no more nodes", a.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return a, nil
}

// admit issues a credential, valid from now, and records it in the log;
// verb is what the log says was done.
func (a *authority) admit(verb, name string, key crypto.Signer, validity time.Duration) (Credential, error) {
	if validity == 0 {
		validity = DefaultValidity
	}
	if validity < 0 {
		return Credential{}, fmt.Errorf("admission: negative validity %v", validity)
	}
	now := time.Now()
	notAfter := now.Add(validity)
	if notAfter.After(a.cert.NotAfter) {
		return Credential{}, fmt.Errorf("admission: validity %v would outlast the network's certificate (until %s)",
			validity, a.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	c, err := a.issue(name, key, now.Add(-backdate), notAfter)
	if err != nil {
		return Credential{}, err
	}
	// The record comes before the credential is handed out: a credential
	// whose issue could not be recorded is never used.
	line := fmt.Sprintf("%s %s name=%s id=%s serial=%x not-after=%s\n", now.UTC().Format(time.RFC3339),
		verb, c.name, c.id, c.cert.SerialNumber, c.cert.NotAfter.UTC().Format(time.RFC3339))
	f, err := os.OpenFile(filepath.Join(a.dir, logFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return Credential{}, fmt.Errorf("admission: %w", err)
	}
	_, err = io.WriteString(f, line)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Credential{}, fmt.Errorf("admission: recording the credential: %w", err)
	}
	return *c, nil
}

// issue signs a node certificate for key and returns the credential.
func (a *authority) issue(name string, key crypto.Signer, notBefore, notAfter time.Time) (*Credential, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{nodeURI(name)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	return newCredential(cert, a.cert, key, a.gossip), nil
}

func nodeURI(name string) *url.URL {
	return &url.URL{Scheme: uriScheme, Opaque: nodeURIPrefix + name}
}

// checkName reports whether name can name a node: a DNS label, lower case
// so that two names never differ only in case.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("admission: empty node name")
	case len(name) > 63:
		return fmt.Errorf("admission: node name %.20q… is %d bytes long; at most 63", name, len(name))
	case name[0] == '-' || name[len(name)-1] == '-':
		return fmt.Errorf("admission: node name %q starts or ends with a hyphen", name)
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9', b == '-':
		case 'A' <= b && b <= 'Z':
			return fmt.Errorf("admission: node name %q has upper-case letters; use lower case", name)
		default:
			return fmt.Errorf("admission: node name %q: only letters a-z, digits and hyphens are allowed", name)
		}
	}
	return nil
}

// checkCA checks that cert is a waggle network's certificate: a self-signed
// authority named like one.
func checkCA(cert *x509.Certificate) error {
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return errors.New("admission: the network certificate is not a certificate authority")
	}
	if !strings.HasPrefix(cert.Subject.CommonName, networkCNPrefix) {
		return fmt.Errorf("admission: the network certificate's name %q is not a waggle network's", cert.Subject.CommonName)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		return fmt.Errorf("admission: the network certificate is not self-signed (damaged?): %w", err)
	}
	return nil
}

// parseKey parses a PKCS #8 private key and checks that it belongs to cert.
func parseKey(der []byte, cert *x509.Certificate) (crypto.Signer, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("admission: private key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("admission: private key of type %T cannot sign", k)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("admission: the private key does not match the certificate of %q", cert.Subject.CommonName)
	}
	return signer, nil
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1)) // positive, as RFC 5280 requires
}

// maxFileSize bounds what is read as a key or credential file; a
// credential is about 2 KB.
const maxFileSize = 1 << 20

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("admission: %s is larger than %d bytes; not a key or credential file", path, maxFileSize)
	}
	return b, nil
}

// writeNew writes a new file at path with mode perm, atomically and never
// over an existing file: a reader sees all of the file or nothing, and an
// existing key or credential is never lost.
func writeNew(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	// A hard link, unlike a rename, fails if path exists.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("admission: %s exists; refusing to overwrite it", path)
		}
		return fmt.Errorf("admission: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // make the new name durable
		d.Sync()
		d.Close()
	}
	return nil
}
