// Package urlkey gives URLs their identity in waggle: the canonical form that
// is fetched and deduplicated (WHATWG URL parsing), and the SURT key under
// which captures are indexed (the key pywb, warcio and IA's surt library use).
package urlkey

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"

	whatwg "github.com/nlnwa/whatwg-url/url"
	"golang.org/x/net/publicsuffix"
)

// MaxURLLength bounds a canonical URL; longer ones are refused (a trap sign,
// and no server is obliged to accept them).
const MaxURLLength = 2048

// Errors of Canonical.
var (
	ErrScheme  = errors.New("urlkey: not an http or https URL")
	ErrNoHost  = errors.New("urlkey: URL has no host")
	ErrTooLong = errors.New("urlkey: URL too long")
)

// Canonical resolves ref against base (base may be empty) and returns the
// canonical absolute URL: WHATWG-parsed (lowercase host, punycode, normalized
// IPv4/IPv6, dot segments resolved, percent-encoding normalized, default port
// dropped), without fragment and credentials, with "/" for an empty path. The
// query keeps its order: reordering it may change what the server returns.
func Canonical(base, ref string) (string, error) {
	if len(ref) > 4*MaxURLLength || len(base) > 4*MaxURLLength {
		return "", ErrTooLong
	}
	s, err := CanonicalAnyLength(base, ref)
	if err != nil {
		return "", err
	}
	if len(s) > MaxURLLength {
		return "", ErrTooLong
	}
	return s, nil
}

// CanonicalAnyLength is Canonical without the length limit, for URLs that
// are only looked at, never fetched (replay rewrites a page's every link).
func CanonicalAnyLength(base, ref string) (string, error) {
	if s, ok := fastCanonical(base, ref); ok {
		return s, nil
	}
	return slowCanonical(base, ref)
}

// slowCanonical is Canonical by the WHATWG parser, without the length limit
// (Canonical applies it to both paths).
func slowCanonical(base, ref string) (string, error) {
	var u *whatwg.Url
	var err error
	if base == "" {
		u, err = whatwg.Parse(ref)
	} else {
		u, err = whatwg.ParseRef(base, ref)
	}
	if err != nil {
		return "", fmt.Errorf("urlkey: %w", err)
	}
	if s := u.Scheme(); s != "http" && s != "https" {
		return "", ErrScheme
	}
	if u.Hostname() == "" {
		return "", ErrNoHost
	}
	u.SetUsername("")
	u.SetPassword("")
	return u.Href(true), nil
}

// Host returns the host of a canonical URL, with ":port" when the port is not
// the scheme's default: the unit of politeness and of ring ownership.
func Host(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return ""
	}
	rest := u[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	if k := strings.LastIndexByte(rest, '@'); k >= 0 {
		rest = rest[k+1:]
	}
	return strings.ToLower(rest)
}

// Domain returns the registrable domain (eTLD+1) of a host (port ignored);
// an IP address or a name that is itself a public suffix is its own domain.
func Domain(host string) string {
	h := host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		h = hn
	}
	h = strings.Trim(h, "[]")
	if net.ParseIP(h) != nil {
		return h
	}
	d, err := publicsuffix.EffectiveTLDPlusOne(h)
	if err != nil {
		return h
	}
	return d
}

var (
	// IA's canonicalizer strips these session ids (surt/IAURLCanonicalizer.py).
	pathSessionIDs = []*regexp.Regexp{
		regexp.MustCompile(`(?i)^(.*/)(\((?:[a-z]\([0-9a-z]{24}\))+\)/)([^?]+\.aspx.*)$`),
		regexp.MustCompile(`(?i)^(.*/)(\([0-9a-z]{24}\)/)([^?]+\.aspx.*)$`),
	}
	pathJsessionID = regexp.MustCompile(`(?i);jsessionid=[0-9a-z]{32}`)
)

// Site returns the host part of the SURT key of a canonical URL
// ("http://www.Example.com:8080/a" → "com,example:8080") without computing
// the rest of the key. Every URL of one SURT host — http and https, with
// and without "www." — has the same Site, which is why the network assigns
// work and captures to nodes by it.
func Site(u string) string {
	host := Host(u)
	port := ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host, port = host[:i], host[i:]
	}
	if strings.HasPrefix(host, "[") {
		return host + port // an IPv6 literal, kept as SURT keeps it
	}
	// A canonical URL's IPv4 host has no trailing dot (the WHATWG parser
	// drops one); a host that still has dots around an address is a DNS
	// name, which SURT reverses.
	if net.ParseIP(host) != nil {
		return host + port
	}
	return reverseHost(strings.Trim(host, ".")) + port
}

