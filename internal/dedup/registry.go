package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/peer"
)

// keyPrefix is the registry's key prefix in the node's database:
// x/<digest> → the encoded entry (encodeEntry).
const keyPrefix = "x/"

// The first byte of a stored entry: entryVersion for an entry registered
// first-wins, entryReplacing for one that replaced the entry of a missing
// capture, which keeps that capture's record ID too, so that a hand-over
// passes it on as a replacement.
const (
	entryVersion   = 1
	entryReplacing = 2
)

// A Registry is the owner's side: for each digest this node owns, where
// the payload was first archived in the network. It is safe for concurrent
// use.
type Registry struct {
	db *pebble.DB
	// mu makes Register's test-and-set atomic, so that the first
	// registration of a digest is the one kept.
	mu      sync.Mutex
	corrupt atomic.Uint64 // entries found unreadable
}

// NewRegistry returns the registry kept in db under the key prefix "x/".
func NewRegistry(db *pebble.DB) *Registry { return &Registry{db: db} }

// Lookup returns the Refs of those of digests that are registered, in the
// order of digests, one per distinct digest.
func (r *Registry) Lookup(digests []string) ([]Ref, error) {
	refs := make([]Ref, len(digests))
	has := make([]bool, len(digests))
	err := r.read(len(digests), func(i int) string { return digests[i] }, func(i int, ref Ref, ok bool) error {
		refs[i], has[i] = ref, ok
		return nil
	})
	if err != nil {
		return nil, err
	}
	var found []Ref
	for i := range digests {
		if has[i] {
			found = append(found, refs[i])
		}
	}
	return found, nil
}

// read reads the entries of n digests (digest(i) the i-th) with one
// iterator, in key order — a Get each would cost an iterator each — and
// calls fn once per distinct digest, with the index of its first
// occurrence, its Ref and whether it is registered. An entry that cannot
// be decoded (a corrupt disk) counts as absent, so that lookups of it miss
// and the next registration of the digest overwrites it: it costs a
// duplicate, where an error would fail every request that asks about it.
func (r *Registry) read(n int, digest func(int) string, fn func(i int, ref Ref, ok bool) error) error {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(digest(a), digest(b)) })
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: []byte(keyPrefix), UpperBound: prefixEnd(keyPrefix)})
	if err != nil {
		return fmt.Errorf("dedup: reading the registry: %w", err)
	}
	defer it.Close()
	var key []byte
	for k, i := range order {
		d := digest(i)
		if k > 0 && digest(order[k-1]) == d {
			continue // the first occurrence was answered
		}
		key = append(append(key[:0], keyPrefix...), d...)
		var ref Ref
		ok := it.SeekGE(key) && bytes.Equal(it.Key(), key)
		if ok {
			reg, err := decodeEntry(d, it.Value())
			if err != nil {
				r.corrupt.Add(1)
				ok = false
			}
			ref = reg.Ref
		}
		if err := fn(i, ref, ok); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("dedup: reading the registry: %w", err)
	}
	return nil
}

// Register records each of refs whose digest is not registered yet; the
// first registration of a digest wins, within refs as across calls. It
// returns how many were new, once they are durable. A ref that is not
// valid (an empty field, a field over its Max…Bytes, a time outside
// 1970–2262) fails the whole call, and nothing is registered.
func (r *Registry) Register(refs []Ref) (added int, err error) {
	return r.register(plain(refs))
}

// register is Register for registrations, of which those that replace an
// entry take the place of the digest's entry if it still names the record
// they replace (a capture found missing): first-wins again, among the
// replacements of one lost capture.
func (r *Registry) register(regs []registration) (added int, err error) {
	for _, reg := range regs {
		if err := reg.check(); err != nil {
			return 0, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.db.NewBatch()
	defer b.Close()
	err = r.read(len(regs), func(i int) string { return regs[i].Digest }, func(i int, current Ref, ok bool) error {
		reg := regs[i]
		if ok && (reg.replaces == "" || current.RecordID != reg.replaces) {
			return nil
		}
		if err := b.Set([]byte(keyPrefix+reg.Digest), encodeEntry(reg), nil); err != nil {
			return fmt.Errorf("dedup: staging %s: %w", reg.Digest, err)
		}
		added++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if added == 0 {
		return 0, nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("dedup: committing registrations: %w", err)
	}
	return added, nil
}

// An entry is a registry entry as stored: what remove compares before it
// deletes.
type entry struct {
	digest string
	value  []byte
}

// foreign returns up to limit entries, in digest order after the digest
// after ("" for the first), whose digest pick selects, decoded and as
// stored, and the last digest it read ("" once it read the last entry).
// Entries that cannot be decoded are counted in CorruptEntries and
// returned apart: they can only be deleted.
func (r *Registry) foreign(after string, limit int, pick func(digest string) bool) (regs []registration, stored, corrupt []entry, last string, err error) {
	lower := []byte(keyPrefix + after)
	if after != "" {
		lower = append(lower, 0) // the next key after it
	}
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(keyPrefix)})
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("dedup: reading the registry: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		last = string(it.Key()[len(keyPrefix):])
		if !pick(last) {
			continue
		}
		e := entry{last, slices.Clone(it.Value())}
		reg, err := decodeEntry(last, e.value)
		if err != nil {
			r.corrupt.Add(1)
			corrupt = append(corrupt, e)
			continue
		}
		regs, stored = append(regs, reg), append(stored, e)
		if len(regs) == limit {
			return regs, stored, corrupt, last, nil
		}
	}
	if err := it.Error(); err != nil {
		return nil, nil, nil, "", fmt.Errorf("dedup: reading the registry: %w", err)
	}
	return regs, stored, corrupt, "", nil
}

// prefixEnd is the first key after every key that starts with prefix.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// remove deletes those of entries that are still stored as they were read
// (a registration replacing one meanwhile is kept), and returns how many.
func (r *Registry) remove(entries []entry) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	// One iterator for all: a Get each would cost an iterator each.
	r.mu.Lock()
	defer r.mu.Unlock()
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: []byte(keyPrefix), UpperBound: prefixEnd(keyPrefix)})
	if err != nil {
		return 0, fmt.Errorf("dedup: reading the registry: %w", err)
	}
	defer it.Close()
	b := r.db.NewBatch()
	defer b.Close()
	removed := 0
	for _, e := range entries {
		key := []byte(keyPrefix + e.digest)
		if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) || !bytes.Equal(it.Value(), e.value) {
			continue
		}
		if err := b.Delete(key, nil); err != nil {
			return 0, fmt.Errorf("dedup: staging the removal of %s: %w", e.digest, err)
		}
		removed++
	}
	if err := it.Error(); err != nil {
		return 0, fmt.Errorf("dedup: reading the registry: %w", err)
	}
	// Not synced: an entry a crash brings back is only sent again.
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("dedup: removing entries: %w", err)
	}
	return removed, nil
}

