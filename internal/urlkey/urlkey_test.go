package urlkey

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, c := range []struct{ base, ref, want string }{
		{"", "HTTP://Example.COM", "http://example.com/"},
		{"", "http://example.com:80/a/./b/../c?x=1#frag", "http://example.com/a/c?x=1"},
		{"", "https://example.com:443/", "https://example.com/"},
		{"", "http://example.com:8080/", "http://example.com:8080/"},
		{"", "http://user:pw@example.com/", "http://example.com/"},
		{"", "http://bücher.example/", "http://xn--bcher-kva.example/"},
		{"", "http://0x7f.1/", "http://127.0.0.1/"},
		{"", "http://[::1]:80/", "http://[::1]/"},
		{"", "http://example.com/a b", "http://example.com/a%20b"},
		{"", `http:\\example.com\path`, "http://example.com/path"},
		{"http://example.com/dir/page.html", "../other.html", "http://example.com/other.html"},
		{"http://example.com/dir/page.html", "//cdn.example.com/x.png", "http://cdn.example.com/x.png"},
		{"http://example.com/dir/page.html", "?q=1", "http://example.com/dir/page.html?q=1"},
		{"http://example.com/dir/", "  img.png  ", "http://example.com/dir/img.png"},
		{"", "http://example.com/?b=2&a=1", "http://example.com/?b=2&a=1"}, // query order kept
	} {
		got, err := Canonical(c.base, c.ref)
		if err != nil || got != c.want {
			t.Errorf("Canonical(%q, %q) = %q, %v; want %q", c.base, c.ref, got, err, c.want)
		}
	}
	for _, bad := range []string{"mailto:a@b.c", "javascript:alert(1)", "ftp://example.com/", "http://", "not a url", "http://example.com/" + strings.Repeat("a", MaxURLLength)} {
		if got, err := Canonical("", bad); err == nil {
			t.Errorf("Canonical(%q) = %q, want an error", bad, got)
		}
	}
	if _, err := Canonical("", "http://example.com/"+strings.Repeat("a", MaxURLLength)); !errors.Is(err, ErrTooLong) {
		t.Errorf("long URL: %v, want ErrTooLong", err)
	}
}

