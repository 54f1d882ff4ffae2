package archive

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
)

// A node proves it holds a payload by answering a fresh nonce with a hash
// of the nonce and the payload's bytes; a record it does not hold, or
// holds with other bytes, cannot be answered for.
func TestProve(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	nonce := bytes.Repeat([]byte{7}, NonceBytes)
	for i, who := range []string{"this node", "another node"} {
		c := cl.held(t, i, "", "")[0]
		rec, err := cl.nodes[i].local.Record(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		body := rec.Block[bytes.Index(rec.Block, []byte("\r\n\r\n"))+4:]
		got, err := cl.net.Prove(ctx, c, nonce)
		if err != nil || got != PayloadProof(nonce, body) {
			t.Errorf("%s: Prove = %x, %v; want the proof of %q", who, got, err, body)
		}
		if other := PayloadProof(bytes.Repeat([]byte{8}, NonceBytes), body); got == other {
			t.Errorf("%s: the proof does not depend on the nonce", who)
		}
		if forged := PayloadProof(nonce, append(bytes.Clone(body), 'x')); got == forged {
			t.Errorf("%s: the proof does not depend on the payload", who)
		}
		// An index entry naming a record the location does not hold.
		wrong := c
		wrong.RecordID = "<urn:uuid:00000000-0000-0000-0000-00000000f00d>"
		if _, err := cl.net.Prove(ctx, wrong, nonce); !errors.Is(err, ErrNotHeld) {
			t.Errorf("%s: Prove of a record not there: %v, want ErrNotHeld", who, err)
		}
	}

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
	if status, body := get(t, cl.client, cl.nodes[1], proof(good())); status != http.StatusOK || len(body) != ProofBytes {
		t.Errorf("proof: %d, %d bytes", status, len(body))
	}
	for _, tc := range []struct {
		name   string
		params url.Values
		want   int
	}{
		{"short nonce", with("nonce", "0707"), http.StatusBadRequest},
		{"nonce not hex", with("nonce", "zz070707070707070707070707070707"), http.StatusBadRequest},
		{"two nonces", with("nonce", "07070707070707070707070707070707", "07070707070707070707070707070707"), http.StatusBadRequest},
		{"no ID", with("id"), http.StatusBadRequest},
		{"segment out of the directory", with("segment", "../x.warc.gz"), http.StatusBadRequest},
		{"unknown parameter", with("why", "x"), http.StatusBadRequest},
		{"record too large to read whole", with("length", strconv.Itoa(MaxProofRecord+1)), http.StatusRequestEntityTooLarge},
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
				if _, err := l.Prove(context.Background(), c, nonce); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
