package warc

import (
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"testing"
)

// Block.Record grows with the bytes that come, as Reader does: a peer's
// answer of a few bytes declaring a 64 MiB block costs little.
func TestBlockRecordLyingLengthAllocatesLittle(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	io.WriteString(zw, "WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:uuid:x>\r\nContent-Length: 67108864\r\n\r\nshort")
	zw.Close()
	member := z.Bytes()
	alloc := func(f func()) uint64 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	viaReader := alloc(func() {
		rd, err := NewReader(bytes.NewReader(member))
		if err == nil {
			_, _, err = rd.Next()
		}
		if err == nil {
			t.Error("Reader accepted a cut block")
		}
	})
	viaBlock := alloc(func() {
		b, err := ReadBlock(io.NopCloser(bytes.NewReader(member)), Location{Segment: "s", Length: int64(len(member))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Record(); err == nil {
			t.Error("Block.Record accepted a cut block")
		}
	})
	t.Logf("%d-byte member: Reader allocated %d bytes, Block.Record %d", len(member), viaReader, viaBlock)
	if viaBlock > 4<<20 {
		t.Errorf("Block.Record allocated %d bytes for a %d-byte answer declaring a 64 MiB block", viaBlock, len(member))
	}
}
