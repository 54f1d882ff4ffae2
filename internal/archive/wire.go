package archive

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// The capture stream, the body of GET /v1/archive/range and
// /v1/archive/digest answers, is
//
//	"WGC" 0x01                         magic and version
//	frames, each: tag byte, uvarint n, n bytes of content
//
// where the frames are any number of captures (tagCapture) and then one
// last frame: tagEnd, whose content is the uvarint count of captures sent,
// or tagError, whose content is the message of an error that stopped the
// server mid-stream. A stream without its last frame was cut off.
//
// A capture frame holds the URL key front-coded against the previous
// capture's (uvarint length of the shared prefix, uvarint length of the
// rest, the rest: captures come sorted, so a key shared by many captures
// travels once), the time as a varint of Unix nanoseconds (what the index
// stores), then URL, Type, MIME, Digest, Segment, RecordID and Redirect,
// each a uvarint length and bytes, then Status, Offset and Length as
// varints, and last the SimHash as 8 bytes big-endian when it is not 0.
// Node is not sent: the receiver knows whom it asked.
const (
	streamContentType = "application/x-waggle-captures"

	tagCapture = 1
	tagEnd     = 2
	tagError   = 3

	// maxFrame bounds a frame's content, and so a capture's fields; it
	// also bounds a reconstructed URL key.
	maxFrame = 1 << 20
	// maxErrorMessage bounds the message of an error frame.
	maxErrorMessage = 4 << 10
)

var streamMagic = [4]byte{'W', 'G', 'C', 1}

// errOversize is the error of a capture too large to send.
var errOversize = errors.New("archive: capture too large for the stream")

// errStream marks a capture stream that breaks the format.
var errStream = errors.New("archive: malformed capture stream")

// captureEncoder writes a capture stream.
type captureEncoder struct {
	w    *bufio.Writer
	prev string
	n    uint64
	buf  []byte
}

// newCaptureEncoder writes the stream's magic to w and returns an encoder
// for the rest.
func newCaptureEncoder(w *bufio.Writer) (*captureEncoder, error) {
	if _, err := w.Write(streamMagic[:]); err != nil {
		return nil, err
	}
	return &captureEncoder{w: w}, nil
}

func (e *captureEncoder) capture(c index.Capture) error {
	shared := commonPrefix(e.prev, c.URLKey)
	b := e.buf[:0]
	b = binary.AppendUvarint(b, uint64(shared))
	b = appendString(b, c.URLKey[shared:])
	b = binary.AppendVarint(b, c.Time.UnixNano())
	for _, s := range [...]string{c.URL, c.Type, c.MIME, c.Digest, c.Segment, c.RecordID, c.Redirect} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, int64(c.Status))
	b = binary.AppendVarint(b, c.Offset)
	b = binary.AppendVarint(b, c.Length)
	if c.SimHash != 0 {
		b = binary.BigEndian.AppendUint64(b, c.SimHash)
	}
	e.buf = b
	if len(b) > maxFrame {
		return fmt.Errorf("%w: capture of %.200q at %s is %d bytes encoded, over the limit of %d",
			errOversize, c.URLKey, c.Timestamp14(), len(b), maxFrame)
	}
	if err := e.frame(tagCapture, b); err != nil {
		return err
	}
	e.prev = c.URLKey
	e.n++
	return nil
}

// end writes the frame that closes a complete stream.
func (e *captureEncoder) end() error {
	return e.frame(tagEnd, binary.AppendUvarint(e.buf[:0], e.n))
}

// fail writes the frame that closes a stream the server could not finish.
func (e *captureEncoder) fail(msg string) error {
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	return e.frame(tagError, []byte(msg))
}

func (e *captureEncoder) frame(tag byte, content []byte) error {
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = tag
	n := 1 + binary.PutUvarint(head[1:], uint64(len(content)))
	if _, err := e.w.Write(head[:n]); err != nil {
		return err
	}
	_, err := e.w.Write(content)
	return err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// A remoteError is the message of a stream's error frame: the failure the
// serving node reported.
type remoteError string

func (e remoteError) Error() string { return "the node failed: " + string(e) }

// captureDecoder reads a capture stream. It trusts nothing it reads: every
// length is bounded before anything is allocated for it.
type captureDecoder struct {
	r    *bufio.Reader
	prev string
	n    uint64
	buf  []byte
	err  error // sticky: io.EOF after the end frame, or the first error
}

// newCaptureDecoder reads the stream's magic from r.
func newCaptureDecoder(r io.Reader) (*captureDecoder, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 32<<10)
	}
	var m [len(streamMagic)]byte
	if _, err := io.ReadFull(br, m[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("archive: capture stream: %w", err)
	}
	if m != streamMagic {
		return nil, fmt.Errorf("%w: magic %q is not %q", errStream, m[:], streamMagic[:])
	}
	return &captureDecoder{r: br}, nil
}

