package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Handler serves POST /v1/replicate, the receiving end of Run, behind a
// peer.Server, whose MaxBodyBytes must be at least MaxLargeBodyBytes. It
// decodes and checks a batch whole — at most MaxBodyBytes, or one entry
// of at most MaxLargeBodyBytes declared in Content-Length; a batch over
// MaxBodyBytes, or whose records' blocks come to over MaxBodyBytes, is
// taken one at a time (another meanwhile is answered 503) — each member at
// most MaxMemberBytes holding exactly one gzip member that decompresses
// to exactly one WARC record of at most MaxBlockBytes, whose CRC-32 and
// WARC-Block-Digest verify; and a capture's own record has the capture's
// WARC-Record-ID, type and date, and a WARC-Target-URI whose SURT key is
// the capture's — and refuses a batch with anything wrong in it (4xx)
// without calling store. Otherwise it passes the copies, in the order
// sent, to store with the certified ID of the sending node, and
// acknowledges (204) only once store has returned nil; a copy's Record is
// the record read in that check, or nil (the batch's records kept are
// bounded); an error from store
// is answered 503, and the sender keeps the batch and tries again later.
// store must hold the copies durably before it returns, must skip records
// it already holds (delivery is at least once), and must be safe for
// concurrent use. The members alias the request body: store may keep them.
func Handler(store func(ctx context.Context, from string, copies []Copy) error) http.Handler {
	// A large batch is held in memory whole, and its record decompressed:
	// one at a time bounds what the senders can make this node allocate.
	large := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "replicate: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		from, _, ok := peer.Caller(r.Context())
		if !ok {
			http.Error(w, "replicate: not a peer request", http.StatusForbidden)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != ContentType {
			http.Error(w, "replicate: want Content-Type "+ContentType, http.StatusUnsupportedMediaType)
			return
		}
		if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
			http.Error(w, "replicate: a batch is not compressed", http.StatusUnsupportedMediaType)
			return
		}
		if r.ContentLength > MaxLargeBodyBytes {
			http.Error(w, fmt.Sprintf("replicate: batch body over %d bytes", MaxLargeBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		holding := false
		takeLarge := func() bool {
			select {
			case large <- struct{}{}:
				holding = true
				return true
			default:
				http.Error(w, fmt.Sprintf("replicate: taking another batch over %d bytes; try again later", MaxBodyBytes), http.StatusServiceUnavailable)
				return false
			}
		}
		defer func() {
			if holding {
				<-large
			}
		}()
		if r.ContentLength > MaxBodyBytes && !takeLarge() {
			return
		}
		body, err := readBody(r)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge) || errors.Is(err, errTooLarge):
			http.Error(w, fmt.Sprintf("replicate: batch body over %d bytes (or over %d without its length declared)", MaxLargeBodyBytes, MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "replicate: reading batch: "+err.Error(), http.StatusBadRequest)
			return
		}
		copies, err := decodeCopies(body)
		if err == nil {
			// Records that compress well are small on the wire and large
			// once inflated: past MaxBodyBytes inflated, a batch is large,
			// and even a large one inflates to no more than it could carry.
			budget := int64(MaxBodyBytes)
			if holding {
				budget = MaxLargeBodyBytes
			}
			err = verifyCopies(copies, budget)
			if errors.Is(err, errOverBudget) && !holding {
				if !takeLarge() {
					return
				}
				err = verifyCopies(copies, MaxLargeBodyBytes)
			}
			if errors.Is(err, errOverBudget) {
				err = fmt.Errorf("%w: its records inflate to over %d bytes", errTooLarge, MaxLargeBodyBytes)
			}
		}
		switch {
		case errors.Is(err, errTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := store(r.Context(), from, copies); err != nil {
			http.Error(w, "replicate: copies not stored: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// readBody reads a batch body: of its declared length, allocated once, or
// of at most MaxBodyBytes if it declares none.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength >= 0 {
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err == nil && len(body) > MaxBodyBytes {
		err = errTooLarge
	}
	return body, err
}

// maxRetainedBlocks bounds the decompressed blocks of one batch kept as
// Copy.Record for the store; past it, the store reads the members again.
const maxRetainedBlocks = 16 << 20

// errOverBudget reports a batch whose records inflate to more than the
// budget verifyCopies was given: it is refused before the block that
// would pass it is inflated (a record's header, at most 1 MiB, is
// inflated before it is counted).
var errOverBudget = errors.New("replicate: the batch's blocks are over the budget")

// verifyCopies checks every copy of a batch and sets its Record (see
// verifyCopy), as long as the records kept, headers and blocks, stay under
// maxRetainedBlocks; the first is always kept, so that a large record is
// not decompressed twice. The records may inflate to budget bytes in all
// (errOverBudget).
func verifyCopies(copies []Copy, budget int64) error {
	entry := -1
	retained := int64(0)
	for i := range copies {
		if copies[i].Capture != nil {
			entry++
		}
		maxBlock := min(MaxBlockBytes, budget)
		if err := verifyCopy(&copies[i], maxBlock); err != nil {
			switch {
			case errors.Is(err, errTooLarge):
				return err
			case maxBlock < MaxBlockBytes && errors.Is(err, warc.ErrBlockTooLarge):
				return errOverBudget
			}
			return fmt.Errorf("replicate: batch: entry %d, record %d: %w", entry, i, err)
		}
		rec := copies[i].Record
		inflated := int64(rec.Header.Size() + len(rec.Block))
		budget -= inflated
		if retained += inflated; retained > maxRetainedBlocks && i > 0 {
			copies[i].Record = nil
		}
	}
	return nil
}
