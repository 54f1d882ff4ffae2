package cdx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// openDB opens a node database in a temporary directory as crawl.OpenDB
// does (DATA/db, the frontier's pebble options), without depending on the
// crawler.
func openDB(t testing.TB) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(filepath.Join(t.TempDir(), "db"), frontier.PebbleOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ts(t testing.TB, s string) time.Time {
	t.Helper()
	layout := "20060102150405"
	if strings.Contains(s, ".") {
		layout += ".000"
	}
	v, err := time.Parse(layout, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// capture makes a capture of u at time s (yyyyMMddhhmmss[.mmm]), its key the
// URL's SURT key.
func capture(t testing.TB, u, s string) index.Capture {
	t.Helper()
	key, err := urlkey.SURT(u)
	if err != nil {
		t.Fatal(err)
	}
	tm := ts(t, s)
	return index.Capture{
		URLKey: key, Time: tm, URL: u, Type: "response", Status: 200, MIME: "text/html",
		Digest: "sha1:" + strings.ToUpper(fmt.Sprintf("%x", tm.UnixNano()))[:8], Segment: "waggle-1.warc.gz",
		Offset: tm.Unix() % 100000, Length: 1000 + int64(len(u)), RecordID: "<urn:uuid:x>",
	}
}

func put(t testing.TB, db *pebble.DB, cs ...index.Capture) {
	t.Helper()
	b := db.NewBatch()
	for _, c := range cs {
		if err := index.Put(b, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

// fixture is a small archive over several hosts, subdomains, paths and times.
func fixture(t testing.TB) *index.Index {
	db := openDB(t)
	var cs []index.Capture
	add := func(u, s string, edit func(*index.Capture)) {
		c := capture(t, u, s)
		if edit != nil {
			edit(&c)
		}
		cs = append(cs, c)
	}
	add("http://example.com/", "20140101000000", func(c *index.Capture) { c.SimHash = 0xf0f0 })
	add("https://www.example.com/", "20140615120000.500", func(c *index.Capture) { c.SimHash = 0xf0f1 })
	add("http://example.com/", "20150301000000", func(c *index.Capture) { c.Type, c.SimHash = "revisit", 0xf0f1 })
	add("http://example.com/", "20160101000000", func(c *index.Capture) { c.SimHash = 0xfff0 })
	add("http://example.com/a", "20140201000000", func(c *index.Capture) { c.Status = 404; c.MIME = "text/plain" })
	add("http://example.com/a/b", "20140301000000", func(c *index.Capture) { c.MIME = "image/png" })
	add("http://example.com/ab", "20140401000000", nil)
	add("http://example.com/path?q=1&r=<2>", "20140501000000", nil)
	add("http://example.com/nomime", "20140502000000", func(c *index.Capture) { c.MIME, c.Status, c.Digest = "", 0, "" })
	add("http://sub.example.com/", "20140701000000", nil)
	add("http://deep.sub.example.com/x", "20140801000000", nil)
	add("http://exampleother.com/", "20140901000000", nil)
	add("http://example.com:8080/", "20141001000000", nil)
	add("http://example.org/", "20141101000000", nil)
	put(t, db, cs...)
	return index.New(db)
}

// run returns "key ts" of each capture q yields.
func run(t *testing.T, idx *index.Index, q Query) []string {
	t.Helper()
	var got []string
	err := q.Run(context.Background(), idx, func(c index.Capture) (bool, error) {
		got = append(got, c.URLKey+" "+c.Timestamp14())
		return true, nil
	})
	if err != nil {
		t.Fatalf("Run(%+v): %v", q, err)
	}
	return got
}

func parse(t *testing.T, query string) Query {
	t.Helper()
	v, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseQuery(v)
	if err != nil {
		t.Fatalf("ParseQuery(%s): %v", query, err)
	}
	return q
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		url, mt string
		wantMT  string
		want    [][2]string
	}{
		{"example.com", "", "exact", [][2]string{{"com,example)/\x00", "com,example)/\x01"}}},
		{"https://www.Example.com/A?b=2&a=1", "exact", "exact", [][2]string{{"com,example)/a?a=1&b=2\x00", "com,example)/a?a=1&b=2\x01"}}},
		{"//example.com/a", "", "exact", [][2]string{{"com,example)/a\x00", "com,example)/a\x01"}}},
		{"http://example.com/path/*", "", "prefix", [][2]string{{"com,example)/path/", "com,example)/path0"}}},
		{"example.com/path/file.html", "prefix", "prefix", [][2]string{{"com,example)/path/file.html", "com,example)/path/file.htmm"}}},
		{"example.com/path?", "prefix", "prefix", [][2]string{{"com,example)/path?", "com,example)/path@"}}},
		{"example.com/*", "", "prefix", [][2]string{{"com,example)/", "com,example)0"}}},
		{"example.com/path/*", "prefix", "prefix", [][2]string{{"com,example)/path/", "com,example)/path0"}}},
		{"example.com/path/file.html", "host", "host", [][2]string{{"com,example)/", "com,example)0"}}},
		{"*.example.com", "", "domain", [][2]string{{"com,example)/", "com,example)0"}, {"com,example,", "com,example-"}}},
		{"example.com/x", "domain", "domain", [][2]string{{"com,example)/", "com,example)0"}, {"com,example,", "com,example-"}}},
		{"com", "domain", "domain", [][2]string{{"com)/", "com)0"}, {"com,", "com-"}}},
	} {
		mt, got, err := Ranges(tc.url, tc.mt)
		if err != nil {
			t.Errorf("Ranges(%q, %q): %v", tc.url, tc.mt, err)
			continue
		}
		if mt != tc.wantMT || !slices.Equal(got, tc.want) {
			t.Errorf("Ranges(%q, %q) = %q %q, want %q %q", tc.url, tc.mt, mt, got, tc.wantMT, tc.want)
		}
	}
	for _, tc := range [][2]string{{"example.com", "bogus"}, {"*", ""}, {"*.", ""}, {"", "exact"}, {"ftp://example.com/", ""}, {"http://", ""}} {
		if _, _, err := Ranges(tc[0], tc[1]); err == nil || !strings.HasPrefix(err.Error(), "cdx: ") {
			t.Errorf("Ranges(%q, %q) error = %v, want a cdx: error", tc[0], tc[1], err)
		}
	}
}

func TestMatchTypes(t *testing.T) {
	idx := fixture(t)
	root := []string{"com,example)/ 20140101000000", "com,example)/ 20140615120000", "com,example)/ 20150301000000", "com,example)/ 20160101000000"}
	host := append(slices.Clone(root),
		"com,example)/a 20140201000000", "com,example)/a/b 20140301000000", "com,example)/ab 20140401000000",
		"com,example)/nomime 20140502000000", "com,example)/path?q=1&r=%3c2%3e 20140501000000")
	sortKeys := func(s []string) []string { sort.Strings(s); return s }
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"url=example.com", root},
		{"url=https://www.example.com/", root},
		{"url=http://EXAMPLE.com", root},
		{"url=example.com/a*", []string{"com,example)/a 20140201000000", "com,example)/a/b 20140301000000", "com,example)/ab 20140401000000"}},
		{"url=example.com/a/*", []string{"com,example)/a/b 20140301000000"}},
		{"url=example.com/a&matchType=prefix", []string{"com,example)/a 20140201000000", "com,example)/a/b 20140301000000", "com,example)/ab 20140401000000"}},
		{"url=example.com/ab&matchType=exact", []string{"com,example)/ab 20140401000000"}},
		{"url=example.com/anything&matchType=host", sortKeys(host)},
		{"url=example.com/*", sortKeys(slices.Clone(host))},
		{"url=*.example.com", sortKeys(append(slices.Clone(host), "com,example,sub)/ 20140701000000", "com,example,sub,deep)/x 20140801000000"))},
		{"url=sub.example.com&matchType=domain", []string{"com,example,sub)/ 20140701000000", "com,example,sub,deep)/x 20140801000000"}},
		{"url=example.com:8080&matchType=host", []string{"com,example:8080)/ 20141001000000"}},
		{"url=example.org/*", []string{"org,example)/ 20141101000000"}},
		{"url=example.net", nil},
		{"url=example.com/a/b/c*", nil},
	} {
		got := run(t, idx, parse(t, tc.query))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got  %q\n want %q", tc.query, got, tc.want)
		}
	}
	// The whole .com zone: every com key, the port-qualified host included.
	got := run(t, idx, parse(t, "url=com&matchType=domain"))
	if len(got) != 14-1 || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "org,") }) {
		t.Errorf("domain com = %q", got)
	}
}

