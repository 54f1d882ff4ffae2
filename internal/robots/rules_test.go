package robots

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// RFC 9309's matching: rules match from the start of the path, the longest
// pattern decides, an allow wins a tie, '$' ends a pattern, escapes and
// non-ASCII octets compare as the same octets.
func TestGroupMatching(t *testing.T) {
	g := parseGroup([]byte("\xef\xbb\xbfUser-agent: *\r\n"+
		"Disallow: /foo*bar\r\n"+
		"Disallow: /*.pdf$\n"+
		"Allow: /a\n"+
		"Disallow: /ab\n"+
		"Disallow: /tie\n"+
		"Allow: /tie\n"+
		"Disallow: /caf\xc3\xa9\n"+
		"Disallow: /%7euser/\n"+
		"Disallow: /q?x=*&y\n"+
		"Disallow:\n"+
		"Disallow: /robots.txt\n"+
		"Disallow: nolead\n"), "waggle")
	for path, want := range map[string]bool{
		"/foo/bar":        false,
		"/foobar":         false,
		"/x/foo/bar":      true, // anchored at the path's start
		"/doc.pdf":        false,
		"/dir/doc.pdf":    false,
		"/doc.pdf?x":      true, // '$' ends the pattern
		"/a":              true,
		"/abc":            false, // the longer rule decides
		"/tie":            true,  // an allow wins a tie
		"/caf%C3%A9/menu": false, // non-ASCII in a rule is compared encoded
		"/caf%c3%a9":      false, // escapes compare case-insensitively
		"/%7Euser/x":      false,
		"/q?x=1&y=2":      false,
		"/q?y=2&x=1":      true,
		"/":               true, // an empty Disallow matches nothing
		"/robots.txt":     true, // always allowed
		"/nolead":         false,
		"/%7Euser/y":      false, // an unreserved character's escape is the character
		"/~user/z":        false,
		"/%7euser/w":      false,
	} {
		if got := g.allowed(path); got != want {
			t.Errorf("%s: allowed %v, want %v", path, got, want)
		}
	}
}

// RFC 9309 §2.2.2's examples of equivalent octets, a rule line written
// without its colon (as Google's parser reads it), and a reserved
// character's escape that stays distinct.
func TestGroupOctets(t *testing.T) {
	g := parseGroup([]byte("User-agent: *\nDisallow: /foo/bar/baz\nDisallow: /~joe/\nDisallow /private\nDisallow: /a%2Fb\n"), "waggle")
	for path, want := range map[string]bool{
		"/foo/bar/%62%61%7A": false,
		"/%7Ejoe/index.html": false,
		"/private/x":         false,
		"/a%2fb":             false,
		"/a/b":               true, // %2F is not "/"
	} {
		if got := g.allowed(path); got != want {
			t.Errorf("%s: allowed %v, want %v", path, got, want)
		}
	}
}

// The groups that name the crawler's product token are merged and used
// instead of "*"'s; a user-agent line after rules starts a new group; rules
// before any user-agent line belong to none.
func TestGroupSelection(t *testing.T) {
	body := []byte(`Disallow: /orphan
User-agent: *
Disallow: /all
Crawl-delay: 7

User-agent: otherbot
User-agent: Waggle/2.1 (+https://example.org)
Disallow: /w1
Crawl-delay: 2.5
User-agent: somebot
Disallow: /some

user-agent: WAGGLE
disallow: /w2
`)
	w := parseGroup(body, "waggle")
	for path, want := range map[string]bool{"/orphan": true, "/all": true, "/w1": false, "/w2": false, "/some": true} {
		if got := w.allowed(path); got != want {
			t.Errorf("waggle %s: allowed %v, want %v", path, got, want)
		}
	}
	if w.crawlDelay != 2500*time.Millisecond {
		t.Errorf("waggle crawl delay %v, want 2.5s", w.crawlDelay)
	}
	any := parseGroup(body, "nobody")
	for path, want := range map[string]bool{"/orphan": true, "/all": false, "/w1": true} {
		if got := any.allowed(path); got != want {
			t.Errorf("nobody %s: allowed %v, want %v", path, got, want)
		}
	}
	if any.crawlDelay != 7*time.Second {
		t.Errorf("* crawl delay %v, want 7s", any.crawlDelay)
	}
	if g := parseGroup([]byte("User-agent: waggle\nAllow: /other\n\nUser-agent: *\nDisallow: /\n"), "waggle"); !g.allowed("/x") {
		t.Error("the * group applied to a crawler with a group of its own")
	}
	// Consecutive user-agent lines, blank lines between them or not, name
	// one group.
	if g := parseGroup([]byte("User-agent: waggle\n\nUser-agent: *\nDisallow: /\n"), "waggle"); g.allowed("/x") {
		t.Error("a group naming the crawler on its second user-agent line did not apply")
	}
}

