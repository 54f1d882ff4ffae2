// Package index is the capture index of a node: for every archived response
// or revisit record, its SURT key and time, mapped to where the record lies
// in the WARC segments and what a replay or CDX query needs to know about it
// without opening the WARC.
//
// The index lives in the node's pebble database under the key prefix "c/":
//
//	c/<SURT key> 0x00 <capture time, unix nanoseconds, big-endian uint64>  →  capture
//
// so that all captures of a URL are adjacent and ordered by time, and a
// prefix of SURT keys (a host, a path) is one contiguous range. A second
// prefix, "d/<payload digest>", maps a payload digest to the first capture
// that stored it, for identical-payload revisit records.
//
// Writes go into a caller's batch: the crawler commits index entries in the
// same atomic batch as its frontier changes, after the WARC bytes are durable.
package index

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

const (
	capturePrefix = "c/"
	digestPrefix  = "d/"
)

// Capture is one archived fetch: a response or revisit record in a WARC segment.
type Capture struct {
	URLKey   string    // SURT key of URL
	Time     time.Time // WARC-Date of the record
	URL      string    // original URL
	Type     string    // WARC record type: "response" or "revisit"
	Status   int       // HTTP status code (0 when unknown)
	MIME     string    // media type from Content-Type, without parameters
	Digest   string    // WARC-Payload-Digest, "sha1:..."
	Segment  string    // WARC file base name
	Offset   int64     // offset of the record's gzip member in Segment
	Length   int64     // length of the gzip member
	RecordID string    // WARC-Record-ID, for WARC-Refers-To of later revisits
	Redirect string    // Location of a 3xx response, resolved
	// SimHash is the 64-bit SimHash of an HTML page's visible text
	// (package simhash), 0 for other captures; a revisit has its
	// original's.
	SimHash uint64

	// Node is the ID of the network node a capture was read from, set by a
	// network archive (package archive); empty for this node's own. It is
	// not stored.
	Node string
}

// Timestamp14 is the capture time as the 14-digit Wayback timestamp.
func (c Capture) Timestamp14() string { return Timestamp(c.Time) }

// Index reads the capture index. Writing is done with Put into a batch.
type Index struct {
	db *pebble.DB
}

// New returns an Index over db.
func New(db *pebble.DB) *Index { return &Index{db: db} }

// Put stages c into b. c.URLKey must not contain a NUL byte.
func Put(b *pebble.Batch, c Capture) error {
	if c.URLKey == "" {
		return errors.New("index: capture without URL key")
	}
	for i := 0; i < len(c.URLKey); i++ {
		if c.URLKey[i] == 0 {
			return fmt.Errorf("index: URL key %q contains NUL", c.URLKey)
		}
	}
	return b.Set(captureKey(c.URLKey, c.Time), encodeCapture(c), nil)
}

// PutDigest stages c as the first capture of its payload digest. The
// caller has checked with ByDigest that there is none yet.
func PutDigest(b *pebble.Batch, c Capture) error {
	if c.Digest == "" {
		return nil
	}
	return b.Set([]byte(digestPrefix+c.Digest), encodeCapture(c), nil)
}

// Digests calls fn with every payload digest the index has a first
// capture of.
func Digests(r pebble.Reader, fn func(digest string)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(digestPrefix), UpperBound: prefixEnd([]byte(digestPrefix))})
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		fn(string(it.Key()[len(digestPrefix):]))
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// ByDigest returns the first capture that stored a payload with this digest.
// r is the database or an indexed batch (to see writes not yet committed).
func ByDigest(r pebble.Reader, digest string) (Capture, bool, error) {
	v, closer, err := r.Get([]byte(digestPrefix + digest))
	if errors.Is(err, pebble.ErrNotFound) {
		return Capture{}, false, nil
	}
	if err != nil {
		return Capture{}, false, fmt.Errorf("index: digest lookup: %w", err)
	}
	defer closer.Close()
	c, err := decodeCapture(v)
	if err != nil {
		return Capture{}, false, err
	}
	return c, true, nil
}

// ByDigest returns the first capture that stored a payload with this digest.
func (x *Index) ByDigest(digest string) (Capture, bool, error) { return ByDigest(x.db, digest) }