func TestParseTimestamp(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi string // empty: an error
	}{
		{"2014", "20140101000000", "20141231235959"},
		{"201402", "20140201000000", "20140228235959"},
		{"201602", "20160201000000", "20160229235959"},
		{"2016022", "20160220000000", "20160229235959"},
		{"2014013", "20140130000000", "20140131235959"},
		{"20141", "20141001000000", "20141231235959"},
		{"20140", "20140101000000", "20140930235959"},
		{"201", "20100101000000", "20191231235959"},
		{"2", "20000101000000", "29991231235959"},
		{"201406151", "20140615100000", "20140615195959"},
		{"2014061512", "20140615120000", "20140615125959"},
		{"20140615120030", "20140615120030", "20140615120030"},
		{"201413", "20141201000000", "20141231235959"}, // clamped, as Wayback machines do
		{"2014023", "20140228000000", "20140228235959"},
		{"20140230", "20140228000000", "20140228235959"},
		{"20140615246", "20140615235900", "20140615235959"},
		{"201406151260", "20140615125900", "20140615125959"},
		{"2014061512006", "20140615120059", "20140615120059"},
		{"", "", ""},
		{"2014x", "", ""},
		{"-2014", "", ""},
		{"201406151200001", "", ""},
	} {
		lo, err1 := parseTimestamp("from", tc.in, false)
		hi, err2 := parseTimestamp("to", tc.in, true)
		if tc.lo == "" {
			if err1 == nil || err2 == nil {
				t.Errorf("parseTimestamp(%q) = %v, %v; want errors", tc.in, lo, hi)
			}
			continue
		}
		if err1 != nil || err2 != nil {
			t.Errorf("parseTimestamp(%q): %v %v", tc.in, err1, err2)
			continue
		}
		if got := lo.Format("20060102150405"); got != tc.lo {
			t.Errorf("parseTimestamp(%q, low) = %s, want %s", tc.in, got, tc.lo)
		}
		if got := hi.Format("20060102150405"); got != tc.hi {
			t.Errorf("parseTimestamp(%q, high) = %s, want %s", tc.in, got, tc.hi)
		}
	}
}

