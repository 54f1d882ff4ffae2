package replay

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// elsewhere stands for archive.Network, for a capture of this node's:
// OpenBlock opens the local block (Network.OpenBlock), and Record reads the
// local copy, or, when it is damaged, another node's good copy
// (Network.recordElsewhere).
type elsewhere struct {
	*archive.Local
	good *warc.Record
}

func (e *elsewhere) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	rec, err := e.Local.Record(ctx, c)
	if err != nil && e.good != nil {
		return e.good, nil // another node's copy checks out
	}
	return rec, err
}

// A capture over 64 MiB damaged on this node, with a good copy on another,
// is replayed from that copy: its block is read through before it is first
// streamed, and a damaged one is read whole, through Record, which falls
// back to other nodes (and has this node's copy repaired) as for any size.
func TestDamagedLargeCaptureIsReadElsewhere(t *testing.T) {
	video := make([]byte, streamBlock+3<<20)
	rand.NewChaCha8([32]byte{7}).Read(video)
	var via *elsewhere
	a := newTestArchiveVia(t, []fixture{
		{url: "http://example.com/big.mp4", at: "20240101120000", header: "Content-Type: video/mp4\r\n", body: string(video)},
	}, func(l *archive.Local) archive.Archive { via = &elsewhere{Local: l}; return via })
	c := a.caps["http://example.com/big.mp4 20240101120000"]
	good, err := a.local.Record(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	via.good = good
	flipMiddleByte(t, a, c)
	resp, sum, n, err := fetchSum(t, a.content.URL+"/web/20240101120000id_/http://example.com/big.mp4")
	if err != nil || resp.StatusCode != 200 || sum != sha256.Sum256(video) {
		t.Errorf("%d, %d bytes (%v): the good copy another node holds was never read", resp.StatusCode, n, err)
	}
}
