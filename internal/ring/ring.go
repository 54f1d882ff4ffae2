// Package ring assigns hosts to the nodes of a waggle network by
// identifier-seeded consistent hashing (UbiCrawler §4.3): every member puts
// virtual nodes on a 64-bit circle at positions derived only from its
// identity, as many as its capacity times Options.VnodesPerCapacity, and a
// key (a host) belongs to the member of the first virtual node at or after
// the key's hash, going clockwise.
//
// The assignment has the three properties the network relies on:
//
//   - agreement: it depends only on the member set and the options, so every
//     node that knows the same members computes the same owner for every key,
//     with no communication (the order in which members are given is
//     irrelevant);
//   - contravariance: when a member leaves, only the keys it owned move; when
//     one joins, keys move only to it. Views of the membership that briefly
//     differ between nodes therefore disagree only about the keys of the
//     members they disagree about (UbiCrawler §5.1);
//   - balance: each member's share of the key space is close to its share of
//     the total capacity (docs/benchmarks.md gives the measured deviation).
//
// Because positions depend only on the member's ID, a node cannot pick its
// range other than by picking its identity, which the network certifies.
//
// The placement and key hashing are part of the network protocol: all nodes
// of a network must use the same Options and the same version of this
// package's algorithm, or they will disagree about owners. Digest lets nodes
// check that their views agree.
package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

const (
	// DefaultVnodesPerCapacity is the number of virtual nodes per unit of
	// capacity when Options.VnodesPerCapacity is zero. It is the smallest
	// round figure that keeps the largest deviation of a member's share from
	// its capacity share within 5% for 99% of 10-member networks (median
	// 2.6%); 100 to 200, as in UbiCrawler, give medians of 17% and 12%. See
	// docs/benchmarks.md, "Ring balance and agreement".
	DefaultVnodesPerCapacity = 4000

	// DefaultMaxVnodes bounds the number of virtual nodes of a ring when
	// Options.MaxVnodes is zero: 4,096 members of capacity 1 at the default
	// density. A ring keeps 14 to 16 bytes per virtual node (54 MiB for
	// 1,000 members of capacity 1, about 240 MiB at the bound), so a member
	// list with absurd capacities is refused rather than allowed to exhaust
	// memory.
	DefaultMaxVnodes = 1 << 24

	// MaxIDLen bounds a member ID in bytes. IDs are meant to be short
	// (the hex of a hash of the node's certified public key).
	MaxIDLen = 1024
)

// placementDomain separates the hashes that place virtual nodes from any
// other use of SHA-256 over a node identity. Changing it, or the layout of
// the hashed input, moves every host in every network: it is a protocol
// constant.
const placementDomain = "waggle/ring/v1\x00"

// Member is a node as the ring sees it.
type Member struct {
	// ID is the node's certified identity, e.g. the hex of a hash of the
	// public key of its certificate. Virtual-node positions derive from it
	// alone.
	ID string
	// Capacity is the node's relative capacity, at least 1. A member with
	// capacity 2 gets about twice the hosts of one with capacity 1.
	Capacity int
}

// Options tune a ring. The zero value gives the defaults. Every node of a
// network must use the same VnodesPerCapacity.
type Options struct {
	// VnodesPerCapacity is the number of virtual nodes per unit of capacity
	// (default DefaultVnodesPerCapacity). More virtual nodes give a better
	// balance (relative deviation about 1/sqrt(VnodesPerCapacity×Capacity)
	// per member) at the cost of memory and build time.
	VnodesPerCapacity int
	// MaxVnodes bounds the total number of virtual nodes (default
	// DefaultMaxVnodes); New refuses member lists that would exceed it.
	MaxVnodes int
}

// Ring maps keys (hosts) to members. It is immutable: build a new one when
// the membership changes. It is safe for concurrent use.
type Ring struct {
	members []Member // sorted by ID; owners index into it
	points  []uint64 // virtual-node positions, ascending
	owners  []uint32 // owners[i] is the member of points[i]
	// bucket[j] is the index of the first point p with p>>shift ≥ j, and
	// the last entry is len(points): it narrows a lookup to the one or two
	// points of a bucket instead of a binary search over all of them.
	bucket []uint32
	shift  uint
	vpc    int
	digest uint64
}

