package warc

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// HTTPHead is what the header section of an archived HTTP/1.x response
// says.
type HTTPHead struct {
	StatusLine string
	Status     int // 0: the status line is not one (no code in 100..999)
	Header     http.Header
	// Skipped are the lines passed over that are not fields.
	Skipped []string
}

// ReadHTTPHead reads the header section of an HTTP/1.x response, up to
// its blank line or the end of section, as browsers and replay tools read
// it: a line that is not a field — no colon, or a name that is no token,
// as in "X-Powered-By PHP/5.2", which some servers send and crawlers
// archive as sent — is passed over, and the fields around it are kept; a
// line beginning with a space or tab continues the field before it
// (obs-fold, RFC 9112 §5.2). Every reader of archived responses uses it,
// so that they agree on what such a response says.
func ReadHTTPHead(section []byte) HTTPHead {
	lines := strings.Split(string(section), "\n")
	hd := HTTPHead{StatusLine: strings.TrimSuffix(lines[0], "\r"), Header: http.Header{}}
	if proto, rest, ok := strings.Cut(hd.StatusLine, " "); ok && strings.HasPrefix(proto, "HTTP/") {
		code, _, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
		if status, err := strconv.Atoi(code); err == nil && status >= 100 && status <= 999 {
			hd.Status = status
		}
	}
	var last string // the field a continuation line adds to
	for _, line := range lines[1:] {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// It continues the line before: a field, or one passed over.
			if vs := hd.Header[last]; len(vs) > 0 {
				vs[len(vs)-1] = strings.TrimLeft(vs[len(vs)-1]+" "+strings.Trim(line, " \t"), " ")
			}
			continue
		}
		if !IsHTTPField(line) {
			hd.Skipped = append(hd.Skipped, line)
			last = ""
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		last = textproto.CanonicalMIMEHeaderKey(name) // as net/http keys it: "Name " stays apart from "Name"
		hd.Header[last] = append(hd.Header[last], strings.Trim(value, " \t"))
	}
	return hd
}

// IsHTTPField reports whether a header line (without its line end) is a
// field net/http takes: a name of token bytes (and spaces, which net/http
// keeps in the name), a colon, and a value without control bytes other
// than tab. The fetcher passes over the lines it is not (see package
// fetch), so that what it read of a response is what ReadHTTPHead reads
// of its record.
func IsHTTPField[T ~string | ~[]byte](line T) bool {
	i := 0
	for ; i < len(line) && line[i] != ':'; i++ {
		if c := line[i]; c != ' ' && !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	if i == 0 || i == len(line) {
		return false // no name, or no colon
	}
	for _, c := range []byte(line[i+1:]) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
