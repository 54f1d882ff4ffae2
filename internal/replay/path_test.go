package replay

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// What follows /web/ is a timestamp (with a modifier), a capture list, or a
// URL (a TimeGate). A first segment that starts with a digit but is no
// timestamp, before an absolute URL, is a mistake to say so, not a URL
// "2026x/http://…" to look up; digits past the 14th are dropped.
func TestParseTargetTimestamps(t *testing.T) {
	for _, tc := range []struct {
		rest, ts, mod, url string
		bad                bool
	}{
		{rest: "2024/http://example.com/", ts: "2024", url: "http://example.com/"},
		{rest: "20240101120000id_/http://example.com/", ts: "20240101120000", mod: "id_", url: "http://example.com/"},
		{rest: "20240101120000123/http://example.com/", ts: "20240101120000", url: "http://example.com/"},
		{rest: "20240101120000123im_/https://example.com/a.png", ts: "20240101120000", mod: "im_", url: "https://example.com/a.png"},
		{rest: "1password.com/", url: "1password.com/"},
		{rest: "2024x/example.com/", url: "2024x/example.com/"}, // a host "2024x", for all we know
		{rest: "1.2.3.4/http://x.test/", url: "1.2.3.4/http://x.test/"},
		{rest: "127.0.0.1:8080/http://x.test/", url: "127.0.0.1:8080/http://x.test/"},
		{rest: "2026x/http://example.com/", bad: true},
		{rest: "2024near_/http://example.com/", bad: true},
		{rest: "2024id/HTTPS:/example.com/", bad: true},
		{rest: "2024-01-01T12:00:00Z/http://example.com/", bad: true},
		{rest: "2024.01.01/http://example.com/", bad: true},
		{rest: "1password.com/http://x.test/", url: "1password.com/http://x.test/"},
		{rest: "1password.com./http://x.test/", url: "1password.com./http://x.test/"},
		{rest: "1host.example:8080/http://x.test/", url: "1host.example:8080/http://x.test/"},
		{rest: "2024-01-01T12:00/http://example.com/", bad: true},
		{rest: "20240101:1200/http://example.com/", bad: true},
		{rest: "*near/http://example.com/", bad: true},
		{rest: "example.com?q=*&next=/home", url: "example.com?q=*&next=/home"}, // a TimeGate: the '*' is the query's
		{rest: "2024.example?q=*/x", url: "2024.example?q=*/x"},
		{rest: "2024*nearby_/example.com/", bad: true},
	} {
		got, err := parseTarget(tc.rest)
		if tc.bad {
			if !errors.Is(err, errBadTimestamp) {
				t.Errorf("parseTarget(%q) = %+v, %v; want errBadTimestamp", tc.rest, got, err)
			}
			continue
		}
		if err != nil || got.ts != tc.ts || got.mod != tc.mod || got.url != tc.url {
			t.Errorf("parseTarget(%q) = %+v, %v; want ts %q mod %q url %q", tc.rest, got, err, tc.ts, tc.mod, tc.url)
		}
	}
}

func TestBadTimestampIsExplained(t *testing.T) {
	a := newTestArchive(t, []fixture{
		{url: "http://example.com/", at: "20240101120000", header: "Content-Type: text/html\r\n", body: "<p>hello</p>"},
	})
	for _, base := range []string{a.ui.URL, a.content.URL} {
		resp, body := get(t, base+"/web/2026x/http://example.com/")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not a timestamp") {
			t.Errorf("%s/web/2026x/…: %d %.300q; want 400 saying it is not a timestamp", base, resp.StatusCode, body)
		}
	}
	// Milliseconds are dropped: the capture of that second is found.
	resp, body := get(t, a.content.URL+"/web/20240101120000999id_/http://example.com/")
	if resp.StatusCode != http.StatusOK || body != "<p>hello</p>" {
		t.Errorf("a 17-digit timestamp: %d %.200q", resp.StatusCode, body)
	}
}
