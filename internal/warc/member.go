package warc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/gzip"
)

// MemberReader reads records one gzip member at a time, header first and
// then only as much of the block as is wanted: deciding about a record
// from its header costs the header's decompression, not the block's. It
// reuses its buffers from member to member; the zero MemberReader is ready.
type MemberReader struct {
	gz  *gzip.Reader
	src countingReader
	br  *bufio.Reader
}

// ErrBlockTooLarge reports a record whose block is larger than Finish was
// asked to read.
var ErrBlockTooLarge = errors.New("warc: record larger than allowed")

// Open starts on the gzip member at off of ra, reading at most limit
// compressed bytes, and returns its record's header.
func (m *MemberReader) Open(ra io.ReaderAt, off, limit int64) (Header, error) {
	sr := io.NewSectionReader(ra, off, limit)
	if m.src.br == nil {
		m.src.br = bufio.NewReaderSize(sr, 16<<10)
	} else {
		m.src.br.Reset(sr)
	}
	m.src.n = 0
	var err error
	if m.gz == nil {
		m.gz, err = gzip.NewReader(&m.src)
	} else {
		err = m.gz.Reset(&m.src)
	}
	if err != nil {
		return Header{}, fmt.Errorf("warc: gzip member at offset %d: %w", off, err)
	}
	m.gz.Multistream(false)
	if m.br == nil {
		m.br = bufio.NewReaderSize(m.gz, 4<<10)
	} else {
		m.br.Reset(m.gz)
	}
	h, err := ReadHeader(m.br)
	if err != nil {
		return h, fmt.Errorf("warc: record header at offset %d: %w", off, err)
	}
	return h, nil
}

// ReadBlock appends up to n more bytes of the open record's block to buf;
// fewer at the block's end.
func (m *MemberReader) ReadBlock(buf []byte, n int) ([]byte, error) {
	have := len(buf)
	buf = slices.Grow(buf, n)[:have+n]
	k, err := io.ReadFull(m.br, buf[have:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return buf[:have+k], err
	}
	return buf[:have+k], nil
}

// Finish reads the rest of the open member, checking its CRC, and returns
// the member's compressed length. A block of more than maxBlock bytes is
// not read to its end: ErrBlockTooLarge.
func (m *MemberReader) Finish(maxBlock int64) (int64, error) {
	n, err := io.Copy(io.Discard, io.LimitReader(m.br, maxBlock+1))
	switch {
	case err != nil:
		return 0, err
	case n > maxBlock:
		return 0, ErrBlockTooLarge
	}
	return m.src.n, nil
}
