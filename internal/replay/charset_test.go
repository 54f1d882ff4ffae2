package replay

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding/unicode"
)

// A page archived in UTF-16 is replayed in UTF-8, rewritten like any
// other: the rewriter and the script it injects work on UTF-8 bytes, and
// a UTF-8 script before a UTF-16 page garbles it.
func TestUTF16PageIsReplayedAsUTF8(t *testing.T) {
	const page = `<html><head><title>Ça va</title></head><body><p>日本語</p><a href="/about">about</a></body></html>`
	for _, tc := range []struct {
		name, header string
		enc          unicode.BOMPolicy
		endian       unicode.Endianness
	}{
		{"by Content-Type, little-endian, no BOM", "Content-Type: text/html; charset=utf-16le\r\n", unicode.IgnoreBOM, unicode.LittleEndian},
		{"by byte order mark, big-endian", "Content-Type: text/html\r\n", unicode.UseBOM, unicode.BigEndian},
	} {
		body, err := unicode.UTF16(tc.endian, tc.enc).NewEncoder().String(page)
		if err != nil {
			t.Fatal(err)
		}
		a := newTestArchive(t, []fixture{{url: "http://example.com/", at: "20240101120000", header: tc.header, body: body}})
		resp, got := get(t, a.content.URL+"/web/20240101120000mp_/http://example.com/")
		if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "charset=utf-8") {
			t.Errorf("%s: Content-Type %q, want charset=utf-8", tc.name, ct)
		}
		if !utf8.ValidString(got) || !strings.Contains(got, "日本語") || !strings.Contains(got, "Ça va") {
			t.Errorf("%s: the page is not its text in UTF-8: %.200q", tc.name, got)
		}
		if !strings.Contains(got, `href="/web/20240101120000mp_/http://example.com/about"`) || !strings.Contains(got, "window.__wb=") {
			t.Errorf("%s: links not rewritten or no banner script: %.300q", tc.name, got)
		}
	}
}
