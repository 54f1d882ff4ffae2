package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/waggle-archive/waggle/internal/peer"
)

// Handler serves POST /v1/urls, the receiving end of Run, behind a
// peer.Server. It decompresses and checks a batch whole — at most
// MaxBodyBytes compressed, MaxDecodedBytes decompressed and MaxBatchURLs
// links, each URL valid UTF-8 without control characters and at most
// MaxURLBytes long, each depth at most MaxDepth — and refuses a batch with
// anything wrong in it (4xx), or in the format of an older version,
// without calling accept. Otherwise it passes the links, sorted by URL and
// one per URL, to accept with the certified ID of the sending node, and
// acknowledges (204) only once accept has returned nil; an error from
// accept is answered 503, and the sender keeps the batch and tries again
// later. accept must hold the links durably before it returns and must be
// safe for concurrent use.
func Handler(accept func(ctx context.Context, fromPeerID string, links []Link) error) http.Handler {
	// A streaming decoder serves one request at a time.
	decoders := sync.Pool{New: func() any {
		dec, err := newDecoder()
		if err != nil {
			panic("outbox: " + err.Error()) // the options are constants
		}
		return dec
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "outbox: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		from, _, ok := peer.Caller(r.Context())
		if !ok {
			http.Error(w, "outbox: not a peer request", http.StatusForbidden)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != ContentType {
			http.Error(w, "outbox: want Content-Type "+ContentType, http.StatusUnsupportedMediaType)
			return
		}
		if ce := r.Header.Get("Content-Encoding"); ce != "zstd" {
			http.Error(w, "outbox: want Content-Encoding zstd", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge) || len(body) > MaxBodyBytes:
			http.Error(w, fmt.Sprintf("outbox: batch body over %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "outbox: reading batch: "+err.Error(), http.StatusBadRequest)
			return
		}
		dec := decoders.Get().(*zstd.Decoder)
		links, err := decodeBatch(dec, body)
		dec.Reset(nil)
		decoders.Put(dec)
		switch {
		case errors.Is(err, errTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := accept(r.Context(), from, links); err != nil {
			http.Error(w, "outbox: links not taken: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
