package replay

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/waggle-archive/waggle/internal/diskfree"
	"github.com/waggle-archive/waggle/internal/warc"
)

// DefaultSpoolBytes is Config.SpoolBytes's default.
const DefaultSpoolBytes = 4 << 30

// payloadSpool keeps on this node's disk the payloads of captures too large
// to read whole (blocks over streamBlock), once read through and checked:
// a video player's range requests then read their ranges from a local
// file, where each would otherwise inflate the record from its start — and,
// for a capture another node holds, move it across the network again.
// A reader opens a file by its name, with a descriptor of its own, so an
// eviction only unlinks it: a response being served reads on.
type payloadSpool struct {
	dir string
	max int64

	mu      sync.Mutex
	held    int64               // bytes of the payloads kept
	filling int64               // bytes reserved for the fills in progress
	entries map[string]*spooled // by record ID
	lru     *list.List          // of *spooled, most recent first
	seq     uint64              // names the files being written
	hits    int64               // loads answered from the spool
	fills   int64               // payloads spooled
	// unkept are the records whose payload could not be written here (a
	// full disk): not tried again, each try being a read of the record.
	unkept recordSet
}

// spooled is one payload on disk, with the head of its response.
type spooled struct {
	id     string
	path   string
	status int
	header http.Header
	skip   int64 // the HTTP header section before the payload in the block
	size   int64
	elem   *list.Element
}

// newPayloadSpool empties dir, left by an earlier process, for a spool of
// at most max bytes.
func newPayloadSpool(dir string, max int64) (*payloadSpool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("replay: spool: %w", err)
	}
	if err := emptySpool(dir); err != nil {
		return nil, err
	}
	return &payloadSpool{dir: dir, max: max, entries: map[string]*spooled{}, lru: list.New()}, nil
}

// emptySpool removes what dir holds — not dir itself, which may be a link
// to another disk — if it exists.
func emptySpool(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: spool: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("replay: spool: %w", err)
		}
	}
	return nil
}

// get returns the spool's entry for the record id, if it holds one. Its
// header is shared: a response clones it.
func (sp *payloadSpool) get(id string) (spooled, bool) {
	if sp == nil || id == "" {
		return spooled{}, false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	e, ok := sp.entries[id]
	if !ok {
		return spooled{}, false
	}
	sp.lru.MoveToFront(e.elem)
	sp.hits++
	return *e, true
}

// fits reports whether a payload of size bytes, of the record id, can be
// kept: one of known length, no larger than the whole spool.
func (sp *payloadSpool) fits(id string, size int64) bool {
	return sp != nil && id != "" && size >= 0 && size <= sp.max && !sp.unkept.has(id)
}

// fill reads payload — the rest of b, the payload of a response whose head
// is resp, after skip bytes of HTTP header section — to its end, which
// checks the block's digest, and keeps it in the spool (it fits): it
// returns the file's path then, else "". The error is the block's: a write
// that fails on this side only leaves the payload out of the spool.
func (sp *payloadSpool) fill(id string, payload io.Reader, b *warc.Block, resp *response, skip, size int64) (string, error) {
	path, ok := sp.reserve(id, size)
	if !ok {
		_, err := b.Check()
		return "", err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		sp.release(size)
		sp.unkept.add(id)
		_, cerr := b.Check()
		return "", cerr
	}
	w := &keptWriter{w: f}
	n, err := io.Copy(w, payload)
	if err == nil {
		err = b.Finish()
	}
	if cerr := f.Close(); w.err == nil {
		w.err = cerr
	}
	if err != nil || w.err != nil || n != size {
		os.Remove(path)
		sp.release(size)
		if err == nil {
			sp.unkept.add(id)
		}
		return "", err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.filling -= size
	if old, ok := sp.entries[id]; ok {
		sp.drop(old) // a load that raced this one
	}
	e := &spooled{id: id, path: path, status: resp.status, header: resp.header.Clone(), skip: skip, size: size}
	e.elem = sp.lru.PushFront(e)
	sp.entries[id] = e
	sp.held += size
	sp.fills++
	for sp.held+sp.filling > sp.max && sp.lru.Len() > 1 {
		sp.drop(sp.lru.Back().Value.(*spooled))
	}
	return path, nil
}

// reserve makes room for a payload of size bytes, letting the least
// recently used go, and names its file. It declines when the fills in
// progress hold the room (the request reads the record as without a
// spool), or when the disk would be left with less free space than the
// payload takes — the crawl writes its WARC files there too —, which
// marks the payload not to be tried again.
func (sp *payloadSpool) reserve(id string, size int64) (string, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for sp.held+sp.filling+size > sp.max && sp.lru.Len() > 0 {
		sp.drop(sp.lru.Back().Value.(*spooled))
	}
	if sp.held+sp.filling+size > sp.max {
		return "", false
	}
	if free, ok := diskfree.Available(sp.dir); ok && free < 2*size {
		sp.unkept.add(id)
		return "", false
	}
	sp.filling += size
	// Each fill has a file of its own: two loads of one capture at once
	// (without the memory cache, which shares them) each write theirs.
	sp.seq++
	return filepath.Join(sp.dir, fmt.Sprint(sp.seq)), true
}

func (sp *payloadSpool) release(size int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.filling -= size
}

// drop forgets e and unlinks its file; sp.mu is held.
func (sp *payloadSpool) drop(e *spooled) {
	sp.lru.Remove(e.elem)
	delete(sp.entries, e.id)
	sp.held -= e.size
	os.Remove(e.path)
}

func (sp *payloadSpool) stats() (bytes int64, entries int, hits, fills int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.held, len(sp.entries), sp.hits, sp.fills
}

// keptWriter writes to w until a write fails, then only keeps that error:
// the block is still read to its end, to be checked.
type keptWriter struct {
	w   io.Writer
	err error
}

func (k *keptWriter) Write(p []byte) (int, error) {
	if k.err == nil {
		_, k.err = k.w.Write(p)
	}
	return len(p), nil
}
