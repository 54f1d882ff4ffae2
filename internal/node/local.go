package node

import (
	"context"

	"github.com/waggle-archive/waggle/internal/index"
)

// LocalCaptures calls fn for each capture this node holds, made here or
// copied from another node, in key order, until fn returns false.
func (n *Node) LocalCaptures(ctx context.Context, fn func(index.Capture) bool) error {
	return n.local.Index().Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		return fn(c), nil
	})
}

// Repair returns the node's anti-entropy figures (zero for a single node).
func (n *Node) Repair() RepairStats {
	if n.members == nil {
		return RepairStats{}
	}
	return n.repairStats()
}
