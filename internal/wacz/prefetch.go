package wacz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"sync"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// The records of several captures are read at once — from disk, checked,
// or from other nodes, a round trip each — while the WARC file is written
// in index order.
const (
	prefetchWorkers = 4
	prefetchDepth   = 64       // captures read ahead of the writer, at most
	prefetchBytes   = 64 << 20 // and their records' bytes (a larger record is read alone)
)

// fetched is one capture's records, read ahead of the writer.
type fetched struct {
	c          index.Capture
	selected   bool // in the selection, not an original a revisit needs
	member     []byte
	spool      *os.File // holds the member instead, when it is over MaxHeld
	companions [][]byte
	err        error // member could not be read
	// companionsErr says why its request and metadata records could not be.
	companionsErr error

	// For a selected revisit: the capture holding its payload (zero when
	// it names none), or why it was not found (archive.ErrNoOriginal when
	// the archive holds the payload nowhere).
	original index.Capture
	via      []index.Capture // revisits between it and original (archive.Chain)
	// standing is, for a 304, the capture whose status and headers it says
	// still stand, when that is not original (archive.Standing).
	standing    index.Capture
	originalErr error
	page        bool // a line of pages.jsonl
	title       string
	done        chan struct{}
}

// prefetch calls write with the records of each capture feed yields, in
// feed's order, reading them prefetchWorkers at a time ahead of write. The
// first error of feed or write ends it.
func (e *exporter) prefetch(feed func(yield func(c index.Capture, selected bool) error) error, write func(*fetched) error) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	jobs := make(chan *fetched)
	order := make(chan *fetched, prefetchDepth)
	var workers sync.WaitGroup
	for range prefetchWorkers {
		workers.Go(func() {
			for f := range jobs {
				if err := safely(func() error { e.read(ctx, f); return nil }); err != nil {
					f.err = err
				}
				close(f.done)
			}
		})
	}
	b := newByteBudget(prefetchBytes)
	written := make(chan error, 1)
	go func() {
		var err error
		for f := range order { // drained to the end, so that feed never blocks for ever
			<-f.done
			if err == nil {
				if err = safely(func() error { return write(f) }); err != nil {
					cancel()
				}
			}
			f.closeSpool()
			b.release(f.c.Length)
		}
		written <- err
	}()
	// The goroutines are wound down even if feed panics.
	err := safely(func() error {
		return feed(func(c index.Capture, selected bool) error {
			b.acquire(c.Length)
			if err := ctx.Err(); err != nil {
				b.release(c.Length)
				return err
			}
			f := &fetched{c: c, selected: selected, done: make(chan struct{})}
			order <- f
			jobs <- f
			return nil
		})
	})
	if err != nil {
		cancel()
	}
	close(jobs)
	close(order)
	workers.Wait()
	if werr := <-written; werr != nil {
		return werr
	}
	return err
}

// errInternal is a panic met while exporting: a bug, which fails the
// export rather than count as one unreadable capture.
var errInternal = errors.New("wacz: internal error")

// safely calls fn, turning a panic into an errInternal: a bug met while
// exporting one capture fails the export, not the node that serves it
// (net/http recovers only the handler's own goroutine).
func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errInternal, r, debug.Stack())
		}
	}()
	return fn()
}

// read reads f's records and, for a selected capture, what its index and
// page lines need — a revisit's original, a page's title — from the record
// as its member is checked: only the member waits for the writer, in memory
// or, past MaxHeld, in a temporary file.
func (e *exporter) read(ctx context.Context, f *fetched) {
	var (
		dst  io.Writer
		held *bytes.Buffer
	)
	if f.c.Length > e.maxHeld() {
		if f.spool, f.err = e.tempFile("record"); f.err != nil {
			return
		}
		dst = f.spool
	} else {
		held = bytes.NewBuffer(make([]byte, 0, max(f.c.Length, 0)))
		dst = held
	}
	head := 0
	if f.selected && isPage(f.c) && f.c.Type == warc.TypeResponse {
		head = maxTitleScan // for its title
	}
	h, block, err := e.src.Archive.CopyMember(ctx, f.c, dst, head)
	if err != nil {
		f.closeSpool()
		f.err = err
		return
	}
	if held != nil {
		f.member = held.Bytes()
	}
	// Without them the capture still goes, as the record that matters.
	if f.companions, f.companionsErr = e.src.Archive.Companions(ctx, f.c); ctx.Err() != nil {
		f.err = ctx.Err()
		return
	}
	if !f.selected {
		return
	}
	switch {
	case f.c.Type == warc.TypeRevisit:
		e.resolve(ctx, f, h)
		switch {
		case f.originalErr == nil && revisitsPage(f.c, f.original, f.standing):
			f.page, f.title = true, e.titles.of(ctx, e.src.Archive, f.original)
		case f.originalErr != nil && !errors.Is(f.originalErr, archive.ErrNoOriginal):
			// Not looked up (its node away): a page if it says so itself.
			f.page = f.c.Status == 200 && isHTML(f.c.MIME)
		}
	case head > 0:
		f.page, f.title = true, title(block)
		e.titles.put(f.c.RecordID, f.title)
	default:
		f.page = isPage(f.c)
	}
}