// next returns the next capture, io.EOF after a complete stream, a
// remoteError if the server reported one, or the error that broke the
// stream.
func (d *captureDecoder) next() (index.Capture, error) {
	if d.err != nil {
		return index.Capture{}, d.err
	}
	c, err := d.read()
	if err != nil {
		d.err = err
	}
	return c, err
}

func (d *captureDecoder) read() (index.Capture, error) {
	tag, err := d.r.ReadByte()
	if err != nil {
		return index.Capture{}, d.cut(err)
	}
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return index.Capture{}, d.cut(err)
	}
	limit := uint64(maxFrame)
	if tag == tagError {
		limit = maxErrorMessage
	}
	if n > limit {
		return index.Capture{}, fmt.Errorf("%w: frame of %d bytes, over the limit of %d", errStream, n, limit)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		return index.Capture{}, d.cut(err)
	}
	switch tag {
	case tagCapture:
		c, err := d.decode(b)
		if err != nil {
			return index.Capture{}, err
		}
		d.n++
		return c, nil
	case tagEnd:
		count, k := binary.Uvarint(b)
		switch {
		case k <= 0 || k != len(b):
			return index.Capture{}, fmt.Errorf("%w: bad end frame", errStream)
		case count != d.n:
			return index.Capture{}, fmt.Errorf("%w: the server says it sent %d captures, %d came", errStream, count, d.n)
		}
		if _, err := d.r.ReadByte(); !errors.Is(err, io.EOF) {
			if err != nil {
				return index.Capture{}, fmt.Errorf("archive: capture stream: %w", err)
			}
			return index.Capture{}, fmt.Errorf("%w: data after the end frame", errStream)
		}
		return index.Capture{}, io.EOF
	case tagError:
		return index.Capture{}, remoteError(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	return index.Capture{}, fmt.Errorf("%w: unknown frame type %d", errStream, tag)
}

// cut is the error of a stream that stopped before its end frame.
func (d *captureDecoder) cut(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("archive: capture stream cut off after %d captures: %w", d.n, err)
}

func (d *captureDecoder) decode(b []byte) (index.Capture, error) {
	f := fields{buf: b}
	shared := f.uvarint()
	rest := f.bytes()
	if f.bad {
		return index.Capture{}, fmt.Errorf("%w: truncated capture", errStream)
	}
	if shared > uint64(len(d.prev)) {
		return index.Capture{}, fmt.Errorf("%w: key shares %d bytes with a previous key of %d", errStream, shared, len(d.prev))
	}
	if shared+uint64(len(rest)) > maxFrame {
		return index.Capture{}, fmt.Errorf("%w: URL key over %d bytes", errStream, maxFrame)
	}
	var c index.Capture
	c.URLKey = d.prev[:shared] + string(rest)
	c.Time = time.Unix(0, f.varint()).UTC()
	for _, s := range [...]*string{&c.URL, &c.Type, &c.MIME, &c.Digest, &c.Segment, &c.RecordID, &c.Redirect} {
		*s = string(f.bytes())
	}
	status := f.varint()
	c.Offset = f.varint()
	c.Length = f.varint()
	if len(f.buf) == 8 {
		c.SimHash = binary.BigEndian.Uint64(f.buf)
		f.buf = nil
	}
	switch {
	case f.bad:
		return index.Capture{}, fmt.Errorf("%w: truncated capture", errStream)
	case len(f.buf) != 0:
		return index.Capture{}, fmt.Errorf("%w: %d stray bytes after a capture", errStream, len(f.buf))
	case c.URLKey == "" || strings.IndexByte(c.URLKey, 0) >= 0:
		return index.Capture{}, fmt.Errorf("%w: empty URL key or one with NUL", errStream)
	case status < 0 || status > 999:
		return index.Capture{}, fmt.Errorf("%w: HTTP status %d", errStream, status)
	case c.Offset < 0 || c.Length < 0:
		return index.Capture{}, fmt.Errorf("%w: negative record location", errStream)
	}
	c.Status = int(status)
	d.prev = c.URLKey
	return c, nil
}

// fields reads the fields of a frame; bad is set once one is cut off.
type fields struct {
	buf []byte
	bad bool
}

func (f *fields) uvarint() uint64 {
	v, n := binary.Uvarint(f.buf)
	if n <= 0 {
		f.bad = true
		f.buf = nil
		return 0
	}
	f.buf = f.buf[n:]
	return v
}

func (f *fields) varint() int64 {
	v, n := binary.Varint(f.buf)
	if n <= 0 {
		f.bad = true
		f.buf = nil
		return 0
	}
	f.buf = f.buf[n:]
	return v
}

func (f *fields) bytes() []byte {
	l := f.uvarint()
	if f.bad || l > uint64(len(f.buf)) {
		f.bad = true
		f.buf = nil
		return nil
	}
	s := f.buf[:l]
	f.buf = f.buf[l:]
	return s
}