// New builds the ring of members. The order of members does not matter.
// An empty list gives an empty ring, which owns nothing. New fails on an
// empty, overlong or duplicate ID, on a capacity below 1, and when the ring
// would hold more than Options.MaxVnodes virtual nodes.
func New(members []Member, opts Options) (*Ring, error) {
	vpc := opts.VnodesPerCapacity
	if vpc == 0 {
		vpc = DefaultVnodesPerCapacity
	}
	maxV := opts.MaxVnodes
	if maxV == 0 {
		maxV = DefaultMaxVnodes
	}
	if vpc < 0 {
		return nil, fmt.Errorf("ring: VnodesPerCapacity %d is negative", vpc)
	}
	if maxV < 0 {
		return nil, fmt.Errorf("ring: MaxVnodes %d is negative", maxV)
	}
	// Owners are stored as uint32 and points are counted in int.
	maxV = min(maxV, 1<<31-1)

	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	total := 0
	for i, m := range ms {
		switch {
		case m.ID == "":
			return nil, errors.New("ring: member with an empty ID")
		case len(m.ID) > MaxIDLen:
			return nil, fmt.Errorf("ring: member ID of %d bytes is longer than %d", len(m.ID), MaxIDLen)
		case i > 0 && ms[i-1].ID == m.ID:
			return nil, fmt.Errorf("ring: duplicate member ID %q", abbrev(m.ID))
		case m.Capacity < 1:
			return nil, fmt.Errorf("ring: member %q has capacity %d, want at least 1", abbrev(m.ID), m.Capacity)
		case m.Capacity > (maxV-total)/vpc:
			return nil, fmt.Errorf("ring: %d members with these capacities need more than %d virtual nodes at %d per unit of capacity (member %q has capacity %d)",
				len(ms), maxV, vpc, abbrev(m.ID), m.Capacity)
		}
		total += m.Capacity * vpc
	}

	r := &Ring{
		members: ms,
		vpc:     vpc,
		digest:  digest(ms, vpc),
	}
	r.place(total)
	return r, nil
}

// place puts the members' virtual nodes on the ring, total in all.
func (r *Ring) place(total int) {
	if total == 0 {
		return
	}
	pos := make([]uint64, 0, total)
	runs := make([]int, len(r.members))
	for idx, m := range r.members {
		n := m.Capacity * r.vpc
		runs[idx] = n
		seed := sha256.Sum256(append([]byte(placementDomain), m.ID...))
		// Block b is SHA-256(seed ‖ big-endian uint32 b): one compression,
		// four positions.
		var in [sha256.Size + 4]byte
		copy(in[:], seed[:])
		for b := 0; 4*b < n; b++ {
			binary.BigEndian.PutUint32(in[sha256.Size:], uint32(b))
			sum := sha256.Sum256(in[:])
			for w := 0; w < 4 && 4*b+w < n; w++ {
				pos = append(pos, binary.BigEndian.Uint64(sum[8*w:]))
			}
		}
	}
	r.index(pos, runs)
}

// index sorts the points pos into r.points and r.owners, and keeps the bucket
// index. The points come in runs, one per member: the first runs[0] belong to
// member 0, the next runs[1] to member 1, and so on.
//
// It counts the points into buckets of their top bits, places each in its
// bucket, then orders each bucket by insertion: positions are uniform, so a
// bucket holds one or two, and the sort is linear in the number of points,
// several times faster than a comparison sort at a thousand members.
func (r *Ring) index(pos []uint64, runs []int) {
	total := len(pos)
	nb := max(bits.Len(uint(total))-1, 0)
	r.shift = uint(64 - nb) // 64 when there is one bucket: p>>64 is 0 in Go
	bucket := make([]uint32, 1<<nb+1)
	for _, p := range pos {
		bucket[p>>r.shift]++
	}
	// Now bucket[j] is the end of bucket j once placed; count down into it.
	for j := 1; j < len(bucket); j++ {
		bucket[j] += bucket[j-1]
	}
	r.points = make([]uint64, total)
	r.owners = make([]uint32, total)
	i := total
	for o := len(runs) - 1; o >= 0; o-- {
		for range runs[o] {
			i--
			j := pos[i] >> r.shift
			bucket[j]--
			r.points[bucket[j]] = pos[i]
			r.owners[bucket[j]] = uint32(o)
		}
	}
	// Now bucket[j] is the start of bucket j; the last entry stays total.
	bucket[len(bucket)-1] = uint32(total)
	r.bucket = bucket
	for j := range len(bucket) - 1 {
		lo, hi := int(bucket[j]), int(bucket[j+1])
		for k := lo + 1; k < hi; k++ {
			// Equal positions (about one chance in 10^6 at four million
			// virtual nodes) are ordered by member ID, the order of the
			// owner indexes, so every node resolves them alike.
			p, o := r.points[k], r.owners[k]
			m := k
			for m > lo && less(p, o, r.points[m-1], r.owners[m-1]) {
				r.points[m], r.owners[m] = r.points[m-1], r.owners[m-1]
				m--
			}
			r.points[m], r.owners[m] = p, o
		}
	}
}