// titleCache keeps the titles of pages recently read, by record ID, so
// that the revisits of a page (adjacent in the index: one URL's captures
// in time order, read four at a time) read their original's record once
// for its title: a title being read is waited for, not read again.
type titleCache struct {
	mu sync.Mutex
	m  map[string]*cachedTitle
}

// cachedTitle is a title in a titleCache, known once done is closed.
type cachedTitle struct {
	done  chan struct{}
	title string
}

// maxTitles bounds a titleCache; full, it starts afresh.
const maxTitles = 4096

// entry returns recordID's entry, and whether the caller made it and must
// fill it; "" (a record imported without an ID) is no key.
func (tc *titleCache) entry(recordID string) (*cachedTitle, bool) {
	if recordID == "" {
		return &cachedTitle{done: make(chan struct{})}, true
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if pt, ok := tc.m[recordID]; ok {
		return pt, false
	}
	if tc.m == nil || len(tc.m) >= maxTitles {
		tc.m = map[string]*cachedTitle{}
	}
	pt := &cachedTitle{done: make(chan struct{})}
	tc.m[recordID] = pt
	return pt, true
}

// put notes the title of the page whose response record is recordID's.
func (tc *titleCache) put(recordID, title string) {
	if pt, mine := tc.entry(recordID); mine {
		pt.title = title
		close(pt.done)
	}
}

// of returns the title of the page whose response record is c's, reading
// the record for it unless the cache has it or is reading it: "" when it
// cannot be read (the revisit is still listed, untitled).
func (tc *titleCache) of(ctx context.Context, a Archive, c index.Capture) string {
	pt, mine := tc.entry(c.RecordID)
	if !mine {
		select {
		case <-pt.done:
			return pt.title
		case <-ctx.Done():
			return ""
		}
	}
	defer close(pt.done) // even if the read panics: no one waits for ever
	if _, block, err := a.CopyMember(ctx, c, io.Discard, maxTitleScan); err == nil {
		pt.title = title(block)
	}
	return pt.title
}

func (e *exporter) maxHeld() int64 {
	if e.src.MaxHeld > 0 {
		return e.src.MaxHeld
	}
	return DefaultMaxHeld
}

// closeSpool lets go of f's temporary file, if it has one.
func (f *fetched) closeSpool() {
	if f.spool != nil {
		f.spool.Close()
		os.Remove(f.spool.Name()) // where tempFile could not, the file being open
		f.spool = nil
	}
}

// resolve finds the capture holding the payload of a revisit whose record
// header is h.
func (e *exporter) resolve(ctx context.Context, f *fetched, h warc.Header) {
	if f.c.Digest == "" && h.Get("WARC-Refers-To-Target-URI") == "" {
		// Named by record ID alone, or not at all, and never adopted by
		// a capture of the payload: replay finds none either.
		f.originalErr = fmt.Errorf("its original: %w", archive.ErrNoOriginal)
		return
	}
	f.original, f.via, f.originalErr = e.chains.Resolve(ctx, e.src.Archive, f.c, h)
	if f.originalErr != nil {
		f.originalErr = fmt.Errorf("its original: %w", f.originalErr)
		return
	}
	if f.c.Status == http.StatusNotModified {
		// Replayed with its status and headers: it goes along too.
		if st, ok, err := archive.Standing(ctx, e.src.Archive, f.c, f.via); err == nil && ok && st.RecordID != f.original.RecordID {
			f.standing = st
		}
	}
}

// byteBudget bounds the bytes of records read ahead. A request larger than
// the whole budget waits until nothing else is held, then runs alone.
type byteBudget struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	held int64
}

func newByteBudget(max int64) *byteBudget {
	b := &byteBudget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *byteBudget) acquire(n int64) {
	b.mu.Lock()
	for b.held > 0 && b.held+n > b.max {
		b.cond.Wait()
	}
	b.held += n
	b.mu.Unlock()
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}
