package antientropy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// The bodies of the peer protocol (see Handler) are binary; each starts
// with the version byte wireVersion. Integers are uvarints unless said
// otherwise; hashes and fingerprints are 8 bytes, big-endian.
//
//	summary answer:   lo, hi (uvarint length and bytes), depth byte,
//	                  root hash, count
//	children request: tree depth, root hash, level d, n, then n parent
//	                  node indexes, strictly increasing, delta-coded
//	children answer:  16·n child hashes
//	diff request:     tree depth, n, then n buckets, each: its index
//	                  (strictly increasing, delta-coded), k, and k
//	                  fingerprints of the asker's captures in it
//	diff answer:      answered, missingThere, n, then n captures
//
// A diff answer's captures are front-coded on the URL key (the length of
// the prefix shared with the previous capture's key, then the rest), then
// the time as a varint of Unix nanoseconds, then URL, Type, MIME, Digest,
// Segment, RecordID and Redirect as lengths and bytes, then Status, Offset
// and Length as varints, and in a diff answer of version
// diffVersionSimHash the SimHash (8 bytes). An asker names the highest
// diff answer version it reads in the acceptVersion header, which nodes
// that predate version 2 ignore (answering version 1).
const (
	wireVersion        = 1
	diffVersionSimHash = 2
	acceptVersion      = "Waggle-Accept-Version"
)

// Bounds on what one request or answer may carry. Each decoder checks
// them before it allocates.
const (
	maxKeyBytes         = 64 << 10                  // Lo and Hi of a summary
	maxSummaryBytes     = 2*maxKeyBytes + 64        // a summary answer
	maxParents          = 1 << (4 * (MaxDepth - 1)) // every node above the leaves' level
	maxChildrenRequest  = 16 + 10*maxParents
	maxDiffBuckets      = 1 << 16
	maxDiffFingerprints = 1 << 18
	maxDiffRequest      = 16 + maxDiffBuckets*(10+10) + 8*maxDiffFingerprints
	maxAnswerCaptures   = 1 << 14
	maxAnswerBytes      = 32 << 20
	maxCaptureBytes     = 1 << 20
)

var errWire = errors.New("antientropy: malformed message")

func appendSummary(b []byte, s Summary) []byte {
	b = append(b, wireVersion)
	b = appendString(b, s.Lo)
	b = appendString(b, s.Hi)
	b = append(b, byte(s.Depth))
	b = binary.BigEndian.AppendUint64(b, s.Root)
	return binary.AppendUvarint(b, uint64(s.Count))
}

func decodeSummary(b []byte) (Summary, error) {
	r := reader{buf: b}
	r.version()
	lo, hi := r.string(maxKeyBytes), r.string(maxKeyBytes)
	s := Summary{Lo: lo, Hi: hi, Depth: int(r.byte()), Root: r.uint64(), Count: int64(r.uvarint(math.MaxInt64))}
	if err := r.done(); err != nil {
		return Summary{}, err
	}
	if s.Depth > MaxDepth {
		return Summary{}, fmt.Errorf("%w: depth %d", errWire, s.Depth)
	}
	return s, nil
}

type childrenRequest struct {
	depth   int    // of the tree
	root    uint64 // of the tree, to check it is the one summarised
	level   int    // of the parents
	parents []uint64
}

func (q childrenRequest) append(b []byte) []byte {
	b = append(b, wireVersion)
	b = binary.AppendUvarint(b, uint64(q.depth))
	b = binary.BigEndian.AppendUint64(b, q.root)
	b = binary.AppendUvarint(b, uint64(q.level))
	b = binary.AppendUvarint(b, uint64(len(q.parents)))
	var prev uint64
	for i, p := range q.parents {
		if i > 0 {
			p -= prev + 1
		}
		b = binary.AppendUvarint(b, p)
		prev = q.parents[i]
	}
	return b
}

func decodeChildrenRequest(b []byte) (childrenRequest, error) {
	r := reader{buf: b}
	r.version()
	q := childrenRequest{depth: int(r.uvarint(MaxDepth)), root: r.uint64()}
	q.level = int(r.uvarint(MaxDepth))
	if r.err == nil && q.level >= q.depth {
		return q, fmt.Errorf("%w: no children at level %d of a depth-%d tree", errWire, q.level, q.depth)
	}
	nodes := uint64(1) << (4 * q.level)
	n := r.uvarint(nodes)
	q.parents = r.increasing(n, nodes)
	return q, r.done()
}

