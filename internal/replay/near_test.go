package replay

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

const h0 = 0x0123456789abcdef

func TestFoldNear(t *testing.T) {
	var caps []index.Capture
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, hash := range []uint64{
		h0,
		h0 ^ 1,              // 1 bit from h0: folded
		h0 ^ 0b111,          // 3 bits from h0 (the capture shown, not the last folded): folded
		h0 ^ 0b1111,         // 4 bits: shown
		0,                   // no SimHash: shown
		0,                   // and again: nothing to be near
		h0 ^ 0b1111,         // after one without: shown
		h0 ^ 0b1111 ^ 1<<63, // folded
	} {
		caps = append(caps, index.Capture{Time: start.Add(time.Duration(i) * time.Hour), SimHash: hash})
	}
	groups := foldNear(caps)
	var got []string
	for _, g := range groups {
		got = append(got, g.Time.Format("15")+"+"+string(rune('0'+g.Count)))
		if g.Count > 0 && !g.Until.Equal(g.Folded[len(g.Folded)-1].Time) {
			t.Errorf("group at %s: until %s, last folded %s", g.Time, g.Until, g.Folded[len(g.Folded)-1].Time)
		}
	}
	if want := "00+2 03+0 04+0 05+0 06+1"; strings.Join(got, " ") != want {
		t.Errorf("groups %q, want %q", strings.Join(got, " "), want)
	}
	if len(foldNear(nil)) != 0 {
		t.Error("groups of nothing")
	}
}

func TestCalendarBudget(t *testing.T) {
	// 1,200 near-identical captures in 2024: one row, 999 listed under it
	// (the page shows 1,000 captures in all), 200 left to the CDX link.
	var caps []index.Capture
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 1200 {
		caps = append(caps, index.Capture{URL: "http://example.com/", Time: start.Add(time.Duration(i) * time.Hour), SimHash: h0})
	}
	d := newCalendar("http://example.com/", caps, 2024, true)
	if len(d.Groups) != 1 || d.Folded != 1199 || len(d.Groups[0].Folded) != 999 || d.Groups[0].Unlisted() != 200 || d.List != nil {
		t.Fatalf("groups %d, folded %d, listed %d, unlisted %d", len(d.Groups), d.Folded, len(d.Groups[0].Folded), d.Groups[0].Unlisted())
	}
	if !d.Groups[0].Until.Equal(caps[1199].Time) || !d.Groups[0].Folded[0].Time.Equal(caps[1].Time) {
		t.Errorf("group until %s, first folded %s", d.Groups[0].Until, d.Groups[0].Folded[0].Time)
	}
	if d.Unlisted != 0 {
		t.Errorf("one group shown, yet %d captures counted unlisted", d.Unlisted)
	}
	full := newCalendar("http://example.com/", caps, 2024, false)
	if len(full.List) != 1000 || !full.List[0].Time.Equal(caps[1199].Time) || full.Groups != nil {
		t.Errorf("full list: %d rows, first %s", len(full.List), full.List[0].Time)
	}
	if full.Unlisted != 200 || !full.UnlistedUntil.Equal(caps[199].Time) {
		t.Errorf("full list: %d unlisted until %s; want the oldest 200, until %s", full.Unlisted, full.UnlistedUntil, caps[199].Time)
	}

	// 1,100 captures each unlike the one before (1,100 groups), and 50
	// near-identical ones before them: the 1,000 newest groups are shown,
	// the other 100 groups and the 50 folded into the oldest counted.
	var distinct []index.Capture
	for i := range 1150 {
		hash := uint64(h0)
		if i >= 50 {
			hash = uint64(i) * 0x9e3779b97f4a7c15 // far apart from one another
		}
		distinct = append(distinct, index.Capture{URL: "http://example.com/", Time: start.Add(time.Duration(i) * time.Hour), SimHash: hash})
	}
	for _, near := range []bool{true, false} {
		d := newCalendar("http://example.com/", distinct, 2024, near)
		shown := len(d.List) + len(d.Groups)
		if shown != 1000 || d.Unlisted != 150 || !d.UnlistedUntil.Equal(distinct[149].Time) {
			t.Errorf("near %v: %d rows, %d unlisted until %s; want 1,000 rows and the oldest 150 unlisted, until %s", near, shown, d.Unlisted, d.UnlistedUntil, distinct[149].Time)
		}
		// The page says so, and links to them.
		var b strings.Builder
		if err := pages.ExecuteTemplate(&b, "calendar", d); err != nil {
			t.Fatal(err)
		}
		link := "/cdx?url=http%3a%2f%2fexample.com%2f&amp;from=2024&amp;to=" + distinct[149].Timestamp14() + "&amp;output=json"
		if !strings.Contains(b.String(), "150 older captures of 2024 not listed here") || !strings.Contains(b.String(), link) {
			t.Errorf("near %v: the page does not say that 150 captures are not listed, with a link to %s", near, link)
		}
	}
}

// nearArchive has eight captures of http://example.com/ in January 2024,
// the 4th a revisit.
func nearArchive(t *testing.T) *testArchive {
	html := "Content-Type: text/html\r\n"
	f := func(day string, body string, hash uint64) fixture {
		return fixture{url: "http://example.com/", at: "202401" + day + "000000", header: html, body: body, simhash: hash}
	}
	fs := []fixture{
		f("01", "<p>one", h0),
		f("02", "<p>one.", h0^1),
		f("03", "<p>one!", h0^0b111),
		f("04", "<p>one", h0),
		f("05", "<p>two", h0^0b1111),
		f("06", "<p>no text", 0),
		f("07", "<p>two", h0^0b1111),
		f("08", "<p>two.", h0^0b1111^1<<63),
	}
	fs[3].revisit = true
	return newTestArchive(t, fs)
}

