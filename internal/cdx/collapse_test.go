package cdx

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/simhash"
)

const baseHash = 0x0123456789abcdef

// collapseFixture has six captures of http://c.example/ (key
// "example,c)/", numbered 0 to 5 in time order) whose fields repeat in
// known runs, and five of http://c.example/a (a0 to a4) whose SimHashes
// drift.
func collapseFixture(t *testing.T) (*index.Index, map[string]string) {
	db := openDB(t)
	names := map[string]string{} // "key timestamp" → name
	var cs []index.Capture
	for i, r := range []struct {
		url, at, mime, digest, seg string
		status                     int
		length, offset             int64
		revisit                    bool
		hash                       uint64
	}{
		{"http://c.example/", "20200101000000", "text/html", "sha1:A", "s1", 200, 100, 0, false, baseHash},
		{"http://c.example/", "20200101060000", "text/html", "sha1:A", "s1", 200, 100, 5, false, baseHash ^ 0b111},    // 3 bits from 0
		{"http://c.example/", "20200102000000", "text/plain", "sha1:B", "s2", 404, 200, 10, false, 0},                 // no SimHash
		{"https://c.example/", "20200102010000", "text/html", "sha1:B", "s2", 200, 250, 15, false, baseHash ^ 0b1111}, // 4 bits from 0
		{"http://c.example/", "20200201000000", "text/html", "sha1:C", "s2", 301, 250, 1000, false, baseHash ^ 0b1111 ^ 0b111<<61},
		{"http://c.example/", "20200201000500", "text/html", "sha1:C", "s1", 0, 100, 1500, true, baseHash ^ 0b1111 ^ 0b111<<61},
	} {
		c := capture(t, r.url, r.at)
		c.MIME, c.Digest, c.Segment, c.Status, c.Length, c.Offset, c.SimHash = r.mime, r.digest, r.seg, r.status, r.length, r.offset, r.hash
		if r.revisit {
			c.Type = "revisit"
		}
		cs = append(cs, c)
		names[c.URLKey+" "+r.at] = string(rune('0' + i))
	}
	h := uint64(baseHash ^ 0b1111) // the SimHash of the last capture of "/" kept by collapse=simhash
	for i, hash := range []uint64{
		h,                                // a new URL key starts afresh
		h ^ 0b11<<8,                      // 2 bits from a0: near
		h ^ 0b11<<8 ^ 0b11<<16,           // 2 bits from a1, 4 from a0: kept
		h ^ 0b11<<8 ^ 0b11<<16 ^ 0xf<<24, // 4 bits from a2: far
		h ^ 0b11<<8 ^ 0b11<<16 ^ 0xf<<24 ^ 0b111<<32, // 3 bits from a3: near
	} {
		at := "2020030" + string(rune('1'+i)) + "000000"
		c := capture(t, "http://c.example/a", at)
		c.SimHash = hash
		cs = append(cs, c)
		names[c.URLKey+" "+at] = "a" + string(rune('0'+i))
	}
	if cs[3].URLKey != cs[0].URLKey {
		t.Fatalf("fixture: https and http keys differ: %q %q", cs[3].URLKey, cs[0].URLKey)
	}
	put(t, db, cs...)
	return index.New(db), names
}