// CorruptEntries counts the entries found unreadable since the registry
// was opened (each time one was read).
func (r *Registry) CorruptEntries() uint64 { return r.corrupt.Load() }

// encodeEntry encodes reg for its key: a version byte, then the URL, the
// time and the record ID as in the wire format, and for a replacement the
// record ID it replaced.
func encodeEntry(reg registration) []byte {
	b := make([]byte, 0, registrationSize(reg)+1)
	if reg.replaces == "" {
		b = append(b, entryVersion)
	} else {
		b = append(b, entryReplacing)
	}
	b = appendRefFields(b, reg.Ref)
	if reg.replaces != "" {
		b = appendString(b, reg.replaces)
	}
	return b
}

func decodeEntry(digest string, v []byte) (registration, error) {
	bad := func(err error) (registration, error) {
		return registration{}, fmt.Errorf("dedup: corrupt registry entry for %s: %w", digest, err)
	}
	if len(v) == 0 || v[0] != entryVersion && v[0] != entryReplacing {
		return bad(errors.New("unknown version"))
	}
	r := reader{b: v[1:]}
	reg := registration{Ref: Ref{Digest: digest}}
	err := r.refFields(&reg.Ref)
	if err != nil {
		return bad(err)
	}
	if v[0] == entryReplacing {
		if reg.replaces, err = r.string("record ID replaced", MaxRecordIDBytes); err != nil {
			return bad(err)
		}
		if reg.replaces == "" {
			return bad(errors.New("a replacing entry without the record ID it replaced"))
		}
	}
	if err := r.end(); err != nil {
		return bad(err)
	}
	if err := reg.check(); err != nil {
		return bad(err)
	}
	return reg, nil
}

// Handler serves the registry to the other nodes of the network, behind a
// peer.Server (a request that did not come through one is refused, 403):
//
//	POST /v1/dedup/lookup     a lookup request → the Refs found (200)
//	POST /v1/dedup/register   Refs to register, or to replace the entries of
//	                          captures found missing → how many were new
//	                          or replaced (200), once they are durable
//
// The bodies are described in wire.go. A body that is not well formed or
// breaks a limit (MaxEntries, MaxDigestBytes, MaxURLBytes,
// MaxRecordIDBytes) is refused whole with 400 and a message saying why; one
// over MaxBodyBytes with 413. A registration the database fails to take is
// answered 503, and the sender tries again later. An answer to a lookup
// holds at most MaxBodyBytes: Refs that would not fit (only possible with
// thousands of very long URLs) are left out, which the asker takes as not
// found — at the cost of a duplicate, never of data.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != lookupPath && req.URL.Path != registerPath {
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "dedup: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if _, _, ok := peer.Caller(req.Context()); !ok {
			http.Error(w, "dedup: not a peer request", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		body, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge) || len(body) > MaxBodyBytes:
			http.Error(w, fmt.Sprintf("dedup: body over %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "dedup: reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var answer []byte
		if req.URL.Path == lookupPath {
			digests, err := decodeLookup(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			found, err := r.Lookup(digests)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			answer = encodeRefs(kindFound, fitting(found))
		} else {
			regs, err := decodeRegistrations(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			added, err := r.register(regs)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			answer = encodeAdded(added)
		}
		w.Header().Set("Content-Type", contentType)
		w.Write(answer)
	})
}

// fitting returns the longest prefix of refs whose body fits in
// MaxBodyBytes.
func fitting(refs []Ref) []Ref {
	size := emptySize
	for i, ref := range refs {
		size += refSize(ref)
		if size > MaxBodyBytes {
			return refs[:i]
		}
	}
	return refs
}
