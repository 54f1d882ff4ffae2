// Package wacz writes and reads WACZ files (Web Archive Collection Zipped,
// version 1.1.1): a ZIP holding WARC data, a CDXJ index into it, a list of
// pages and a datapackage.json manifest with the SHA-256 of every file, so
// that a selection of the archive can be handed to anyone and replayed by
// ReplayWeb.page, pywb or waggle itself, and checked for damage on arrival.
//
// Export copies the selected records out of an archive byte for byte (each
// record is its own gzip member there) and streams the ZIP: a node's own
// segments (archive.Local), or a whole network's records read from the
// nodes holding them (archive.Network). It checks each record as it reads
// it, reads a few captures ahead of the writer, and holds at most 64 MiB
// of records (or one larger record) in memory. Open reads a WACZ back and
// checks its manifest.
package wacz

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// Version is the WACZ specification version written.
const Version = "1.1.1"

// Paths of the files inside a WACZ that Export writes.
const (
	pathWARC          = "archive/data.warc.gz"
	pathIndex         = "indexes/index.cdxj"
	pathPages         = "pages/pages.jsonl"
	pathPackage       = "datapackage.json"
	pathPackageDigest = "datapackage-digest.json"
)

// Package is the datapackage.json manifest of a WACZ.
type Package struct {
	Profile      string     `json:"profile"`
	WACZVersion  string     `json:"wacz_version"`
	Title        string     `json:"title,omitempty"`
	Description  string     `json:"description,omitempty"`
	Created      string     `json:"created,omitempty"`
	Modified     string     `json:"modified,omitempty"`
	Software     string     `json:"software,omitempty"`
	MainPageURL  string     `json:"mainPageUrl,omitempty"`
	MainPageDate string     `json:"mainPageDate,omitempty"`
	Resources    []Resource `json:"resources"`
}

// Resource is one file listed in datapackage.json.
type Resource struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Hash  string `json:"hash"` // "sha256:<hex>"
	Bytes int64  `json:"bytes"`
}

// packageDigest is datapackage-digest.json.
type packageDigest struct {
	Path string `json:"path"`
	Hash string `json:"hash"`
}

// newHash returns the hash function a datapackage hash value names and the
// expected sum. Frictionless data packages default to MD5 when the value has
// no algorithm prefix; WACZ writers use SHA-256.
func newHash(v string) (hash.Hash, []byte, error) {
	alg, sum, ok := strings.Cut(v, ":")
	if !ok {
		alg, sum = "md5", v
	}
	want, err := hex.DecodeString(sum)
	if err != nil {
		return nil, nil, fmt.Errorf("malformed hash %q", v)
	}
	var h hash.Hash
	switch strings.ToLower(alg) {
	case "sha256":
		h = sha256.New()
	case "md5":
		h = md5.New()
	default:
		return nil, nil, fmt.Errorf("unsupported hash algorithm %q", alg)
	}
	if len(want) != h.Size() {
		return nil, nil, fmt.Errorf("malformed hash %q", v)
	}
	return h, want, nil
}

func sha256Value(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }
