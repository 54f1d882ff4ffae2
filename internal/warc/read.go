package warc

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// MaxBlock is the largest content block a Reader accepts by default.
const MaxBlock = 1 << 30

const maxHeaderBytes = 1 << 20

// Reader reads records from a WARC file: gzip with a member per record (or
// one stream for the whole file) or uncompressed; WARC/1.0 or 1.1.
type Reader struct {
	src         *countingReader
	compressed  bool
	gz          *gzip.Reader
	cur         *bufio.Reader // decompressed current member, or the plain stream
	memberStart int64
	bufSize     int
	spare       *bufio.Reader // the decompressed-member buffer, reused
	MaxBlock    int64         // reject larger blocks (default MaxBlock)
}

// countingReader counts the bytes consumed from a buffered source; being a
// ByteReader, the gzip decoder reads exactly one member's bytes from it.
type countingReader struct {
	br *bufio.Reader
	n  int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.br.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.br.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) (*Reader, error) {
	size := 64 << 10
	if l, ok := r.(interface{ Len() int }); ok {
		// An in-memory record (a member from a peer, a copy being indexed)
		// needs no 64 KiB buffers, which would cost more to clear than to
		// read it.
		size = min(max(l.Len(), 4<<10), size)
	}
	src := &countingReader{br: bufio.NewReaderSize(r, size)}
	magic, _ := src.br.Peek(2)
	rd := &Reader{src: src, MaxBlock: MaxBlock, bufSize: size}
	rd.compressed = len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b
	if !rd.compressed {
		rd.cur = bufio.NewReaderSize(src, size)
	}
	return rd, nil
}

// Next returns the next record and where it lies. Location.Length is 0 for
// records that do not fill a gzip member of their own. At the end it
// returns io.EOF; a malformed or cut-off record gives an error naming its offset.
func (r *Reader) Next() (*Record, Location, error) {
	if !r.compressed {
		start := r.src.n - int64(r.cur.Buffered())
		rec, err := readRecord(r.cur, r.MaxBlock)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, Location{}, io.EOF
			}
			return nil, Location{}, fmt.Errorf("warc: record at offset %d: %w", start, err)
		}
		end := r.src.n - int64(r.cur.Buffered())
		return rec, Location{Offset: start, Length: end - start}, nil
	}
	for {
		if r.cur == nil {
			if _, err := r.src.br.Peek(1); err != nil {
				return nil, Location{}, io.EOF
			}
			r.memberStart = r.src.n
			var err error
			if r.gz == nil {
				r.gz, err = gzip.NewReader(r.src)
			} else {
				err = r.gz.Reset(r.src)
			}
			if err != nil {
				return nil, Location{}, fmt.Errorf("warc: gzip member at offset %d: %w", r.memberStart, err)
			}
			r.gz.Multistream(false)
			// One buffer serves every member: records copy what they keep.
			if r.spare == nil {
				r.spare = bufio.NewReaderSize(r.gz, r.bufSize)
			} else {
				r.spare.Reset(r.gz)
			}
			r.cur = r.spare
		}
		rec, err := readRecord(r.cur, r.MaxBlock)
		if errors.Is(err, io.EOF) {
			r.cur = nil // an empty remainder of a member
			continue
		}
		if err != nil {
			return nil, Location{}, fmt.Errorf("warc: record in gzip member at offset %d: %w", r.memberStart, err)
		}
		loc := Location{Offset: r.memberStart}
		// If the member ends here, this record had it to itself.
		if _, perr := r.cur.Peek(1); perr != nil {
			if !errors.Is(perr, io.EOF) {
				return nil, Location{}, fmt.Errorf("warc: gzip member at offset %d: %w", r.memberStart, perr)
			}
			loc.Length = r.src.n - r.memberStart
			r.cur = nil
		}
		return rec, loc, nil
	}
}

