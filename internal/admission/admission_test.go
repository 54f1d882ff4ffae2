package admission

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func newNetwork(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "net")
	if err := Init(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func admit(t testing.TB, dir, name string) *Credential {
	t.Helper()
	c, err := Admit(dir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// save writes c to a new file and returns its path.
func save(t testing.TB, c *Credential) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), c.Name()+".pem")
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func authorityOf(t testing.TB, dir string) *authority {
	t.Helper()
	a, err := loadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRoundTrip(t *testing.T) {
	dir := newNetwork(t)
	before := time.Now().Truncate(time.Second)
	c1 := admit(t, dir, "node-1")
	after := time.Now()
	path := save(t, c1)

	l1, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Name() != "node-1" || l1.ID() != c1.ID() || l2.ID() != c1.ID() || l1.Network() != c1.Network() {
		t.Errorf("loaded %s %s %s, twice %s; issued %s %s %s", l1.Name(), l1.ID(), l1.Network(), l2.ID(), c1.Name(), c1.ID(), c1.Network())
	}
	if !l1.cert.Equal(c1.cert) || !l1.ca.Equal(c1.ca) || !bytes.Equal(l1.GossipKey(), c1.GossipKey()) {
		t.Error("loaded credential differs from the issued one")
	}
	// The ID is the hash of the node's public key, computed independently.
	spki, err := x509.MarshalPKIXPublicKey(l1.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(spki); l1.ID() != hex.EncodeToString(sum[:]) {
		t.Errorf("ID %s is not the SHA-256 of the public key", l1.ID())
	}
	if len(l1.Network()) != 16 || strings.Contains(l1.Network(), " ") {
		t.Errorf("network id %q", l1.Network())
	}
	if na := l1.NotAfter(); na.Before(before.Add(DefaultValidity)) || na.After(after.Add(DefaultValidity)) {
		t.Errorf("expires %v; want a year after issue (%v)", na, before)
	}
	if u := l1.cert.URIs; len(u) != 1 || u[0].String() != "waggle:node/node-1" {
		t.Errorf("URI SANs %v", u)
	}

	c2 := admit(t, dir, "node-2")
	if c2.ID() == c1.ID() || c2.Network() != c1.Network() || !bytes.Equal(c2.GossipKey(), c1.GossipKey()) {
		t.Errorf("second node: ID %s (first %s), network %s", c2.ID(), c1.ID(), c2.Network())
	}
	// The same name admitted again is a different node.
	if again := admit(t, dir, "node-1"); again.ID() == c1.ID() {
		t.Error("a second admission of a name has the same ID")
	}

	// The gossip key is the network's, 32 random bytes, handed out as a copy.
	b, err := os.ReadFile(filepath.Join(dir, gossipKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	g := l1.GossipKey()
	if block == nil || !bytes.Equal(block.Bytes, g) || len(g) != 32 || bytes.Equal(g, make([]byte, 32)) {
		t.Fatalf("gossip key %x, network's %v", g, block)
	}
	g[0] ^= 1
	if bytes.Equal(l1.GossipKey(), g) {
		t.Error("GossipKey returned the credential's own slice")
	}
}

func TestInitRefusesOverwrite(t *testing.T) {
	dir := newNetwork(t)
	read := func() map[string][]byte {
		m := map[string][]byte{}
		for _, f := range []string{caCertFile, caKeyFile, gossipKeyFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			m[f] = b
		}
		return m
	}
	was := read()
	err := Init(dir)
	if err == nil || !strings.Contains(err.Error(), "already holds a network") {
		t.Fatalf("second Init: %v", err)
	}
	for f, b := range read() {
		if !bytes.Equal(b, was[f]) {
			t.Errorf("%s changed", f)
		}
	}

	// Any one of the files is enough to refuse, and it is left alone.
	part := t.TempDir()
	if err := os.WriteFile(filepath.Join(part, caKeyFile), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Init(part); err == nil {
		t.Fatal("Init over an existing ca.key succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(part, caKeyFile)); string(b) != "precious" {
		t.Errorf("ca.key is now %q", b)
	}
	if _, err := os.Stat(filepath.Join(part, gossipKeyFile)); err == nil {
		t.Error("refused Init wrote a gossip key")
	}
	// That incomplete directory cannot admit.
	if _, err := Admit(part, "n", 0); err == nil || !strings.Contains(err.Error(), "no network") {
		t.Errorf("Admit from an incomplete network: %v", err)
	}
}

func TestFileModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix file modes")
	}
	dir := newNetwork(t)
	c := admit(t, dir, "n1")
	cred := save(t, c)
	for path, want := range map[string]os.FileMode{
		dir:                               0o700 | os.ModeDir,
		filepath.Join(dir, caKeyFile):     0o600,
		filepath.Join(dir, gossipKeyFile): 0o600,
		filepath.Join(dir, logFile):       0o600,
		filepath.Join(dir, caCertFile):    0o644,
		cred:                              0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode(), want)
		}
	}
	// No temporary file is left behind.
	for _, d := range []string{dir, filepath.Dir(cred)} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("left %s in %s", e.Name(), d)
			}
		}
	}
}

