package recrawl

import (
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/schedule"
)

func TestParseRule(t *testing.T) {
	for _, c := range []struct {
		in     string
		prefix string
		want   schedule.Policy
	}{
		{"24h", "", schedule.Policy{Default: 24 * time.Hour, Min: time.Hour, Max: 720 * time.Hour}},
		{" 24h ", "", schedule.Policy{Default: 24 * time.Hour, Min: time.Hour, Max: 720 * time.Hour}},
		{"1h,10m,48h", "", schedule.Policy{Default: time.Hour, Min: 10 * time.Minute, Max: 48 * time.Hour}},
		{"1h, 10m, 48h", "", schedule.Policy{Default: time.Hour, Min: 10 * time.Minute, Max: 48 * time.Hour}},
		// A 24th of the interval, kept to whole seconds, at least a second.
		{"1h", "", schedule.Policy{Default: time.Hour, Min: 150 * time.Second, Max: 30 * time.Hour}},
		{"100s", "", schedule.Policy{Default: 100 * time.Second, Min: 4 * time.Second, Max: 3000 * time.Second}},
		{"10s", "", schedule.Policy{Default: 10 * time.Second, Min: time.Second, Max: 300 * time.Second}},
		{"1s,1s,1s", "", schedule.Policy{Default: time.Second, Min: time.Second, Max: time.Second}},
		{"http://news.example.com/=1h", "http://news.example.com/", schedule.Policy{Default: time.Hour, Min: 150 * time.Second, Max: 30 * time.Hour}},
		{"http://news.example.com/=1h,1m,24h", "http://news.example.com/", schedule.Policy{Default: time.Hour, Min: time.Minute, Max: 24 * time.Hour}},
		// Without a scheme: prefixes match whatever the scheme.
		{"www.news.example.com/=1h,1m,24h", "http://www.news.example.com/", schedule.Policy{Default: time.Hour, Min: time.Minute, Max: 24 * time.Hour}},
		{"www.x.test/go?to=http://y.test/=2h", "http://www.x.test/go?to=http://y.test/", schedule.Policy{Default: 2 * time.Hour, Min: 5 * time.Minute, Max: 60 * time.Hour}},
		// The last "=" separates: a prefix may hold a query.
		{"http://x.test/?p=1=2h", "http://x.test/?p=1", schedule.Policy{Default: 2 * time.Hour, Min: 5 * time.Minute, Max: 60 * time.Hour}},
	} {
		r, err := ParseRule(c.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		if r.Prefix != c.prefix || r.Policy != c.want {
			t.Errorf("ParseRule(%q) = %q %+v; want %q %+v", c.in, r.Prefix, r.Policy, c.prefix, c.want)
		}
		if err := r.Policy.Validate(); err != nil {
			t.Errorf("ParseRule(%q): invalid policy: %v", c.in, err)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "invalid duration"},
		{"x", "invalid duration"},
		{"=1h", "prefix"},
		{"not a url=1h", "prefix"},
		{"ftp://x.test/=1h", "prefix"},
		{"1h,2h", "INTERVAL,MIN,MAX"},
		{"1h,1m,2h,3h", "INTERVAL,MIN,MAX"},
		{"1h,,2h", "invalid duration"},
		{"http://news.example.com/=1h,1m,1d", "unknown unit"},
		{"1d", "unknown unit"},
		{"1h,2h,3h", "shorter than the minimum"},
		{"1h,1m,30m", "maximum interval"},
		{"-1h", "shorter than"},
		{"1h,-1m,2h", "shorter than a second"},
		{"0", "shorter than"},
		{"1500ms", "whole seconds"},
		{"1h,1500ms,2h", "whole seconds"},
		{"1h,1m,1000000h", "100 years"},
		{"100000h", "INTERVAL alone sets MAX to 30 times it, more than 100 years"},
		// 30 times this overflows a time.Duration.
		{"2000000h", "100 years"},
		{"1h,1m", "INTERVAL,MIN,MAX"},
		{"http://x.test/=", "invalid duration"},
	} {
		_, err := ParseRule(c.in)
		if err == nil {
			t.Errorf("ParseRule(%q): no error", c.in)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "recrawl: ") || !strings.Contains(msg, c.want) || !strings.Contains(msg, c.in) {
			t.Errorf("ParseRule(%q) error %q; want it to name the rule and say %q", c.in, msg, c.want)
		}
	}
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRulesFor(t *testing.T) {
	def := schedule.Policy{Default: 12 * time.Hour, Min: time.Hour, Max: 48 * time.Hour}
	site := mustRule(t, "http://news.example.com/=1h")
	dir := mustRule(t, "http://news.example.com/live/=1m,1s,1h")
	page := mustRule(t, "http://news.example.com/live/ticker.html=10s,1s,1m")
	other := mustRule(t, "https://example.com/=7h")
	// Given shortest last, so that the order of the rules cannot decide.
	rs := NewRules(def, page, other, site, dir)
	for _, c := range []struct {
		url  string
		want schedule.Policy
	}{
		{"http://news.example.com/", site.Policy},
		{"http://news.example.com/world/1.html", site.Policy},
		{"http://news.example.com/live/", dir.Policy},
		{"http://news.example.com/live", dir.Policy}, // the same SURT key as "/live/"
		{"http://news.example.com/live/1", dir.Policy},
		{"http://news.example.com/liveblog", site.Policy},
		{"http://news.example.com/live/ticker.html", page.Policy},
		{"http://news.example.com/live/ticker.html?x=1", page.Policy},
		// The SURT key ignores the scheme, www., a default port and case.
		{"https://news.example.com/live/1", dir.Policy},
		{"http://www.news.example.com/live/1", dir.Policy},
		{"http://NEWS.example.com:80/LIVE/1", dir.Policy},
		{"http://example.com/a", other.Policy},
		{"http://www.example.com/a", other.Policy},
		// A subdomain or a different port is not under the prefix.
		{"http://sport.news.example.com/", def},
		{"http://news.example.com:8080/", def},
		{"http://example.org/", def},
		{"not a url", def},
	} {
		if got := rs.For(c.url); got != c.want {
			t.Errorf("For(%q) = %+v, want %+v", c.url, got, c.want)
		}
	}
}

func TestRulesDefault(t *testing.T) {
	if got := (Rules{}).For("http://x.test/"); got != schedule.DefaultPolicy() {
		t.Errorf("zero Rules: %+v", got)
	}
	if got := NewRules(schedule.Policy{}).For("http://x.test/"); got != schedule.DefaultPolicy() {
		t.Errorf("zero default: %+v", got)
	}
	def := schedule.Policy{Default: 12 * time.Hour, Min: time.Hour, Max: 48 * time.Hour}
	if got := NewRules(def).For("http://x.test/"); got != def {
		t.Errorf("NewRules(def): %+v", got)
	}
	all := mustRule(t, "2h")
	site := mustRule(t, "http://x.test/=5h")
	rs := NewRules(def, all, site)
	if got := rs.For("http://y.test/"); got != all.Policy {
		t.Errorf("rule without prefix does not replace the default: %+v", got)
	}
	if got := rs.For("http://x.test/a"); got != site.Policy {
		t.Errorf("prefix rule: %+v", got)
	}
	// Prefix rules over a zero default still fall back to DefaultPolicy.
	if got := NewRules(schedule.Policy{}, site).For("http://y.test/"); got != schedule.DefaultPolicy() {
		t.Errorf("prefix rules over zero default: %+v", got)
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"24h", "1h,10m,48h", "http://news.example.com/=1h", "http://news.example.com/=1h,1m,1d",
		"", "x", "1h,2h", "-1h", "http://x.test/?p=1=2h", "=1h", "2000000h", "1h,1m,1000000h",
		"https://www.x.test:8443/a/b/=90s", "http://[::1]/=1h",
	} {
		f.Add(s, "http://news.example.com/live/1")
	}
	f.Fuzz(func(t *testing.T, s, url string) {
		r, err := ParseRule(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "recrawl: ") {
				t.Fatalf("error %q lacks the package name", err)
			}
			return
		}
		if err := r.Policy.Validate(); err != nil {
			t.Fatalf("ParseRule(%q) accepted an invalid policy %+v: %v", s, r.Policy, err)
		}
		got := NewRules(schedule.DefaultPolicy(), r).For(url)
		if got != r.Policy && got != schedule.DefaultPolicy() {
			t.Fatalf("For(%q) = %+v, neither the rule nor the default", url, got)
		}
		if r.Prefix != "" && Key(r.Prefix) == Key(url) && got != r.Policy {
			t.Fatalf("rule %q does not cover its own prefix %q", s, url)
		}
	})
}

// String tells rules apart by what they do: the same rules in another
// order, or with a rule repeated after itself, are the same; another
// interval, bound or prefix is not.
func TestRulesString(t *testing.T) {
	rules := func(specs ...string) Rules {
		t.Helper()
		var rs []Rule
		for _, s := range specs {
			r, err := ParseRule(s)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		return NewRules(schedule.DefaultPolicy(), rs...)
	}
	base := rules("http://a.test/=2h", "http://b.test/x/=6h,1h,12h", "48h")
	for _, same := range []Rules{
		rules("48h", "http://b.test/x/=6h,1h,12h", "http://a.test/=2h"),
		rules("http://a.test/=2h", "http://b.test/x/=6h,1h,12h", "48h", "http://a.test/=3h"),
		rules("https://www.a.test/=2h", "http://b.test/x/=6h,1h,12h", "48h"),
	} {
		if same.String() != base.String() {
			t.Errorf("%q and %q schedule alike but differ", same.String(), base.String())
		}
	}
	for _, other := range []Rules{
		rules("http://a.test/=3h", "http://b.test/x/=6h,1h,12h", "48h"),
		rules("http://a.test/=2h", "http://b.test/x/=6h,1h,24h", "48h"),
		rules("http://a.test/=2h", "http://b.test/y/=6h,1h,12h", "48h"),
		rules("http://a.test/=2h", "http://b.test/x/=6h,1h,12h"),
	} {
		if other.String() == base.String() {
			t.Errorf("%q schedules differently but reads as the same", other.String())
		}
	}
}

// Rules given that would not do what they say are refused: a wildcard, and
// two rules for the same URLs, whichever way they are written (which one
// was meant cannot be told). A data directory that kept such rules, from
// before they were refused, still opens with them.
func TestCheckRefusesWildcardsAndTwoRulesForTheSameURLs(t *testing.T) {
	parse := func(specs []string) []Rule {
		var rules []Rule
		for _, s := range specs {
			r, err := ParseRule(s)
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, r)
		}
		return rules
	}
	for _, specs := range [][]string{
		{"24h", "12h"},
		{"example.com=1h", "http://www.example.com=6h"},
		{"https://example.com/news/=1h", "example.com/news/=2h,1h,3h"},
	} {
		if err := Check(parse(specs)); err == nil || !strings.Contains(err.Error(), "cover the same URLs") {
			t.Errorf("Check(%q): %v; want them refused", specs, err)
		}
		if _, err := ParseRules(specs); err != nil {
			t.Errorf("ParseRules(%q), as a data directory keeps them: %v", specs, err)
		}
	}
	for _, spec := range []string{"*.example.com=1h", "http://*.example.com/=1h"} {
		if err := Check(parse([]string{spec})); err == nil || !strings.Contains(err.Error(), "no wildcards") {
			t.Errorf("Check(%q): %v; want it refused", spec, err)
		}
		if _, err := ParseRules([]string{spec}); err != nil {
			t.Errorf("ParseRules(%q), as a data directory keeps it: %v", spec, err)
		}
	}
	if err := Check(parse([]string{"24h", "example.com=1h", "example.com/news/=10m"})); err != nil {
		t.Errorf("a default and two nested prefixes: %v", err)
	}
}
