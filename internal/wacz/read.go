package wacz

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
)

// maxManifest bounds datapackage.json and datapackage-digest.json: a manifest
// lists files, and even a million of them fit.
const maxManifest = 256 << 20

// Reader reads a WACZ file. Every file it opens is checked, as it is read,
// against the size and hash datapackage.json gives for it.
type Reader struct {
	Package Package // the parsed datapackage.json

	zr        *zip.Reader
	closer    io.Closer
	files     map[string]*zip.File
	resources map[string]Resource
}

// Open opens the WACZ file at path; see NewReader.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wacz: %w", err)
	}
	r, err := NewReader(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	r.closer = f
	return r, nil
}

// NewReader reads the ZIP directory and the manifest of a WACZ of size bytes.
// It checks that datapackage.json is there and well-formed, that
// datapackage-digest.json (if present) holds its hash, that every resource it
// lists is in the ZIP, and that every WARC file in the ZIP is listed (so none
// can be read unchecked). It does not read the files themselves; Verify does.
func NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	zr, err := zip.NewReader(ra, size)
	if err != nil {
		return nil, fmt.Errorf("wacz: not a ZIP file: %w", err)
	}
	r := &Reader{zr: zr, files: map[string]*zip.File{}, resources: map[string]Resource{}}
	for _, f := range zr.File {
		if _, dup := r.files[f.Name]; dup {
			return nil, fmt.Errorf("wacz: the ZIP holds %q twice", f.Name)
		}
		r.files[f.Name] = f
	}
	raw, err := r.readSmall(pathPackage)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &r.Package); err != nil {
		return nil, fmt.Errorf("wacz: %s: %w", pathPackage, err)
	}
	if r.Package.Profile != "data-package" {
		return nil, fmt.Errorf("wacz: %s: profile is %q, want \"data-package\"", pathPackage, r.Package.Profile)
	}
	if _, ok := r.files[pathPackageDigest]; ok {
		if err := r.checkPackageDigest(raw); err != nil {
			return nil, err
		}
	}
	for _, res := range r.Package.Resources {
		if _, ok := r.files[res.Path]; !ok {
			return nil, fmt.Errorf("wacz: %s lists %q, which is not in the ZIP", pathPackage, res.Path)
		}
		if _, _, err := newHash(res.Hash); err != nil {
			return nil, fmt.Errorf("wacz: %s: %s: %w", pathPackage, res.Path, err)
		}
		if res.Bytes < 0 {
			return nil, fmt.Errorf("wacz: %s: %s: negative size", pathPackage, res.Path)
		}
		if _, dup := r.resources[res.Path]; dup {
			return nil, fmt.Errorf("wacz: %s lists %q twice", pathPackage, res.Path)
		}
		r.resources[res.Path] = res
	}
	for _, name := range r.WARCs() {
		if _, ok := r.resources[name]; !ok {
			return nil, fmt.Errorf("wacz: %s is not listed in %s, so it cannot be checked", name, pathPackage)
		}
	}
	return r, nil
}

// readSmall reads a whole manifest file.
func (r *Reader) readSmall(name string) ([]byte, error) {
	f, ok := r.files[name]
	if !ok {
		return nil, fmt.Errorf("wacz: no %s: not a WACZ file", name)
	}
	if f.UncompressedSize64 > maxManifest {
		return nil, fmt.Errorf("wacz: %s is %d bytes, over the %d-byte limit", name, f.UncompressedSize64, maxManifest)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("wacz: %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("wacz: %s: %w", name, err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("wacz: %s is over the %d-byte limit", name, maxManifest)
	}
	return b, nil
}

func (r *Reader) checkPackageDigest(pkg []byte) error {
	raw, err := r.readSmall(pathPackageDigest)
	if err != nil {
		return err
	}
	var d packageDigest
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("wacz: %s: %w", pathPackageDigest, err)
	}
	if d.Path != pathPackage {
		return fmt.Errorf("wacz: %s: path is %q, want %q", pathPackageDigest, d.Path, pathPackage)
	}
	h, want, err := newHash(d.Hash)
	if err != nil {
		return fmt.Errorf("wacz: %s: %w", pathPackageDigest, err)
	}
	h.Write(pkg)
	if !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("wacz: %s does not match the hash in %s: the manifest was altered or damaged", pathPackage, pathPackageDigest)
	}
	return nil
}

// Close releases the file opened by Open.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// WARCs lists the WARC files of the archive/ directory in ZIP order.
func (r *Reader) WARCs() []string {
	var names []string
	for _, f := range r.zr.File {
		dir, base := path.Split(f.Name)
		if dir == "archive/" && (strings.HasSuffix(base, ".warc") || strings.HasSuffix(base, ".warc.gz")) {
			names = append(names, f.Name)
		}
	}
	return names
}

// ErrMismatch reports a file whose size or hash differs from its manifest entry.
var ErrMismatch = errors.New("wacz: file does not match datapackage.json")

// Open opens a file of the WACZ. If datapackage.json lists it, reading it to
// the end returns ErrMismatch instead of io.EOF when its size or hash differs;
// a damaged ZIP entry gives zip.ErrChecksum.
func (r *Reader) Open(name string) (io.ReadCloser, error) {
	f, ok := r.files[name]
	if !ok {
		return nil, fmt.Errorf("wacz: no %s in the ZIP", name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("wacz: %s: %w", name, err)
	}
	res, listed := r.resources[name]
	if !listed {
		return rc, nil
	}
	h, want, _ := newHash(res.Hash) // checked in NewReader
	return &checkedReader{rc: rc, name: name, h: h, want: want, size: res.Bytes}, nil
}

// Verify reads every file datapackage.json lists and checks its size and hash.
func (r *Reader) Verify(ctx context.Context) error {
	buf := make([]byte, 256<<10)
	for _, res := range r.Package.Resources {
		rc, err := r.Open(res.Path)
		if err != nil {
			return err
		}
		for {
			if err = ctx.Err(); err != nil {
				break
			}
			if _, err = rc.Read(buf); err != nil {
				break
			}
		}
		rc.Close()
		if !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}

// checkedReader hashes a file as it is read and checks it at the end.
type checkedReader struct {
	rc   io.ReadCloser
	name string
	h    hash.Hash
	want []byte
	size int64
	n    int64
	err  error
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	// Never read more than one byte past the listed size: a mislabeled entry
	// (a ZIP bomb, say) stops there.
	if rest := c.size + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.rc.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	switch {
	case c.n > c.size:
		c.err = fmt.Errorf("%w: %s is longer than the %d bytes listed", ErrMismatch, c.name, c.size)
		return n, c.err
	case errors.Is(err, io.EOF) && c.n < c.size:
		c.err = fmt.Errorf("%w: %s has %d bytes, %d listed", ErrMismatch, c.name, c.n, c.size)
		return n, c.err
	case errors.Is(err, io.EOF) && !bytes.Equal(c.h.Sum(nil), c.want):
		c.err = fmt.Errorf("%w: %s: hash differs", ErrMismatch, c.name)
		return n, c.err
	case errors.Is(err, zip.ErrChecksum):
		c.err = fmt.Errorf("wacz: %s is damaged: %w", c.name, err)
		return n, c.err
	case err != nil && !errors.Is(err, io.EOF):
		c.err = fmt.Errorf("wacz: %s: %w", c.name, err)
		return n, c.err
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.rc.Close() }