func less(p uint64, o uint32, q uint64, oq uint32) bool {
	return p < q || p == q && o < oq
}

// Hash returns the position of key on the ring: the 64-bit xxHash (XXH64,
// seed 0) of its bytes. Keys are compared as given; callers pass canonical
// hosts (urlkey.Host), so that "Example.org" and "example.org" agree.
func Hash(key string) uint64 { return xxhash.Sum64String(key) }

// search returns the index of the first point at or after h, clockwise.
func (r *Ring) search(h uint64) int {
	j := h >> r.shift
	lo, hi := int(r.bucket[j]), int(r.bucket[j+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.points[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.points) {
		return 0 // past the last point: wrap around to the first
	}
	return lo
}

// Owner returns the member responsible for key, and false if the ring is
// empty.
func (r *Ring) Owner(key string) (Member, bool) {
	if len(r.points) == 0 {
		return Member{}, false
	}
	return r.members[r.owners[r.search(Hash(key))]], true
}

// Replicas returns the members that hold key: its owner first, then the
// next distinct members clockwise, n in all, or every member if there are
// fewer than n. When the owner leaves, the second member becomes the owner,
// so the replicas of a key are also the members that held it before the
// current owner joined (UbiCrawler §5.1.1). Replicas returns nil for n < 1
// or an empty ring.
func (r *Ring) Replicas(key string, n int) []Member {
	n = min(n, len(r.members))
	if n < 1 || len(r.points) == 0 {
		return nil
	}
	out := make([]Member, 0, n)
	// A linear check of the owners taken so far is cheapest for the usual
	// handful of replicas; a set indexed by member keeps large n linear in
	// the points walked.
	var small [16]uint32
	taken := small[:0]
	var seen []bool
	if n > len(small) {
		seen = make([]bool, len(r.members))
	}
	start := r.search(Hash(key))
	for k := 0; k < len(r.points) && len(out) < n; k++ {
		i := start + k
		if i >= len(r.points) {
			i -= len(r.points)
		}
		o := r.owners[i]
		if seen != nil {
			if seen[o] {
				continue
			}
			seen[o] = true
		} else {
			if slices.Contains(taken, o) {
				continue
			}
			taken = append(taken, o)
		}
		out = append(out, r.members[o])
	}
	return out
}

// Members returns the members, sorted by ID.
func (r *Ring) Members() []Member { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Share returns the fraction of the key space owned by the member with the
// given ID, 0 if there is none: the share of uniformly hashed keys it can
// expect.
func (r *Ring) Share(id string) float64 {
	idx, ok := slices.BinarySearchFunc(r.members, id, func(m Member, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return 0
	}
	return r.shares()[idx]
}

// Digest returns a digest of the member set (IDs and capacities), the
// virtual-node density and the placement algorithm: two rings with the same
// digest assign every key to the same member. Nodes exchange it to tell
// whether their views of the network agree.
func (r *Ring) Digest() uint64 { return r.digest }

func digest(ms []Member, vpc int) uint64 {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	h.Write([]byte(placementDomain))
	h.Write(binary.AppendUvarint(buf[:0], uint64(vpc)))
	for _, m := range ms {
		h.Write(binary.AppendUvarint(buf[:0], uint64(len(m.ID))))
		h.Write([]byte(m.ID))
		h.Write(binary.AppendUvarint(buf[:0], uint64(m.Capacity)))
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// abbrev shortens an ID for an error message.
func abbrev(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}

// shares returns every member's fraction of the key space, in the order of
// r.members. Point i owns the arc (points[i-1], points[i]]; the first point's
// arc wraps around from the last one, as unsigned subtraction does.
func (r *Ring) shares() []float64 {
	out := make([]float64, len(r.members))
	switch len(r.members) {
	case 0:
		return out
	case 1:
		out[0] = 1 // the whole circle, 2^64, which a uint64 sum cannot hold
		return out
	}
	sums := make([]uint64, len(r.members))
	prev := r.points[len(r.points)-1]
	for i, p := range r.points {
		sums[r.owners[i]] += p - prev
		prev = p
	}
	for i, s := range sums {
		out[i] = float64(s) / (1 << 64)
	}
	return out
}
