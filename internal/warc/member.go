package warc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/klauspost/compress/gzip"
)

// MemberReader reads records one gzip member at a time, header first and
// then only as much of the block as is wanted: deciding about a record
// from its header costs the header's decompression, not the block's. It
// reuses its buffers from member to member; the zero MemberReader is ready.
type MemberReader struct {
	gz     *gzip.Reader
	src    countingReader
	br     *bufio.Reader
	length int64 // the open record's Content-Length
	read   int64 // bytes of its block read so far
}

// ErrBlockTooLarge reports a record whose block is larger than the reader
// was allowed (Reader.MaxBlock, Finish's maxBlock); the block is not read.
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
	m.read = 0
	m.length, err = strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	if err != nil || m.length < 0 {
		return h, fmt.Errorf("warc: record at offset %d: bad Content-Length %s", off, quote(h.Get("Content-Length")))
	}
	return h, nil
}

// ReadBlock appends up to n more bytes of the open record's block to buf;
// fewer at the block's end.
func (m *MemberReader) ReadBlock(buf []byte, n int) ([]byte, error) {
	n = int(min(int64(n), m.length-m.read))
	have := len(buf)
	buf = slices.Grow(buf, n)[:have+n]
	k, err := io.ReadFull(m.br, buf[have:])
	m.read += int64(k)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return buf[:have+k], err
	}
	return buf[:have+k], nil
}

// Finish reads the rest of the open member — the block, of the length the
// header gives, its closing CRLF CRLF and nothing more — checking its CRC,
// and returns the member's compressed length. A block of more than
// maxBlock bytes is not read: ErrBlockTooLarge.
func (m *MemberReader) Finish(maxBlock int64) (int64, error) {
	if m.length > maxBlock {
		return 0, ErrBlockTooLarge
	}
	if n, err := io.CopyN(io.Discard, m.br, m.length-m.read); err != nil {
		return 0, fmt.Errorf("warc: content block cut off after %d of %d bytes: %w", m.read+n, m.length, unexpected(err))
	}
	// At most a few line ends may follow (LF alone tolerated, as Reader does).
	rest, err := io.ReadAll(io.LimitReader(m.br, 9))
	if err != nil {
		return 0, err
	}
	if len(rest) > 8 || len(bytes.Trim(rest, "\r\n")) > 0 {
		return 0, errors.New("warc: the gzip member holds more than one record")
	}
	return m.src.n, nil
}
