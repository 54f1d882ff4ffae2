package replay

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"sync"

	"github.com/waggle-archive/waggle/internal/index"
)

// Large payloads are kept once loaded: a video player asks for one capture
// in many ranges, each of which would otherwise read, check and decompress
// the whole record again, holding a copy per request.
const (
	// minCachedPayload is the smallest payload kept; smaller ones are
	// cheap to load again.
	minCachedPayload = 1 << 20
	// DefaultPayloadCacheBytes is Config.PayloadCacheBytes's default.
	DefaultPayloadCacheBytes = 256 << 20
)

// payloadCache holds the responses of the large captures loaded last, up
// to max bytes of payload, and shares a load in progress among the
// requests that want it.
type payloadCache struct {
	max int64

	mu      sync.Mutex
	held    int64
	entries map[string]*cacheEntry // loading or kept, by record ID
	lru     *list.List             // of *cacheEntry, kept ones only; most recent first
	hits    int64                  // requests answered by a kept or shared load
	loads   int64                  // loads made through the cache
}

// CacheStats are the figures of replay's payload cache.
type CacheStats struct {
	Bytes   int64 `json:"bytes"`   // payload bytes kept
	Entries int   `json:"entries"` // payloads kept
	Limit   int64 `json:"limit"`   // the most it keeps (0: no cache)
	Hits    int64 `json:"hits"`    // requests answered without a load of their own
	Loads   int64 `json:"loads"`   // records loaded (kept or not)

	// The spool on disk of payloads too large to hold (Config.SpoolDir).
	Spooled        int64 `json:"spooled_bytes"` // payload bytes on disk
	SpooledEntries int   `json:"spooled"`       // payloads on disk
	SpoolLimit     int64 `json:"spool_limit"`   // the most it keeps (0: no spool)
	SpoolHits      int64 `json:"spool_hits"`    // loads answered from the spool
	SpoolFills     int64 `json:"spool_fills"`   // payloads written to it
}

func (pc *payloadCache) stats() CacheStats {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return CacheStats{Bytes: pc.held, Entries: pc.lru.Len(), Limit: max(pc.max, 0), Hits: pc.hits, Loads: pc.loads}
}

type cacheEntry struct {
	key  string
	done chan struct{} // closed once resp or err is set
	resp *response
	err  error
	elem *list.Element // nil while loading, or once evicted
}

func newPayloadCache(max int64) *payloadCache {
	return &payloadCache{max: max, entries: map[string]*cacheEntry{}, lru: list.New()}
}

// get returns c's response, from the cache or by calling load, once for
// all the requests that want it meanwhile. A payload of minCachedPayload
// or more is kept (revisits included: what decides is the payload loaded,
// not the record). A failed load is not kept: a request that waited on it
// tries again, loading itself if no one else has started.
func (pc *payloadCache) get(ctx context.Context, c index.Capture, load func(context.Context) (*response, error)) (*response, error) {
	if pc.max <= 0 || c.RecordID == "" {
		return load(ctx)
	}
	key := c.RecordID
	for {
		pc.mu.Lock()
		e, ok := pc.entries[key]
		if !ok {
			e = &cacheEntry{key: key, done: make(chan struct{})}
			pc.entries[key] = e
			pc.loads++
			pc.mu.Unlock()
			return pc.fill(ctx, e, load)
		}
		pc.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err == nil {
			pc.touch(e)
			return e.resp, nil
		}
		if !errors.Is(e.err, context.Canceled) && !errors.Is(e.err, context.DeadlineExceeded) && !errors.Is(e.err, errLoadPanicked) {
			return nil, e.err // the capture's own failure
		}
		// Its loader's request went away (a player seeking aborts one),
		// which says nothing of this one's: try again.
	}
}

// fill loads e, which this caller made, and keeps it if it is worth it.
// A load that panics leaves no one waiting.
func (pc *payloadCache) fill(ctx context.Context, e *cacheEntry, load func(context.Context) (*response, error)) (*response, error) {
	loaded := false
	defer func() {
		if !loaded {
			pc.mu.Lock()
			delete(pc.entries, e.key)
			pc.mu.Unlock()
			e.err = errLoadPanicked
			close(e.done)
		}
	}()
	resp, err := load(ctx)
	loaded = true
	keep := err == nil && len(resp.payload) >= minCachedPayload && int64(len(resp.payload)) <= pc.max
	if keep {
		// The payload is a slice of the record's block: the HTTP header
		// before it, and the room the buffer grew into after it, would stay
		// in memory with it, uncounted. Kept alone, it holds its own bytes.
		kept := *resp
		kept.payload = bytes.Clone(resp.payload)
		resp = &kept
	}
	e.resp, e.err = resp, err
	pc.mu.Lock()
	if !keep {
		delete(pc.entries, e.key)
	} else {
		e.elem = pc.lru.PushFront(e)
		pc.held += e.size()
		pc.evict()
	}
	pc.mu.Unlock()
	close(e.done)
	return resp, err
}

// errLoadPanicked is what the requests waiting on a load that panicked
// see: they load again themselves.
var errLoadPanicked = errors.New("replay: loading the capture failed")

// touch marks e as used now, if it is still kept, by a request it answered.
func (pc *payloadCache) touch(e *cacheEntry) {
	pc.mu.Lock()
	pc.hits++
	if e.elem != nil {
		pc.lru.MoveToFront(e.elem)
	}
	pc.mu.Unlock()
}

// evict drops the least recently used responses until what is held fits.
// pc.mu is held.
func (pc *payloadCache) evict() {
	for pc.held > pc.max {
		old := pc.lru.Back().Value.(*cacheEntry)
		pc.lru.Remove(old.elem)
		old.elem = nil
		pc.held -= old.size()
		delete(pc.entries, old.key)
	}
}

// size is the memory e's payload holds.
func (e *cacheEntry) size() int64 {
	if e.resp == nil {
		return 0
	}
	return int64(cap(e.resp.payload))
}