var rowRE = regexp.MustCompile(`<tr><td><a href="/web/(\d{14})/`)

func rows(body string) []string {
	var out []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1][6:8])
	}
	return out
}

func TestCaptureListCollapse(t *testing.T) {
	a := nearArchive(t)
	resp, full := get(t, a.ui.URL+"/web/*/http://example.com/")
	if resp.StatusCode != 200 {
		t.Fatalf("full list: %d", resp.StatusCode)
	}
	if got := strings.Join(rows(full), " "); got != "08 07 06 05 04 03 02 01" {
		t.Errorf("full list rows %s", got)
	}
	// The revisit, and it alone, is marked.
	if !strings.Contains(full, `href="/web/20240104000000/http://example.com/">4 Jan 2024 00:00:00 UTC</a> <span class="tag"`) || strings.Count(full, ">revisit</span>") != 1 {
		t.Errorf("revisit not labelled once:\n%s", full)
	}
	toggle := regexp.MustCompile(`<a id="collapse" href="([^"]+)"`).FindStringSubmatch(full)
	if toggle == nil || toggle[1] != "/web/2024*near_/http://example.com/" {
		t.Fatalf("toggle link %q", toggle)
	}

	resp, near := get(t, a.ui.URL+toggle[1])
	if resp.StatusCode != 200 {
		t.Fatalf("collapsed list: %d", resp.StatusCode)
	}
	if got := strings.Join(rows(near), " "); got != "07 06 05 01" {
		t.Errorf("collapsed rows %s, want 07 06 05 01", got)
	}
	for _, want := range []string{
		"+3 near-duplicate captures until 4 Jan 2024 00:00:00 UTC",
		"+1 near-duplicate capture until 8 Jan 2024 00:00:00 UTC",
		"4 shown, 4 near-duplicates folded",
		// Every folded capture stays one click away, the revisit still marked.
		`<li><a href="/web/20240102000000/http://example.com/">`,
		`<li><a href="/web/20240103000000/http://example.com/">`,
		`<li><a href="/web/20240104000000/http://example.com/">4 Jan 2024 00:00:00 UTC</a> <span class="tag"`,
		`<li><a href="/web/20240108000000/http://example.com/">`,
		`href="/web/2024*near_/http://example.com/" class="on"`, // the year links keep the view
		"Captured <b>8</b> times", // the calendar counts every capture
	} {
		if !strings.Contains(near, want) {
			t.Errorf("collapsed list lacks %q", want)
		}
	}
	if strings.Count(near, "near-duplicate capture") != 2 {
		t.Errorf("folded groups: %d", strings.Count(near, "near-duplicate capture"))
	}

	// And back.
	back := regexp.MustCompile(`<a id="collapse" href="([^"]+)"`).FindStringSubmatch(near)
	if back == nil || back[1] != "/web/2024*/http://example.com/" {
		t.Fatalf("link back %q", back)
	}
	_, again := get(t, a.ui.URL+back[1])
	if got := strings.Join(rows(again), " "); got != "08 07 06 05 04 03 02 01" {
		t.Errorf("back to the full list: rows %s", got)
	}

	// A year without captures says so, rather than "0 shown" above an
	// empty table.
	for _, u := range []string{"/web/2023*near_/http://example.com/", "/web/2023*/http://example.com/"} {
		_, none := get(t, a.ui.URL+u)
		if !strings.Contains(none, "No capture in 2023") || strings.Contains(none, "0 shown") || len(rows(none)) != 0 {
			t.Errorf("%s: no note that the year has no captures:\n%s", u, none)
		}
	}

	// The near_ modifier without a year, and on a URL list (which has no
	// near-duplicates to fold).
	_, near2 := get(t, a.ui.URL+"/web/*near_/example.com/")
	if got := strings.Join(rows(near2), " "); got != "07 06 05 01" {
		t.Errorf("/web/*near_/: rows %s", got)
	}
	resp, list := get(t, a.ui.URL+"/web/*near_/http://example.com/*")
	if resp.StatusCode != 200 || !strings.Contains(list, `href="/web/*/http://example.com/"`) {
		t.Errorf("URL list with near_: %d\n%s", resp.StatusCode, list)
	}
}

func TestParseTargetNear(t *testing.T) {
	for _, tc := range []struct {
		rest       string
		ts, within string
		near       bool
		url        string
	}{
		{"*near_/example.com/", "*", "", true, "example.com/"},
		{"2024*near_/http://example.com/?q=near_", "*", "2024", true, "http://example.com/?q=near_"},
		{"*/http://example.com/near_", "*", "", false, "http://example.com/near_"},
	} {
		got, err := parseTarget(tc.rest)
		if err != nil || got.ts != tc.ts || got.within != tc.within || got.near != tc.near || got.url != tc.url {
			t.Errorf("parseTarget(%q) = %+v, %v", tc.rest, got, err)
		}
	}
	if _, err := parseTarget("*near_"); err == nil {
		t.Error("a list without URL accepted")
	}
}
