package archive

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A node proves it holds a payload by answering a fresh nonce with a hash
// of the nonce and the payload's bytes; a record it does not hold, holds
// damaged, or holds with other bytes, cannot be answered for, and another
// node's intact copy is asked instead.
func TestProvePayload(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	payloadOf := func(i int, c index.Capture) []byte {
		t.Helper()
		rec, err := cl.nodes[i].local.Record(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		payload, _ := warc.HTTPPayload(rec.Block)
		return payload
	}
	for i, who := range []string{"this node", "another node"} {
		c := cl.held(t, i, "", "")[0]
		payload := payloadOf(i, c)
		if ok, err := cl.net.ProvePayload(ctx, c, payload); !ok || err != nil {
			t.Errorf("%s: ProvePayload of its payload = %v, %v; want proven", who, ok, err)
		}
		if ok, err := cl.net.ProvePayload(ctx, c, append(bytes.Clone(payload), 'x')); ok || err != nil {
			t.Errorf("%s: ProvePayload of other bytes = %v, %v; want not proven", who, ok, err)
		}
		// An index entry naming a record the location does not hold.
		wrong := c
		wrong.RecordID = "<urn:uuid:00000000-0000-0000-0000-00000000f00d>"
		if ok, err := cl.net.ProvePayload(ctx, wrong, payload); ok || err != nil {
			t.Errorf("%s: ProvePayload of a record not there = %v, %v; want not proven", who, ok, err)
		}
	}

	// This node's copy of the replicated capture is damaged: node 2's copy
	// proves the payload.
	var replica index.Capture
	for _, c := range cl.held(t, 0, "", "") {
		if c.RecordID == replicaID {
			replica = c
		}
	}
	if replica.RecordID == "" {
		t.Fatal("node 0 holds no capture of the replicated record")
	}
	payload := payloadOf(0, replica)
	seg := filepath.Join(cl.nodes[0].local.dir, replica.Segment)
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("damage"), replica.Offset+replica.Length/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if ok, _ := cl.nodes[0].local.ProvePayload(ctx, replica, payload); ok {
		t.Fatal("a damaged copy proved its payload")
	}
	if ok, err := cl.net.ProvePayload(ctx, replica, payload); !ok || err != nil {
		t.Errorf("ProvePayload with this node's copy damaged = %v, %v; want proven by node 2's", ok, err)
	}
	// With node 2 away too, nothing proves it, and nobody else could be
	// asked: node 1 answers that it holds no such record.
	cl.nodes[2].stop()
	if ok, err := cl.net.ProvePayload(ctx, replica, payload); ok || err != nil {
		t.Errorf("ProvePayload with no intact copy up = %v, %v; want not proven", ok, err)
	}
	// A remote holder that cannot be reached is no answer.
	cl.nodes[1].stop()
	remote := cl.held(t, 1, "", "")[0]
	if ok, err := cl.net.ProvePayload(ctx, remote, payload); ok || !errors.Is(err, ErrUnavailable) {
		t.Errorf("ProvePayload with every other node down = %v, %v; want ErrUnavailable", ok, err)
	}
}

// The proof handler refuses malformed requests, and answers 404 for a
// location that holds no intact response record of that ID.
func TestProofRequests(t *testing.T) {
	cl := newCluster(t)
	c := cl.held(t, 1, "", "")[0]
	proof := func(params url.Values) string {
		return proofPath + "?" + params.Encode()
	}
	good := func() url.Values {
		return url.Values{"segment": {c.Segment}, "offset": {strconv.FormatInt(c.Offset, 10)}, "length": {strconv.FormatInt(c.Length, 10)},
			"id": {c.RecordID}, "nonce": {"07070707070707070707070707070707"}}
	}
	with := func(name string, vals ...string) url.Values {
		v := good()
		v[name] = vals
		return v
	}
	rec, err := cl.nodes[1].local.Record(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := warc.HTTPPayload(rec.Block)
	nonce := bytes.Repeat([]byte{7}, NonceBytes)
	if status, body := get(t, cl.client, cl.nodes[1], proof(good())); status != http.StatusOK || !bytes.Equal(body, func() []byte { p := PayloadProof(nonce, payload); return p[:] }()) {
		t.Errorf("proof: %d, %x; want the proof of %q", status, body, payload)
	}
	// A record of another type whose block reads as a response.
	w, err := warc.NewWriter(cl.nodes[1].local.dir, warc.WriterOptions{Prefix: "other"})
	if err != nil {
		t.Fatal(err)
	}
	req := warc.NewRequest(c.URL, c.Time, rec.Block)
	// A chunked response whose block is not the one its digest names: the
	// payload ends before the block does, which is read to its end all the
	// same.
	trailer := strings.Repeat("X-Trailer: padding past the reader's buffer\r\n", 4096)
	altered, err := warc.NewResponse(c.URL, c.Time, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"+trailer+"\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	altered.Header.Set("WARC-Block-Digest", warc.Digest([]byte("another block")))
	at := func(rec *warc.Record) url.Values {
		t.Helper()
		loc, err := w.Write(rec)
		if err != nil {
			t.Fatal(err)
		}
		return url.Values{"segment": {loc.Segment}, "offset": {strconv.FormatInt(loc.Offset, 10)}, "length": {strconv.FormatInt(loc.Length, 10)},
			"id": {rec.ID()}, "nonce": {"07070707070707070707070707070707"}}
	}
	notResponse, damaged := at(req), at(altered)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		params url.Values
		want   int
	}{
		{"a request record", notResponse, http.StatusNotFound},
		{"a block that is not the one archived", damaged, http.StatusNotFound},
		{"short nonce", with("nonce", "0707"), http.StatusBadRequest},
		{"nonce not hex", with("nonce", "zz070707070707070707070707070707"), http.StatusBadRequest},
		{"two nonces", with("nonce", "07070707070707070707070707070707", "07070707070707070707070707070707"), http.StatusBadRequest},
		{"no ID", with("id"), http.StatusBadRequest},
		{"segment out of the directory", with("segment", "../x.warc.gz"), http.StatusBadRequest},
		{"unknown parameter", with("why", "x"), http.StatusBadRequest},
		{"not at a record", func() url.Values {
			v := with("offset", strconv.FormatInt(c.Offset+1, 10))
			v.Set("length", strconv.FormatInt(c.Length-1, 10))
			return v
		}(), http.StatusNotFound},
		{"another record", with("id", "<urn:uuid:00000000-0000-0000-0000-00000000f00d>"), http.StatusNotFound},
	} {
		if status, body := get(t, cl.client, cl.nodes[1], proof(tc.params)); status != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, status, body, tc.want)
		}
	}
}

// BenchmarkProve measures what a holder spends answering a proof of a
// capture on its own disk: reading the record, decompressing it, checking
// its block digest and hashing the payload.
func BenchmarkProve(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			body := make([]byte, size)
			for i := range body {
				body[i] = 'a' + byte(rng.IntN(26)) // text, compressing as text does
			}
			l := archivePages(b, []page{{url: "http://bench.test/big.js", at: t0, body: string(body)}})
			var c index.Capture
			if err := l.Captures(context.Background(), "test,bench)/big.js", false, func(cp index.Capture) (bool, error) {
				c = cp
				return false, nil
			}); err != nil || c.RecordID == "" {
				b.Fatalf("capture not found: %v", err)
			}
			nonce := make([]byte, NonceBytes)
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := l.prove(context.Background(), c, nonce); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
