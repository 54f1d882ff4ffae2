package replay

import (
	"container/list"
	"context"
	"sync"

	"github.com/waggle-archive/waggle/internal/index"
)

// Large payloads are kept once loaded: a video player asks for one capture
// in many ranges, each of which would otherwise read, check and decompress
// the whole record again, holding a copy per request.
const (
	// minCachedRecord is the smallest record, in bytes as stored, whose
	// response is kept; smaller ones are cheap to load again.
	minCachedRecord = 1 << 20
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
	entries map[string]*cacheEntry
	lru     *list.List // of *cacheEntry, kept ones only; most recent first
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

// get returns c's response, from the cache or by calling load (once for
// all the requests that want it meanwhile). A failed load is not kept: a
// request waiting on it loads again itself, under its own context.
func (pc *payloadCache) get(ctx context.Context, c index.Capture, load func(context.Context) (*response, error)) (*response, error) {
	if pc.max <= 0 || c.Length < minCachedRecord || c.RecordID == "" {
		return load(ctx)
	}
	key := c.RecordID
	pc.mu.Lock()
	if e, ok := pc.entries[key]; ok {
		pc.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return load(ctx)
		}
		pc.touch(e)
		return e.resp, nil
	}
	e := &cacheEntry{key: key, done: make(chan struct{})}
	pc.entries[key] = e
	pc.mu.Unlock()

	e.resp, e.err = load(ctx)
	pc.mu.Lock()
	if size := e.size(); e.err != nil || size > pc.max {
		delete(pc.entries, key)
	} else {
		e.elem = pc.lru.PushFront(e)
		pc.held += size
		pc.evict()
	}
	pc.mu.Unlock()
	close(e.done)
	return e.resp, e.err
}

// touch marks e as used now, if it is still kept.
func (pc *payloadCache) touch(e *cacheEntry) {
	pc.mu.Lock()
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

func (e *cacheEntry) size() int64 {
	if e.resp == nil {
		return 0
	}
	return int64(len(e.resp.payload))
}