// Has reports whether any capture of urlKey exists.
func (x *Index) Has(urlKey string) (bool, error) {
	found := false
	err := x.scan(context.Background(), urlKey+"\x00", urlKey+"\x01", false, func([]byte, []byte) (bool, error) {
		found = true
		return false, nil
	})
	return found, err
}

// Captures calls fn for each capture of urlKey in time order (newest first
// when reverse) until fn returns false or an error.
func (x *Index) Captures(ctx context.Context, urlKey string, reverse bool, fn func(Capture) (bool, error)) error {
	return x.scanCaptures(ctx, urlKey+"\x00", urlKey+"\x01", reverse, fn)
}

// Range calls fn for each capture whose URL key k satisfies lo <= k < hi
// (hi empty: no upper bound), ordered by key then time.
func (x *Index) Range(ctx context.Context, lo, hi string, reverse bool, fn func(Capture) (bool, error)) error {
	return x.scanCaptures(ctx, lo, hi, reverse, fn)
}

// A Position is a capture's place in the index's order: its URL key, then
// its time. The zero Position is before every capture.
type Position struct {
	URLKey string
	Time   time.Time
}

// After calls fn for each capture after p, in the index's order, until fn
// returns false or an error: a walk over the index a part at a time, from
// where the last part ended.
func (x *Index) After(ctx context.Context, p Position, fn func(Capture) (bool, error)) error {
	return x.Range(ctx, p.URLKey, "", false, func(c Capture) (bool, error) {
		if c.URLKey == p.URLKey && !c.Time.After(p.Time) {
			return true, nil // p itself, or before it
		}
		return fn(c)
	})
}

func (x *Index) scanCaptures(ctx context.Context, lo, hi string, reverse bool, fn func(Capture) (bool, error)) error {
	return x.scan(ctx, lo, hi, reverse, func(_, v []byte) (bool, error) {
		c, err := decodeCapture(v)
		if err != nil {
			return false, err
		}
		return fn(c)
	})
}