func TestFromTo(t *testing.T) {
	idx := fixture(t)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"url=example.com&from=2014&to=2014", []string{"20140101000000", "20140615120000"}},
		{"url=example.com&from=201406", []string{"20140615120000", "20150301000000", "20160101000000"}},
		{"url=example.com&to=2015", []string{"20140101000000", "20140615120000", "20150301000000"}},
		// Inclusive at the second: the capture at 12:00:00.5 has timestamp ...120000.
		{"url=example.com&to=20140615120000", []string{"20140101000000", "20140615120000"}},
		{"url=example.com&to=20140615115959", []string{"20140101000000"}},
		{"url=example.com&from=20140615120000&to=20140615120000", []string{"20140615120000"}},
		{"url=example.com&from=20140615120001&to=2015", []string{"20150301000000"}},
		{"url=example.com&from=2014&to=2014&sort=reverse", []string{"20140615120000", "20140101000000"}},
		{"url=example.com/*&from=201404&to=201405", []string{"20140502000000", "20140501000000", "20140401000000"}},
		{"url=example.com&from=2017", nil},
	} {
		got := run(t, idx, parse(t, tc.query))
		for i := range got {
			got[i] = got[i][strings.IndexByte(got[i], ' ')+1:]
		}
		if strings.Contains(tc.query, "/*") {
			sort.Sort(sort.Reverse(sort.StringSlice(got))) // order across keys is not the point here
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.want)
		}
	}
}

func TestLimitReverse(t *testing.T) {
	idx := fixture(t)
	all := run(t, idx, parse(t, "url=*.example.com"))
	rev := run(t, idx, parse(t, "url=*.example.com&sort=reverse"))
	want := slices.Clone(all)
	slices.Reverse(want)
	if len(all) != 11 || !slices.Equal(rev, want) {
		t.Fatalf("reverse of %q = %q", all, rev)
	}
	if got := run(t, idx, parse(t, "url=*.example.com&limit=3")); !slices.Equal(got, all[:3]) {
		t.Errorf("limit=3: %q, want %q", got, all[:3])
	}
	if got := run(t, idx, parse(t, "url=*.example.com&limit=2&reverse=true")); !slices.Equal(got, want[:2]) {
		t.Errorf("limit=2 reverse: %q, want %q", got, want[:2])
	}
	if got := run(t, idx, parse(t, "url=example.com&limit=1&sort=reverse")); !slices.Equal(got, []string{"com,example)/ 20160101000000"}) {
		t.Errorf("latest capture: %q", got)
	}
	if got := run(t, idx, parse(t, "url=example.com&limit=100")); len(got) != 4 {
		t.Errorf("limit above the count: %q", got)
	}
	if got := run(t, idx, parse(t, "url=example.com&reverse=false")); !slices.Equal(got, all[:4]) {
		t.Errorf("reverse=false: %q", got)
	}
	// fn stopping early is honoured.
	n := 0
	err := parse(t, "url=*.example.com").Run(context.Background(), idx, func(index.Capture) (bool, error) {
		n++
		return n < 2, nil
	})
	if err != nil || n != 2 {
		t.Errorf("fn returning false: n=%d err=%v", n, err)
	}
	boom := errors.New("boom")
	err = parse(t, "url=*.example.com").Run(context.Background(), idx, func(index.Capture) (bool, error) { return true, boom })
	if !errors.Is(err, boom) {
		t.Errorf("fn error = %v", err)
	}
}

// closestRef is pywb's cdx_sort_closest: a stable sort of the captures (in
// time order) by distance in seconds between 14-digit timestamps.
func closestRef(cs []index.Capture, at time.Time, limit int) []string {
	cs = slices.Clone(cs)
	d := func(c index.Capture) int64 {
		v := c.Time.Truncate(time.Second).Unix() - at.Unix()
		if v < 0 {
			v = -v
		}
		return v
	}
	sort.SliceStable(cs, func(i, j int) bool { return d(cs[i]) < d(cs[j]) })
	if limit > 0 && len(cs) > limit {
		cs = cs[:limit]
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Time.Format(time.RFC3339Nano))
	}
	return out
}