// anchored is the reference a rule's pattern means: a regular expression
// anchored at the path's start.
func anchored(pattern string) *regexp.Regexp {
	end := strings.HasSuffix(pattern, "$")
	pattern = strings.TrimSuffix(pattern, "$")
	expr := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*")
	if end {
		expr += "$"
	}
	return regexp.MustCompile(expr)
}

func FuzzRuleMatches(f *testing.F) {
	f.Add("/a*b*c$", "/axxbyyc")
	f.Add("/*.pdf$", "/x.pdf.pdf")
	f.Add("*a**", "/b")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		if len(pattern) > 64 || len(path) > 256 || strings.ContainsAny(pattern+path, "%\x00") || !strings.HasPrefix(path, "/") {
			return
		}
		for _, c := range pattern + path {
			if c <= ' ' || c >= 0x7f {
				return // normalize's encoding is checked by TestGroupMatching
			}
		}
		if pattern == "" || pattern[0] != '/' && pattern[0] != '*' {
			return
		}
		r := newRule(false, pattern)
		if got, want := r.matches(path), anchored(pattern).MatchString(path); got != want {
			t.Fatalf("pattern %q on %q: %v, want %v", pattern, path, got, want)
		}
	})
}

// BenchmarkHostileRules checks a path against 500 KiB of wildcard rules,
// the most a robots.txt is read for: a check costs about one pass of the
// path per rule. With temoto/robotstxt (one regular expression per rule,
// matched anywhere in the path) the first file took 759 ms per check.
func BenchmarkHostileRules(b *testing.B) {
	for _, bc := range []struct {
		name, rule, path string
	}{
		// Many short parts, a path of 1,001 bytes.
		{"parts", "Disallow: /*a*b*c%d$\n", "/" + strings.Repeat("ab", 500)},
		// A long literal part after a '*', nearly found everywhere in a
		// path of the longest length a URL may have.
		{"literal", "Disallow: /*" + strings.Repeat("a", 30) + "b%d\n", "/" + strings.Repeat("a", 2040)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var body strings.Builder
			body.WriteString("User-agent: *\n")
			for i := 0; body.Len() < 500<<10; i++ {
				fmt.Fprintf(&body, bc.rule, i)
			}
			g := parseGroup([]byte(body.String()), "waggle")
			for b.Loop() {
				if !g.allowed(bc.path) {
					b.Fatal("disallowed")
				}
			}
			b.ReportMetric(float64(len(g.rules)), "rules")
		})
	}
}

// A file longer than MaxSize is read to its last whole line within it: a
// rule cut short would say something the file does not.
func TestCutFileKeepsWholeLines(t *testing.T) {
	body := "User-agent: *\nDisallow: /\nAllow: /public-page.html\n"
	cut := strings.Index(body, "Allow: /") + len("Allow: /")
	dir := t.TempDir()
	fetches := 0
	fetch := func(_ context.Context, u string) (int, []byte, string, error) {
		fetches++
		return 200, []byte(body), "", nil
	}
	// Read when fetched, and again from the persistent cache after a restart.
	for run := range 2 {
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := New(fetch, Options{UserAgent: "waggle", MaxSize: cut, Store: db})
		d, err := c.Check(context.Background(), "http://a.test/secret")
		if err != nil || d.Allowed {
			t.Errorf("run %d: a file cut inside its Allow line lets /secret through: %+v, %v", run, d, err)
		}
		db.Close()
	}
	if fetches != 1 {
		t.Errorf("%d fetches, want 1: the second run reads the persistent cache", fetches)
	}
}