// readRecord reads one record; io.EOF when only blank lines remain.
func readRecord(br *bufio.Reader, maxBlock int64) (*Record, error) {
	h, err := ReadHeader(br)
	if err != nil {
		return nil, err
	}
	rec := &Record{Header: h}
	cl, err := strconv.ParseInt(rec.Header.Get("Content-Length"), 10, 64)
	if err != nil || cl < 0 {
		return nil, fmt.Errorf("bad Content-Length %s", quote(rec.Header.Get("Content-Length")))
	}
	if cl > maxBlock {
		return nil, fmt.Errorf("%w: content block of %d bytes is over the %d-byte limit", ErrBlockTooLarge, cl, maxBlock)
	}
	var block bytes.Buffer
	block.Grow(int(min(cl, 1<<20))) // a lying Content-Length must not allocate much
	if n, err := io.CopyN(&block, br, cl); err != nil {
		return nil, fmt.Errorf("content block cut off after %d of %d bytes: %w", n, cl, unexpected(err))
	}
	rec.Block = block.Bytes()
	for range 2 { // the record's closing CRLF CRLF (LF alone tolerated)
		if b, _ := br.Peek(1); len(b) == 1 && b[0] == '\r' {
			br.Discard(1)
		}
		if b, _ := br.Peek(1); len(b) == 1 && b[0] == '\n' {
			br.Discard(1)
		}
	}
	return rec, nil
}

