package replicate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// The wire format of a batch (POST /v1/replicate) is, uncompressed since
// the members are gzip already,
//
//	"WGR" 0x01 or 0x02                      magic and version
//	uvarint n                               number of entries, 1..MaxBatchEntries
//	n × (capture,                           the entry's index entry
//	     uvarint m,                         number of records, 1..MaxEntryRecords
//	     m × (uvarint len, len bytes))      each record's gzip member, the capture's own first
//
// and a capture is
//
//	varint  time (Unix nanoseconds)
//	7 × (uvarint len, bytes)                URLKey URL Type MIME Digest RecordID Redirect
//	uvarint status
//	[8 bytes SimHash, big-endian]           in version 2 only
//
// Every field of index.Capture travels except Node and the location
// (Segment, Offset, Length), which only the receiver can know. The
// receiver computes a page's SimHash from its record; a revisit has no
// text, and takes its original's where the receiver holds the original,
// else the one the owner sends. A batch is sent as version 1 when none of
// its revisits has a SimHash, so that nodes which read only version 1
// still take most batches (see Queue.sendBatch for the rest).
const (
	// ContentType is the media type of a batch.
	ContentType = "application/x-waggle-replicate"
	// MaxBodyBytes limits a batch of several entries.
	MaxBodyBytes = 64 << 20
	// MaxLargeBodyBytes limits a batch of one entry: a capture too large
	// for MaxBodyBytes travels alone, and a receiver takes one such batch
	// at a time, since it holds it in memory. The peer.Server the Handler
	// runs behind must allow bodies this large (its MaxBodyBytes).
	MaxLargeBodyBytes = MaxBlockBytes + MaxBodyBytes
	// MaxBlockBytes limits the decompressed content block of one record,
	// which is held in memory while its digest is checked: the largest
	// block a node reads at all.
	MaxBlockBytes = warc.MaxBlock
	// MaxMemberBytes limits one record's gzip member: a block of
	// MaxBlockBytes that does not compress, with its header.
	MaxMemberBytes = MaxBlockBytes + 2<<20
	// MaxBatchEntries is the most entries a batch may carry.
	MaxBatchEntries = 100_000
	// MaxEntryRecords is the most records one entry may carry.
	MaxEntryRecords = 16
	// maxField limits each string of a capture.
	maxField = 64 << 10
)

var magic = []byte{'W', 'G', 'R', 1}

// versionSimHash is the version of a batch whose captures carry their SimHash.
const versionSimHash = 2

// errTooLarge marks a batch or record over one of the limits.
var errTooLarge = errors.New("replicate: over the size limits")

// A Copy is a record received from the capture's owner.
type Copy struct {
	// Member is one gzip member holding one WARC record, byte for byte as
	// the owner wrote it.
	Member []byte
	// Capture is set on the capture's own record (the first of its
	// entry); nil on its request and metadata records. Node, Segment,
	// Offset and Length are zero: the receiver sets them.
	Capture *index.Capture
	// Record is the member's record as Handler read and checked it, so
	// that the store need not decompress the member again; nil once the
	// records a batch keeps reach their bound (maxRetainedBlocks).
	Record *warc.Record
}

// wireEntry is one entry of a batch being encoded.
type wireEntry struct {
	capture index.Capture
	members [][]byte
}

// appendCapture appends the encoding of c shared by the wire format and
// the queue, with its SimHash in their versions that carry one.
func appendCapture(dst []byte, c *index.Capture, withSimHash bool) []byte {
	dst = binary.AppendVarint(dst, c.Time.UnixNano())
	for _, s := range [...]string{c.URLKey, c.URL, c.Type, c.MIME, c.Digest, c.RecordID, c.Redirect} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	dst = binary.AppendUvarint(dst, uint64(c.Status))
	if withSimHash {
		dst = binary.BigEndian.AppendUint64(dst, c.SimHash)
	}
	return dst
}

// carriesSimHash reports whether a batch of entries has a SimHash for the
// receiver to take: one of a revisit (see the format above).
func carriesSimHash(entries []wireEntry) bool {
	return slices.ContainsFunc(entries, func(e wireEntry) bool {
		return e.capture.Type == warc.TypeRevisit && e.capture.SimHash != 0
	})
}

// encodeBatch returns the wire form of entries, in version 1 or
// versionSimHash, in pieces: the framing, and the members as they are,
// not copied (a large one may be most of the process's memory).
func encodeBatch(entries []wireEntry, version byte) (pieces [][]byte, size int) {
	withSimHash := version == versionSimHash
	frame := append([]byte(nil), magic...)
	frame[3] = version
	frame = binary.AppendUvarint(frame, uint64(len(entries)))
	for i := range entries {
		e := &entries[i]
		frame = appendCapture(frame, &e.capture, withSimHash)
		frame = binary.AppendUvarint(frame, uint64(len(e.members)))
		for _, m := range e.members {
			frame = binary.AppendUvarint(frame, uint64(len(m)))
			pieces = append(pieces, frame, m)
			size += len(frame) + len(m)
			frame = nil
		}
	}
	if len(frame) > 0 {
		pieces = append(pieces, frame)
		size += len(frame)
	}
	return pieces, size
}

