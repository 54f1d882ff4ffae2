package wacz_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
)

type entry struct {
	name string
	data []byte
}

// testWARC is a one-record WARC file as waggle writes it.
func testWARC(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := warc.NewResponse("http://a.test/", time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		[]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<title>A</title>"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	name := w.Segment()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildWACZ zips files with a datapackage.json listing them (changed by
// edit, if given) and its datapackage-digest.json.
func buildWACZ(t testing.TB, files []entry, edit func(*wacz.Package)) []byte {
	t.Helper()
	pkg := wacz.Package{Profile: "data-package", WACZVersion: "1.1.1"}
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		pkg.Resources = append(pkg.Resources, wacz.Resource{
			Name: filepath.Base(f.name), Path: f.name, Hash: "sha256:" + hex.EncodeToString(sum[:]), Bytes: int64(len(f.data)),
		})
	}
	if edit != nil {
		edit(&pkg)
	}
	pj, _ := json.Marshal(pkg)
	sum := sha256.Sum256(pj)
	dj, _ := json.Marshal(map[string]string{"path": "datapackage.json", "hash": "sha256:" + hex.EncodeToString(sum[:])})
	return zipOf(t, append(files, entry{"datapackage.json", pj}, entry{"datapackage-digest.json", dj}))
}

func zipOf(t testing.TB, files []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(f.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func open(b []byte) (*wacz.Reader, error) { return wacz.NewReader(bytes.NewReader(b), int64(len(b))) }

func TestReaderRejects(t *testing.T) {
	w := testWARC(t)
	good := []entry{{"archive/data.warc.gz", w}, {"pages/pages.jsonl", []byte("{}\n")}}
	for _, tc := range []struct {
		name, want string
		file       []byte
	}{
		{"not a zip", "not a ZIP file", []byte("hello, world\n")},
		{"no manifest", "no datapackage.json", zipOf(t, good)},
		{"bad manifest", "datapackage.json", zipOf(t, append(good, entry{"datapackage.json", []byte("{")}))},
		{"wrong profile", "profile", buildWACZ(t, good, func(p *wacz.Package) { p.Profile = "tabular-data-package" })},
		{"missing file", "not in the ZIP", buildWACZ(t, good, func(p *wacz.Package) {
			p.Resources = append(p.Resources, wacz.Resource{Path: "indexes/index.cdxj", Hash: p.Resources[0].Hash})
		})},
		{"unlisted WARC", "not listed", buildWACZ(t, good, func(p *wacz.Package) { p.Resources = p.Resources[1:] })},
		{"bad hash", "malformed hash", buildWACZ(t, good, func(p *wacz.Package) { p.Resources[0].Hash = "sha256:xyz" })},
		{"unknown hash", "unsupported hash", buildWACZ(t, good, func(p *wacz.Package) { p.Resources[0].Hash = "crc32:00000000" })},
		{"duplicate entry", "twice", zipOf(t, append(good, good[0]))},
		{"altered manifest", "datapackage-digest.json", func() []byte {
			b := buildWACZ(t, good, nil)
			// Rebuild with a different manifest but the old digest file.
			zr, _ := zip.NewReader(bytes.NewReader(b), int64(len(b)))
			var files []entry
			for _, f := range zr.File {
				rc, _ := f.Open()
				data, _ := io.ReadAll(rc)
				if f.Name == "datapackage.json" {
					data = bytes.Replace(data, []byte(`"1.1.1"`), []byte(`"1.1.2"`), 1)
				}
				files = append(files, entry{f.Name, data})
			}
			return zipOf(t, files)
		}()},
	} {
		_, err := open(tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "wacz: ") {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestReaderChecksContent(t *testing.T) {
	w := testWARC(t)
	damaged := bytes.Clone(w)
	damaged[len(damaged)/2] ^= 0xff
	for _, tc := range []struct {
		name string
		edit func(*wacz.Package)
		data []byte
	}{
		{"changed bytes", nil, damaged},
		{"longer", nil, append(bytes.Clone(w), 0)},
		{"shorter", nil, w[:len(w)-1]},
	} {
		// The manifest describes w; the ZIP holds tc.data.
		b := buildWACZ(t, []entry{{"archive/data.warc.gz", w}}, nil)
		b = bytes.Replace(b, w, tc.data, 1)
		if len(tc.data) != len(w) {
			// Sizes in the ZIP headers change too: rebuild with the manifest of w.
			sum := sha256.Sum256(w)
			b = buildWACZ(t, []entry{{"archive/data.warc.gz", tc.data}}, func(p *wacz.Package) {
				p.Resources[0].Hash, p.Resources[0].Bytes = "sha256:"+hex.EncodeToString(sum[:]), int64(len(w))
			})
		}
		r, err := open(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = r.Verify(context.Background())
		if !errors.Is(err, wacz.ErrMismatch) && !errors.Is(err, zip.ErrChecksum) {
			t.Errorf("%s: Verify: %v", tc.name, err)
		}
		rc, err := r.Open("archive/data.warc.gz")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(rc)
		rc.Close()
		if !errors.Is(err, wacz.ErrMismatch) && !errors.Is(err, zip.ErrChecksum) {
			t.Errorf("%s: reading to the end: %v", tc.name, err)
		}
	}

	// Intact, it verifies, and its WARC reads.
	r, err := open(buildWACZ(t, []entry{{"archive/data.warc.gz", w}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc, err := r.Open(r.WARCs()[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, w) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
}

// FuzzReader feeds arbitrary bytes to the WACZ reader and reads whatever it
// accepts to the end: no panic, no hang, errors only.
func FuzzReader(f *testing.F) {
	w := testWARC(f)
	f.Add(buildWACZ(f, []entry{{"archive/data.warc.gz", w}, {"pages/pages.jsonl", []byte("{}\n")}}, nil))
	f.Add(buildWACZ(f, []entry{{"archive/data.warc", []byte("WARC/1.1\r\nContent-Length: 0\r\n\r\n\r\n\r\n")}}, nil))
	f.Add(buildWACZ(f, nil, func(p *wacz.Package) { p.Resources = []wacz.Resource{{Path: "datapackage.json", Hash: "md5:00"}} }))
	f.Add(zipOf(f, []entry{{"datapackage.json", []byte(`{"profile":"data-package","resources":null}`)}}))
	f.Add([]byte("PK\x03\x04"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := open(b)
		if err != nil {
			return
		}
		r.Verify(context.Background())
		for _, name := range r.WARCs() {
			rc, err := r.Open(name)
			if err != nil {
				continue
			}
			rd, _ := warc.NewReader(rc)
			for {
				if _, _, err := rd.Next(); err != nil {
					break
				}
			}
			rc.Close()
		}
	})
}
