// Package antientropy finds the captures two replicas of a key range do not
// share, moving data in proportion to the difference rather than to the
// archive (issue 5, anti-entropy).
//
// Each capture is reduced to a 64-bit fingerprint of (SURT key, capture time,
// payload digest). A Tree over a key range [lo, hi) is a complete 16-ary
// tree of fixed depth whose leaves are buckets chosen by the fingerprint
// alone, so both sides build trees of the same shape whatever captures they
// hold. A node's hash is the sum, modulo 2^64, of the fingerprints beneath it.
//
// A round between two nodes is:
//
//  1. Compare: exchange Summaries (range, depth, root hash); if the roots are
//     equal nothing else crosses the wire. Otherwise walk down level by level,
//     asking only for the children of nodes that differ, one round trip per
//     level, and end with the leaf buckets that differ.
//  2. The initiator lists its Entries in those buckets and sends the
//     buckets and their Fingerprints (8 bytes a capture). MissingCaptures at
//     the peer then says exactly which captures the initiator lacks (the
//     peer sends those) and which fingerprints the peer lacks (the peer asks
//     for those, 8 bytes each).
//
// Copying the records themselves is the transport's business.
package antientropy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/waggle-archive/waggle/internal/index"
)

// Fanout is the number of children of every inner node.
const Fanout = 16

// MaxDepth bounds a tree to 16^5 (about a million) leaves, 9 MB of hashes,
// enough for leaves of tens of captures at tens of millions per range.
const MaxDepth = 5

// Entry is what anti-entropy compares of a capture: the capture is the same
// on two nodes when these three agree.
type Entry struct {
	URLKey string
	Time   time.Time
	Digest string
}

// EntryOf returns the Entry of c.
func EntryOf(c index.Capture) Entry { return Entry{URLKey: c.URLKey, Time: c.Time, Digest: c.Digest} }

// Fingerprint is a 64-bit hash of (URLKey, Time in unix nanoseconds, Digest).
//
// 64 bits suffice because a fingerprint is never trusted alone to prove two
// captures equal across the network: a tree node compares sums of them, and
// a false "equal" needs a difference that sums to exactly zero mod 2^64
// (probability 2^-64 per node compared, so about 2^-34 per day even for 10^4
// node pairs comparing 10^5 nodes an hour), while within a bucket of tens of
// captures a collision hiding a missing capture is as unlikely. 128 bits
// would double every byte on the wire for no practical gain.
//
// Zero is never returned: a zero summand would not change any sum, so such
// a capture could never be found missing.
func (e Entry) Fingerprint() uint64 {
	var buf [256]byte
	return e.fingerprint(buf[:0])
}

func (e Entry) fingerprint(buf []byte) uint64 {
	// The index refuses NUL in URL keys, so the separator makes the
	// encoding unambiguous; the digest is last and needs no length.
	buf = append(buf, e.URLKey...)
	buf = append(buf, 0)
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.Time.UnixNano()))
	buf = append(buf, e.Digest...)
	if fp := xxhash.Sum64(buf); fp != 0 {
		return fp
	}
	return 1
}

// Summary is what two nodes exchange first: the shape of their trees, which
// must agree, and the root hash.
type Summary struct {
	Lo, Hi string // key range [Lo, Hi); Hi empty: no upper bound
	Depth  int
	Root   uint64
	Count  int64 // captures in the tree, for reports only
}

// WireSize is the encoded size of s: the two keys with uvarint lengths, the
// depth byte, the root and the count.
func (s Summary) WireSize() int {
	return uvarintLen(uint64(len(s.Lo))) + len(s.Lo) + uvarintLen(uint64(len(s.Hi))) + len(s.Hi) + 1 + 8 + uvarintLen(uint64(s.Count))
}

// Tree is a hash tree over the captures of a key range. It is safe for
// concurrent use; Add and Remove keep it current as captures are written, so
// it need not be rebuilt every round.
type Tree struct {
	lo, hi string
	depth  int

	mu     sync.RWMutex
	levels [][]uint64 // levels[d] holds the 16^d node hashes of depth d
	count  int64
}

// New returns an empty tree over [lo, hi) with leaves at depth (0 to
// MaxDepth; DepthFor suggests one).
func New(lo, hi string, depth int) (*Tree, error) {
	if depth < 0 || depth > MaxDepth {
		return nil, fmt.Errorf("antientropy: depth %d outside 0..%d", depth, MaxDepth)
	}
	if hi != "" && lo >= hi {
		return nil, fmt.Errorf("antientropy: empty key range [%q, %q)", lo, hi)
	}
	t := &Tree{lo: lo, hi: hi, depth: depth, levels: make([][]uint64, depth+1)}
	for d := range t.levels {
		t.levels[d] = make([]uint64, 1<<(4*d))
	}
	return t, nil
}

// DepthFor is the depth at which n captures fill leaves with at most about
// 32 each on average, so that a differing leaf costs a few hundred bytes of
// fingerprints. Both sides must use the same depth: derive it from a figure
// they agree on (the range's expected size), not from their own counts.
func DepthFor(n int64) int {
	d := 0
	for leaves := int64(1); d < MaxDepth && n > 32*leaves; leaves *= Fanout {
		d++
	}
	return d
}

// Build returns the tree of the captures of idx whose keys lie in [lo, hi).
func Build(ctx context.Context, idx *index.Index, lo, hi string, depth int) (*Tree, error) {
	t, err := New(lo, hi, depth)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, 256)
	err = idx.Range(ctx, lo, hi, false, func(c index.Capture) (bool, error) {
		t.add(EntryOf(c).fingerprint(buf[:0]), false)
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("antientropy: build: %w", err)
	}
	return t, nil
}

