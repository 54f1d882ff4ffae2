package replay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// countingOpener counts the blocks opened through it, and the bytes read
// from their segments: each block is a read of the record from its start
// (from another node: across the network).
type countingOpener struct {
	*archive.Local
	dir          string // the segments'
	opened, read *atomic.Int64
}

func (c countingOpener) OpenBlock(ctx context.Context, cp index.Capture) (*warc.Block, error) {
	c.opened.Add(1)
	f, err := os.Open(filepath.Join(c.dir, cp.Segment))
	if err != nil {
		return nil, err
	}
	r := struct {
		io.Reader
		io.Closer
	}{&countingReader{io.NewSectionReader(f, cp.Offset, cp.Length), c.read}, f}
	return warc.ReadBlock(r, warc.Location{Segment: cp.Segment, Offset: cp.Offset, Length: cp.Length})
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// spoolingArchive archives videos of streamBlock+3 MiB, each with an
// identical-payload revisit, served with a spool of max bytes in spoolDir,
// counting the blocks replay opens and the bytes it reads from them.
func spoolingArchive(t testing.TB, spoolDir string, max int64, videos int) (a *testArchive, bodies [][]byte, opened, read *atomic.Int64) {
	t.Helper()
	opened, read = new(atomic.Int64), new(atomic.Int64)
	h := "Content-Type: video/mp4\r\n"
	var fs []fixture
	for i := range videos {
		video := make([]byte, streamBlock+3<<20)
		rand.NewChaCha8([32]byte{7, byte(i)}).Read(video)
		bodies = append(bodies, video)
		u := fmt.Sprintf("http://example.com/big%d.mp4", i)
		fs = append(fs, fixture{url: u, at: "20240101120000", header: h, body: string(video)},
			fixture{url: u, at: "20240301120000", header: h, body: string(video), revisit: true})
	}
	a = newTestArchive(t, fs)
	a.srv = New(Config{Archive: countingOpener{a.local, a.dir, opened, read}, UIAddr: a.ui.Listener.Addr().String(),
		ContentAddr: a.content.Listener.Addr().String(), SpoolDir: spoolDir, SpoolBytes: max})
	a.ui.Config.Handler, a.content.Config.Handler = a.srv.UI(), a.srv.Content() // no request was made yet
	return a, bodies, opened, read
}

// A capture too large to hold is read through once, checked, and kept on
// disk: its range requests, a seek back included, and its revisits read
// the spool's file, not the record from its start.
func TestLargeCaptureIsSpooled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "left-by-an-earlier-process"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, videos, opened, _ := spoolingArchive(t, dir, 1<<30, 1)
	video := videos[0]
	if _, err := os.Stat(filepath.Join(dir, "left-by-an-earlier-process")); err == nil {
		t.Error("the spool kept a file from before the server started")
	}
	base := a.content.URL + "/web/20240101120000id_/http://example.com/big0.mp4"
	resp, sum, n, err := fetchSum(t, base)
	if err != nil || resp.StatusCode != 200 || n != int64(len(video)) || sum != sha256.Sum256(video) {
		t.Fatalf("first replay: %d, %d bytes (%v)", resp.StatusCode, n, err)
	}
	st := a.srv.CacheStats()
	if st.SpooledEntries != 1 || st.Spooled != int64(len(video)) || st.SpoolFills != 1 {
		t.Fatalf("after the first replay the spool holds %d payloads, %d bytes (%d fills); want the video", st.SpooledEntries, st.Spooled, st.SpoolFills)
	}
	before := opened.Load()
	checkVideoRanges(t, base, video)
	revisit := a.content.URL + "/web/20240301120000id_/http://example.com/big0.mp4"
	resp, sum, n, err = fetchSum(t, revisit)
	if err != nil || resp.StatusCode != 200 || n != int64(len(video)) || sum != sha256.Sum256(video) {
		t.Errorf("the revisit: %d, %d bytes (%v)", resp.StatusCode, n, err)
	}
	if got := opened.Load() - before; got != 0 {
		t.Errorf("the ranges and the revisit opened the record %d times; want it read from the spool", got)
	}
	if st := a.srv.CacheStats(); st.SpoolHits < 3 || st.SpoolFills != 1 {
		t.Errorf("spool hits %d, fills %d; want the ranges and the revisit answered from it, one fill", st.SpoolHits, st.SpoolFills)
	}
}

