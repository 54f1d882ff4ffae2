package antientropy

import (
	"context"
	"fmt"
	"slices"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// BuildFiltered returns the tree, over the whole key space, of the captures
// of idx whose site (urlkey.SiteOfKey of the URL key) passes keep.
//
// Two nodes share a scattered set of sites, the ones whose replica sets
// hold both, not a key range; built with the same keep, their trees are
// equal exactly when they hold the same captures of those sites. keep is
// asked once per run of captures of one site, not once per capture.
func BuildFiltered(ctx context.Context, idx *index.Index, keep func(site string) bool, depth int) (*Tree, error) {
	t, err := New("", "", depth)
	if err != nil {
		return nil, err
	}
	err = scanShared(ctx, idx, keep, func(_ index.Capture, fp uint64) error {
		t.add(fp, false)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("antientropy: build: %w", err)
	}
	return t, nil
}

// scanShared calls fn, in key order, for each capture of idx whose site
// passes keep, with the capture's fingerprint.
func scanShared(ctx context.Context, idx *index.Index, keep func(site string) bool, fn func(c index.Capture, fp uint64) error) error {
	var site string
	var kept, known bool
	buf := make([]byte, 0, 256)
	return idx.Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		// Captures come in key order, so those of a site are contiguous.
		if s := urlkey.SiteOfKey(c.URLKey); !known || s != site {
			site, kept, known = s, keep(s), true
		}
		if !kept {
			return true, nil
		}
		return true, fn(c, EntryOf(c).fingerprint(buf[:0]))
	})
}

// bucketAt is the leaf bucket of fp in a tree of the given depth: the
// bucket of Tree.bucket, without a tree.
func bucketAt(fp uint64, depth int) uint64 {
	if depth == 0 {
		return 0
	}
	return (fp * 0x9e3779b97f4a7c15) >> (64 - 4*depth)
}

// truncate returns a copy of the top d+1 levels of t, which is the tree of
// the same captures at depth d: a leaf's bucket at depth d is the top 4d
// bits of its remixed fingerprint, as is its ancestor's index at level d
// of a deeper tree. One scan at MaxDepth thus serves any depth.
func (t *Tree) truncate(d int) *Tree {
	t.mu.RLock()
	defer t.mu.RUnlock()
	c := &Tree{lo: t.lo, hi: t.hi, depth: d, count: t.count, levels: make([][]uint64, d+1)}
	for i := range c.levels {
		c.levels[i] = slices.Clone(t.levels[i])
	}
	return c
}
