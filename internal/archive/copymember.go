package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// CopyMember is Member for a record too large to hold: it writes the gzip
// member holding c's record to w as it reads it, byte for byte, checking
// it as Member does (one gzip member of c.Length bytes holding one record,
// c's, whose block digest verifies), and returns the record's header and
// the first head bytes of its block. When it fails, w may have been given
// part of the member: the caller keeps w's bytes apart until it succeeds.
func (l *Local) CopyMember(ctx context.Context, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error) {
	f, err := l.openMember(c)
	if err != nil {
		return warc.Header{}, nil, err
	}
	h, start, err := copyMember(ctxReader{ctx, io.NewSectionReader(f, c.Offset, c.Length)}, f, c, w, head)
	if errors.Is(err, ErrWrite) {
		return warc.Header{}, nil, err
	}
	if err != nil {
		return warc.Header{}, nil, fmt.Errorf("archive: %w", err)
	}
	return h, start, nil
}

// CopyMember is Local.CopyMember for a record on this node or on the node
// c came from, whose answer is checked and written to w as it arrives.
func (n *Network) CopyMember(ctx context.Context, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.CopyMember(ctx, c, w, head)
	}
	body, node, err := n.askMember(ctx, c)
	if err != nil {
		return warc.Header{}, nil, err
	}
	h, start, err := copyMember(io.LimitReader(body, c.Length), body, c, w, head)
	if err != nil {
		return warc.Header{}, nil, n.answerFailed(ctx, node, err)
	}
	return h, start, nil
}

// askMember asks the node c came from for the gzip member of c's record,
// and returns its answer's body, of the length declared, to be read and
// checked as it arrives.
func (n *Network) askMember(ctx context.Context, c index.Capture) (io.ReadCloser, Node, error) {
	resp, node, err := n.askRecord(ctx, c)
	if err != nil {
		return nil, node, err
	}
	if resp.ContentLength != c.Length {
		resp.Body.Close()
		return nil, node, n.failed(ctx, node.ID, fmt.Errorf("record answer of undeclared length, want %d bytes", c.Length))
	}
	return resp.Body, node, nil
}

// answerFailed says why a record answer from node failed: this side's
// write (ErrWrite) as it is; a record that is damaged or another one than
// asked for as that copy being unavailable, which another node's may
// replace; anything else as the node failing.
func (n *Network) answerFailed(ctx context.Context, node Node, err error) error {
	switch {
	case errors.Is(err, ErrWrite):
		return err
	case errors.Is(err, warc.ErrDigestMismatch), errors.Is(err, errWrongRecord):
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, node.ID, err)
	}
	return n.failed(ctx, node.ID, err)
}

// errWrongRecord reports a member that holds a record other than the
// capture's.
var errWrongRecord = errors.New("another record")

// ErrWrite marks CopyMember's failure to write to its writer (a full
// disk): the caller's side, not the record's nor the peer's.
var ErrWrite = errors.New("archive: writing the member out")

// countingWriter passes bytes on to w, counting them, and keeps its error,
// marked ErrWrite.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	if err != nil && cw.err == nil {
		cw.err = fmt.Errorf("%w: %w", ErrWrite, err)
	}
	return n, cw.err
}

// copyMember reads the gzip member raw gives (at most c.Length bytes;
// src closes what it reads from), writing its bytes to w as they are read,
// and checks it.
func copyMember(raw io.Reader, src io.Closer, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error) {
	out := &countingWriter{w: w}
	b, err := memberBlock(io.TeeReader(raw, out), src, c)
	if err != nil {
		return warc.Header{}, nil, firstOf(out.err, err)
	}
	defer b.Close()
	start, err := io.ReadAll(io.LimitReader(b, int64(max(head, 0))))
	if err == nil {
		_, err = b.Check()
	}
	if err != nil {
		return warc.Header{}, nil, firstOf(out.err, err)
	}
	// Check saw the member end with the bytes read: all of them are out.
	if out.n != c.Length {
		return warc.Header{}, nil, fmt.Errorf("record of %d bytes, want %d", out.n, c.Length)
	}
	return b.Header, start, nil
}

// firstOf returns the write error, which a read error then only reports
// again, if there was one.
func firstOf(writeErr, err error) error {
	if writeErr != nil {
		return writeErr
	}
	return err
}

// memberBlock opens the block of the record whose gzip member r gives, as
// Record has it: one gzip member, whose CRC-32 is then checked as well as
// the block's digest, holding c's record. Closing the block closes src.
func memberBlock(r io.Reader, src io.Closer, c index.Capture) (*warc.Block, error) {
	var magic [2]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		src.Close()
		return nil, fmt.Errorf("reading the record: %w", err)
	}
	if magic != [2]byte{0x1f, 0x8b} {
		src.Close()
		return nil, errors.New("record is not a gzip member")
	}
	body := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(magic[:]), r), src}
	b, err := warc.ReadBlock(body, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
	if err != nil {
		return nil, err
	}
	if id := b.Header.Get("WARC-Record-ID"); c.RecordID != "" && id != c.RecordID {
		b.Close()
		return nil, fmt.Errorf("%w: %s at %d holds record %.100s, not %s", errWrongRecord, c.Segment, c.Offset, id, c.RecordID)
	}
	return b, nil
}

// ctxReader reads r until ctx is done: a local record is not read on
// after its reader has gone.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