func TestWriteFileRefusesOverwrite(t *testing.T) {
	dir := newNetwork(t)
	c1, c2 := admit(t, dir, "n1"), admit(t, dir, "n2")
	path := save(t, c1)
	err := c2.WriteFile(path)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("WriteFile over a credential: %v", err)
	}
	if l, err := Load(path); err != nil || l.ID() != c1.ID() {
		t.Fatalf("after refused overwrite: %v, %v", l, err)
	}
}

func TestAdmitErrors(t *testing.T) {
	dir := newNetwork(t)
	for _, tc := range []struct {
		dir, name string
		validity  time.Duration
		want      string
	}{
		{t.TempDir(), "n1", 0, "no network"},
		{dir, "Node1", 0, "lower case"},
		{dir, "", 0, "empty"},
		{dir, "n1", -time.Hour, "negative validity"},
		{dir, "n1", 200 * 365 * 24 * time.Hour, "outlast"},
	} {
		if _, err := Admit(tc.dir, tc.name, tc.validity); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Admit(%q, %v): %v; want an error saying %q", tc.name, tc.validity, err, tc.want)
		}
	}

	// A network key that does not go with the certificate is refused.
	other := newNetwork(t)
	key, err := os.ReadFile(filepath.Join(other, caKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Admit(dir, "n1", 0); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Admit with another network's key: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, name := range []string{"a", "node-1", "0", "abc-def-123", strings.Repeat("x", 63)} {
		if err := checkName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "-a", "a-", "A", "a.b", "a_b", "a b", "né", "a/b", strings.Repeat("x", 64), "a\x00"} {
		if err := checkName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestExpiredAndRenew(t *testing.T) {
	dir := newNetwork(t)
	a := authorityOf(t, dir)
	now := time.Now()
	old, err := a.issue("old", newKey(t), now.Add(-2*DefaultValidity), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	path := save(t, old)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Load of an expired credential: %v", err)
	}
	future, err := a.issue("future", newKey(t), now.Add(time.Hour), now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(save(t, future)); err == nil || !strings.Contains(err.Error(), "not valid before") {
		t.Fatalf("Load of a credential not yet valid: %v", err)
	}

	// Renewal keeps the name and the ID, and the new file loads.
	r, err := Renew(dir, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "old" || r.ID() != old.ID() || !r.NotAfter().After(now) {
		t.Errorf("renewed %s %s until %v; was %s %s", r.Name(), r.ID(), r.NotAfter(), old.Name(), old.ID())
	}
	if l, err := Load(save(t, &r)); err != nil || l.ID() != old.ID() {
		t.Errorf("renewed credential: %v, %v", l, err)
	}

	// A credential of another network is not renewed.
	other := admit(t, newNetwork(t), "stranger")
	if _, err := Renew(dir, save(t, other), 0); err == nil || !strings.Contains(err.Error(), "not of the network") {
		t.Errorf("Renew of another network's credential: %v", err)
	}
}

func TestAdmittedLog(t *testing.T) {
	dir := newNetwork(t)
	c1, c2 := admit(t, dir, "n1"), admit(t, dir, "n2")
	if _, err := Renew(dir, save(t, c1), 0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, logFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{" admitted name=n1 id=" + c1.ID(), " admitted name=n2 id=" + c2.ID(), " renewed name=n1 id=" + c1.ID()}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", b)
	}
	for i, l := range lines {
		if !strings.Contains(l, want[i]) || !strings.Contains(l, "not-after=") {
			t.Errorf("log line %q, want %q", l, want[i])
		}
	}
}

// blocks returns the PEM blocks of a credential.
func blocks(t testing.TB, c *Credential) []*pem.Block {
	t.Helper()
	var bs []*pem.Block
	for rest := c.marshal(); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return bs
		}
		bs = append(bs, b)
	}
}

func encode(bs ...*pem.Block) []byte {
	var b bytes.Buffer
	for _, x := range bs {
		pem.Encode(&b, x)
	}
	return b.Bytes()
}

func TestTampered(t *testing.T) {
	dir := newNetwork(t)
	c, other := admit(t, dir, "node-1"), admit(t, dir, "node-2")
	stranger := admit(t, newNetwork(t), "node-1")
	bs, obs, sbs := blocks(t, c), blocks(t, other), blocks(t, stranger)

	// The name changed in place, in the subject and in the URI: still a
	// well-formed certificate, but no longer the one the network signed.
	forged := *bs[0]
	forged.Bytes = bytes.ReplaceAll(bs[0].Bytes, []byte("node-1"), []byte("node-9"))
	if _, err := x509.ParseCertificate(forged.Bytes); err != nil {
		t.Fatal(err)
	}
	// One bit of the signature flipped.
	flipped := *bs[0]
	flipped.Bytes = bytes.Clone(bs[0].Bytes)
	flipped.Bytes[len(flipped.Bytes)-1] ^= 1

	for _, tc := range []struct {
		what string
		file []byte
		want string
	}{
		{"altered name", encode(&forged, bs[1], bs[2], bs[3]), "not signed by"},
		{"altered signature", encode(&flipped, bs[1], bs[2], bs[3]), "not signed by"},
		{"another node's key", encode(bs[0], bs[1], obs[2], bs[3]), "does not match"},
		{"another network's node", encode(sbs[0], bs[1], sbs[2], bs[3]), "not signed by"},
		{"another network's authority", encode(bs[0], sbs[1], bs[2], bs[3]), "not signed by"},
		{"certificates swapped", encode(bs[1], bs[0], bs[2], bs[3]), "not a certificate authority"},
	} {
		path := filepath.Join(t.TempDir(), "cred.pem")
		if err := os.WriteFile(path, tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want an error saying %q and naming the file", tc.what, err, tc.want)
		}
	}
}

// sign signs tmpl with the network's key for a fresh key pair and returns
// the credential, for certificates Admit would not issue.
func sign(t *testing.T, a *authority, tmpl *x509.Certificate) *Credential {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = newSerial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return newCredential(cert, a.cert, key, a.gossip)
}

// TestNodeShape: certificates signed by the network's key but not issued
// as nodes' are refused.
func TestNodeShape(t *testing.T) {
	dir := newNetwork(t)
	a := authorityOf(t, dir)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, tc := range []struct {
		what string
		tmpl *x509.Certificate
		want string
	}{
		{"no URI", &x509.Certificate{Subject: pkix.Name{CommonName: "n"}, ExtKeyUsage: both}, "want just waggle:node/n"},
		{"URI of another name", &x509.Certificate{Subject: pkix.Name{CommonName: "n"}, ExtKeyUsage: both, URIs: []*url.URL{nodeURI("m")}}, "want just waggle:node/n"},
		{"two URIs", &x509.Certificate{Subject: pkix.Name{CommonName: "n"}, ExtKeyUsage: both, URIs: []*url.URL{nodeURI("n"), nodeURI("m")}}, "want just"},
		{"server only", &x509.Certificate{Subject: pkix.Name{CommonName: "n"}, ExtKeyUsage: both[:1], URIs: []*url.URL{nodeURI("n")}}, "both TLS server and client"},
		{"bad name", &x509.Certificate{Subject: pkix.Name{CommonName: "N!"}, ExtKeyUsage: both, URIs: []*url.URL{nodeURI("N!")}}, "node name"},
	} {
		c := sign(t, a, tc.tmpl)
		path := filepath.Join(t.TempDir(), "cred.pem")
		if err := os.WriteFile(path, c.marshal(), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.what, err, tc.want)
		}
	}
}

func TestLoadMalformed(t *testing.T) {
	c := admit(t, newNetwork(t), "n1")
	good := c.marshal()
	bs := blocks(t, c)
	short := *bs[3]
	short.Bytes = short.Bytes[:16]
	noEnd := bytes.Replace(good, []byte("-----END PRIVATE KEY-----"), nil, 1)
	for _, tc := range []struct {
		what string
		file []byte
		want string
	}{
		{"empty", nil, "no PEM blocks"},
		{"text", []byte("hello\n"), "no PEM blocks"},
		{"truncated", good[:len(good)/2], "damaged PEM"},
		{"block without end", noEnd, "damaged PEM"},
		{"one certificate", encode(bs[0], bs[2], bs[3]), "1 certificates"},
		{"three certificates", encode(bs[0], bs[1], bs[1], bs[2], bs[3]), "3 certificates"},
		{"no key", encode(bs[0], bs[1], bs[3]), "no private key"},
		{"two keys", encode(bs[0], bs[1], bs[2], bs[2], bs[3]), "two private keys"},
		{"no gossip key", encode(bs[0], bs[1], bs[2]), "no gossip key"},
		{"short gossip key", encode(bs[0], bs[1], bs[2], &short), "16 bytes"},
		{"unknown block", encode(bs[0], bs[1], bs[2], bs[3], &pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte{1}}), "unexpected"},
		{"garbage certificate", encode(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("xx")}, bs[1], bs[2], bs[3]), "node certificate"},
		{"garbage key", encode(bs[0], bs[1], &pem.Block{Type: "PRIVATE KEY", Bytes: []byte("xx")}, bs[3]), "private key"},
	} {
		if _, err := parse(tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.what, err, tc.want)
		}
	}
	if _, err := parse(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.pem")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, bytes.Repeat(good, maxFileSize/len(good)+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load of a huge file: %v", err)
	}
}

func FuzzLoad(f *testing.F) {
	c := admit(f, newNetwork(f), "seed")
	good := c.marshal()
	bs := blocks(f, c)
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add(encode(bs[0], bs[1], bs[3]))
	f.Add(encode(bs[1], bs[0], bs[2], bs[3]))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN WAGGLE GOSSIP KEY-----\nAAAA\n-----END WAGGLE GOSSIP KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data)
		if err != nil {
			return
		}
		// What parses is whole: it writes out and parses back the same.
		again, err := parse(c.marshal())
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if again.ID() != c.ID() || again.Name() != c.Name() || !bytes.Equal(again.GossipKey(), c.GossipKey()) {
			t.Fatal("re-parse differs")
		}
	})
}