// SURT cases from IA's surt library and pywb's tests.
func TestSURT(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://www.archive.org/", "org,archive)/"},
		{"http://archive.org/goo/?a=2&b&a=1", "org,archive)/goo?a=1&a=2&b"},
		{"http://www.example.com/Path/File.HTML", "com,example)/path/file.html"},
		{"https://www2.example.com:8443/x", "com,example:8443)/x"},
		{"http://example.com:80/", "com,example)/"},
		{"http://127.0.0.1/a", "127.0.0.1)/a"},
		{"http://example.com/?", "com,example)/"},
		{"http://example.com/a;jsessionid=0123456789abcdef0123456789abcdef?x=1", "com,example)/a?x=1"},
		{"http://example.com/a?jsessionid=0123456789abcdef0123456789abcdef&x=1", "com,example)/a?x=1"},
		{"http://example.com/a?PHPSESSID=0123456789abcdef0123456789abcdef", "com,example)/a"},
		{"http://example.com/page#section", "com,example)/page"},
	} {
		got, err := SURT(c.in)
		if err != nil || got != c.want {
			t.Errorf("SURT(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// FuzzQuerySessionIDs holds stripQuerySessionIDs to IA's expressions on
// the queries it is given: ASCII without newlines.
func FuzzQuerySessionIDs(f *testing.F) {
	ia := []*regexp.Regexp{
		regexp.MustCompile(`(?i)^(.*)(?:jsessionid=[0-9a-zA-Z]{32})(?:&(.*))?$`),
		regexp.MustCompile(`(?i)^(.*)(?:phpsessid=[0-9a-zA-Z]{32})(?:&(.*))?$`),
		regexp.MustCompile(`(?i)^(.*)(?:sid=[0-9a-zA-Z]{32})(?:&(.*))?$`),
		regexp.MustCompile(`(?i)^(.*)(?:aspsessionid[a-zA-Z]{8}=[a-zA-Z]{24})(?:&(.*))?$`),
		regexp.MustCompile(`(?i)^(.*)(?:cfid=[^&]+&cftoken=[^&]+)(?:&(.*))?$`),
	}
	id := "0123456789abcdef0123456789abcdef"
	for _, q := range []string{
		"a=1&b=2", "sid=" + id, "x=1&sid=" + id + "&y=2", "sid=" + id + "x&sid=" + id,
		"jsessionid=" + id + "&phpsessid=" + id + "&sid=" + id, "sid=" + id + "&sid=" + id + "&",
		"aspsessionidabcdefgh=abcdefghijklmnopqrstuvwx&z", "cfid=1&cftoken=2", "a=1&cfid=x&cftoken=&cfid=1&cftoken=2&b",
		"cfid=&cftoken=1", "sid=sid=" + id, "ssid=" + id,
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for i := 0; i < len(q); i++ {
			if q[i] >= 0x80 || q[i] == '\n' {
				return
			}
		}
		lower := strings.ToLower(q)
		want := lower
		for _, re := range ia {
			want = re.ReplaceAllString(want, "$1$2")
		}
		if got := stripQuerySessionIDs(lower); got != want {
			t.Fatalf("stripQuerySessionIDs(%q) = %q, the expressions give %q", lower, got, want)
		}
		// The case-keeping cut removes the same IDs and keeps the rest's case.
		got := cutQuerySessionIDs(q, lower)
		if strings.ToLower(got) != want {
			t.Fatalf("cutQuerySessionIDs(%q) = %q, the expressions give %q", q, got, want)
		}
		if want == lower && got != q {
			t.Fatalf("cutQuerySessionIDs(%q) = %q: it changed a query without session IDs", q, got)
		}
	})
}

func TestWithoutSessionIDs(t *testing.T) {
	id := "0123456789ABCDEF0123456789abcdef"
	for _, c := range []struct{ in, want string }{
		{"http://example.com/Shop/Item?A=1", "http://example.com/Shop/Item?A=1"},
		{"http://example.com/Shop/;jsessionid=" + id, "http://example.com/Shop/"},
		{"http://example.com/;JSESSIONID=" + id, "http://example.com/"},
		{"http://example.com/a;jsessionid=" + id + "?Page=2", "http://example.com/a?Page=2"},
		{"http://example.com/a?PHPSESSID=" + id + "&Page=2", "http://example.com/a?Page=2"},
		{"http://example.com/a?Page=2&sid=" + id, "http://example.com/a?Page=2"},
		{"http://example.com/a?sid=" + id, "http://example.com/a"},
		{"http://example.com/a?sid=short", "http://example.com/a?sid=short"},
		{"http://example.com/x/(S(abcdefghijklmnopqrstuvwx))/Default.aspx", "http://example.com/x/Default.aspx"},
		{"http://example.com/(parens)/a", "http://example.com/(parens)/a"},
		{"http://example.com", "http://example.com"},
	} {
		if got := WithoutSessionIDs(c.in); got != c.want {
			t.Errorf("WithoutSessionIDs(%q) = %q, want %q", c.in, got, c.want)
		}
		// Whatever it cuts, it cuts what the SURT key leaves out.
		k1, err1 := SURT(c.in)
		k2, err2 := SURT(WithoutSessionIDs(c.in))
		if err1 != nil || err2 != nil || k1 != k2 {
			t.Errorf("SURT of %q is %q (%v), of its identity %q (%v)", c.in, k1, err1, k2, err2)
		}
	}
}

// TestStripWWW checks the hand-written www strip against IA's expression.
func TestStripWWW(t *testing.T) {
	ia := regexp.MustCompile(`^www\d*\.`)
	for _, h := range []string{"www.example.com", "www2.example.com", "www12.x", "www", "www.", "wwwx.example.com",
		"www2", "www2x.example.com", "example.www.com", "ww.example.com", "www..a", "", "www0.a"} {
		if got, want := stripWWW(h), ia.ReplaceAllString(h, ""); got != want {
			t.Errorf("stripWWW(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestHostAndDomain(t *testing.T) {
	for _, c := range []struct{ url, host, domain string }{
		{"http://www.example.co.uk/a", "www.example.co.uk", "example.co.uk"},
		{"http://img.amber-river.test:8080/", "img.amber-river.test:8080", "amber-river.test"},
		{"http://127.0.0.1/", "127.0.0.1", "127.0.0.1"},
		{"http://[::1]:81/", "[::1]:81", "::1"},
		{"http://localhost/", "localhost", "localhost"},
	} {
		if h := Host(c.url); h != c.host {
			t.Errorf("Host(%q) = %q, want %q", c.url, h, c.host)
		}
		if d := Domain(Host(c.url)); d != c.domain {
			t.Errorf("Domain(%q) = %q, want %q", Host(c.url), d, c.domain)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"http://example.com/a/../b?c#d", "HTTPS://[::1]:443/%7e", "http://xn--bcher-kva.example/ü", "//x", "http://a/b/c/./../../g"} {
		f.Add("http://base.example/dir/", s)
	}
	f.Fuzz(func(t *testing.T, base, ref string) {
		u, err := Canonical(base, ref)
		if err != nil {
			return
		}
		if len(u) > MaxURLLength {
			t.Fatalf("canonical URL of %d bytes", len(u))
		}
		again, err := Canonical("", u)
		if err != nil || again != u {
			t.Fatalf("not idempotent: %q → %q (%v)", u, again, err)
		}
		if Host(u) == "" {
			t.Fatalf("no host in %q", u)
		}
	})
}

func FuzzSURT(f *testing.F) {
	for _, s := range []string{"http://www.archive.org/goo/?a=2&b&a=1", "http://www.example.com/A/(S(abcdefghijklmnopqrstuvwx))/page.aspx?B=1&JSESSIONID=0123456789abcdef0123456789abcdef",
		"http://www3.example.com/x;jsessionid=0123456789ABCDEF0123456789ABCDEF?sid=0123456789abcdef0123456789abcdef&cfid=1&cftoken=2", "http://[::1]/x;jsessionid=0123456789abcdef0123456789abcdef",
		"https://WWW2.Example.COM:8443/a", "http://192.168.0.1:80/", "http://example.com./x", "http://xn--bcher-kva.example/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := SURT(s)
		if err != nil {
			return
		}
		if !strings.Contains(k, ")") || strings.ContainsAny(k, " \x00") {
			t.Fatalf("SURT(%q) = %q", s, k)
		}
		if slow, err := surt(s, false); err != nil || slow != k {
			t.Fatalf("SURT(%q) = %q; by the WHATWG parser alone: %q, %v", s, k, slow, err)
		}
		// Site, the network's assignment key, agrees with the SURT key.
		if c, _ := Canonical("", s); Site(c) != SiteOfKey(k) {
			t.Fatalf("Site(%q) = %q, SURT key %q", c, Site(c), k)
		}
	})
}

func BenchmarkCanonical(b *testing.B) {
	for b.Loop() {
		Canonical("http://www.example.com/dir/page.html", "../images/photo.jpg?size=large")
	}
}

// FuzzFastPath: whenever the fast path answers, it gives what the WHATWG
// parser gives.
func FuzzFastPath(f *testing.F) {
	for _, c := range [][2]string{
		{"http://example.com/dir/page.html", "other.html"},
		{"http://example.com/dir/page.html?x=1", "?y=2"},
		{"http://example.com/dir/", "/abs/path;p=1"},
		{"", "https://www.example.com"},
		{"", "http://example.com?q"},
		{"http://a.example/b/c", "d/e:f"},
		{"http://a.example/b/c", "./d"},
		{"http://1.2.3.4/", "x"},
		{"http://a", "0"},
		{"http://a/b/../c", "d"},
		{"http://a.example/b/c/d.html?q=1", "#top"},
		{"http://a.example/b/c/d.html", ""},
		{"http://a.example/b/c/d.html", "../../x/y.css"},
		{"http://a.example/b/c/", "./../../../z?k=v"},
		{"http://a.example/b/c/", "../"},
		{"http://a.example/b/c/", ".././"},
		{"http://a.example/b/c/", ".."},
		{"http://a.example/b/c/", "../.x"},
		{"https://a.example/b", "//media.example/js/app.js"},
		{"https://a.example/b", "//Media.example:8080/x"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, base, ref string) {
		fast, ok := fastCanonical(base, ref)
		if !ok {
			return
		}
		slow, err := slowCanonical(base, ref)
		if err != nil || slow != fast {
			t.Fatalf("fast(%q, %q) = %q; WHATWG: %q, %v", base, ref, fast, slow, err)
		}
	})
}