// reverseHost is a DNS name as SURT keys write it: without a leading www
// label (www, www2, …), labels reversed and joined by commas.
func reverseHost(host string) string {
	host = stripWWW(host)
	parts := strings.Split(host, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ",")
}

// stripWWW drops a leading "www", "www2", … label (IA's ^www\d*\.).
func stripWWW(host string) string {
	if !strings.HasPrefix(host, "www") {
		return host
	}
	i := 3
	for i < len(host) && '0' <= host[i] && host[i] <= '9' {
		i++
	}
	if i < len(host) && host[i] == '.' {
		return host[i+1:]
	}
	return host
}

// SiteOfKey returns the host part of a SURT key, as Site gives it. The
// path after the host always starts with "/", which no host contains.
func SiteOfKey(key string) string {
	site, _, _ := strings.Cut(key, ")/")
	return site
}

// SURT returns the Sort-friendly URI Reordering Transform key of a URL, as
// IA's surt library makes it by default and pywb indexes it:
// "http://www.Example.com/a?b=2&a=1" → "com,example)/a?a=1&b=2".
func SURT(raw string) (string, error) { return surt(raw, true) }

// surt is SURT, splitting simple URLs as strings when fast is set (tests
// compare the two ways).
func surt(raw string, fast bool) (string, error) {
	host, port, path, query, ip, err := surtParts(raw, fast)
	if err != nil {
		return "", err
	}
	host = strings.ToLower(strings.Trim(host, "."))
	hostKey := host // an IP address stays as it is
	if !ip {
		hostKey = reverseHost(host)
	}
	if port != "" {
		hostKey += ":" + port
	}
	// The session-ID expressions run only on paths and queries that may
	// hold one: SURT runs for every capture.
	path = strings.ToLower(path)
	if strings.Contains(path, ";") {
		path = pathJsessionID.ReplaceAllString(path, "")
	}
	if strings.Contains(path, "(") {
		for _, re := range pathSessionIDs {
			path = re.ReplaceAllString(path, "$1$3")
		}
	}
	if path == "" {
		path = "/"
	}
	if len(path) > 1 && strings.HasSuffix(path, "/") {
		path = path[:len(path)-1] // IA: path_strip_trailing_slash_unless_empty
	}
	key := hostKey + ")" + path
	if q := strings.ToLower(query); q != "" {
		q = stripQuerySessionIDs(q)
		var args []string
		for _, a := range strings.Split(q, "&") {
			if a != "" {
				args = append(args, a)
			}
		}
		sort.Strings(args)
		if len(args) > 0 {
			key += "?" + strings.Join(args, "&")
		}
	}
	return key, nil
}

// stripQuerySessionIDs removes from a lower-cased query the session IDs
// IA's canonicalizer removes, as its expressions do, in their order:
// ^(.*)(?:jsessionid=[0-9a-z]{32})(?:&(.*))?$ → $1$2, then the same for
// phpsessid= and sid=, aspsessionid[a-z]{8}=[a-z]{24}, and
// cfid=[^&]+&cftoken=[^&]+. Each removes the last ID that ends the query
// or is followed by "&" (which goes with it). q is a canonical URL's query:
// ASCII, without newlines, where the expressions' case folding and "."
// change nothing. FuzzQuerySessionIDs holds it to the expressions, which
// cost more than the rest of the key.
func stripQuerySessionIDs(q string) string { return cutQuerySessionIDs(q, q) }

// querySessionIDs are the names and values stripQuerySessionIDs removes,
// in its order.
var querySessionIDs = []struct {
	name  string
	value func(v string) int
}{
	{"jsessionid=", alnumRun(32)},
	{"phpsessid=", alnumRun(32)},
	{"sid=", alnumRun(32)},
	{"aspsessionid", aspSessionValue},
	{"cfid=", cfTokenValue},
}

// cutQuerySessionIDs is stripQuerySessionIDs on a query of any case: the
// IDs are looked for in lower, q lower-cased, and cut from both (an ASCII
// query keeps its length when lower-cased).
func cutQuerySessionIDs(q, lower string) string {
	for _, id := range querySessionIDs {
		q, lower = cutSessionID(q, lower, id.name, id.value)
	}
	return q
}