func TestClosest(t *testing.T) {
	idx := fixture(t)
	got := run(t, idx, parse(t, "url=example.com&closest=20150101"))
	// 2014-01-01 and 2016-01-01 are both 365 days away: the older first.
	want := []string{"com,example)/ 20150301000000", "com,example)/ 20140615120000", "com,example)/ 20140101000000", "com,example)/ 20160101000000"}
	if !slices.Equal(got, want) {
		t.Errorf("closest=20150101: %q, want %q", got, want)
	}
	if got := run(t, idx, parse(t, "url=example.com&sort=closest&closest=2016&limit=2")); !slices.Equal(got, []string{"com,example)/ 20160101000000", "com,example)/ 20150301000000"}) {
		t.Errorf("closest=2016 limit=2: %q", got)
	}
	// closest overrides reverse, as in pywb.
	if got := run(t, idx, parse(t, "url=example.com&closest=2014&sort=reverse&limit=1")); !slices.Equal(got, []string{"com,example)/ 20140101000000"}) {
		t.Errorf("closest with reverse: %q", got)
	}

	// Against pywb's algorithm, on a URL with captures crowding single
	// seconds, around many points, with limits, bounds and a filter.
	db := openDB(t)
	var cs []index.Capture
	for _, s := range []string{
		"20200101000000.100", "20200101000000.200", "20200101000000.300", "20200101000002.000",
		"20191231235958.000", "20191231235958.500", "20191231235959.900", "20200101000001.000",
		"20200101000004.000", "20191231235955.000", "20200101000010.000", "20191231235950.000",
	} {
		c := capture(t, "http://same.example/", s)
		if strings.HasSuffix(s, "500") {
			c.Status = 404
		}
		cs = append(cs, c)
	}
	put(t, db, cs...)
	sidx := index.New(db)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Time.Before(cs[j].Time) })
	base := ts(t, "20191231235945")
	for off := 0; off <= 30; off++ {
		at := base.Add(time.Duration(off) * time.Second)
		for _, limit := range []int{0, 1, 3} {
			for _, extra := range []string{"", "&filter=!=status:404", "&from=20191231235958&to=20200101000002"} {
				query := "url=same.example&closest=" + at.Format("20060102150405") + extra
				if limit > 0 {
					query += fmt.Sprintf("&limit=%d", limit)
				}
				q := parse(t, query)
				var got []string
				err := q.Run(context.Background(), sidx, func(c index.Capture) (bool, error) {
					got = append(got, c.Time.Format(time.RFC3339Nano))
					return true, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				ref := slices.DeleteFunc(slices.Clone(cs), func(c index.Capture) bool {
					if extra == "&filter=!=status:404" {
						return c.Status == 404
					}
					if extra != "" {
						return c.Time.Before(ts(t, "20191231235958")) || c.Time.Truncate(time.Second).After(ts(t, "20200101000002"))
					}
					return false
				})
				if want := closestRef(ref, at, limit); !slices.Equal(got, want) {
					t.Fatalf("closest=%s limit=%d%s:\n got  %q\n want %q", at.Format("20060102150405"), limit, extra, got, want)
				}
			}
		}
	}

	// Run itself refuses closest order for a range of keys.
	q := Query{URL: "example.com/*", Closest: ts(t, "20140101000000")}
	if err := q.Run(context.Background(), idx, func(index.Capture) (bool, error) { return true, nil }); err == nil {
		t.Error("closest with a prefix match accepted")
	}
}

func TestFilters(t *testing.T) {
	idx := fixture(t)
	keys := func(query string) []string {
		var out []string
		for _, s := range run(t, idx, parse(t, "url=example.com/*&"+query)) {
			out = append(out, strings.TrimPrefix(s[:strings.IndexByte(s, ' ')], "com,example)"))
		}
		return out
	}
	for _, tc := range []struct {
		filters string
		want    []string
	}{
		{"filter=mime:html", []string{"/", "/", "/", "/ab", "/path?q=1&r=%3c2%3e"}},
		{"filter==mime:text/html", []string{"/", "/", "/", "/ab", "/path?q=1&r=%3c2%3e"}},
		{"filter==mime:text/htm", nil},
		{"filter=mime:warc/revisit", []string{"/"}},
		{"filter=!mime:html", []string{"/", "/a", "/a/b", "/nomime"}},
		{"filter=~url:http://example.com/a", []string{"/a", "/a/b", "/ab"}},
		{"filter=~url:example", nil}, // anchored at the start, as re.match
		{"filter=~url:.*example.com/a$", []string{"/a"}},
		{"filter=!~url:.*b$", []string{"/", "/", "/", "/", "/a", "/nomime", "/path?q=1&r=%3c2%3e"}},
		{"filter=!=status:200", []string{"/a", "/nomime"}},
		{"filter=statuscode:404", []string{"/a"}},
		{"filter==status:", []string{"/nomime"}}, // an absent field is empty
		{"filter=~mime:image/", []string{"/a/b"}},
		{"filter=mime:html&filter=~timestamp:2014", []string{"/", "/", "/ab", "/path?q=1&r=%3c2%3e"}},
		{"filter=~timestamp:2014&filter=!=urlkey:com,example)/", []string{"/a", "/a/b", "/ab", "/nomime", "/path?q=1&r=%3c2%3e"}},
		{"filter=nomime", []string{"/nomime"}}, // no field: the whole line
		{"filter=!~.*\"status\"", []string{"/nomime"}},
		{"filter=~filename:waggle-1\\.warc\\.gz$&filter=~digest:sha1:&filter=!=length:0", []string{"/", "/", "/", "/", "/a", "/a/b", "/ab", "/path?q=1&r=%3c2%3e"}},
	} {
		got := keys(tc.filters)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.filters, got, tc.want)
		}
	}
	for _, s := range []string{"~url:(", "~url:a)(b", "foo:bar", "http://example.com/", "!~(?<=a)b", "s:200"} {
		if _, err := ParseFilter(s); err == nil || !strings.HasPrefix(err.Error(), "cdx: ") {
			t.Errorf("ParseFilter(%q) error = %v", s, err)
		}
	}
	f, err := ParseFilter("!=status:200")
	if err != nil || f.String() != "!=status:200" {
		t.Fatalf("ParseFilter: %v %v", f, err)
	}
	c := capture(t, "http://example.com/", "20140101000000")
	if f.Match(c) {
		t.Error("!=status:200 matched a 200")
	}
	c.Status = 301
	if !f.Match(c) {
		t.Error("!=status:200 did not match a 301")
	}
	if !(Filter{}).Match(c) {
		t.Error("zero Filter did not match")
	}
}