func appendHashes(b []byte, hashes []uint64) []byte {
	b = append(b, wireVersion)
	for _, h := range hashes {
		b = binary.BigEndian.AppendUint64(b, h)
	}
	return b
}

// decodeHashes decodes a children answer, which must hold exactly n hashes.
func decodeHashes(b []byte, n int) ([]uint64, error) {
	r := reader{buf: b}
	r.version()
	if r.err == nil && len(r.buf) != 8*n {
		return nil, fmt.Errorf("%w: %d bytes of hashes, want %d", errWire, len(r.buf), 8*n)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.uint64()
	}
	return out, r.done()
}

type diffBucket struct {
	bucket uint64
	fps    []uint64 // the asker's fingerprints in bucket
}

type diffRequest struct {
	depth   int
	buckets []diffBucket
}

func (q diffRequest) append(b []byte) []byte {
	b = append(b, wireVersion)
	b = binary.AppendUvarint(b, uint64(q.depth))
	b = binary.AppendUvarint(b, uint64(len(q.buckets)))
	var prev uint64
	for i, x := range q.buckets {
		d := x.bucket
		if i > 0 {
			d -= prev + 1
		}
		prev = x.bucket
		b = binary.AppendUvarint(b, d)
		b = binary.AppendUvarint(b, uint64(len(x.fps)))
		for _, fp := range x.fps {
			b = binary.BigEndian.AppendUint64(b, fp)
		}
	}
	return b
}

// decodeDiffRequest decodes a diff request, checking that every
// fingerprint lies in the bucket it is listed under.
func decodeDiffRequest(b []byte) (diffRequest, error) {
	r := reader{buf: b}
	r.version()
	q := diffRequest{depth: int(r.uvarint(MaxDepth))}
	leaves := uint64(1) << (4 * q.depth)
	n := r.uvarint(min(leaves, maxDiffBuckets))
	q.buckets = make([]diffBucket, 0, min(n, uint64(len(r.buf))))
	var next uint64 // the least index the next bucket may have
	total := uint64(0)
	for range n {
		d := r.uvarint(leaves)
		k := r.uvarint(maxDiffFingerprints - total)
		if r.err != nil {
			break
		}
		if d >= leaves-next {
			return diffRequest{}, fmt.Errorf("%w: bucket beyond the %d leaves or out of order", errWire, leaves)
		}
		if k*8 > uint64(len(r.buf)) {
			return diffRequest{}, fmt.Errorf("%w: truncated fingerprints", errWire)
		}
		x := diffBucket{bucket: next + d, fps: make([]uint64, k)}
		for i := range x.fps {
			x.fps[i] = r.uint64()
			if bucketAt(x.fps[i], q.depth) != x.bucket {
				return diffRequest{}, fmt.Errorf("%w: fingerprint %016x not in bucket %d", errWire, x.fps[i], x.bucket)
			}
		}
		total += k
		next = x.bucket + 1
		q.buckets = append(q.buckets, x)
	}
	return q, r.done()
}

type diffAnswer struct {
	answered     int // how many of the asked buckets, from the first, this answers
	missingThere int // fingerprints of the asker in those buckets the server lacks
	captures     []index.Capture
}

// append appends the answer in version wireVersion or diffVersionSimHash.
func (a diffAnswer) append(b []byte, version byte) ([]byte, error) {
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(a.answered))
	b = binary.AppendUvarint(b, uint64(a.missingThere))
	b = binary.AppendUvarint(b, uint64(len(a.captures)))
	prev := ""
	for _, c := range a.captures {
		start := len(b)
		shared := commonPrefix(prev, c.URLKey)
		b = binary.AppendUvarint(b, uint64(shared))
		b = appendString(b, c.URLKey[shared:])
		b = binary.AppendVarint(b, c.Time.UnixNano())
		for _, s := range [...]string{c.URL, c.Type, c.MIME, c.Digest, c.Segment, c.RecordID, c.Redirect} {
			b = appendString(b, s)
		}
		b = binary.AppendVarint(b, int64(c.Status))
		b = binary.AppendVarint(b, c.Offset)
		b = binary.AppendVarint(b, c.Length)
		if version == diffVersionSimHash {
			b = binary.BigEndian.AppendUint64(b, c.SimHash)
		}
		if len(b)-start > maxCaptureBytes {
			return nil, fmt.Errorf("antientropy: capture of %.200q at %s is over %d bytes encoded", c.URLKey, c.Timestamp14(), maxCaptureBytes)
		}
		prev = c.URLKey
	}
	if len(b) > maxAnswerBytes {
		return nil, fmt.Errorf("antientropy: diff answer of %d bytes is over %d", len(b), maxAnswerBytes)
	}
	return b, nil
}