// ReadHeader reads a record's version line and named fields, leaving br at
// the start of its content block; io.EOF when only blank lines remain. It is
// for readers that need a record's header without its block.
func ReadHeader(br *bufio.Reader) (Header, error) {
	var h Header
	var line string
	for {
		l, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) && l == "" {
				return h, io.EOF
			}
			return h, unexpected(err)
		}
		if l != "" {
			line = l
			break
		}
	}
	if !strings.HasPrefix(line, "WARC/") {
		return h, fmt.Errorf("not a WARC record: starts with %s", quote(line))
	}
	total := len(line)
	for {
		l, err := readLine(br)
		if err != nil {
			return h, unexpected(err)
		}
		if l == "" {
			return h, nil
		}
		if total += len(l); total > maxHeaderBytes {
			return h, errors.New("record header too large")
		}
		if (l[0] == ' ' || l[0] == '\t') && len(h.fields) > 0 {
			last := &h.fields[len(h.fields)-1]
			last.Value += " " + strings.TrimSpace(l)
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || !validName(name) {
			return h, fmt.Errorf("malformed header line %s", quote(l))
		}
		h.fields = append(h.fields, Field{Name: name, Value: strings.TrimSpace(value)})
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readLine reads a line without its CRLF or LF, up to maxHeaderBytes.
func readLine(br *bufio.Reader) (string, error) {
	var long []byte
	for {
		frag, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if long = append(long, frag...); len(long) > maxHeaderBytes {
				return "", errors.New("header line too long")
			}
			continue
		}
		if err != nil {
			if len(frag)+len(long) > 0 && errors.Is(err, io.EOF) {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		line := string(append(long, frag...))
		return strings.TrimRight(line, "\r\n"), nil
	}
}

// ReadAt reads the record at loc in dir and checks its block digest.
func ReadAt(dir string, loc Location) (*Record, error) {
	f, err := os.Open(filepath.Join(dir, filepath.Base(loc.Segment)))
	if err != nil {
		return nil, fmt.Errorf("warc: %w", err)
	}
	defer f.Close()
	length := loc.Length
	if length <= 0 {
		length = 1 << 62
	}
	r, err := NewReader(io.NewSectionReader(f, loc.Offset, length))
	if err != nil {
		return nil, err
	}
	rec, _, err := r.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("warc: %s at %d: %w", loc.Segment, loc.Offset, err)
	}
	if err := VerifyBlock(rec); err != nil {
		return nil, fmt.Errorf("%w: %s at offset %d", err, loc.Segment, loc.Offset)
	}
	return rec, nil
}

// maxHTTPHeader bounds the HTTP header section HTTPHeaderAt reads: the
// most a crawler's response header may hold (fetch.DefaultMaxHeaderBytes).
const maxHTTPHeader = 1 << 20

// HTTPHeaderAt returns the WARC header of the record at loc in dir and the
// header fields of the HTTP message that starts its block, as
// ReadHTTPHead reads them (a section cut short is an error), reading no further
// than that: for a reader that wants a response's headers from a
// large record. The block's digest is not checked, since the block is not
// read whole.
func HTTPHeaderAt(dir string, loc Location) (Header, http.Header, error) {
	f, rs, err := openAt(dir, loc)
	if err != nil {
		var wh Header
		if rs != nil {
			wh = rs.header
		}
		return wh, nil, err
	}
	defer f.Close()
	br, wh, n := rs.r, rs.header, rs.length
	// The section is read whole, to the blank line that ends it, first: a
	// section cut short (by the block's end or the limit) is a capture cut
	// short, none of which stands for a whole response, wherever the cut
	// falls (inside a name, a line would only look malformed).
	section, err := HTTPSection(io.LimitReader(br, n))
	if err != nil {
		return wh, nil, fmt.Errorf("warc: %s at %d: http headers: %w", loc.Segment, loc.Offset, err)
	}
	return wh, ReadHTTPHead(section).Header, nil
}

// HTTPSection reads an HTTP message's header section from r, through the
// blank line that ends it, or fails if r ends first or the section is
// longer than a crawler's response header may be (1 MiB). It reads no more
// of r than it needs, give or take a buffer, and returns exactly the
// section: what follows it in the message starts at its length.
func HTTPSection(r io.Reader) ([]byte, error) {
	return ReadHTTPSection(bufio.NewReader(io.LimitReader(r, maxHTTPHeader)))
}

// ReadHTTPSection is HTTPSection reading from br, which it leaves at the
// first byte after the section: for a reader that goes on with the body.
func ReadHTTPSection(br *bufio.Reader) ([]byte, error) {
	var section []byte
	whole := true // the bytes read so far end a line
	for {
		line, err := br.ReadSlice('\n')
		section = append(section, line...)
		if len(section) > maxHTTPHeader {
			return nil, fmt.Errorf("a header section of over %d bytes", maxHTTPHeader)
		}
		switch {
		case err == nil:
			if whole && (len(line) == 1 || len(line) == 2 && line[0] == '\r') && len(section) > len(line) {
				return section, nil
			}
			whole = true
		case errors.Is(err, bufio.ErrBufferFull):
			whole = false // a long line, read on
		default:
			return nil, fmt.Errorf("cut short after %d bytes: %w", len(section), unexpected(err))
		}
	}
}

// openAt opens the record at loc in dir, inflating it if it is a gzip
// member, and reads its WARC header and Content-Length (see recordStart).
func openAt(dir string, loc Location) (*os.File, *recordStart, error) {
	f, err := os.Open(filepath.Join(dir, filepath.Base(loc.Segment)))
	if err != nil {
		return nil, nil, fmt.Errorf("warc: %w", err)
	}
	length := loc.Length
	if length <= 0 {
		length = 1 << 62
	}
	rs, err := startRecord(io.NewSectionReader(f, loc.Offset, length), loc)
	if err != nil {
		f.Close()
		return nil, rs, err
	}
	return f, rs, nil
}

// recordStart is a record read up to its block.
type recordStart struct {
	r      *bufio.Reader // what is left: the block, then the record's end (inflated)
	header Header
	length int64 // the block's, from Content-Length
	// member is the raw reader of the record's gzip member, nil for a
	// record not in one: once the member is inflated to its end, nothing
	// is left in it if the location's length is the member's.
	member *bufio.Reader
}

// startRecord reads the WARC header of the record r starts with, inflating
// r if it starts with a gzip member. loc names where r reads from, for
// errors. On an error the header read so far is returned with it.
func startRecord(r io.Reader, loc Location) (*recordStart, error) {
	rs := &recordStart{r: bufio.NewReader(r)}
	fail := func(err error) (*recordStart, error) {
		return rs, fmt.Errorf("warc: %s at %d: %w", loc.Segment, loc.Offset, err)
	}
	if magic, _ := rs.r.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(rs.r)
		if err != nil {
			return fail(err)
		}
		zr.Multistream(false)
		rs.member, rs.r = rs.r, bufio.NewReader(zr)
	}
	var err error
	if rs.header, err = ReadHeader(rs.r); err != nil {
		return fail(unexpected(err))
	}
	rs.length, err = strconv.ParseInt(rs.header.Get("Content-Length"), 10, 64)
	if err != nil || rs.length < 0 {
		return fail(fmt.Errorf("bad Content-Length %q", rs.header.Get("Content-Length")))
	}
	return rs, nil
}

// VerifyBlock checks a record's WARC-Block-Digest: SHA-1 or SHA-256, in
// base 32 (padded or not) or hex, as the tools that write WARC files differ.
// Other algorithms, and a record without the field, are not checked.
func VerifyBlock(rec *Record) error {
	d, ok := newBlockDigest(rec.Header)
	if !ok {
		return nil
	}
	d.h.Write(rec.Block)
	return d.check()
}

// blockDigest checks a block, written to h, against the digest its header
// names.
type blockDigest struct {
	h    hash.Hash
	want string
}

// newBlockDigest returns the check of h's WARC-Block-Digest, or false when
// there is none this package knows how to check.
func newBlockDigest(h Header) (blockDigest, bool) {
	return parseDigest(h.Get("WARC-Block-Digest"))
}

// DigestMatches reports whether digest ("algorithm:value", as in
// WARC-Payload-Digest: SHA-1 or SHA-256, in base 32, padded or not, or
// hex) is the digest of b; false for an algorithm this package does not
// know.
func DigestMatches(digest string, b []byte) bool {
	d, ok := parseDigest(digest)
	if !ok {
		return false
	}
	d.h.Write(b)
	return d.check() == nil
}

// parseDigest returns the check of a digest field's value, or false when
// it is none this package knows how to check.
func parseDigest(digest string) (blockDigest, bool) {
	alg, want, ok := strings.Cut(strings.TrimSpace(digest), ":")
	if !ok {
		return blockDigest{}, false
	}
	switch strings.ToLower(alg) {
	case "sha1":
		return blockDigest{sha1.New(), want}, true
	case "sha256":
		return blockDigest{sha256.New(), want}, true
	}
	return blockDigest{}, false
}

func (d blockDigest) check() error {
	sum := d.h.Sum(nil)
	for _, got := range []string{base32.StdEncoding.EncodeToString(sum), base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum), hex.EncodeToString(sum)} {
		if strings.EqualFold(got, d.want) {
			return nil
		}
	}
	return ErrDigestMismatch
}