func write(t *testing.T, idx *index.Index, q Query) string {
	t.Helper()
	var b bytes.Buffer
	if err := q.Write(context.Background(), idx, &b); err != nil {
		t.Fatalf("Write(%+v): %v", q, err)
	}
	return b.String()
}

func TestOutputs(t *testing.T) {
	idx := fixture(t)
	for _, tc := range []struct{ query, want string }{
		{"url=example.com/a",
			`com,example)/a 20140201000000 {"url":"http://example.com/a","mime":"text/plain","status":"404","digest":"sha1:134E94AB","length":"1020","offset":"12800","filename":"waggle-1.warc.gz"}` + "\n"},
		{"url=example.com/a&output=cdxj&fl=mime,urlkey,status",
			`com,example)/a 20140201000000 {"mime":"text/plain","status":"404"}` + "\n"},
		{"url=example.com/a&output=json",
			`{"urlkey":"com,example)/a","timestamp":"20140201000000","url":"http://example.com/a","mime":"text/plain","status":"404","digest":"sha1:134E94AB","length":"1020","offset":"12800","filename":"waggle-1.warc.gz"}` + "\n"},
		{"url=example.com/a&output=json&fl=timestamp,original,statuscode",
			`{"timestamp":"20140201000000","url":"http://example.com/a","status":"404"}` + "\n"},
		{"url=example.com/a&output=text",
			"com,example)/a 20140201000000 http://example.com/a text/plain 404 sha1:134E94AB 1020 12800 waggle-1.warc.gz\n"},
		{"url=example.com/nomime&output=text",
			"com,example)/nomime 20140502000000 http://example.com/nomime - - - 1025 88800 waggle-1.warc.gz\n"},
		{"url=example.com/nomime&output=json",
			`{"urlkey":"com,example)/nomime","timestamp":"20140502000000","url":"http://example.com/nomime","length":"1025","offset":"88800","filename":"waggle-1.warc.gz"}` + "\n"},
		{"url=example.com&from=2015&output=text&fl=timestamp,mime,status",
			"20150301000000 warc/revisit 200\n20160101000000 text/html 200\n"},
		{"url=example.com&to=2014&output=link",
			`<http://example.com/>; rel="memento"; datetime="Wed, 01 Jan 2014 00:00:00 GMT",` + "\n" +
				`<https://www.example.com/>; rel="memento"; datetime="Sun, 15 Jun 2014 12:00:00 GMT"` + "\n"},
		{"url=example.com/path?q=1%26r=%3c2%3e&output=json&fl=url",
			`{"url":"http://example.com/path?q=1\u0026r=\u003c2\u003e"}` + "\n"},
		{"url=example.net&output=link", ""},
		{"url=example.net&output=json", ""},
	} {
		if got := write(t, idx, parse(t, tc.query)); got != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.query, got, tc.want)
		}
	}

	q := parse(t, "url=example.com&from=2016&output=link")
	q.LinkPrefix = "/web/"
	if got, want := write(t, idx, q), `</web/20160101000000/http://example.com/>; rel="memento"; datetime="Fri, 01 Jan 2016 00:00:00 GMT"`+"\n"; got != want {
		t.Errorf("link with prefix:\n got  %s\n want %s", got, want)
	}

	// Every path to a JSON line agrees with index.AppendCDXJ, the node's
	// export: cdxj as it, json with urlkey and timestamp folded in, and the
	// field-by-field encoding of fl.
	for _, query := range []string{"url=*.example.com", "url=example.com/*&filter=nomime", "url=example.com/path*"} {
		var export bytes.Buffer
		err := parse(t, query).Run(context.Background(), idx, func(c index.Capture) (bool, error) {
			export.Write(index.AppendCDXJ(nil, c))
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		cdxj := write(t, idx, parse(t, query))
		cdxjFL := write(t, idx, parse(t, query+"&fl=urlkey,timestamp,url,mime,status,digest,length,offset,filename,simhash"))
		jsonAll := write(t, idx, parse(t, query+"&output=json"))
		jsonFL := write(t, idx, parse(t, query+"&output=json&fl=urlkey,timestamp,url,mime,status,digest,length,offset,filename,simhash"))
		if cdxj != export.String() || cdxjFL != cdxj || jsonAll != jsonFL {
			t.Errorf("%s: outputs disagree:\nexport %s\ncdxj   %s\ncdxjfl %s\njson   %s\njsonfl %s", query, export.String(), cdxj, cdxjFL, jsonAll, jsonFL)
		}
		// The json line is the cdxj line's object with urlkey and timestamp.
		jl := strings.Split(strings.TrimSuffix(jsonAll, "\n"), "\n")
		for i, line := range strings.Split(strings.TrimSuffix(cdxj, "\n"), "\n") {
			parts := strings.SplitN(line, " ", 3)
			var a, b map[string]any
			if err := json.Unmarshal([]byte(parts[2]), &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(jl[i]), &b); err != nil {
				t.Fatalf("json line %q: %v", jl[i], err)
			}
			a["urlkey"], a["timestamp"] = parts[0], parts[1]
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("json %v, want %v", b, a)
			}
		}
	}

	// Text values never carry the separator.
	var c index.Capture
	c.URLKey, c.URL, c.MIME, c.Segment, c.Time = "k", "http://x/", "text/ html\n", "f", time.Unix(0, 0)
	enc, _ := Query{Output: "text", Fields: []string{"mime", "url"}}.newEncoder()
	if got := string(enc.append(nil, &c)); got != "text/%20html%0A http://x/\n" {
		t.Errorf("text escaping: %q", got)
	}
	c.URL = "http://x/>y"
	enc, _ = Query{Output: "link"}.newEncoder()
	if got := string(enc.append(nil, &c)); !strings.HasPrefix(got, "<http://x/%3Ey>;") {
		t.Errorf("link escaping: %q", got)
	}
	if _, err := (Query{URL: "example.com", Output: "xml"}).newEncoder(); err == nil {
		t.Error("output=xml accepted")
	}
	if _, err := (Query{URL: "example.com", Fields: []string{"bogus"}}).newEncoder(); err == nil {
		t.Error("unknown field accepted")
	}
}