// wireSize is the size of the wire form of an entry whose members are
// n bytes in all, a bound good enough for batching.
func wireSize(c *index.Capture, records, n int) int {
	return 10 + 7*3 + len(c.URLKey) + len(c.URL) + len(c.Type) + len(c.MIME) + len(c.Digest) +
		len(c.RecordID) + len(c.Redirect) + 3 + 8 + 1 + records*10 + n
}

// reader decodes the fields of a queue value or a batch.
type reader struct {
	buf []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	// Only the shortest form, so that a batch has one encoding.
	var min [binary.MaxVarintLen64]byte
	if n <= 0 || binary.PutUvarint(min[:], v) != n {
		r.fail("bad %s", what)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	var min [binary.MaxVarintLen64]byte
	if n <= 0 || binary.PutVarint(min[:], v) != n {
		r.fail("bad %s", what)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// bytes returns the next n bytes, aliasing the buffer.
func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)) {
		r.fail("%s of %d bytes cut off", what, n)
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

func (r *reader) str(what string, limit uint64) string {
	n := r.uvarint(what + " length")
	if n > limit {
		r.fail("%s of %d bytes is longer than %d", what, n, limit)
		return ""
	}
	return string(r.bytes(n, what))
}

// capture decodes a capture, with its SimHash if withSimHash, and checks
// it (see checkCapture).
func (r *reader) capture(withSimHash bool) *index.Capture {
	c := &index.Capture{Time: time.Unix(0, r.varint("capture time")).UTC()}
	for _, f := range [...]struct {
		s    *string
		name string
	}{{&c.URLKey, "URL key"}, {&c.URL, "URL"}, {&c.Type, "type"}, {&c.MIME, "media type"},
		{&c.Digest, "digest"}, {&c.RecordID, "record ID"}, {&c.Redirect, "redirect"}} {
		*f.s = r.str(f.name, maxField)
	}
	status := r.uvarint("status")
	if r.err != nil {
		return nil
	}
	if status > 999 {
		r.fail("status %d", status)
		return nil
	}
	c.Status = int(status)
	if withSimHash {
		if sh := r.bytes(8, "SimHash"); sh != nil {
			c.SimHash = binary.BigEndian.Uint64(sh)
		} else {
			return nil
		}
	}
	if why := checkCapture(c); why != "" {
		r.fail("%s", why)
		return nil
	}
	return c
}

// checkCapture reports why c cannot be an index entry, or "".
func checkCapture(c *index.Capture) string {
	switch {
	case c.URLKey == "":
		return "capture without URL key"
	case strings.IndexByte(c.URLKey, 0) >= 0:
		return "URL key contains NUL"
	case c.RecordID == "":
		return "capture without record ID"
	case c.Type == "":
		return "capture without record type"
	case c.Status < 0 || c.Status > 999:
		return fmt.Sprintf("status %d", c.Status)
	case !time.Unix(0, c.Time.UnixNano()).Equal(c.Time):
		return "capture time outside what the index can hold"
	}
	for _, s := range [...]string{c.URLKey, c.URL, c.Type, c.MIME, c.Digest, c.RecordID, c.Redirect} {
		if len(s) > maxField {
			return fmt.Sprintf("capture field of %d bytes is longer than %d", len(s), maxField)
		}
	}
	return ""
}

// decodeCopies parses a batch body, checking its framing, limits and
// index entries, but not its members (see verifyCopy). The members alias
// body.
func decodeCopies(body []byte) ([]Copy, error) {
	if len(body) > MaxLargeBodyBytes {
		return nil, fmt.Errorf("%w: batch of %d bytes, at most %d", errTooLarge, len(body), MaxLargeBodyBytes)
	}
	if len(body) < len(magic) || !bytes.Equal(body[:3], magic[:3]) {
		return nil, errors.New("replicate: not a replication batch")
	}
	if body[3] != magic[3] && body[3] != versionSimHash {
		return nil, fmt.Errorf("replicate: batch version %d is not supported (want %d or %d)", body[3], magic[3], versionSimHash)
	}
	withSimHash := body[3] == versionSimHash
	r := &reader{buf: body[len(magic):]}
	n := r.uvarint("entry count")
	switch {
	case r.err != nil:
	case n == 0:
		r.fail("empty batch")
	case n > MaxBatchEntries:
		return nil, fmt.Errorf("%w: %d entries, at most %d", errTooLarge, n, MaxBatchEntries)
	case n > 1 && len(body) > MaxBodyBytes:
		return nil, fmt.Errorf("%w: batch of %d entries and %d bytes: one over %d bytes carries a single entry", errTooLarge, n, len(body), MaxBodyBytes)
	}
	var copies []Copy
	for i := uint64(0); i < n && r.err == nil; i++ {
		c := r.capture(withSimHash)
		m := r.uvarint("record count")
		if r.err != nil {
			return nil, fmt.Errorf("replicate: batch: entry %d: %w", i, r.err)
		}
		if m == 0 || m > MaxEntryRecords {
			return nil, fmt.Errorf("replicate: batch: entry %d has %d records, want 1 to %d", i, m, MaxEntryRecords)
		}
		for j := range m {
			l := r.uvarint("member length")
			if r.err == nil && (l == 0 || l > MaxMemberBytes) {
				if l > MaxMemberBytes {
					return nil, fmt.Errorf("%w: entry %d: member of %d bytes, at most %d", errTooLarge, i, l, MaxMemberBytes)
				}
				r.fail("empty member")
			}
			b := r.bytes(l, "member")
			if r.err != nil {
				return nil, fmt.Errorf("replicate: batch: entry %d, record %d: %w", i, j, r.err)
			}
			cp := Copy{Member: b}
			if j == 0 {
				cp.Capture = c
			}
			copies = append(copies, cp)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("replicate: batch: %w", r.err)
	}
	if len(r.buf) > 0 {
		return nil, fmt.Errorf("replicate: batch: %d bytes after the last entry", len(r.buf))
	}
	return copies, nil
}

// readMember checks that m is exactly one gzip member holding exactly one
// WARC record, with its CRC-32 and its WARC-Block-Digest (when it has one
// in an algorithm warc.VerifyBlock knows) right, and returns the record.
// A record whose block is over maxBlock is refused before it is inflated
// (warc.ErrBlockTooLarge).
func readMember(m []byte, maxBlock int64) (*warc.Record, error) {
	if len(m) > MaxMemberBytes {
		return nil, fmt.Errorf("%w: member of %d bytes, at most %d", errTooLarge, len(m), MaxMemberBytes)
	}
	if len(m) < 2 || m[0] != 0x1f || m[1] != 0x8b {
		return nil, errors.New("not a gzip member")
	}
	rd, err := warc.NewReader(bytes.NewReader(m))
	if err != nil {
		return nil, err
	}
	rd.MaxBlock = maxBlock
	rec, loc, err := rd.Next()
	switch {
	case errors.Is(err, io.EOF):
		return nil, errors.New("gzip member holds no record")
	case err != nil:
		return nil, err
	case loc.Offset != 0:
		return nil, fmt.Errorf("%d bytes before the record's gzip member", loc.Offset)
	case loc.Length == 0:
		return nil, errors.New("gzip member holds more than one record, or bytes after its record")
	case loc.Length != int64(len(m)):
		return nil, fmt.Errorf("%d bytes after the gzip member", int64(len(m))-loc.Length)
	}
	if err := warc.VerifyBlock(rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// matches reports why rec is not the record of capture c, or "".
func matches(rec *warc.Record, c *index.Capture) string {
	if id := rec.ID(); id != c.RecordID {
		return fmt.Sprintf("record ID %.100q is not the capture's %.100q", id, c.RecordID)
	}
	if typ := rec.Type(); typ != c.Type {
		return fmt.Sprintf("record type %.40q is not the capture's %.40q", typ, c.Type)
	}
	key, err := urlkey.SURT(rec.TargetURI())
	if err != nil {
		return fmt.Sprintf("target URI %.200q: %v", rec.TargetURI(), err)
	}
	if key != c.URLKey {
		return fmt.Sprintf("target URI %.200q has key %.200q, not the capture's %.200q", rec.TargetURI(), key, c.URLKey)
	}
	// A WARC-Date is written to the microsecond at most, cut, not rounded.
	d, err := rec.Date()
	if err != nil {
		return err.Error()
	}
	if !d.Equal(c.Time) && !d.Equal(c.Time.Truncate(time.Microsecond)) {
		return fmt.Sprintf("record date %s is not the capture's %s", d.Format(time.RFC3339Nano), c.Time.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// verifyCopy checks a copy's member and, for a capture's own record, that
// it is the record the capture names, and sets cp.Record. Its block may be
// at most maxBlock bytes.
func verifyCopy(cp *Copy, maxBlock int64) error {
	rec, err := readMember(cp.Member, maxBlock)
	if err != nil {
		return err
	}
	if cp.Capture != nil {
		if why := matches(rec, cp.Capture); why != "" {
			return errors.New(why)
		}
	}
	cp.Record = rec
	return nil
}
