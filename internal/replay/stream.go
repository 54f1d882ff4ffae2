package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A record is read whole to be replayed — it is checked, decompressed and
// often rewritten — unless its block is larger than streamBlock: such a
// record (an imported video, a disk image) is read as it is served, from
// this node's disk or from the node holding it, so that visitors asking
// for many of them at once do not hold them all in memory. It is replayed
// as archived: a page that large is not rewritten anyway (maxRewriteSize
// is smaller).
const streamBlock = 64 << 20

// minStreamedMember is the smallest gzip member whose block can be over
// streamBlock (deflate inflates at most about 1032 to 1): smaller ones are
// read whole without a look at their header first.
const minStreamedMember = streamBlock / 1032

// blockOpener is an archive that can stream the blocks of the records it
// holds: archive.Local, and archive.Network, from whichever node holds
// the capture.
type blockOpener interface {
	OpenBlock(ctx context.Context, c index.Capture) (*warc.Block, error)
}

// The archives a node replays stream: a change of signature must not turn
// streaming off unnoticed.
var (
	_ blockOpener = (*archive.Local)(nil)
	_ blockOpener = (*archive.Network)(nil)
)

// storedBody is the payload of a record too large to read whole. It is
// read from the spool's copy when there is one, else from the record's
// block each time it is served.
type storedBody struct {
	open    func(context.Context) (*warc.Block, error)
	skip    int64  // the HTTP header section before the payload
	size    int64  // the payload's length; -1 when it has chunked framing
	spooled string // the path of the payload's copy in the spool, if any
}

// reader returns the payload from its start, read within ctx: the spool's
// file (which seeks) while it is there.
func (sb *storedBody) reader(ctx context.Context) (io.ReadCloser, error) {
	if sb.spooled != "" {
		if f, err := os.Open(sb.spooled); err == nil {
			return f, nil
		}
	}
	b, err := sb.open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, b, sb.skip); err != nil {
		b.Close()
		return nil, err
	}
	if sb.size < 0 {
		return struct {
			io.Reader
			io.Closer
		}{&dechunked{httputil.NewChunkedReader(b), b}, b}, nil
	}
	return b, nil
}

// dechunked reads a chunked payload, and at its end the rest of the block
// (a trailer, the last line end): the block's digest is checked only once
// all of it is read, and a payload is not whole until it is.
type dechunked struct {
	chunks io.Reader
	block  io.Reader
}

func (d *dechunked) Read(p []byte) (int, error) {
	n, err := d.chunks.Read(p)
	if errors.Is(err, io.EOF) {
		if _, derr := io.Copy(io.Discard, d.block); derr != nil {
			return n, derr
		}
	}
	return n, err
}

// openLarge returns c's response with a stored body when c is a response
// or resource record whose block is over streamBlock. Otherwise it returns
// nil, and for another node's capture the record itself, read whole from
// the same answer (the look at its header was a request of its own), or
// nil again if that failed: the caller reads it with Record, which also
// reports what may be wrong with it and tries other nodes' copies.
func (s *Server) openLarge(ctx context.Context, c index.Capture) (*response, *warc.Record, error) {
	bo, ok := s.arc.(blockOpener)
	if !ok || c.Length < minStreamedMember {
		return nil, nil, nil
	}
	open := func(ctx context.Context) (*warc.Block, error) { return bo.OpenBlock(ctx, c) }
	if e, ok := s.spool.get(c.RecordID); ok {
		// Read from the spool's file, or from the record should it be gone.
		body := &storedBody{open: open, skip: e.skip, size: e.size, spooled: e.path}
		return &response{status: e.status, header: e.header.Clone(), body: body}, nil, nil
	}
	b, err := bo.OpenBlock(ctx, c)
	if err != nil {
		return nil, nil, nil
	}
	defer b.Close()
	if b.Length <= streamBlock {
		if c.Node == "" {
			return nil, nil, nil // this node's: Record reads it from disk
		}
		rec, err := b.Record()
		if err != nil {
			return nil, nil, nil
		}
		return nil, rec, nil
	}
	var section []byte
	payload := bufio.NewReaderSize(b, 64<<10) // after the section, what it read ahead and the rest of b
	switch b.Header.Get("WARC-Type") {
	case warc.TypeResource:
	case warc.TypeResponse:
		if section, err = warc.ReadHTTPSection(payload); err != nil {
			if _, cerr := b.Check(); cerr != nil {
				return nil, nil, nil // damaged: Record finds another copy
			}
			return nil, nil, fmt.Errorf("%w: %v", errCorrupt, err) // archived so: not to be read whole
		}
	default:
		return nil, nil, nil // a revisit's block is its headers: small, whatever its member's size
	}
	var resp *response
	body := &storedBody{open: open, size: b.Length}
	if section == nil {
		h := http.Header{}
		if ct := b.Header.Get("Content-Type"); ct != "" {
			h.Set("Content-Type", ct)
		}
		resp = &response{status: http.StatusOK, header: h}
	} else {
		if resp, err = parseHead(section); err != nil {
			return nil, nil, err
		}
		body.skip, body.size = int64(len(section)), b.Length-int64(len(section))
		if warc.Chunked(resp.header) {
			body.size = -1
		}
	}
	resp.body = body
	// Read through once before the first byte is sent: a damaged block is
	// then read whole instead, which finds another node's copy if there
	// is one (archive.Network.Record) and has this one repaired, where a
	// stream could only be cut short. The read fills the spool on the way.
	switch {
	case s.spool.fits(c.RecordID, body.size):
		if body.spooled, err = s.spool.fill(c.RecordID, payload, b, resp, body.skip, body.size); err != nil {
			return nil, nil, nil
		}
		s.verified.add(c.RecordID) // if the spool could not keep it, not checked again
	case !s.verified.has(c.RecordID):
		if _, err := b.Check(); err != nil {
			return nil, nil, nil
		}
		s.verified.add(c.RecordID)
	}
	return resp, nil, nil
}

