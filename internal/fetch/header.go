package fetch

import (
	"bufio"
	"bytes"

	"github.com/waggle-archive/waggle/internal/warc"
)

// passOverBadHeaderLines lets http.ReadResponse read a response whose
// header section holds lines that are not fields — "X-Powered-By PHP/5.2"
// without its colon, a name of non-token bytes, a value with control
// bytes — which some servers send, browsers pass over, and other crawlers
// archive. net/http refuses the whole response for one such line.
//
// Each such line, while the whole section is in br's buffer, is rewritten
// there, at its length, into an empty field named "X" ("X:" and spaces);
// the lines around it are left as they are. The archived bytes are not
// these: the recorder below br keeps what the server sent. A line too
// short to rewrite, or a section longer than br's buffer, is left to
// ReadResponse, which refuses it as before.
func passOverBadHeaderLines(br *bufio.Reader) {
	if _, err := br.Peek(1); err != nil {
		return
	}
	for {
		n := br.Buffered()
		buf, _ := br.Peek(n)
		if !bytes.HasPrefix(buf, []byte("HTTP/")[:min(n, 5)]) {
			return // no HTTP response: ReadResponse says so, without waiting for more
		}
		if end := warc.HTTPHeaderEnd(buf); end >= 0 {
			rewriteBadHeaderLines(buf[:end])
			return
		}
		if n >= br.Size() {
			return
		}
		if _, err := br.Peek(n + 1); err != nil {
			return // cut off: ReadResponse says so
		}
	}
}

// rewriteBadHeaderLines rewrites in place, at their length, the lines of a
// header section (status line first, blank line last) that net/http would
// refuse as fields.
func rewriteBadHeaderLines(section []byte) {
	first := true // the status line
	for len(section) > 0 {
		nl := bytes.IndexByte(section, '\n')
		if nl < 0 {
			return
		}
		line := section[:nl] // with its '\r', if any: one more byte to rewrite into
		section = section[nl+1:]
		if first {
			first = false
			continue
		}
		if len(bytes.TrimSuffix(line, []byte("\r"))) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue // the blank line, or a continuation of the field before
		}
		if warc.IsHTTPField(bytes.TrimSuffix(line, []byte("\r"))) || len(line) < 2 {
			continue
		}
		line[0], line[1] = 'X', ':'
		for i := 2; i < len(line); i++ {
			line[i] = ' '
		}
	}
}