// Add records a capture written after Build.
func (t *Tree) Add(e Entry) error { return t.update(e, false) }

// Remove forgets a capture deleted after Build (a range handed over).
func (t *Tree) Remove(e Entry) error { return t.update(e, true) }

func (t *Tree) update(e Entry, remove bool) error {
	if !t.contains(e.URLKey) {
		return fmt.Errorf("antientropy: key %q outside [%q, %q)", e.URLKey, t.lo, t.hi)
	}
	t.mu.Lock()
	t.add(e.Fingerprint(), remove)
	t.mu.Unlock()
	return nil
}

// add adds fp to (or, when remove, subtracts it from) every node on the
// path to its leaf. Sums, unlike XOR, need no care for a fingerprint counted
// twice (two equal captures do not cancel) and make Remove the exact
// inverse of Add, in any order.
func (t *Tree) add(fp uint64, remove bool) {
	b, n := t.bucket(fp), int64(1)
	if remove {
		fp, n = -fp, -1
	}
	for d := t.depth; d >= 0; d-- {
		t.levels[d][b] += fp
		b >>= 4
	}
	t.count += n
}

// bucket is the leaf of a fingerprint. The fingerprint is remixed first
// (multiplication by an odd constant is a bijection whose top bits depend on
// all bits of the input) so that captures within a leaf do not share the
// high bits of their fingerprints, which would weaken the leaf's sum.
// Bucketing by fingerprint rather than by URL key keeps leaves even when one
// URL has thousands of captures.
func (t *Tree) bucket(fp uint64) uint64 {
	if t.depth == 0 {
		return 0
	}
	return (fp * 0x9e3779b97f4a7c15) >> (64 - 4*t.depth)
}

func (t *Tree) contains(key string) bool {
	return key >= t.lo && (t.hi == "" || key < t.hi)
}

// Range returns the key range of t.
func (t *Tree) Range() (lo, hi string) { return t.lo, t.hi }

// Depth returns the depth of t's leaves.
func (t *Tree) Depth() int { return t.depth }

// Root returns the hash of all captures in t.
func (t *Tree) Root() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.levels[0][0]
}

// Len returns the number of captures in t.
func (t *Tree) Len() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.count
}

// Summary returns what t's side sends first in a round.
func (t *Tree) Summary() Summary {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return Summary{Lo: t.lo, Hi: t.hi, Depth: t.depth, Root: t.levels[0][0], Count: t.count}
}

// Level returns a copy of the 16^d hashes at depth d, or nil when d is not
// a level of t.
func (t *Tree) Level(d int) []uint64 {
	if d < 0 || d > t.depth {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.levels[d])
}

// Children returns the hashes of the 16 children of each of parents (node
// indexes at depth d), in order: what a node serves to a peer comparing
// with it. The arguments come from the peer and are checked.
func (t *Tree) Children(d int, parents []uint64) ([]uint64, error) {
	if d < 0 || d >= t.depth {
		return nil, fmt.Errorf("antientropy: no children at depth %d of a depth-%d tree", d, t.depth)
	}
	if len(parents) > 1<<(4*d) {
		return nil, fmt.Errorf("antientropy: %d parents asked at depth %d", len(parents), d)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	level := t.levels[d+1]
	out := make([]uint64, 0, Fanout*len(parents))
	for _, p := range parents {
		if p >= uint64(len(t.levels[d])) {
			return nil, fmt.Errorf("antientropy: node %d does not exist at depth %d", p, d)
		}
		out = append(out, level[p*Fanout:(p+1)*Fanout]...)
	}
	return out, nil
}

// Clone returns a copy of t that later changes to t do not affect: serve a
// clone for the length of a round so the peer sees one consistent tree.
func (t *Tree) Clone() *Tree {
	t.mu.RLock()
	defer t.mu.RUnlock()
	c := &Tree{lo: t.lo, hi: t.hi, depth: t.depth, count: t.count, levels: make([][]uint64, len(t.levels))}
	for d, l := range t.levels {
		c.levels[d] = slices.Clone(l)
	}
	return c
}

// Entries returns the captures of idx in t's range that fall in the given
// leaf buckets, in key order. It reads the whole range once, since a
// bucket's captures are spread over it.
func (t *Tree) Entries(ctx context.Context, idx *index.Index, buckets []uint64) ([]Entry, error) {
	want := make(map[uint64]bool, len(buckets))
	leaves := uint64(1) << (4 * t.depth)
	for _, b := range buckets {
		if b >= leaves {
			return nil, fmt.Errorf("antientropy: bucket %d does not exist in a depth-%d tree", b, t.depth)
		}
		want[b] = true
	}
	if len(want) == 0 {
		return nil, nil
	}
	var out []Entry
	buf := make([]byte, 0, 256)
	err := idx.Range(ctx, t.lo, t.hi, false, func(c index.Capture) (bool, error) {
		e := EntryOf(c)
		if want[t.bucket(e.fingerprint(buf[:0]))] {
			out = append(out, e)
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("antientropy: entries: %w", err)
	}
	return out, nil
}

// Bucket returns the leaf bucket of e in t.
func (t *Tree) Bucket(e Entry) uint64 { return t.bucket(e.Fingerprint()) }

var errShape = errors.New("antientropy: trees of different shape")

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