// scan iterates the capture keys between c/lo and c/hi.
func (x *Index) scan(ctx context.Context, lo, hi string, reverse bool, fn func(k, v []byte) (bool, error)) error {
	opts := &pebble.IterOptions{LowerBound: []byte(capturePrefix + lo)}
	if hi != "" {
		opts.UpperBound = []byte(capturePrefix + hi)
	} else {
		opts.UpperBound = prefixEnd([]byte(capturePrefix))
	}
	it, err := x.db.NewIterWithContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	defer it.Close()
	valid := it.First
	step := it.Next
	if reverse {
		valid, step = it.Last, it.Prev
	}
	n := 0
	for ok := valid(); ok; ok = step() {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		more, err := fn(it.Key(), it.Value())
		if err != nil || !more {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// WriteCDXJ writes every capture as a CDXJ line ("<urlkey> <timestamp> {json}"),
// the format pywb and OutbackCDX read, in byte order (as `LC_ALL=C sort`
// has it). The index yields captures by key and time to the nanosecond;
// the lines of one key within one second, which the 14-digit timestamp
// does not tell apart, are held and sorted by their bytes before they are
// written. Such a run is a few lines; one of more than maxSortRun bytes is
// written in capture order past that point, and WriteCDXJ then returns an
// error saying so once every line is written.
func (x *Index) WriteCDXJ(ctx context.Context, w io.Writer) (int, error) {
	return x.writeCDXJ(ctx, w, maxSortRun)
}

// maxSortRun bounds the bytes of lines WriteCDXJ holds to sort one run of a
// key and second.
const maxSortRun = 64 << 20

func (x *Index) writeCDXJ(ctx context.Context, w io.Writer, maxRun int) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	n := 0
	var (
		runKey, runTS string   // the run held: its URL key and timestamp
		buf           []byte   // its lines, one after another
		ends          []int    // where each line in buf ends
		lines         [][]byte // the lines, to sort
		unsorted      string   // the first run too long to sort, "key timestamp"
		streaming     bool     // the current run is past maxRun: lines go straight out
	)
	flush := func() error {
		lines = lines[:0]
		for i, e := range ends {
			s := 0
			if i > 0 {
				s = ends[i-1]
			}
			lines = append(lines, buf[s:e])
		}
		if len(lines) > 1 {
			slices.SortFunc(lines, bytes.Compare)
		}
		for _, l := range lines {
			if _, err := bw.Write(l); err != nil {
				return err
			}
		}
		buf, ends = buf[:0], ends[:0]
		return nil
	}
	err := x.Range(ctx, "", "", false, func(c Capture) (bool, error) {
		ts := c.Timestamp14()
		if c.URLKey != runKey || ts != runTS {
			if err := flush(); err != nil {
				return false, err
			}
			runKey, runTS, streaming = c.URLKey, ts, false
		}
		n++
		if streaming {
			_, err := bw.Write(AppendCDXJ(buf[:0], c))
			return err == nil, err
		}
		buf = AppendCDXJ(buf, c)
		ends = append(ends, len(buf))
		if len(buf) > maxRun {
			if unsorted == "" {
				unsorted = runKey + " " + runTS
			}
			streaming = true
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("index: cdxj: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("index: cdxj: %w", err)
	}
	if unsorted != "" {
		return n, fmt.Errorf("index: cdxj: the captures of %q are more than %d MiB of lines in one second: written, but not all in byte order (LC_ALL=C sort the file)", unsorted, maxRun>>20)
	}
	return n, nil
}

// cdxjFields is the JSON block of a CDXJ line, in pywb's field names.
type cdxjFields struct {
	URL      string `json:"url"`
	MIME     string `json:"mime,omitempty"`
	Status   string `json:"status,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Length   string `json:"length"`
	Offset   string `json:"offset"`
	Filename string `json:"filename"`
	SimHash  string `json:"simhash,omitempty"` // 16 hex digits, for HTML pages
}

// AppendCDXJ appends c's CDXJ line, newline included, to dst.
func AppendCDXJ(dst []byte, c Capture) []byte {
	f := cdxjFields{
		URL:      c.URL,
		MIME:     c.MIME,
		Digest:   c.Digest,
		Length:   strconv.FormatInt(c.Length, 10),
		Offset:   strconv.FormatInt(c.Offset, 10),
		Filename: c.Segment,
	}
	if c.Type == "revisit" {
		// pywb marks revisits by this MIME type in CDX lines.
		f.MIME = "warc/revisit"
	}
	if c.Status != 0 {
		f.Status = strconv.Itoa(c.Status)
	}
	if c.SimHash != 0 {
		f.SimHash = fmt.Sprintf("%016x", c.SimHash)
	}
	js, _ := json.Marshal(f) // cannot fail: strings only
	dst = append(dst, c.URLKey...)
	dst = append(dst, ' ')
	dst = append(dst, c.Timestamp14()...)
	dst = append(dst, ' ')
	dst = append(dst, js...)
	return append(dst, '\n')
}

// DropLocations stages into b the removal of every capture stored in
// segment at or past offset from (its bytes are lost), with the digest
// entries that point at them, and returns how many there were. It reads the
// whole index.
func DropLocations(db *pebble.DB, b *pebble.Batch, segment string, from int64) (int, error) {
	n := 0
	err := New(db).scan(context.Background(), "", "", false, func(k, v []byte) (bool, error) {
		c, err := decodeCapture(v)
		if err != nil {
			return false, err
		}
		if c.Segment != segment || c.Offset+c.Length <= from {
			return true, nil
		}
		n++
		if err := b.Delete(k, nil); err != nil {
			return false, err
		}
		if first, ok, err := ByDigest(db, c.Digest); err == nil && ok && first.RecordID == c.RecordID {
			if err := b.Delete([]byte(digestPrefix+c.Digest), nil); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	return n, err
}

// LastWhole returns the offset of the last capture of segment that lies
// wholly within the segment's first size bytes, or 0 if none does: a record
// boundary below which a segment that lost its tail holds what the index
// says it does. It reads the whole index.
func LastWhole(db *pebble.DB, segment string, size int64) (int64, error) {
	var last int64
	err := New(db).scan(context.Background(), "", "", false, func(_, v []byte) (bool, error) {
		c, err := decodeCapture(v)
		if err != nil {
			return false, err
		}
		if c.Segment == segment && c.Offset+c.Length <= size {
			last = max(last, c.Offset)
		}
		return true, nil
	})
	return last, err
}

// Delete stages into b, an indexed batch, the removal of capture c from
// the index, and of its payload digest's entry when c is the digest's first
// capture.
func Delete(b *pebble.Batch, c Capture) error {
	if err := b.Delete(captureKey(c.URLKey, c.Time), nil); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return DeleteDigest(b, c)
}

// DeleteDigest stages the removal of c as the first capture of its payload
// digest, if it is: a later capture of the payload is then stored, and
// becomes the first. b must be indexed.
func DeleteDigest(b *pebble.Batch, c Capture) error {
	if c.Digest == "" {
		return nil
	}
	first, ok, err := ByDigest(b, c.Digest)
	if err != nil || !ok || first.RecordID != c.RecordID {
		return err
	}
	if err := b.Delete([]byte(digestPrefix+c.Digest), nil); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// RecordKey is the key under prefix that marks the record with this ID:
// prefix + the first 16 bytes of the SHA-256 of the ID. Records the index
// does not cover (requests, metadata) are known by such marks.
func RecordKey(prefix, recordID string) []byte {
	sum := sha256.Sum256([]byte(recordID))
	return append([]byte(prefix), sum[:16]...)
}

// HasRecord reports whether r, the database or an indexed batch, holds
// the capture of urlKey at time t made by the record recordID.
func HasRecord(r pebble.Reader, urlKey string, t time.Time, recordID string) (bool, error) {
	c, ok, err := Lookup(r, urlKey, t)
	return ok && c.RecordID == recordID, err
}

// Lookup returns the capture of urlKey at time t from r, the database or
// an indexed batch.
func Lookup(r pebble.Reader, urlKey string, t time.Time) (Capture, bool, error) {
	v, closer, err := r.Get(captureKey(urlKey, t))
	if errors.Is(err, pebble.ErrNotFound) {
		return Capture{}, false, nil
	}
	if err != nil {
		return Capture{}, false, fmt.Errorf("index: %w", err)
	}
	defer closer.Close()
	c, err := decodeCapture(v)
	if err != nil {
		return Capture{}, false, err
	}
	return c, true, nil
}

func captureKey(urlKey string, t time.Time) []byte {
	k := make([]byte, 0, len(capturePrefix)+len(urlKey)+1+8)
	k = append(k, capturePrefix...)
	k = append(k, urlKey...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(t.UnixNano()))
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// The value encoding is a version byte followed by uvarint-length-prefixed
// strings and varints, in a fixed order. It is compact (an index entry is
// about the size of its URL plus 80 bytes) and cheap to decode. Version 2
// adds the SimHash, as 8 bytes big-endian at the end; version 1 entries
// (written before it) read with SimHash 0.
const encodingVersion = 2

func encodeCapture(c Capture) []byte {
	b := make([]byte, 0, 104+len(c.URLKey)+len(c.URL)+len(c.Segment)+len(c.Redirect))
	b = append(b, encodingVersion)
	b = binary.AppendVarint(b, c.Time.UnixNano())
	for _, s := range [...]string{c.URLKey, c.URL, c.Type, c.MIME, c.Digest, c.Segment, c.RecordID, c.Redirect} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, int64(c.Status))
	b = binary.AppendVarint(b, c.Offset)
	b = binary.AppendVarint(b, c.Length)
	return binary.BigEndian.AppendUint64(b, c.SimHash)
}

var errCorrupt = errors.New("index: corrupt capture entry")

func decodeCapture(v []byte) (Capture, error) {
	if len(v) == 0 || v[0] < 1 || v[0] > encodingVersion {
		return Capture{}, errCorrupt
	}
	version := v[0]
	d := decoder{buf: v[1:]}
	var c Capture
	c.Time = time.Unix(0, d.varint()).UTC()
	for _, s := range [...]*string{&c.URLKey, &c.URL, &c.Type, &c.MIME, &c.Digest, &c.Segment, &c.RecordID, &c.Redirect} {
		*s = d.str()
	}
	c.Status = int(d.varint())
	c.Offset = d.varint()
	c.Length = d.varint()
	if version >= 2 {
		if len(d.buf) < 8 {
			return Capture{}, errCorrupt
		}
		c.SimHash = binary.BigEndian.Uint64(d.buf)
	}
	if d.bad {
		return Capture{}, errCorrupt
	}
	return c, nil
}

type decoder struct {
	buf []byte
	bad bool
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) str() string {
	l, n := binary.Uvarint(d.buf)
	if n <= 0 || uint64(len(d.buf)-n) < l {
		d.bad = true
		return ""
	}
	s := string(d.buf[n : n+int(l)])
	d.buf = d.buf[n+int(l):]
	return s
}