// cutSessionID removes the last name+value from q that ends q or is
// followed by "&", finding it in lower. valueLen is the length of the
// value v starts with, or -1 when it has none.
func cutSessionID(q, lower, name string, valueLen func(v string) int) (string, string) {
	for end := len(lower); ; {
		p := strings.LastIndex(lower[:end], name)
		if p < 0 {
			return q, lower
		}
		v := p + len(name)
		if n := valueLen(lower[v:]); n >= 0 {
			switch e := v + n; {
			case e == len(lower):
				return q[:p], lower[:p]
			case lower[e] == '&':
				return q[:p] + q[e+1:], lower[:p] + lower[e+1:]
			}
		}
		end = v - 1 // an earlier, perhaps overlapping, occurrence
	}
}

// WithoutSessionIDs returns canonical URL u without the session IDs its
// SURT key leaves out, and otherwise as it is (case included). It is the
// identity under which the crawler takes a URL once: a site that hands out
// a new session ID on every page — a trap, and a common one — is crawled
// as if it had none, as Heritrix's canonicalization does. Which variant is
// fetched is the one found first.
func WithoutSessionIDs(u string) string {
	lower := strings.ToLower(u)
	if len(lower) != len(u) || !strings.Contains(lower, "sessionid") && !strings.Contains(lower, "sid=") &&
		!strings.Contains(lower, "cfid=") && !strings.Contains(u, "(") {
		return u
	}
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	p := strings.IndexByte(u[i+3:], '/')
	if p < 0 {
		return u
	}
	p += i + 3
	path, query, hasQuery := strings.Cut(u[p:], "?")
	if strings.Contains(path, ";") {
		path = pathJsessionID.ReplaceAllString(path, "")
	}
	if strings.Contains(path, "(") {
		for _, re := range pathSessionIDs {
			path = re.ReplaceAllString(path, "$1$3")
		}
	}
	if path == "" {
		path = "/"
	}
	if hasQuery {
		// IA's expressions leave the "&" before an ID that ends the query.
		query = strings.TrimSuffix(cutQuerySessionIDs(query, lower[len(lower)-len(query):]), "&")
		if query != "" {
			return u[:p] + path + "?" + query
		}
	}
	return u[:p] + path
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// alnumRun matches exactly n ASCII letters or digits.
func alnumRun(n int) func(string) int {
	return func(v string) int {
		if len(v) < n {
			return -1
		}
		for i := 0; i < n; i++ {
			if !isAlnum(v[i]) {
				return -1
			}
		}
		return n
	}
}

// aspSessionValue matches [a-z]{8}=[a-z]{24}.
func aspSessionValue(v string) int {
	if len(v) < 33 || v[8] != '=' {
		return -1
	}
	for i := 0; i < 33; i++ {
		if i != 8 && !isAlpha(v[i]) {
			return -1
		}
	}
	return 33
}

// cfTokenValue matches [^&]+&cftoken=[^&]+.
func cfTokenValue(v string) int {
	i := strings.IndexByte(v, '&')
	if i <= 0 || !strings.HasPrefix(v[i:], "&cftoken=") {
		return -1
	}
	j := i + len("&cftoken=")
	n := strings.IndexByte(v[j:], '&')
	if n < 0 {
		n = len(v) - j
	}
	if n == 0 {
		return -1
	}
	return j + n
}

// surtParts canonicalizes raw and splits it into what SURT reorders. With
// fast set, a URL the fast path accepts (a plain DNS host, no port, simple
// path and query) is split as a string; anything else goes through the
// WHATWG parser.
func surtParts(raw string, fast bool) (host, port, path, query string, ip bool, err error) {
	if c, ok := fastAbsolute(raw); ok && fast && len(c) <= MaxURLLength {
		origin, rest, _ := splitSimple(c)
		host = origin[strings.Index(origin, "://")+3:]
		path, query, _ = strings.Cut(rest, "?")
		return host, "", path, query, false, nil
	}
	c, err := Canonical("", raw)
	if err != nil {
		return "", "", "", "", false, err
	}
	u, err := whatwg.Parse(c)
	if err != nil {
		return "", "", "", "", false, fmt.Errorf("urlkey: %w", err)
	}
	return u.Hostname(), u.Port(), u.Pathname(), u.Query(), u.IsIPv4() || u.IsIPv6(), nil
}
