package replay

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

// Some servers send header lines that are no fields ("X-Powered-By
// PHP/5.2"), and crawlers archive them as sent; import takes such records.
// Replay passes over such a line and keeps the fields around it, those that
// frame the payload among them, as browsers do: it is not damage.
func TestParseResponsePassesOverLinesThatAreNotFields(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		header    http.Header
		payload   string
	}{
		{"no colon, chunked after it",
			"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Powered-By PHP/5.2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n<p>hi\r\n4\r\n</p>\r\n0\r\n\r\n",
			http.Header{"Content-Type": {"text/html"}, "Transfer-Encoding": {"chunked"}}, "<p>hi</p>"},
		{"a name that is no token",
			"HTTP/1.1 200 OK\r\nN\x80me: v\r\nContent-Type: text/html\r\n\r\n<p>hi</p>",
			http.Header{"Content-Type": {"text/html"}}, "<p>hi</p>"},
		{"a folded field (obs-fold)",
			"HTTP/1.1 200 OK\r\nContent-Type: text/html;\r\n\tcharset=utf-8\r\n\r\n<p>hi</p>",
			http.Header{"Content-Type": {"text/html; charset=utf-8"}}, "<p>hi</p>"},
		{"bare LF line ends",
			"HTTP/1.0 200 OK\nContent-Type: text/plain\nX-Powered-By PHP/5.2\nX-Note:  after \n\nbare LF",
			http.Header{"Content-Type": {"text/plain"}, "X-Note": {"after"}}, "bare LF"},
	} {
		r, err := parseResponse([]byte(tc.raw))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.status != http.StatusOK || !reflect.DeepEqual(r.header, tc.header) || string(r.payload) != tc.payload {
			t.Errorf("%s: %d %v %q; want 200 %v %q", tc.name, r.status, r.header, r.payload, tc.header, tc.payload)
		}
	}
	// Lines of which none is a field are passed over as well: the status
	// line says it is HTTP. A bad status line is damage.
	if r, err := parseResponse([]byte("HTTP/1.1 200 OK\r\n\x00\x9c\xf3junk\r\n\r\n<p>hi</p>")); err != nil || len(r.header) != 0 || string(r.payload) != "<p>hi</p>" {
		t.Errorf("only a line that is no field: %v", err)
	}
	if _, err := parseResponse([]byte("HTPP 2OO\r\nContent-Type: text/html\r\n\r\n<p>hi</p>")); !errors.Is(err, errCorrupt) {
		t.Errorf("a bad status line: %v, want damage", err)
	}
}

// A capture and a revisit whose heads hold a line that is no field replay
// as archived: the capture is not "damaged", and the revisit keeps its own
// status and headers, not the original's (which the CDX API would
// contradict: it lists the revisit's own status).
func TestLineThatIsNoFieldDoesNotDamageACapture(t *testing.T) {
	const page = "<p>soft</p>"
	a := newTestArchive(t, []fixture{
		{url: "http://php.example/", at: "20240101000000", header: "Content-Type: text/html\r\nX-Powered-By PHP/5.2\r\nX-Version: 1\r\n", body: page},
		{url: "http://php.example/", at: "20240201000000", status: http.StatusNotFound, revisit: true,
			header: "Content-Type: text/html\r\nX-Powered-By PHP/5.2\r\nX-Version: 2\r\n", body: page},
	})
	for _, tc := range []struct {
		at, version string
		status      int
	}{{"20240101000000", "1", http.StatusOK}, {"20240201000000", "2", http.StatusNotFound}} {
		resp, body := get(t, a.content.URL+"/web/"+tc.at+"id_/http://php.example/")
		if resp.StatusCode != tc.status || body != page || resp.Header.Get("Content-Type") != "text/html" ||
			resp.Header.Get("X-Archive-Orig-X-Version") != tc.version {
			t.Errorf("%s: %d %q %v; want %d, the page, text/html and version %s", tc.at, resp.StatusCode, body, resp.Header, tc.status, tc.version)
		}
	}
}