// Past its bound the spool lets the least recently used payload go, which
// is then read from its record again; a payload larger than the whole
// spool is not kept, and still replays.
func TestSpoolEvicts(t *testing.T) {
	size := int64(streamBlock + 3<<20)
	a, videos, _, _ := spoolingArchive(t, filepath.Join(t.TempDir(), "spool"), size+size/2, 2)
	replay := func(i int, rng string) {
		t.Helper()
		u := fmt.Sprintf("%s/web/20240101120000id_/http://example.com/big%d.mp4", a.content.URL, i)
		resp, body := get(t, u, "Range", rng)
		var from, to int
		fmt.Sscanf(rng, "bytes=%d-%d", &from, &to)
		if resp.StatusCode != http.StatusPartialContent || body != string(videos[i][from:to+1]) {
			t.Fatalf("video %d, %s: %d, %d bytes", i, rng, resp.StatusCode, len(body))
		}
	}
	replay(0, "bytes=100-199")
	replay(1, "bytes=70000000-70000099")
	if st := a.srv.CacheStats(); st.SpooledEntries != 1 || st.Spooled != size || st.SpoolFills != 2 {
		t.Errorf("two videos, room for one: the spool holds %d (%d bytes) after %d fills", st.SpooledEntries, st.Spooled, st.SpoolFills)
	}
	replay(0, "bytes=60000000-60000099")
	if st := a.srv.CacheStats(); st.SpooledEntries != 1 || st.SpoolFills != 3 {
		t.Errorf("the first video again: the spool holds %d after %d fills; want it filled again", st.SpooledEntries, st.SpoolFills)
	}

	// Larger than the spool: checked once, then each range reads the record
	// up to its end only, as without a spool.
	small, videos, _, read := spoolingArchive(t, filepath.Join(t.TempDir(), "spool"), size-1, 1)
	a = small
	replay(0, "bytes=70000000-70000099")
	if st := a.srv.CacheStats(); st.SpooledEntries != 0 || st.SpoolFills != 0 {
		t.Errorf("a payload larger than the spool: %d kept after %d fills", st.SpooledEntries, st.SpoolFills)
	}
	before := read.Load()
	replay(0, "bytes=100-199")
	if got := read.Load() - before; got > 8<<20 {
		t.Errorf("a range of the first 200 bytes, once the record was checked, read %d bytes of it; want the record's start only", got)
	}
}

// A large capture damaged on disk is not kept in the spool, and never sent
// as if it were whole.
func TestDamagedLargeCaptureIsNotSpooled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	a, videos, _, _ := spoolingArchive(t, dir, 1<<30, 1)
	flipMiddleByte(t, a, a.caps["http://example.com/big0.mp4 20240101120000"])
	checkNeverWhole(t, a.content.URL+"/web/20240101120000id_/http://example.com/big0.mp4", videos[0])
	if st := a.srv.CacheStats(); st.SpooledEntries != 0 {
		t.Errorf("the damaged video is in the spool: %+v", st)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) > 0 {
		t.Errorf("%d files left in the spool (%v)", len(left), err)
	}
}

// The spool is emptied when replay starts, turned off or not; a spool
// directory that is a link to another disk stays one.
func TestSpoolEmptiedAtStart(t *testing.T) {
	elsewhere := t.TempDir()
	link := filepath.Join(t.TempDir(), "spool")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	for _, bytes := range []int64{0, -1} { // the default bound, and none
		stale := filepath.Join(elsewhere, "7")
		if err := os.WriteFile(stale, []byte("an earlier run's"), 0o600); err != nil {
			t.Fatal(err)
		}
		New(Config{Archive: archive.NewLocal(nil, t.TempDir()), SpoolDir: link, SpoolBytes: bytes})
		if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("spool bytes %d: an earlier run's file is still there: %v", bytes, err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("spool bytes %d: the link to the spool's disk was replaced: %v", bytes, err)
		}
	}
}

// The fills in progress count against the bound: two payloads that fit
// only one at a time are not written at once.
func TestSpoolReservesRoomForFills(t *testing.T) {
	sp, err := newPayloadSpool(filepath.Join(t.TempDir(), "spool"), 100)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := sp.reserve("a", 60)
	if !ok {
		t.Fatal("no room for the first payload in an empty spool")
	}
	if _, ok := sp.reserve("b", 60); ok {
		t.Error("a second fill of 60 bytes was let in beside one of 60, in a spool of 100")
	}
	sp.release(60)
	second, ok := sp.reserve("b", 60)
	if !ok || second == first {
		t.Errorf("after the first fill gave up its room: %v, file %q (the first's %q)", ok, second, first)
	}
}
