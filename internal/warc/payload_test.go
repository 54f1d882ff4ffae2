package warc

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// payloadCases are raw HTTP responses whose payloads PayloadReader and
// HTTPPayload must agree on.
var payloadCases = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n",
	"HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n\n3\nabc\n0\n\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",             // cut inside a chunk
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello",           // cut after a chunk
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnot chunks\r\nat all", // not chunked after all
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc-1\r\nx",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\rabc\n2\r\nde\r\n0\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: text/html",                 // head cut off
	"\r\nHTTP/1.1 200 OK\r\n\r\nbody after a blank first line",   // the first line never ends the head
	"HTTP/1.1 200 OK\nX: y\n\nbody\r\n\r\nwith CRLF CRLF inside", // the first empty line ends the head
	"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
	"",
}

func TestPayloadReader(t *testing.T) {
	for _, raw := range payloadCases {
		checkPayloadReader(t, []byte(raw))
	}
	// A payload larger than the reader's buffer, in chunks that straddle it.
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 50 {
		b.WriteString("fff\r\n" + strings.Repeat("x", 0xfff) + "\r\n")
	}
	b.WriteString("0\r\n\r\n")
	checkPayloadReader(t, []byte(b.String()))
	checkPayloadReader(t, []byte("HTTP/1.1 200 OK\r\n\r\n"+strings.Repeat("y", 300<<10)))

	if _, err := PayloadReader(strings.NewReader("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHTTPHeader) + "\r\n\r\n")); err == nil {
		t.Error("a header section over 1 MiB was read")
	}
}

// checkPayloadReader fails t if PayloadReader reads another payload from
// raw than HTTPPayload does.
func checkPayloadReader(t *testing.T, raw []byte) {
	t.Helper()
	want, _ := HTTPPayload(raw)
	r, err := PayloadReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("PayloadReader(%.80q): %v", raw, err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the payload of %.80q: %v", raw, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("payload of %.80q: %.80q (%d bytes), HTTPPayload %.80q (%d bytes)", raw, got, len(got), want, len(want))
	}
}

func FuzzPayloadReader(f *testing.F) {
	for _, raw := range payloadCases {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, _ := HTTPPayload(raw)
		r, err := PayloadReader(bytes.NewReader(raw))
		if err != nil {
			return // a line past PayloadReader's bounds
		}
		got, err := io.ReadAll(r)
		if err != nil {
			if strings.Contains(err.Error(), "line over") {
				return
			}
			t.Fatalf("reading the payload: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("payload %q, HTTPPayload %q", got, want)
		}
	})
}
