package warc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxChunkLine bounds a chunk-size line PayloadReader reads.
const maxChunkLine = 64 << 10

// PayloadReader returns a reader of the payload of the raw HTTP response r
// yields: the bytes HTTPPayload returns for the same input, read as a
// stream, for a record too large to hold whole. Unlike HTTPPayload it
// fails on a header section over 1 MiB (the most a crawler's response
// head may hold) and on a chunk-size line over 64 KiB, which no server
// sends.
func PayloadReader(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, maxChunkLine)
	var head []byte
	for start := true; ; start = false {
		line, err := readPayloadLine(br, maxHTTPHeader-len(head))
		switch {
		case errors.Is(err, io.EOF):
			return bytes.NewReader(nil), nil // the head is cut off: no payload, as HTTPPayload has it
		case err != nil:
			return nil, fmt.Errorf("warc: HTTP header section: %w", err)
		}
		head = append(head, line...)
		if !start && (len(line) == 1 || len(line) == 2 && line[0] == '\r') {
			break
		}
	}
	if !Chunked(ReadHTTPHead(head).Header) {
		return br, nil
	}
	return &chunkReader{br: br, first: true}, nil
}

// readPayloadLine reads through the next '\n' (included) from br, at most max
// bytes; io.EOF when the input ends first.
func readPayloadLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max {
			return nil, fmt.Errorf("line over %d bytes", max)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// chunkReader removes chunked framing as dechunk does, as a stream.
type chunkReader struct {
	br    *bufio.Reader
	left  int64 // bytes of the current chunk still to read
	first bool  // no chunk read yet
	done  bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if !c.first {
			// The line end after a chunk's data, either byte optional.
			for _, b := range []byte("\r\n") {
				if next, err := c.br.Peek(1); err == nil && next[0] == b {
					c.br.Discard(1)
				}
			}
		}
		c.first = false
		line, err := readPayloadLine(c.br, maxChunkLine)
		if errors.Is(err, io.EOF) {
			c.done = true // cut off: what was read is the payload
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("warc: chunked payload: %w", err)
		}
		n, ok := chunkSize(line)
		if !ok || n == 0 {
			c.done = true // the last chunk, or bytes that are not chunks after all
			continue
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if errors.Is(err, io.EOF) {
		c.left, c.done = 0, true // cut off inside a chunk
		err = nil
		if n == 0 {
			return 0, io.EOF
		}
	}
	return n, err
}

// chunkSize parses a chunk-size line (its line end included), ignoring
// chunk extensions; ok is false for one that is not a size.
func chunkSize(line []byte) (n int64, ok bool) {
	s := strings.TrimSpace(string(line))
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 16, 64)
	return n, err == nil && n >= 0
}
