package archive

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/warc"
)

// member is a gzip member holding one record of type typ with the given
// extra header lines, whose Content-Length says claimed bytes (-1: the
// block's own length).
func member(t *testing.T, typ, id string, extra []string, block []byte, claimed int) []byte {
	t.Helper()
	if claimed < 0 {
		claimed = len(block)
	}
	var rec bytes.Buffer
	fmt.Fprintf(&rec, "WARC/1.1\r\nWARC-Type: %s\r\n", typ)
	if id != "" {
		fmt.Fprintf(&rec, "WARC-Record-ID: %s\r\n", id)
	}
	for _, l := range extra {
		rec.WriteString(l + "\r\n")
	}
	fmt.Fprintf(&rec, "Content-Length: %d\r\n\r\n", claimed)
	rec.Write(block)
	rec.WriteString("\r\n\r\n")
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(rec.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A capture's companions are its request and metadata records right after
// it, up to the metadata record; a larger one than passes between nodes is
// an error, a damaged one ends them.
func TestCompanionsIn(t *testing.T) {
	const x = "<urn:uuid:x>"
	to := func(id string) []string { return []string{"WARC-Concurrent-To: " + id} }
	capture := member(t, "response", x, nil, []byte("HTTP/1.1 200 OK\r\n\r\nhi"), -1)
	request := member(t, "request", "<urn:uuid:q>", to(x), []byte("GET / HTTP/1.1\r\n\r\n"), -1)
	metadata := member(t, "metadata", "<urn:uuid:m>", to(x), []byte("outlink: http://a.test/\r\n"), -1)
	atLimit := member(t, "request", "<urn:uuid:big>", to(x), bytes.Repeat([]byte("a"), maxCompanionBlock), -1)
	overLimit := member(t, "request", "<urn:uuid:bigger>", to(x), bytes.Repeat([]byte("a"), maxCompanionBlock+1), -1)
	for _, tc := range []struct {
		name    string
		id      string
		after   [][]byte
		want    int // companions found
		wantErr string
	}{
		{"request and metadata", x, [][]byte{request, metadata}, 2, ""},
		{"up to the metadata record", x, [][]byte{request, metadata, request}, 2, ""},
		{"a request at the size limit", x, [][]byte{atLimit, metadata}, 2, ""},
		{"a request over the size limit", x, [][]byte{overLimit, metadata}, 0, "larger than"},
		{"metadata concurrent to two records", x, [][]byte{member(t, "metadata", "<urn:uuid:m2>", append(to("<urn:uuid:other>"), to(x)[0]), []byte("a: b\r\n"), -1)}, 1, ""},
		{"a resource concurrent to it is a capture of its own", x, [][]byte{member(t, "resource", "<urn:uuid:r>", to(x), []byte("png"), -1), request}, 0, ""},
		{"a record of another capture", x, [][]byte{member(t, "request", "<urn:uuid:q2>", to("<urn:uuid:y>"), []byte("GET / HTTP/1.1\r\n\r\n"), -1)}, 0, ""},
		{"a record without an ID has none", "", [][]byte{member(t, "request", "<urn:uuid:q3>", nil, []byte("GET / HTTP/1.1\r\n\r\n"), -1)}, 0, ""},
		{"a damaged request ends them", x, [][]byte{request, member(t, "request", "<urn:uuid:q4>", to(x), []byte("short"), 500), metadata}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg := append([]byte(nil), capture...)
			for _, m := range tc.after {
				seg = append(seg, m...)
			}
			var l Local
			locs, err := l.companionsIn(bytes.NewReader(seg), int64(len(seg)), warc.Location{Segment: "s.warc.gz", Length: int64(len(capture))}, tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(locs) != tc.want {
				t.Fatalf("%d companions, %v; want %d", len(locs), err, tc.want)
			}
			pos := int64(len(capture))
			for i, loc := range locs {
				if loc.Offset != pos || loc.Length != int64(len(tc.after[i])) {
					t.Errorf("companion %d at %d+%d, want %d+%d", i, loc.Offset, loc.Length, pos, len(tc.after[i]))
				}
				pos += loc.Length
			}
		})
	}
}