// recordSet is a bounded set of record IDs, safe for concurrent use; its
// zero value is empty.
type recordSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

// maxRecordSet bounds a recordSet; past it, the set starts afresh.
const maxRecordSet = 4096

func (v *recordSet) has(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return id != "" && v.ids[id]
}

func (v *recordSet) add(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ids == nil || len(v.ids) >= maxRecordSet {
		v.ids = map[string]bool{}
	}
	v.ids[id] = true
}

// serveStored writes a stored body with the archived status. A 200 of
// known length answers range requests, reading the block again from its
// start for each (video players seek with them); anything else is written
// whole. A read that fails partway — a block that does not match its
// digest, cut short on disk — aborts the response, so that the client
// never takes it for whole.
func serveStored(w http.ResponseWriter, r *http.Request, status int, sb *storedBody) {
	if status == http.StatusOK && sb.size >= 0 && w.Header().Get("Content-Encoding") == "" {
		rs := &bodySeeker{sb: sb, ctx: r.Context()}
		http.ServeContent(w, r, "", time.Time{}, rs)
		// For several ranges ServeContent reads in a goroutine of its own,
		// which may still be in a Read when it returns (the client gone):
		// Close waits for it, and stops any other.
		if err := rs.Close(); err != nil && r.Context().Err() == nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	body, err := sb.reader(r.Context())
	if err != nil {
		http.Error(w, "This capture cannot be replayed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer body.Close()
	if sb.size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(sb.size, 10))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, body); err != nil && r.Context().Err() == nil {
		panic(http.ErrAbortHandler)
	}
}

// bodySeeker is a stored body as an io.ReadSeeker for http.ServeContent:
// a seek forward reads on to the offset, a seek back opens the block again.
// It is safe for the concurrent Close of a handler whose ServeContent
// returned while its range goroutine still reads.
type bodySeeker struct {
	sb  *storedBody
	ctx context.Context // the request's

	mu     sync.Mutex
	pos    int64 // where the next Read is to start
	cur    io.ReadCloser
	curPos int64 // where cur is
	err    error // the failure that ended a read, if one did
	closed bool
}

// errSeekerClosed is what a Read after Close gets.
var errSeekerClosed = errors.New("replay: the response has ended")

func (bs *bodySeeker) Seek(offset int64, whence int) (int64, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += bs.pos
	case io.SeekEnd:
		offset += bs.sb.size
	default:
		return 0, errors.New("replay: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("replay: seek before the start")
	}
	bs.pos = offset
	return offset, nil
}

func (bs *bodySeeker) Read(p []byte) (int, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.closed {
		return 0, errSeekerClosed
	}
	if bs.pos >= bs.sb.size {
		return 0, io.EOF
	}
	seeker, seekable := bs.cur.(io.Seeker)
	if bs.cur == nil || bs.curPos > bs.pos && !seekable {
		bs.closeCur()
		cur, err := bs.sb.reader(bs.ctx)
		if err != nil {
			bs.err = err
			return 0, err
		}
		bs.cur, bs.curPos = cur, 0
		seeker, seekable = cur.(io.Seeker)
	}
	if seekable && bs.curPos != bs.pos {
		// The spool's file: straight to the offset.
		if _, err := seeker.Seek(bs.pos, io.SeekStart); err != nil {
			bs.err = err
			return 0, err
		}
		bs.curPos = bs.pos
	}
	if bs.curPos < bs.pos {
		n, err := io.CopyN(io.Discard, bs.cur, bs.pos-bs.curPos)
		bs.curPos += n
		if err != nil {
			bs.err = err
			return 0, err
		}
	}
	n, err := bs.cur.Read(p)
	bs.curPos += int64(n)
	bs.pos += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		bs.err = err
	}
	return n, err
}

// Close closes the block being read, once any Read in progress is done,
// and returns the failure that ended a read, if one did.
func (bs *bodySeeker) Close() error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.closed = true
	bs.closeCur()
	return bs.err
}

func (bs *bodySeeker) closeCur() {
	if bs.cur != nil {
		bs.cur.Close()
		bs.cur = nil
	}
}