func TestParseQueryErrors(t *testing.T) {
	for _, query := range []string{
		"", "matchType=exact", "url=", "url=example.com&matchType=regex",
		"url=example.com&to=abc", "url=example.com&from=2015&to=2014",
		"url=example.com&limit=-1", "url=example.com&limit=0", "url=example.com&limit=ten", "url=example.com&limit=99999999999999999999",
		"url=example.com&sort=newest", "url=example.com&sort=closest", "url=example.com&closest=2014x",
		"url=example.com/*&closest=2014", "url=*.example.com&sort=closest&closest=2014",
		"url=example.com&filter=~url:[", "url=example.com&filter=nosuch:x",
		"url=example.com&fl=url,bogus", "url=example.com&fl=url,url", "url=example.com&output=xml",
		"url=example.com&page=2", "url=example.com&showNumPages=true", "url=example.com&collapseTime=10",
		"url=example.com&resolveRevisits=1", "url=ftp://example.com/", "url=http://", "url=*",
		// The Internet Archive's paging, and a parameter in the wrong case.
		"url=example.com&showResumeKey=true", "url=example.com&resumeKey=abc", "url=example.com&offset=100",
		"url=example.com&fastLatest=true", "url=example.com&gzip=true", "url=example.com/*&matchtype=prefix",
	} {
		v, _ := url.ParseQuery(query)
		if _, err := ParseQuery(v); err == nil || !strings.HasPrefix(err.Error(), "cdx: ") {
			t.Errorf("ParseQuery(%s) error = %v, want a cdx: error", query, err)
		}
	}
	// What pywb accepts that may look odd.
	for _, query := range []string{"url=example.com&page=0", "url=example.com&showNumPages=false", "url=example.com&fl=", "url=example.com&fl=url,,mime", "url=example.com&pageSize=5", "url=example.com&unknown=1", "url=example.com&gzip=false", "url=example.com&showResumeKey=false"} {
		v, _ := url.ParseQuery(query)
		if _, err := ParseQuery(v); err != nil {
			t.Errorf("ParseQuery(%s): %v", query, err)
		}
	}
	q := parse(t, "url=example.com/*&from=2014&to=201406&limit=7&filter=mime:html&filter=!=status:200&fl=url,status&output=json")
	if q.MatchType != "prefix" || q.URL != "example.com/*" || q.Limit != 7 || len(q.Filters) != 2 ||
		!slices.Equal(q.Fields, []string{"url", "status"}) || q.Output != "json" ||
		q.From.Format("20060102150405") != "20140101000000" || q.To.Format("20060102150405") != "20140630235959" {
		t.Errorf("ParseQuery = %+v", q)
	}
	if err := (Query{URL: "example.com", Limit: -1}).Run(context.Background(), fixture(t), nil); err == nil {
		t.Error("Run with a negative limit accepted")
	}
}