func TestCollapse(t *testing.T) {
	idx, names := collapseFixture(t)
	got := func(query string) string {
		t.Helper()
		var out []string
		for _, s := range run(t, idx, parse(t, query)) {
			out = append(out, names[s])
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ query, want string }{
		{"url=c.example/", "0,1,2,3,4,5"},
		{"url=c.example/&collapse=timestamp", "0,1,2,3,4,5"},
		{"url=c.example/&collapse=timestamp:8", "0,2,4"}, // one a day
		{"url=c.example/&collapse=timestamp:6", "0,4"},   // one a month
		{"url=c.example/&collapse=timestamp:14", "0,1,2,3,4,5"},
		{"url=c.example/&collapse=timestamp:99", "0,1,2,3,4,5"}, // past the end: the whole field
		{"url=c.example/&collapse=t:4", "0"},                    // pywb's alias
		{"url=c.example/&collapse=mime", "0,2,3,5"},             // the revisit is warc/revisit
		{"url=c.example/&collapse=mimetype:4", "0,5"},           // "text", "text", ..., "warc"
		{"url=c.example/&collapse=status", "0,2,3,4,5"},         // the revisit's absent status is ""
		{"url=c.example/&collapse=statuscode:1", "0,2,3,4,5"},   // "2", "2", "4", "2", "3", ""
		{"url=c.example/&collapse=digest", "0,2,4"},
		{"url=c.example/&collapse=digest:6", "0,2,4"},
		{"url=c.example/&collapse=digest:5", "0"}, // "sha1:"
		{"url=c.example/&collapse=length", "0,2,3,5"},
		{"url=c.example/&collapse=length:1", "0,2,5"},
		{"url=c.example/&collapse=offset", "0,1,2,3,4,5"},
		{"url=c.example/&collapse=offset:1", "0,1,2"}, // "0", "5", "1", "1", "1", "1"
		{"url=c.example/&collapse=filename", "0,2,5"},
		{"url=c.example/&collapse=url", "0,3,4"}, // https in the middle
		{"url=c.example/&collapse=original:5", "0,3,4"},
		{"url=c.example/&collapse=urlkey", "0"},
		{"url=c.example/*&collapse=urlkey", "0,a0"},
		{"url=c.example/*&collapse=urlkey&sort=reverse", "a4,5"},
		{"url=c.example/*&collapse=k:11", "0"}, // "example,c)/" and "example,c)/a" share 11 characters
		{"url=c.example/*&collapse=k:12", "0,a0"},

		// In output order: the newest of each day with sort=reverse, the
		// closest of each day with closest.
		{"url=c.example/&collapse=timestamp:8&sort=reverse", "5,3,1"},
		{"url=c.example/&collapse=timestamp:8&closest=20200102000000", "2,1,4"},

		// Limit counts the rows kept.
		{"url=c.example/&collapse=timestamp:8&limit=2", "0,2"},
		{"url=c.example/&collapse=timestamp:8&limit=2&sort=reverse", "5,3"},
		{"url=c.example/&collapse=timestamp:8&limit=1", "0"},

		// Filters come first: collapsing sees only the rows they pass.
		{"url=c.example/&filter=!=mime:text/plain&collapse=digest", "0,3,4"},

		// Several collapse parameters are chained in order, as in the
		// Wayback CDX server: the second sees only what the first let
		// through, and each compares with the last row it let through.
		{"url=c.example/&collapse=mime&collapse=timestamp:8", "0,2,5"},
		{"url=c.example/&collapse=timestamp:8&collapse=mime", "0,2,4"},

		// Near-duplicates: 1 is 3 bits from 0, 2 has no SimHash, 3 is 4
		// bits from 0 but follows 2, 4 is 3 bits from 3 and 5 is 4's
		// revisit. Under /a: a1 near a0, a2 drifted 4 bits from a0, a3 4
		// bits from a2, a4 3 bits from a3.
		{"url=c.example/&collapse=simhash", "0,2,3"},
		{"url=c.example/a&collapse=simhash", "a0,a2,a3"},
		{"url=c.example/*&collapse=simhash", "0,2,3,a0,a2,a3"},
		{"url=c.example/*&collapse=simhash&sort=reverse", "a4,a2,a0,5,2,1"},
		{"url=c.example/*&collapse=simhash&limit=4", "0,2,3,a0"},
		{"url=c.example/&filter=!=mime:text/plain&collapse=simhash", "0,3"}, // without 2, 3 is 4 bits from 0
	} {
		if g := got(tc.query); g != tc.want {
			t.Errorf("%s: got %s, want %s", tc.query, g, tc.want)
		}
	}
	// The distances the fixture relies on.
	for _, d := range []struct {
		a, b uint64
		near bool
	}{{baseHash, baseHash ^ 0b111, true}, {baseHash, baseHash ^ 0b1111, false}} {
		if simhash.Near(d.a, d.b) != d.near || simhash.Distance(d.a, d.b) > 4 {
			t.Fatalf("simhash.Near(%x, %x) != %v", d.a, d.b, d.near)
		}
	}
}

func TestSimHashField(t *testing.T) {
	idx, _ := collapseFixture(t)
	for _, tc := range []struct{ query, want string }{
		{"url=c.example/&to=20200102000000&output=json&fl=timestamp,simhash",
			`{"timestamp":"20200101000000","simhash":"0123456789abcdef"}` + "\n" +
				`{"timestamp":"20200101060000","simhash":"0123456789abcde8"}` + "\n" +
				`{"timestamp":"20200102000000"}` + "\n"},
		{"url=c.example/&to=20200102000000&output=text&fl=simhash,status",
			"0123456789abcdef 200\n0123456789abcde8 200\n- 404\n"},
		{"url=c.example/&to=20200101&fl=simhash",
			`example,c)/ 20200101000000 {"simhash":"0123456789abcdef"}` + "\n" +
				`example,c)/ 20200101060000 {"simhash":"0123456789abcde8"}` + "\n"},
		{"url=c.example/&filter==simhash:0123456789abcdef&output=text&fl=timestamp", "20200101000000\n"},
		{"url=c.example/&filter==simhash:&output=text&fl=timestamp", "20200102000000\n"}, // none: empty, as digest
		{"url=c.example/&filter=~simhash:0123456789abcde[0-8]&output=text&fl=timestamp", "20200101060000\n20200102010000\n"},
		{"url=c.example/&filter=!simhash:0&output=text&fl=timestamp", "20200102000000\n"},
	} {
		if got := write(t, idx, parse(t, tc.query)); got != tc.want {
			t.Errorf("%s:\n got  %q\n want %q", tc.query, got, tc.want)
		}
	}
	// A leading zero is kept: always 16 digits.
	c := index.Capture{SimHash: 0xf}
	if b, ok := appendField(nil, &c, fSimHash); !ok || string(b) != "000000000000000f" {
		t.Errorf("simhash 0xf = %q %v", b, ok)
	}
	c.SimHash = 0
	if b, ok := appendField(nil, &c, fSimHash); ok || len(b) != 0 {
		t.Errorf("simhash 0 = %q %v, want absent", b, ok)
	}
}

func TestCollapseErrors(t *testing.T) {
	for _, s := range []string{
		"bogus", "bogus:3", ":8", "timestamp:", "timestamp:0", "timestamp:-1", "timestamp:x", "timestamp:1.5",
		"timestamp:65537", "timestamp:99999999999999999999", "timestamp:8:2", "simhash:3", "simhash:", "TIMESTAMP",
	} {
		_, err := ParseCollapse(s)
		if err == nil || !strings.HasPrefix(err.Error(), "cdx: collapse=") {
			t.Errorf("ParseCollapse(%q) error = %v", s, err)
		}
	}
	for _, s := range []string{"urlkey", "timestamp:65536", "simhash", "original:10", "l"} {
		c, err := ParseCollapse(s)
		if err != nil || c.String() != s {
			t.Errorf("ParseCollapse(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseQuery(url.Values{"url": {"example.com"}, "collapse": slices.Repeat([]string{"digest"}, maxCollapses+1)}); err == nil {
		t.Error("too many collapse parameters accepted")
	}
	q, err := ParseQuery(url.Values{"url": {"example.com"}, "collapse": {"", "digest", "timestamp:8"}})
	if err != nil || len(q.Collapse) != 2 || q.Collapse[1].String() != "timestamp:8" {
		t.Errorf("ParseQuery: %+v %v", q.Collapse, err)
	}

	// Over HTTP: a 400 that says what is wrong.
	idx, _ := collapseFixture(t)
	srv := httptest.NewServer(Handler(idx))
	defer srv.Close()
	for _, tc := range []struct{ query, want string }{
		{"collapse=nosuch", `unknown field "nosuch"`},
		{"collapse=timestamp:0", "must be an integer from 1 to 65536"},
		{"collapse=timestamp:ten", "must be an integer from 1 to 65536"},
		{"collapse=timestamp:1000000000000", "must be an integer from 1 to 65536"},
		{"collapse=simhash:2", "simhash takes no :N"},
		{"collapseTime=10", "use collapse=timestamp:N"},
	} {
		resp, err := http.Get(srv.URL + "/cdx?url=c.example/&" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, err = io.Copy(&b, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s: %d %q, want 400 with %q", tc.query, resp.StatusCode, b.String(), tc.want)
		}
	}
	resp, err := http.Get(srv.URL + "/cdx?url=c.example/&collapse=timestamp:8&output=text&fl=timestamp")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	io.Copy(&b, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || b.String() != "20200101000000\n20200102000000\n20200201000000\n" {
		t.Errorf("collapse over HTTP: %d %q", resp.StatusCode, b.String())
	}
}

// Collapsing streams: a collapsed query with a limit reads only up to its
// last row kept.
func TestCollapseStreams(t *testing.T) {
	idx := bigIndex(t, 2000) // the root: 1,000 captures at odd minutes from 2020
	src := &counting{idx: idx}
	var got []string
	err := parse(t, "url=big.example&collapse=timestamp:10&limit=3").Run(context.Background(), src, func(c index.Capture) (bool, error) {
		got = append(got, c.Timestamp14())
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"20200101000100", "20200101010100", "20200101020100"}) || src.read != 61 {
		t.Errorf("hourly, 3: got %q after reading %d captures, want 61 read", got, src.read)
	}
}
