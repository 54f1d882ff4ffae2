package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/waggle-archive/waggle/internal/dedup"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
)

// contentSeen gives the crawler the network's content-seen test: a payload
// archived by any node is stored as a revisit record that points at it.
type contentSeen struct{ c *dedup.Client }

func (s contentSeen) Lookup(ctx context.Context, digest string) (recrawl.Ref, bool, error) {
	ref, ok, err := s.c.Lookup(ctx, digest)
	return recrawl.Ref{URL: ref.URL, Time: ref.Time, RecordID: ref.RecordID}, ok, err
}

func (s contentSeen) Stored(caps []index.Capture) {
	refs := make([]dedup.Ref, 0, len(caps))
	for _, c := range caps {
		if c.Digest != "" {
			refs = append(refs, dedup.Ref{Digest: c.Digest, URL: c.URL, Time: c.Time, RecordID: c.RecordID})
		}
	}
	s.c.Register(refs)
}

// digestOwner is the node that keeps the registry entry of a payload
// digest: the ring places digests as it places sites.
func (n *Node) digestOwner(digest string) (string, bool) {
	o, ok := n.members.Ring().Owner(digest)
	return o.ID, ok
}

// sendDedup posts a content-seen request to a member.
func (n *Node) sendDedup(ctx context.Context, id, path string, body []byte) ([]byte, error) {
	addr, ok := n.resolve(id)
	if !ok {
		return nil, fmt.Errorf("node: member %.16s is not live", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	resp, err := n.client.Do(ctx, addr, id, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, dedup.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node: %s: %s: %.200s", path, resp.Status, bytes.TrimSpace(data))
	}
	if len(data) > dedup.MaxBodyBytes {
		return nil, fmt.Errorf("node: %s: answer over %d bytes", path, dedup.MaxBodyBytes)
	}
	return data, nil
}