func TestHandler(t *testing.T) {
	idx := fixture(t)
	srv := httptest.NewServer(Handler(idx))
	defer srv.Close()
	get := func(query string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/cdx?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}
	for _, tc := range []struct{ output, ctype string }{
		{"", "text/x-cdxj"}, {"cdxj", "text/x-cdxj"}, {"json", "text/x-ndjson"},
		{"link", "application/link-format"}, {"text", "text/plain"},
	} {
		query := "url=example.com/*&output=" + tc.output
		resp, body := get(query)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: %s %q", query, resp.Status, resp.Header.Get("Content-Type"))
		}
		q := parse(t, query)
		q.LinkPrefix = DefaultLinkPrefix
		if want := write(t, idx, q); body != want || want == "" {
			t.Errorf("%s: body\n%s\nwant\n%s", query, body, want)
		}
	}
	if _, body := get("url=example.com&output=link&limit=1"); !strings.HasPrefix(body, "</web/20140101000000/http://example.com/>; rel=\"memento\"") {
		t.Errorf("link output of Handler: %q", body)
	}
	for _, query := range []string{"", "url=example.com&matchType=bogus", "url=example.com&from=2014-01", "url=example.com&filter=~url:(",
		"url=example.com&fl=nope", "url=example.com&limit=-5", "url=example.com&output=xml", "url=example.com/*&closest=2014", "url=%zz"} {
		resp, body := get(query)
		if resp.StatusCode != 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || !strings.HasPrefix(body, "cdx: ") {
			t.Errorf("%s: %s %q %q; want 400 with an explanation", query, resp.Status, resp.Header.Get("Content-Type"), body)
		}
	}
	resp, err := http.Post(srv.URL+"/cdx?url=example.com", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %s", resp.Status)
	}
	resp, err = http.Head(srv.URL + "/cdx?url=example.com&output=json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/x-ndjson" {
		t.Errorf("HEAD: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}

	// The first line is flushed to the client at once.
	rec := httptest.NewRecorder()
	Handler(idx).ServeHTTP(rec, httptest.NewRequest("GET", "/cdx?url=example.com", nil))
	if !rec.Flushed || strings.Count(rec.Body.String(), "\n") != 4 {
		t.Errorf("recorder: flushed=%v body=%q", rec.Flushed, rec.Body.String())
	}
}

// A corrupt index entry met after output began cuts the response short
// instead of ending it as if complete; met before, it is a 500.
func TestHandlerIndexError(t *testing.T) {
	db := openDB(t)
	put(t, db, capture(t, "http://example.com/a", "20140101000000"), capture(t, "http://example.com/c", "20140101000000"))
	if err := db.Set([]byte("c/com,example)/b\x00\x00\x00\x00\x00\x00\x00\x00\x01"), []byte{9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	idx := index.New(db)
	var b bytes.Buffer
	err := parse(t, "url=example.com/*").Write(context.Background(), idx, &b)
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.HasPrefix(b.String(), "com,example)/a ") {
		t.Fatalf("Write over a corrupt entry: %v, wrote %q", err, b.String())
	}
	srv := httptest.NewServer(Handler(idx))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/cdx?url=example.com/*")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("response read cleanly despite the index error: %q", body)
	}
	resp, err = http.Get(srv.URL + "/cdx?url=example.com/b*")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(body), "corrupt") {
		t.Errorf("error before output: %s %q", resp.Status, body)
	}
}

// Both the local index and an archive spanning nodes can be queried.
var (
	_ Source = (*index.Index)(nil)
	_ Source = archive.Archive(nil)
	_ Source = (*archive.Local)(nil)
)

// A query reads an archive as it reads an index, and a missing source is an
// error, not a panic, whether nil or a nil pointer.
func TestSources(t *testing.T) {
	idx := fixture(t)
	want := write(t, idx, parse(t, "url=*.example.com&output=json"))
	var b bytes.Buffer
	if err := parse(t, "url=*.example.com&output=json").Write(context.Background(), archive.NewLocal(idx, t.TempDir()), &b); err != nil {
		t.Fatal(err)
	}
	if b.String() != want || want == "" {
		t.Errorf("through archive.Local:\n got  %q\n want %q", b.String(), want)
	}

	q := parse(t, "url=example.com")
	for _, src := range []Source{nil, (*index.Index)(nil), (*archive.Local)(nil)} {
		err := q.Run(context.Background(), src, func(index.Capture) (bool, error) { return true, nil })
		if err == nil || !strings.Contains(err.Error(), "no index") {
			t.Errorf("Run(%T): %v", src, err)
		}
		if err := q.Write(context.Background(), src, io.Discard); err == nil {
			t.Errorf("Write(%T) accepted", src)
		}
		rec := httptest.NewRecorder()
		Handler(src).ServeHTTP(rec, httptest.NewRequest("GET", "/cdx?url=example.com", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "no index") {
			t.Errorf("Handler(%T): %d %q", src, rec.Code, rec.Body.String())
		}
	}
}

// counting counts the captures read from the index.
type counting struct {
	idx  *index.Index
	read int
}

func (c *counting) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return c.idx.Range(ctx, lo, hi, reverse, func(x index.Capture) (bool, error) { c.read++; return fn(x) })
}

func (c *counting) CapturesBetween(ctx context.Context, key string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	return c.idx.CapturesBetween(ctx, key, from, to, reverse, func(x index.Capture) (bool, error) { c.read++; return fn(x) })
}

// bigIndex has n captures: n/2 URLs under big.example with one capture each,
// and n/2 captures of http://big.example/ a minute apart from 2020.
func bigIndex(t testing.TB, n int) *index.Index {
	db := openDB(t)
	start := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	b := db.NewBatch()
	for i := 0; i < n; i++ {
		var c index.Capture
		if i%2 == 0 {
			u := fmt.Sprintf("http://big.example/p/%07d", i)
			c = index.Capture{URLKey: fmt.Sprintf("example,big)/p/%07d", i), URL: u, Time: start.Add(time.Duration(i) * time.Second)}
		} else {
			c = index.Capture{URLKey: "example,big)/", URL: "http://big.example/", Time: start.Add(time.Duration(i) * time.Minute)}
		}
		c.Type, c.Status, c.MIME, c.Digest, c.Segment, c.Offset, c.Length = "response", 200, "text/html", "sha1:X", "seg.warc.gz", int64(i)*1000, 1000
		if err := index.Put(b, c); err != nil {
			t.Fatal(err)
		}
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			b = db.NewBatch()
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return index.New(db)
}

// A query matching tens of thousands of captures reads only what it returns.
func TestLimitReadsFew(t *testing.T) {
	idx := bigIndex(t, 50000)
	for _, tc := range []struct {
		query    string
		returned int
		maxRead  int
	}{
		{"url=big.example/*&limit=5", 5, 5},
		{"url=big.example/p/*&limit=5&sort=reverse", 5, 5},
		{"url=*.big.example&limit=5&filter==status:200", 5, 5},
		{"url=big.example/*&limit=5&filter=~url:http://big.example/p/", 5, 25005}, // the root's 25,000 come first
		{"url=big.example&limit=5", 5, 5},
		{"url=big.example&limit=5&sort=reverse", 5, 5},
		{"url=big.example&from=202001010300&to=202001010309", 5, 5},
		{"url=big.example&closest=20200110&limit=5", 5, 5 + 3},
		{"url=big.example&closest=20200110&from=20200109&to=20200111&limit=5", 5, 5 + 3},
	} {
		src := &counting{idx: idx}
		got := 0
		err := parse(t, tc.query).Run(context.Background(), src, func(index.Capture) (bool, error) { got++; return true, nil })
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.returned || src.read > tc.maxRead {
			t.Errorf("%s: returned %d, read %d; want %d, at most %d read", tc.query, got, src.read, tc.returned, tc.maxRead)
		}
	}
	// And the full exact match streams all of its 25,000.
	src := &counting{idx: idx}
	n := 0
	if err := parse(t, "url=big.example&closest=20200201").Run(context.Background(), src, func(index.Capture) (bool, error) { n++; return true, nil }); err != nil {
		t.Fatal(err)
	}
	if n != 25000 || src.read != 25000 {
		t.Errorf("closest over all: returned %d, read %d", n, src.read)
	}

	// Cancellation stops a long scan.
	ctx, cancel := context.WithCancel(context.Background())
	n = 0
	err := parse(t, "url=big.example/*").Run(ctx, idx, func(index.Capture) (bool, error) {
		if n++; n == 10 {
			cancel()
		}
		return true, nil
	})
	if !errors.Is(err, context.Canceled) || n >= 50000 {
		t.Errorf("cancelled scan: n=%d err=%v", n, err)
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"url=example.com", "url=*.example.com&output=json&fl=url,status", "url=example.com/*&filter=!~url:.*\\.php$&limit=3",
		"url=example.com&closest=2014&sort=closest", "url=example.com&from=2014&to=201406&sort=reverse&output=link",
		"url=example.com&filter==mime:text/html&filter=!=status:200&output=text", "url=com&matchType=domain",
		"url=http://example.com/path?&matchType=prefix", "url=%zz", "url=example.com&from=99999999999999",
		"url=example.com&closest=00010101000000", "url=[::1]/*", "url=1.2.3.4&matchType=domain",
		"url=*.example.com&collapse=urlkey", "url=example.com&collapse=timestamp:4&sort=reverse&limit=2",
		"url=example.com/*&collapse=simhash&collapse=digest:6&fl=simhash,url", "url=example.com&collapse=mime:0",
		"url=example.com&collapse=simhash:3", "url=example.com&filter=~simhash:^0&closest=2015&collapse=status",
	} {
		f.Add(s)
	}
	idx := fixture(f)
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseQuery(v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cdx: ") {
				t.Fatalf("error without the package name: %v", err)
			}
			return
		}
		mt, ranges, err := Ranges(q.URL, q.MatchType)
		if err != nil || mt != q.MatchType {
			t.Fatalf("Ranges of a parsed query: %q %v", mt, err)
		}
		for _, r := range ranges {
			if r[1] != "" && r[0] >= r[1] {
				t.Fatalf("empty range %q", r)
			}
		}
		q.Limit = min(max(q.Limit, 1), 20)
		var b bytes.Buffer
		if err := q.Write(context.Background(), idx, &b); err != nil {
			t.Fatalf("Write of a parsed query: %v", err)
		}
		// Collapsing only ever drops rows: what it keeps is a subsequence
		// of the uncollapsed, unlimited result.
		if len(q.Collapse) > 0 {
			collapsed := run(t, idx, q)
			all := q
			all.Collapse, all.Limit = nil, 0
			rest := run(t, idx, all)
			for _, r := range collapsed {
				i := slices.Index(rest, r)
				if i < 0 {
					t.Fatalf("collapsed %q is not a subsequence of %q", collapsed, run(t, idx, all))
				}
				rest = rest[i+1:]
			}
			if len(collapsed) == 0 && len(rest) > 0 {
				t.Fatalf("collapse dropped every row of %q", rest)
			}
		}
	})
}

func BenchmarkQuery(b *testing.B) {
	idx := bigIndex(b, 100000)
	for _, bc := range []struct{ name, query string }{
		{"exact/one", "url=big.example/p/0050000"},
		{"exact/50000-captures-limit100", "url=big.example&limit=100"},
		{"exact/closest-limit100", "url=big.example&closest=20200115&limit=100"},
		{"host/limit100", "url=big.example&matchType=host&limit=100"},
		{"host/limit100-json", "url=big.example/*&limit=100&output=json"},
	} {
		v, _ := url.ParseQuery(bc.query)
		q, err := ParseQuery(v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Write(context.Background(), idx, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
