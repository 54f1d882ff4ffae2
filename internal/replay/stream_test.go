package replay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
)

// largeVideoArchive archives a video whose record is over streamBlock, and
// an identical-payload revisit of it.
func largeVideoArchive(t *testing.T) (*testArchive, []byte) {
	t.Helper()
	video := make([]byte, streamBlock+3<<20)
	rand.NewChaCha8([32]byte{7}).Read(video)
	h := "Content-Type: video/mp4\r\n"
	a := newTestArchive(t, []fixture{
		{url: "http://example.com/big.mp4", at: "20240101120000", header: h, body: string(video)},
		{url: "http://example.com/big.mp4", at: "20240301120000", header: h, body: string(video), revisit: true},
	})
	return a, video
}

// fetchSum asks for u and reads the body into a digest, not into memory.
func fetchSum(t *testing.T, u string, hdr ...string) (*http.Response, [32]byte, int64, error) {
	t.Helper()
	resp := ask(t, u, hdr...)
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	var sum [32]byte
	h.Sum(sum[:0])
	return resp, sum, n, err
}

// A capture too large to read whole is replayed from disk as it is sent:
// whole, in ranges (a seek back included), and through a revisit, with
// far less memory allocated than the record holds.
func TestLargeCaptureIsStreamed(t *testing.T) {
	a, video := largeVideoArchive(t)
	want := sha256.Sum256(video)
	for _, at := range []string{"20240101120000", "20240301120000"} {
		u := a.content.URL + "/web/" + at + "id_/http://example.com/big.mp4"
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, sum, n, err := fetchSum(t, u)
		runtime.ReadMemStats(&after)
		if err != nil || resp.StatusCode != 200 || sum != want || n != int64(len(video)) {
			t.Fatalf("%s: %d, %d bytes (%v), same bytes: %v", at, resp.StatusCode, n, err, sum == want)
		}
		if got := resp.Header.Get("Content-Type"); got != "video/mp4" {
			t.Errorf("%s: Content-Type %q", at, got)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(video))/8 {
			t.Errorf("%s: replaying a %d-byte capture allocated %d bytes: it was read whole", at, len(video), alloc)
		}
	}
	checkVideoRanges(t, a.content.URL+"/web/20240101120000oe_/http://example.com/big.mp4", video)
}

// checkVideoRanges asks u, a replay of video, for its last 1000 bytes, then
// for two ranges in an order that makes the reader go back to an earlier
// offset.
func checkVideoRanges(t *testing.T, u string, video []byte) {
	t.Helper()
	from := len(video) - 1000
	resp, body := get(t, u, "Range", fmt.Sprintf("bytes=%d-", from))
	if resp.StatusCode != http.StatusPartialContent || body != string(video[from:]) {
		t.Errorf("range from %d: %d, %d bytes, want 206 and the last 1000", from, resp.StatusCode, len(body))
	}
	resp, body = get(t, u, "Range", "bytes=5000000-5000009,10-19")
	if resp.StatusCode != http.StatusPartialContent ||
		!bytes.Contains([]byte(body), video[5000000:5000010]) || !bytes.Contains([]byte(body), video[10:20]) {
		t.Errorf("two ranges, the second before the first: %d, %q", resp.StatusCode, body)
	}
}

// A large capture damaged on disk is never sent as if it were whole.
func TestDamagedLargeCaptureIsCutShort(t *testing.T) {
	a, video := largeVideoArchive(t)
	c := a.caps["http://example.com/big.mp4 20240101120000"]
	flipMiddleByte(t, a, c)
	checkNeverWhole(t, a.content.URL+"/web/20240101120000id_/http://example.com/big.mp4", video)
}

// checkNeverWhole asks u, a replay of a damaged capture of video, for all
// of it and for a range: neither may end without an error.
func checkNeverWhole(t *testing.T, u string, video []byte) {
	t.Helper()
	for _, rng := range []string{"", "bytes=1000-"} {
		var hdr []string
		if rng != "" {
			hdr = []string{"Range", rng}
		}
		resp, sum, n, err := fetchSum(t, u, hdr...)
		if err == nil && resp.StatusCode < 300 {
			t.Errorf("range %q: %d, %d bytes (same as archived: %v), read without an error", rng, resp.StatusCode, n, sum == sha256.Sum256(video))
		}
	}
}

// BenchmarkStreamedRange measures one range request for the last MiB of a
// capture too large to read whole: read from the block's start each time
// (record), or from the spool's copy once the first request made it
// (spooled).
func BenchmarkStreamedRange(b *testing.B) {
	for _, mode := range []struct {
		name  string
		spool int64
	}{{"record", -1}, {"spooled", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			a, videos, _, _ := spoolingArchive(b, filepath.Join(b.TempDir(), "spool"), mode.spool, 1)
			u := a.content.URL + "/web/20240101120000oe_/http://example.com/big0.mp4"
			from := len(videos[0]) - 1<<20
			get(b, u, "Range", "bytes=0-0") // the first replay, which reads the record through
			for b.Loop() {
				resp, body := get(b, u, "Range", fmt.Sprintf("bytes=%d-", from))
				if resp.StatusCode != 206 || len(body) != 1<<20 {
					b.Fatalf("%d, %d bytes", resp.StatusCode, len(body))
				}
			}
		})
	}
}

// A large capture archived with chunked framing is replayed without it,
// whole: its length is not known without reading it all.
func TestLargeChunkedCaptureIsStreamed(t *testing.T) {
	video, chunked := chunkedVideo("")
	a := newTestArchive(t, []fixture{{url: "http://example.com/big.mp4", at: "20240101120000",
		header: "Content-Type: video/mp4\r\nTransfer-Encoding: chunked\r\n", body: chunked.String()}})
	resp, sum, n, err := fetchSum(t, a.content.URL+"/web/20240101120000id_/http://example.com/big.mp4", "Range", "bytes=10-19")
	if err != nil || resp.StatusCode != 200 || n != int64(len(video)) || sum != sha256.Sum256(video) {
		t.Fatalf("%d, %d bytes (%v), the video: %v; want 200 and the video whole", resp.StatusCode, n, err, sum == sha256.Sum256(video))
	}
}

// flipMiddleByte damages the record of a's capture c on disk. Its payload
// does not compress (deflate stores it), so the flipped byte inflates to a
// wrong byte rather than to an error.
func flipMiddleByte(t *testing.T, a *testArchive, c index.Capture) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(a.dir, c.Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	off := c.Offset + c.Length/2
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// chunkedVideo returns a video over streamBlock, and its chunked encoding
// in 3 MiB chunks ending with trailer.
func chunkedVideo(trailer string) ([]byte, *bytes.Buffer) {
	video := make([]byte, streamBlock+1<<20)
	rand.NewChaCha8([32]byte{8}).Read(video)
	var chunked bytes.Buffer
	for rest := video; len(rest) > 0; {
		n := min(len(rest), 3<<20)
		fmt.Fprintf(&chunked, "%x\r\n", n)
		chunked.Write(rest[:n])
		chunked.WriteString("\r\n")
		rest = rest[n:]
	}
	chunked.WriteString("0\r\n" + trailer + "\r\n")
	return video, &chunked
}