// encodedSize bounds the size of c in a diff answer.
func encodedSize(c index.Capture) int {
	return 8*binary.MaxVarintLen64 + 8 + len(c.URLKey) + len(c.URL) + len(c.Type) + len(c.MIME) +
		len(c.Digest) + len(c.Segment) + len(c.RecordID) + len(c.Redirect)
}

func decodeDiffAnswer(b []byte) (diffAnswer, error) {
	r := reader{buf: b}
	withSimHash := false
	if v := r.byte(); r.err == nil && v != wireVersion && v != diffVersionSimHash {
		r.fail("version %d, want %d or %d", v, wireVersion, diffVersionSimHash)
	} else {
		withSimHash = v == diffVersionSimHash
	}
	a := diffAnswer{answered: int(r.uvarint(maxDiffBuckets)), missingThere: int(r.uvarint(maxDiffFingerprints))}
	n := r.uvarint(maxAnswerCaptures)
	// A capture takes at least 14 bytes, which bounds the allocation by
	// the input.
	a.captures = make([]index.Capture, 0, min(n, uint64(len(r.buf)/14)))
	prev := ""
	for range n {
		shared := r.uvarint(uint64(len(prev)))
		rest := r.string(maxCaptureBytes)
		var c index.Capture
		c.URLKey = prev[:shared] + rest
		c.Time = time.Unix(0, r.varint(math.MinInt64, math.MaxInt64)).UTC()
		for _, s := range [...]*string{&c.URL, &c.Type, &c.MIME, &c.Digest, &c.Segment, &c.RecordID, &c.Redirect} {
			*s = r.string(maxCaptureBytes)
		}
		c.Status = int(r.varint(0, 999))
		c.Offset = r.varint(0, math.MaxInt64)
		c.Length = r.varint(0, math.MaxInt64)
		if withSimHash {
			c.SimHash = r.uint64()
		}
		if r.err != nil {
			break
		}
		if c.URLKey == "" || strings.IndexByte(c.URLKey, 0) >= 0 {
			return diffAnswer{}, fmt.Errorf("%w: empty URL key or one with NUL", errWire)
		}
		prev = c.URLKey
		a.captures = append(a.captures, c)
	}
	return a, r.done()
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// reader reads a message; the first error sticks, and later reads return
// zero values.
type reader struct {
	buf []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errWire}, args...)...)
	}
	r.buf = nil
}

func (r *reader) version() {
	if v := r.byte(); r.err == nil && v != wireVersion {
		r.fail("version %d, want %d", v, wireVersion)
	}
}

func (r *reader) byte() byte {
	if len(r.buf) < 1 {
		r.fail("truncated")
		return 0
	}
	v := r.buf[0]
	r.buf = r.buf[1:]
	return v
}

func (r *reader) uint64() uint64 {
	if len(r.buf) < 8 {
		r.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.buf)
	r.buf = r.buf[8:]
	return v
}

// uvarint reads a uvarint no larger than max.
func (r *reader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.fail("truncated or overlong number")
		return 0
	}
	if v > max {
		r.fail("%d over the limit of %d", v, max)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// varint reads a varint in [lo, hi].
func (r *reader) varint(lo, hi int64) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if n <= 0 {
		r.fail("truncated or overlong number")
		return 0
	}
	if v < lo || v > hi {
		r.fail("%d outside [%d, %d]", v, lo, hi)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) string(max uint64) string {
	n := r.uvarint(max)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.buf)) {
		r.fail("truncated")
		return ""
	}
	s := string(r.buf[:n])
	r.buf = r.buf[n:]
	return s
}

// increasing reads n strictly increasing, delta-coded numbers below limit.
func (r *reader) increasing(n, limit uint64) []uint64 {
	if r.err != nil {
		return nil
	}
	out := make([]uint64, 0, min(n, uint64(len(r.buf))))
	var next uint64
	for range n {
		d := r.uvarint(limit)
		if r.err != nil {
			return nil
		}
		if d >= limit-next {
			r.fail("node index beyond %d or out of order", limit)
			return nil
		}
		out = append(out, next+d)
		next += d + 1
	}
	return out
}

// done returns the reader's error, or an error if bytes are left over.
func (r *reader) done() error {
	if r.err == nil && len(r.buf) != 0 {
		r.fail("%d stray bytes", len(r.buf))
	}
	return r.err
}
