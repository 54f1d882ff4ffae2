package fetch

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/warc"
)

// A response with header lines that are not fields (no colon, a name of
// bytes no token has, a control byte in a value) is archived as sent, its
// valid fields read, as browsers and other crawlers read it; the
// connection serves the next request as before.
func TestHeaderLinesThatAreNotFieldsArePassedOver(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\n" +
		"X-Powered-By PHP/5.2\r\n" + // no colon, first of the fields
		"Content-Type: text/html; charset=utf-8\r\n" +
		"N\x80me: v\r\n" +
		"X-Debug: a\x00b\r\n" +
		"ETag: \"v1\"\r\n" +
		"Content-Length: 5\r\n" +
		"oops\r\n" + // no colon, last
		"\r\nhello"
	base, conns := rawServer(t, resp, false)
	f := newFetcher(t, Config{})
	for range 2 {
		r, err := f.Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Raw) != resp {
			t.Fatalf("raw response %q, want the bytes sent, %q", r.Raw, resp)
		}
		if r.StatusCode != 200 || string(r.Body) != "hello" || r.Header.Get("Content-Type") != "text/html; charset=utf-8" || r.Header.Get("ETag") != `"v1"` {
			t.Errorf("status %d, body %q, header %v", r.StatusCode, r.Body, r.Header)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 2 requests, want 1 (keep-alive)", n)
	}
}

// The record of a fetched response holds, as its payload, the body the
// fetcher read: the two read the head alike, a field net/http does not
// take (a space before the colon, a control byte in the value) framing
// nothing for either; a status code net/http takes, for both.
func TestRecordPayloadIsTheFetchedBody(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: \x01chunked\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 099 Odd\r\nX-Powered-By PHP/5.2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		base, _ := rawServer(t, resp, true)
		r, err := newFetcher(t, Config{}).Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil {
			t.Errorf("%q: %v", resp, err)
			continue
		}
		rec, err := warc.NewFetchedResponse(base+"/", r.Start, r.Raw)
		if err != nil {
			t.Errorf("%q: fetched (status %d), but no record: %v", resp, r.StatusCode, err)
			continue
		}
		if string(r.Body) != "hello" || rec.Header.Get("WARC-Payload-Digest") != warc.Digest(r.Body) {
			t.Errorf("%q: body %q, the record's payload digest %s, the body's %s", resp, r.Body, rec.Header.Get("WARC-Payload-Digest"), warc.Digest(r.Body))
		}
	}
}

// An interim response before the one that answers (103 Early Hints) is
// passed over: the answer is archived, and the connection serves on.
func TestInterimResponseIsPassedOver(t *testing.T) {
	for _, final := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		base, conns := rawServer(t, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"+final, false)
		f := newFetcher(t, Config{})
		for range 2 {
			r, err := f.Fetch(context.Background(), Request{URL: base + "/"})
			if err != nil {
				t.Fatal(err)
			}
			if r.StatusCode != 200 || string(r.Body) != "hello" || string(r.Raw) != final {
				t.Errorf("status %d, body %q, raw %q; want the 200 alone", r.StatusCode, r.Body, r.Raw)
			}
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("%d connections for 2 requests, want 1 (keep-alive)", n)
		}
	}
}

// A connection that answered 101 Switching Protocols speaks something
// else from then on: it is not used for another request.
func TestSwitchedConnectionIsNotReused(t *testing.T) {
	base, conns := rawServer(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: example\r\nConnection: Upgrade\r\n\r\n", false)
	f := newFetcher(t, Config{})
	for range 2 {
		r, err := f.Fetch(context.Background(), Request{URL: base + "/"})
		if err != nil || r.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%v %v", r, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for 2 requests answered 101; want 2", n)
	}
}