// RepairResult says what Repair kept and cut.
type RepairResult struct {
	Records int   // records found whole, from where the repair started
	Size    int64 // bytes kept
	Cut     int64 // bytes removed from the tail
}

// Repair truncates a segment after its last complete, valid record, so a
// torn tail left by a crash is cut off and the file reads cleanly.
func Repair(path string) (RepairResult, error) { return RepairFrom(path, 0) }

// RepairFrom is Repair reading from offset from, a record boundary, on:
// the bytes before it are kept as they are, damaged or not. A caller that
// knows where the intact part ends starts there, so that one damaged
// record before it does not cut every record after it.
func RepairFrom(path string, from int64) (RepairResult, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return RepairResult{}, fmt.Errorf("warc: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return RepairResult{}, fmt.Errorf("warc: %w", err)
	}
	if from < 0 || from > fi.Size() {
		return RepairResult{}, fmt.Errorf("warc: repair %s from offset %d of %d bytes", path, from, fi.Size())
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return RepairResult{}, fmt.Errorf("warc: %w", err)
	}
	r, err := NewReader(f)
	if err != nil {
		return RepairResult{}, err
	}
	res := RepairResult{Size: from}
	for {
		rec, loc, err := r.Next()
		if err != nil {
			break
		}
		if loc.Length == 0 || VerifyBlock(rec) != nil {
			break // part of a multi-record member, or corrupt: stop at the last clean boundary
		}
		res.Records++
		res.Size = from + loc.Offset + loc.Length
	}
	if res.Size < fi.Size() {
		res.Cut = fi.Size() - res.Size
		if err := f.Truncate(res.Size); err != nil {
			return res, fmt.Errorf("warc: truncate %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return res, fmt.Errorf("warc: %w", err)
		}
	}
	return res, nil
}
