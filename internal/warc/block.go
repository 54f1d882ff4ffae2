package warc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Block is a record's content block read as a stream from its segment, for
// a reader of a record too large to hold in memory. When the block carries
// a digest this package checks, Read withholds the block's last bytes until
// they have been checked, and gives ErrDigestMismatch in their place if the
// block does not match: a reader that copies the block out never passes on
// a whole block that is not the one archived.
type Block struct {
	Header Header
	Length int64 // the block's length, from the record's Content-Length

	src    io.Closer     // what the record is read from
	member *bufio.Reader // its gzip member's raw bytes, if in one (recordStart.member)
	r      *bufio.Reader
	left   int64
	digest blockDigest
	check  bool
	loc    Location
	err    error // the first failure, given again to every later Read
}

// OpenBlock opens the block of the record at loc in dir. The caller closes it.
func OpenBlock(dir string, loc Location) (*Block, error) {
	f, rs, err := openAt(dir, loc)
	if err != nil {
		return nil, err
	}
	return newBlock(f, rs, loc), nil
}

// ReadBlock is OpenBlock for the record r starts with — a gzip member, or
// a record as it is — such as a peer sends; loc says where it lies, for
// errors. Closing the Block closes r.
func ReadBlock(r io.ReadCloser, loc Location) (*Block, error) {
	rs, err := startRecord(r, loc)
	if err != nil {
		r.Close()
		return nil, err
	}
	return newBlock(r, rs, loc), nil
}

func newBlock(src io.Closer, rs *recordStart, loc Location) *Block {
	b := &Block{Header: rs.header, Length: rs.length, src: src, r: rs.r, member: rs.member, left: rs.length, loc: loc}
	b.digest, b.check = newBlockDigest(rs.header)
	return b
}

// Read reads the block's next bytes; at its end, io.EOF.
func (b *Block) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.check {
		b.digest.h.Write(p[:n])
	}
	if b.left == 0 && b.check {
		if err := b.digest.check(); err != nil {
			b.err = fmt.Errorf("%w: %s at offset %d", err, b.loc.Segment, b.loc.Offset)
			return 0, b.err
		}
	}
	if err != nil && b.left > 0 {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		b.err = fmt.Errorf("warc: %s at %d: content block cut off with %d of %d bytes unread: %w", b.loc.Segment, b.loc.Offset, b.left, b.Length, err)
		return n, b.err
	}
	return n, nil
}

// Finish reads what follows a block read to its end — the record's closing
// line ends and, in a gzip member, its CRC-32 and length — and reports
// whether the record ends as written: a member whose checksum fails, or
// is cut short, or holds more than the one record, or (with the location's
// length known) is followed by more bytes within that length. (Line ends are not
// required, as Reader and MemberReader do not require them.)
func (b *Block) Finish() error {
	if b.left > 0 {
		return fmt.Errorf("warc: %s at %d: Finish before the block's end", b.loc.Segment, b.loc.Offset)
	}
	rest, err := io.ReadAll(io.LimitReader(b.r, 9))
	if err != nil {
		return fmt.Errorf("warc: %s at %d: after the block: %w", b.loc.Segment, b.loc.Offset, unexpected(err))
	}
	if len(rest) > 8 || len(bytes.Trim(rest, "\r\n")) > 0 {
		return fmt.Errorf("warc: %s at %d: more than one record, or not a record's end, after the block", b.loc.Segment, b.loc.Offset)
	}
	if b.member != nil && b.loc.Length > 0 {
		if _, err := b.member.Peek(1); err == nil {
			return fmt.Errorf("warc: %s at %d: bytes after the record's gzip member, within its %d", b.loc.Segment, b.loc.Offset, b.loc.Length)
		}
	}
	return nil
}

// Record reads the whole block, which must not have been read from yet,
// checks it as Check does, and returns the record: for a reader that
// opened a block to learn its size and found it small enough to hold.
func (b *Block) Record() (*Record, error) {
	if b.left != b.Length {
		return nil, fmt.Errorf("warc: %s at %d: Record after a Read", b.loc.Segment, b.loc.Offset)
	}
	if b.Length > MaxBlock {
		return nil, fmt.Errorf("%w: %s at %d: %d bytes", ErrBlockTooLarge, b.loc.Segment, b.loc.Offset, b.Length)
	}
	// Grown as bytes arrive, not sized by the header's word: a record
	// that claims a large block and sends little costs little.
	block, err := io.ReadAll(b)
	if err != nil {
		return nil, err
	}
	if err := b.Finish(); err != nil {
		return nil, err
	}
	return &Record{Header: b.Header, Block: block}, nil
}

// Check reads the rest of the block and of its record (Finish), and
// returns the bytes of the block it read: the whole check of a record
// read as a stream, for a reader that wants no bytes.
func (b *Block) Check() (int64, error) {
	n, err := io.Copy(io.Discard, b)
	if err != nil {
		return n, err
	}
	return n, b.Finish()
}

// Close closes the segment (or the reader) the block is read from.
func (b *Block) Close() error { return b.src.Close() }