// What cannot be rewritten is refused as before: a cut-off section, a line
// of one byte without a carriage return.
func TestHeaderLinesLeftToNetHTTP(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 200 OK\nX\nContent-Length: 2\n\nhi",
		"HTTP/1.1 200 OK\r\nNo colon",
	} {
		base, _ := rawServer(t, resp, true)
		if r, err := newFetcher(t, Config{}).Fetch(context.Background(), Request{URL: base + "/"}); err == nil {
			t.Errorf("%q: fetched, status %d; want an error", resp, r.StatusCode)
		}
	}
}

// Rewriting keeps every byte's place, changes nothing of a section
// net/http takes whole, and of one it takes only once rewritten, keeps
// every field but adds "X"; what net/http then reads is what
// warc.ReadHTTPHead reads of the bytes as sent.
func FuzzRewriteBadHeaderLines(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nbad line\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n:x\r\nN\x80: v\r\nV: \x01\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 404 Not Found\n\n"))
	f.Fuzz(func(t *testing.T, section []byte) {
		end := warc.HTTPHeaderEnd(section)
		if end < 0 {
			return
		}
		orig := bytes.Clone(section[:end])
		got := bytes.Clone(orig)
		rewriteBadHeaderLines(got)
		if len(got) != len(orig) || bytes.Count(got, []byte("\n")) != bytes.Count(orig, []byte("\n")) {
			t.Fatalf("%q rewritten %q: lines moved", orig, got)
		}
		read := func(b []byte) (http.Header, bool) {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
			if err != nil {
				return nil, false
			}
			return resp.Header, true
		}
		if _, ok := read(orig); ok && !bytes.Equal(got, orig) {
			t.Fatalf("%q, which net/http reads, rewritten %q", orig, got)
		}
		if after, ok := read(got); ok {
			// What the fetcher read is what the record's readers read.
			archived := warc.ReadHTTPHead(orig).Header
			for name, vs := range after {
				if name != "X" && strings.Join(archived[name], "\x00") != strings.Join(vs, "\x00") {
					t.Fatalf("%q: net/http read %s as %q after the rewrite, warc.ReadHTTPHead %q", orig, name, vs, archived[name])
				}
			}
			for _, line := range strings.Split(string(orig), "\n")[1:] {
				name, _, _ := strings.Cut(line, ":")
				if warc.IsHTTPField(strings.TrimSuffix(line, "\r")) && line[0] != ' ' && line[0] != '\t' && after[http.CanonicalHeaderKey(name)] == nil {
					t.Fatalf("%q rewritten %q: field %q lost", orig, got, name)
				}
			}
		}
	})
}

// BenchmarkPassOverBadHeaderLines measures the look every HTTP/1.1
// response's header section gets before net/http reads it: a typical
// section of about 500 bytes, with no line to rewrite.
func BenchmarkPassOverBadHeaderLines(b *testing.B) {
	resp := []byte("HTTP/1.1 200 OK\r\nDate: Tue, 24 Nov 2026 23:26:05 GMT\r\nServer: Apache/2.4.62 (Debian)\r\n" +
		"Last-Modified: Wed, 01 Jun 2022 01:00:00 GMT\r\nETag: \"8d344a2d94434c16\"\r\nAccept-Ranges: bytes\r\n" +
		"Cache-Control: max-age=600\r\nVary: Accept-Encoding\r\nContent-Encoding: gzip\r\nContent-Length: 5120\r\n" +
		"Content-Type: text/html; charset=utf-8\r\nStrict-Transport-Security: max-age=63072000\r\n" +
		"X-Content-Type-Options: nosniff\r\nSet-Cookie: session=abcdef0123456789; Path=/; HttpOnly\r\n\r\n")
	resp = append(resp, bytes.Repeat([]byte("x"), 5120)...)
	r := bytes.NewReader(resp)
	br := bufio.NewReaderSize(r, 32<<10)
	b.SetBytes(int64(len(resp)))
	for b.Loop() {
		r.Reset(resp)
		br.Reset(r)
		passOverBadHeaderLines(br)
	}
}
