package warc

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
	"testing"
)

func TestDigestMatches(t *testing.T) {
	b := []byte("a payload")
	s1 := sha1.Sum(b)
	s256 := sha256.Sum256(b)
	for _, tc := range []struct {
		digest string
		want   bool
	}{
		{Digest(b), true},
		{"sha1:" + base32.StdEncoding.EncodeToString(s1[:]), true},
		{"SHA1:" + strings.ToLower(base32.StdEncoding.EncodeToString(s1[:])), true},
		{"sha1:" + hex.EncodeToString(s1[:]), true},
		{"sha256:" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(s256[:]), true},
		{"sha256:" + hex.EncodeToString(s256[:]), true},
		{Digest([]byte("another payload")), false},
		{"md5:" + hex.EncodeToString(s1[:16]), false}, // not an algorithm checked
		{"sha1", false},
		{"", false},
	} {
		if got := DigestMatches(tc.digest, b); got != tc.want {
			t.Errorf("DigestMatches(%q) = %v, want %v", tc.digest, got, tc.want)
		}
	}
}
