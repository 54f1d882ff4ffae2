package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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
	a, c := largeWithGoodCopyElsewhere(t, video)
	flipMiddleByte(t, a, c)
	resp, sum, n, err := fetchSum(t, a.content.URL+"/web/20240101120000id_/http://example.com/big.mp4")
	if err != nil || resp.StatusCode != 200 || sum != sha256.Sum256(video) {
		t.Errorf("%d, %d bytes (%v): the good copy another node holds was never read", resp.StatusCode, n, err)
	}
}

// largeWithGoodCopyElsewhere archives video at http://example.com/big.mp4
// behind an elsewhere that holds a good copy of its record: damage to this
// node's copy then shows whether replay finds the other.
func largeWithGoodCopyElsewhere(t *testing.T, video []byte) (*testArchive, index.Capture) {
	t.Helper()
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
	return a, c
}

// heldElsewhere stands for archive.Network for captures another node holds:
// they come with a Node, OpenBlock opens the holder's answer (here, the
// local block), and Record reads a good copy from some node when given one.
type heldElsewhere struct {
	*archive.Local
	good            *warc.Record
	opened, records atomic.Int64
}

func (h *heldElsewhere) onPeer(fn func(index.Capture) (bool, error)) func(index.Capture) (bool, error) {
	return func(c index.Capture) (bool, error) {
		c.Node = "peer"
		return fn(c)
	}
}

func (h *heldElsewhere) Captures(ctx context.Context, key string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return h.Local.Captures(ctx, key, reverse, h.onPeer(fn))
}

func (h *heldElsewhere) CapturesBetween(ctx context.Context, key string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	return h.Local.CapturesBetween(ctx, key, from, to, reverse, h.onPeer(fn))
}

func (h *heldElsewhere) OpenBlock(ctx context.Context, c index.Capture) (*warc.Block, error) {
	h.opened.Add(1)
	return h.Local.OpenBlock(ctx, c)
}

func (h *heldElsewhere) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	h.records.Add(1)
	if h.good != nil {
		return h.good, nil
	}
	return h.Local.Record(ctx, c)
}

// Another node's record whose member is large enough for a look at its
// header, but whose block is not, is read whole from the answer that
// showed its size, not asked for again; if that answer is damaged, it is
// read with Record, which finds a good copy where there is one.
func TestRecordHeldElsewhereIsReadFromOneAnswer(t *testing.T) {
	photo := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{9}).Read(photo)
	for _, damaged := range []bool{false, true} {
		var via *heldElsewhere
		a := newTestArchiveVia(t, []fixture{
			{url: "http://example.com/photo.jpg", at: "20240101120000", header: "Content-Type: image/jpeg\r\n", body: string(photo)},
		}, func(l *archive.Local) archive.Archive { via = &heldElsewhere{Local: l}; return via })
		c := a.caps["http://example.com/photo.jpg 20240101120000"]
		if c.Length < minStreamedMember {
			t.Fatalf("the photo's member is %d bytes, under %d: the test shows nothing", c.Length, minStreamedMember)
		}
		if damaged {
			good, err := a.local.Record(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			via.good = good
			flipMiddleByte(t, a, c)
		}
		resp, sum, n, err := fetchSum(t, a.content.URL+"/web/20240101120000id_/http://example.com/photo.jpg")
		if err != nil || resp.StatusCode != 200 || sum != sha256.Sum256(photo) {
			t.Fatalf("damaged %v: %d, %d bytes (%v), same bytes: %v", damaged, resp.StatusCode, n, err, sum == sha256.Sum256(photo))
		}
		wantRecords := int64(0)
		if damaged {
			wantRecords = 1
		}
		if via.opened.Load() != 1 || via.records.Load() != wantRecords {
			t.Errorf("damaged %v: %d answers opened, %d records asked for; want 1 and %d", damaged, via.opened.Load(), via.records.Load(), wantRecords)
		}
	}
}

// A capture over 64 MiB damaged here in the blank line that ends its HTTP
// header, with a good copy elsewhere: the header cannot be parsed, and the
// record is read whole through Record, which finds the good copy.
func TestDamagedHeaderOfLargeCaptureIsReadElsewhere(t *testing.T) {
	video := make([]byte, streamBlock+3<<20)
	rand.NewChaCha8([32]byte{7}).Read(video)
	for i, b := range video {
		if b == '\n' {
			video[i] = 'n'
		}
	}
	a, c := largeWithGoodCopyElsewhere(t, video)
	path := filepath.Join(a.dir, c.Segment)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 8192)
	f.ReadAt(head, c.Offset)
	warcEnd := bytes.Index(head, []byte("\r\n\r\n"))
	httpEnd := bytes.Index(head[warcEnd+4:], []byte("\r\n\r\n"))
	if warcEnd < 0 || httpEnd < 0 {
		t.Fatal("fixture: the member's headers are not stored as they are (random bytes should not compress)")
	}
	off := c.Offset + int64(warcEnd+4+httpEnd+2) // the blank line's \r
	f.WriteAt([]byte{'X'}, off)
	f.Close()
	resp, sum, n, err := fetchSum(t, a.content.URL+"/web/20240101120000id_/http://example.com/big.mp4")
	if err != nil || resp.StatusCode != 200 || sum != sha256.Sum256(video) {
		t.Errorf("%d, %d bytes (%v): the good copy another node holds was never read", resp.StatusCode, n, err)
	}
}
