package antientropy

import (
	"context"
	"fmt"
	"slices"
)

// Remote is the peer's tree as a transport carries it: each method is one
// request and its reply. A server answers them from a Clone of its tree
// (Tree.Summary, Tree.Children).
type Remote interface {
	Summary(ctx context.Context) (Summary, error)
	// Children returns the 16 child hashes of each of parents, nodes at
	// depth d, in order.
	Children(ctx context.Context, d int, parents []uint64) ([]uint64, error)
}

// Compare walks local and remote down from the roots and returns the leaf
// buckets whose hashes differ, in increasing order, and the bytes the walk
// put on the wire in both directions: the two summaries, then per level the
// request (depth, count and uvarint node indexes) and 8 bytes per child
// hash. Equal trees cost only the summaries. It takes at most depth round
// trips after the summaries, however many nodes differ.
//
// Which side lacks what cannot be told from sums; the captures of the
// returned buckets settle it (MissingCaptures).
func Compare(ctx context.Context, local *Tree, remote Remote) (buckets []uint64, bytes int, err error) {
	ls := local.Summary()
	rs, err := remote.Summary(ctx)
	bytes = ls.WireSize()
	if err != nil {
		return nil, bytes, fmt.Errorf("antientropy: summary: %w", err)
	}
	bytes += rs.WireSize()
	if rs.Lo != ls.Lo || rs.Hi != ls.Hi || rs.Depth != ls.Depth {
		return nil, bytes, fmt.Errorf("%w: local [%q, %q) depth %d, remote [%q, %q) depth %d",
			errShape, ls.Lo, ls.Hi, ls.Depth, rs.Lo, rs.Hi, rs.Depth)
	}
	if rs.Root == ls.Root {
		return nil, bytes, nil
	}
	// Compare against a snapshot so that captures added meanwhile cannot
	// make the local tree disagree with itself between levels.
	local = local.Clone()
	frontier := []uint64{0}
	for d := 0; d < local.depth; d++ {
		bytes += uvarintLen(uint64(d)) + uvarintLen(uint64(len(frontier)))
		for _, p := range frontier {
			bytes += uvarintLen(p)
		}
		hashes, err := remote.Children(ctx, d, frontier)
		if err != nil {
			return nil, bytes, fmt.Errorf("antientropy: children at depth %d: %w", d, err)
		}
		if len(hashes) != Fanout*len(frontier) {
			return nil, bytes, fmt.Errorf("antientropy: remote sent %d hashes for %d nodes at depth %d", len(hashes), len(frontier), d)
		}
		bytes += 8 * len(hashes)
		mine := local.levels[d+1]
		var next []uint64
		for i, p := range frontier {
			before := len(next)
			for c := range uint64(Fanout) {
				if hashes[uint64(i)*Fanout+c] != mine[p*Fanout+c] {
					next = append(next, p*Fanout+c)
				}
			}
			// A node's hash is the sum of its children's, so a differing
			// node has a differing child unless the remote's answers do
			// not come from one consistent tree.
			if len(next) == before {
				return nil, bytes, fmt.Errorf("antientropy: remote tree inconsistent at depth %d node %d", d, p)
			}
		}
		frontier = next
	}
	return frontier, bytes, nil
}

// Fingerprints returns the distinct fingerprints of entries, sorted: what a
// side sends for the differing buckets, 8 bytes each.
func Fingerprints(entries []Entry) []uint64 {
	fps := make([]uint64, 0, len(entries))
	buf := make([]byte, 0, 256)
	for _, e := range entries {
		fps = append(fps, e.fingerprint(buf[:0]))
	}
	slices.Sort(fps)
	return slices.Compact(fps)
}

// MissingCaptures compares the local entries of some buckets with the
// fingerprints the peer sent for the same buckets. missingHere are the
// peer's fingerprints with no local entry (sorted; ask the peer for those
// captures), missingThere the local entries the peer lacks (in the order
// of local; send those). Run on both sides with each other's fingerprints,
// each side learns what to send.
func MissingCaptures(local []Entry, remote []uint64) (missingHere []uint64, missingThere []Entry) {
	theirs := make(map[uint64]bool, len(remote))
	for _, fp := range remote {
		theirs[fp] = true
	}
	mine := make(map[uint64]bool, len(local))
	buf := make([]byte, 0, 256)
	for _, e := range local {
		fp := e.fingerprint(buf[:0])
		mine[fp] = true
		if !theirs[fp] {
			missingThere = append(missingThere, e)
		}
	}
	for fp := range theirs {
		if !mine[fp] {
			missingHere = append(missingHere, fp)
		}
	}
	slices.Sort(missingHere)
	return missingHere, missingThere
}
