package wacz

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/warc"
)

const (
	// A page's title is looked for in the first titleScan bytes of its
	// record, then, if not found there, in the first maxTitleScan.
	titleScan    = 16 << 10
	maxTitleScan = 256 << 10
	maxTitleLen  = 1000
)

// memberReader decompresses single gzip members of a segment file, reusing
// its buffers from member to member.
type memberReader struct {
	gz  *gzip.Reader
	src countingReader
	br  *bufio.Reader
}

// countingReader counts the compressed bytes the gzip decoder consumes; being
// a ByteReader, it lets the decoder stop exactly at the end of the member.
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

// open starts decompressing the member at off in ra. limit bounds the
// compressed bytes read (a member's known length, or the rest of the file).
func (m *memberReader) open(ra io.ReaderAt, off, limit int64) error {
	sr := io.NewSectionReader(ra, off, limit)
	if m.src.br == nil {
		m.src.br = bufio.NewReaderSize(sr, 32<<10)
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
		return err
	}
	m.gz.Multistream(false)
	if m.br == nil {
		// Small: deciding about a member needs only its header, and
		// decompressing more than that is wasted.
		m.br = bufio.NewReaderSize(m.gz, 2<<10)
	} else {
		m.br.Reset(m.gz)
	}
	return nil
}

// peek reads the WARC header of the open member.
func (m *memberReader) peek() (warc.Header, error) {
	h, err := warc.ReadHeader(m.br)
	if err != nil {
		return h, fmt.Errorf("record header: %w", err)
	}
	return h, nil
}

// hasField reports whether h has a field name with exactly value (WARC
// allows WARC-Concurrent-To to repeat).
func hasField(h warc.Header, name, value string) bool {
	for _, f := range h.Fields() {
		if strings.EqualFold(f.Name, name) && f.Value == value {
			return true
		}
	}
	return false
}

// readBlock appends up to n more bytes of the open member's block to buf.
func (m *memberReader) readBlock(buf []byte, n int) ([]byte, error) {
	have := len(buf)
	buf = slices.Grow(buf, n)[:have+n]
	k, err := io.ReadFull(m.br, buf[have:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return buf[:have+k], err
	}
	return buf[:have+k], nil
}

// finish reads the rest of the open member (checking its CRC) and returns
// the member's compressed length.
func (m *memberReader) finish() (int64, error) {
	if _, err := io.Copy(io.Discard, m.br); err != nil {
		return 0, err
	}
	return m.src.n, nil
}

// pageTitle returns the <title> of an HTML response record whose block starts
// with block, or "" when it cannot be had cheaply and reliably (a
// body in an unknown coding, no title in the part read).
func pageTitle(block []byte) string {
	end := warc.HTTPHeaderEnd(block)
	if end < 0 {
		return ""
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block[:end])))
	if _, err := tp.ReadLine(); err != nil {
		return ""
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	h := http.Header(mh)
	body, _, err := warc.HTTPPayload(block)
	if err != nil {
		return ""
	}
	// Decode what there is of a compressed body: the start is enough.
	ce := h.Get("Content-Encoding")
	for _, c := range strings.Split(ce, ",") {
		switch strings.ToLower(strings.TrimSpace(c)) {
		case "", "identity", "gzip", "x-gzip", "br", "deflate", "zstd":
		default:
			return ""
		}
	}
	body, _ = fetch.DecodeContent(body, ce, maxTitleScan)
	ct := h.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt != "text/html" && mt != "application/xhtml+xml" {
		return ""
	}
	r, err := charset.NewReader(bytes.NewReader(body), ct)
	if err != nil {
		r = bytes.NewReader(body)
	}
	z := html.NewTokenizer(r)
	z.SetMaxBuf(maxTitleScan)
	depth := 0 // inside <svg> or <math>, whose <title> is not the page's
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return ""
		case html.StartTagToken, html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Svg || a == atom.Math:
				if tt == html.StartTagToken {
					depth++
				} else if depth > 0 {
					depth--
				}
			case a == atom.Body && tt == html.StartTagToken:
				return "" // no title in the head
			case a == atom.Title && tt == html.StartTagToken && depth == 0:
				if z.Next() != html.TextToken {
					return ""
				}
				return cleanTitle(string(z.Text()))
			}
		}
	}
}

func cleanTitle(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) > maxTitleLen {
		s = s[:maxTitleLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
