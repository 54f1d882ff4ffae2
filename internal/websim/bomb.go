package websim

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/andybalholm/brotli"
)

const (
	bombChunk = 1 << 20  // inflated bytes per repeated piece
	bombSize  = 10 << 30 // inflated bytes per bomb
)

// bomb is a compressed stream of zeros built from a head, a piece repeated
// many times and a tail, so that a 10 GiB bomb is streamed from a few
// kilobytes of memory. Every repeated piece decodes to bombChunk zeros
// whatever came before it, because before it there are only zeros.
type bomb struct {
	head, chunk, tail []byte
	repeat            int64
}

// size returns the compressed length.
func (b *bomb) size() int64 {
	return int64(len(b.head)) + b.repeat*int64(len(b.chunk)) + int64(len(b.tail))
}

// writeTo streams the bomb to w, stopping early if ctx ends.
func (b *bomb) writeTo(ctx context.Context, w io.Writer) error {
	if _, err := w.Write(b.head); err != nil {
		return err
	}
	// Write a few hundred pieces at a time: the pieces are small.
	batch := bytes.Repeat(b.chunk, 256)
	for left := b.repeat; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(left, 256)
		if _, err := w.Write(batch[:n*int64(len(b.chunk))]); err != nil {
			return err
		}
		left -= n
	}
	_, err := w.Write(b.tail)
	return err
}

// bombs holds the two bombs of the hostile host, built on first use.
type bombs struct {
	gzip, brotli bomb
}

func (w *Web) loadBombs() (*bombs, error) {
	w.bombOnce.Do(func() {
		var err1, err2 error
		w.bombs.gzip, err1 = newGzipBomb(bombSize / bombChunk)
		w.bombs.brotli, err2 = newBrotliBomb(bombSize / bombChunk)
		w.bombErr = errors.Join(err1, err2)
	})
	return &w.bombs, w.bombErr
}

// newGzipBomb returns a gzip stream of chunks·bombChunk zeros. Deflate
// cannot do better than about 1:1000, so 10 GiB takes about 10 MB.
func newGzipBomb(chunks int) (bomb, error) {
	if chunks < 1 {
		return bomb{}, fmt.Errorf("websim: gzip bomb of %d chunks", chunks)
	}
	zeros := make([]byte, bombChunk)
	var first, steady bytes.Buffer
	fw, err := flate.NewWriter(&first, flate.BestCompression)
	if err != nil {
		return bomb{}, fmt.Errorf("websim: gzip bomb: %w", err)
	}
	fw.Write(zeros)
	fw.Flush() // ends on a byte boundary, without the final-block bit
	// The repeated piece is compressed against a dictionary of zeros, as
	// the decoder's window holds nothing but zeros by then.
	sw, err := flate.NewWriterDict(&steady, flate.BestCompression, zeros[:32<<10])
	if err != nil {
		return bomb{}, fmt.Errorf("websim: gzip bomb: %w", err)
	}
	sw.Write(zeros)
	sw.Flush()
	total := int64(chunks) * bombChunk
	head := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff} // gzip header: deflate, no name, no mtime
	head = append(head, first.Bytes()...)
	tail := []byte{3, 0} // an empty final block with fixed codes
	tail = binary.LittleEndian.AppendUint32(tail, crc32Zeros(total))
	tail = binary.LittleEndian.AppendUint32(tail, uint32(total))
	return bomb{head: head, chunk: steady.Bytes(), tail: tail, repeat: int64(chunks) - 1}, nil
}

// newBrotliBomb returns a brotli stream of chunks·bombChunk zeros. The
// encoder is fed zeros until its output for one chunk stops changing; that
// output is then the repeated piece. Brotli copies up to 16 MiB per command,
// so each piece is a few bytes.
func newBrotliBomb(chunks int) (bomb, error) {
	var out bytes.Buffer
	bw := brotli.NewWriterOptions(&out, brotli.WriterOptions{Quality: 5, LGWin: 22})
	zeros := make([]byte, bombChunk)
	var prev []byte
	for fed := 1; fed <= 64 && fed < chunks; fed++ {
		start := out.Len()
		if _, err := bw.Write(zeros); err != nil {
			return bomb{}, fmt.Errorf("websim: brotli bomb: %w", err)
		}
		if err := bw.Flush(); err != nil {
			return bomb{}, fmt.Errorf("websim: brotli bomb: %w", err)
		}
		cur := out.Bytes()[start:]
		if fed >= 3 && bytes.Equal(cur, prev) {
			b := bomb{head: bytes.Clone(out.Bytes()[:start]), chunk: bytes.Clone(cur), repeat: int64(chunks - fed + 1)}
			if err := bw.Close(); err != nil {
				return bomb{}, fmt.Errorf("websim: brotli bomb: %w", err)
			}
			b.tail = bytes.Clone(out.Bytes()[start+len(cur):])
			return b, nil
		}
		prev = bytes.Clone(cur)
	}
	return bomb{}, fmt.Errorf("websim: brotli bomb of %d chunks: encoder output did not settle", chunks)
}

// crc32Zeros returns the IEEE CRC-32 of n zero bytes without reading them:
// feeding n zeros multiplies the CRC register by x^(8n) modulo the
// polynomial (the method of zlib's crc32_combine).
func crc32Zeros(n int64) uint32 {
	p := uint32(1) << 31  // x^0
	sq := uint32(1) << 30 // x^1, squared as the exponent's bits are consumed
	for e := uint64(n) * 8; e != 0; e >>= 1 {
		if e&1 != 0 {
			p = multModP(sq, p)
		}
		sq = multModP(sq, sq)
	}
	return ^multModP(p, 0xFFFFFFFF)
}

// multModP multiplies two polynomials modulo the reflected CRC-32 polynomial.
func multModP(a, b uint32) uint32 {
	const poly = 0xedb88320
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}
