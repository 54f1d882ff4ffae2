package robots

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"
)

// group is the part of a robots.txt that applies to one crawler: the rules
// of every group whose user-agent line names its product token, or else of
// every "*" group, merged (RFC 9309 §2.2.1).
//
// The parsing and matching are our own, not a library's: matching must be
// anchored at the path's start (temoto/robotstxt matched wildcard rules
// anywhere in the path, so "Disallow: /a*b" also barred "/x/a/b"), and a
// check against a file of many wildcard rules must cost no more than one
// pass of the path per rule, not a regular expression per rule.
type group struct {
	rules      []rule
	crawlDelay time.Duration
}

// A rule is one allow or disallow line.
type rule struct {
	allow bool
	// parts is the pattern split at its '*'s: the first must start the
	// path, the others follow in order, anywhere after it.
	parts []string
	// end is a pattern ending in '$': its last part must end the path.
	end bool
	// length is the pattern's length in octets, by which the most
	// specific match wins (§2.2.2).
	length int
}

// parseGroup returns the group of body that applies to the crawler whose
// product token is agent ("*": only the groups for every crawler). Lines
// that are not rules are ignored, as §2.2 asks of unparsable ones.
func parseGroup(body []byte, agent string) *group {
	agent = strings.ToLower(agent)
	var own, any group
	haveOwn := false
	// The user-agent lines of the group being read, and whether a rule has
	// ended them (a user-agent line after a rule starts a new group).
	mine, forAll, inRules := false, false, false
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexAny(body, "\r\n"); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		k, v, ok := splitLine(line)
		if !ok {
			continue
		}
		switch k {
		case "user-agent", "useragent", "user agent":
			if inRules {
				mine, forAll, inRules = false, false, false
			}
			if v == "*" {
				forAll = true
			} else if productToken(v) == agent && agent != "*" {
				mine, haveOwn = true, true
			}
		case "allow", "disallow", "crawl-delay":
			inRules = true
			var dst []*group
			if mine {
				dst = append(dst, &own)
			}
			if forAll {
				dst = append(dst, &any)
			}
			for _, g := range dst {
				if k == "crawl-delay" {
					if d, ok := parseDelay(v); ok && g.crawlDelay == 0 {
						g.crawlDelay = d
					}
				} else if v != "" { // an empty path matches nothing (§2.2.2)
					g.rules = append(g.rules, newRule(k == "allow", v))
				}
			}
		}
	}
	if haveOwn {
		return &own
	}
	return &any
}

// splitLine returns a line's key, lower-cased, and value. The separator is
// a colon, or for lack of one, as Google's parser takes it, the first run
// of white space ("Disallow /private").
func splitLine(line []byte) (key, value string, ok bool) {
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		fields := bytes.Fields(line)
		if len(fields) != 2 {
			return "", "", false
		}
		k, v = fields[0], fields[1]
	}
	return strings.ToLower(strings.TrimSpace(string(k))), strings.TrimSpace(string(v)), true
}

// productToken returns the product token a user-agent line names: its
// value up to a version or comment, lower-cased.
func productToken(v string) string {
	if i := strings.IndexAny(v, "/ \t("); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(v)
}

func parseDelay(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, false
	}
	return time.Duration(min(f, 365*24*3600) * float64(time.Second)), true
}

func newRule(allow bool, pattern string) rule {
	pattern = normalize(pattern)
	if !strings.HasPrefix(pattern, "/") && !strings.HasPrefix(pattern, "*") {
		pattern = "/" + pattern
	}
	r := rule{allow: allow, length: len(pattern)}
	if strings.HasSuffix(pattern, "$") {
		r.end, pattern = true, pattern[:len(pattern)-1]
	}
	r.parts = strings.Split(pattern, "*")
	return r
}

// normalize percent-encodes the octets of s that a URL's path would carry
// encoded (non-ASCII, controls, space), decodes the escapes of unreserved
// characters ("%7E" is "~", "%62" is "b") and upper-cases the hex digits
// of the others, so that a rule and a path compare as the same octets
// (§2.2.2). A reserved character's escape ("%2F") stays one.
func normalize(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			if d := unhex(s[i+1])<<4 | unhex(s[i+2]); unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteString(strings.ToUpper(s[i+1 : i+3]))
			}
			i += 2
		case c <= ' ' || c >= 0x7f:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// unreserved reports a character RFC 3986 §2.3 leaves unescaped.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// allowed reports whether path (its escaped form, with the query) may be
// fetched: the rule with the longest pattern that matches decides, an allow
// winning a tie, and no matching rule allows (§2.2.2). /robots.txt itself is
// always allowed.
func (g *group) allowed(path string) bool {
	if path == "/robots.txt" {
		return true
	}
	path = normalize(path)
	best, allow := -1, true
	for i := range g.rules {
		r := &g.rules[i]
		if r.length < best || r.length == best && !r.allow || !r.matches(path) {
			continue
		}
		best, allow = r.length, r.allow
	}
	return allow
}

// matches reports whether r's pattern matches path from its start. Placing
// each part at its first occurrence after the one before leaves the most
// room for the rest, so one pass decides, in time linear in the lengths.
func (r *rule) matches(path string) bool {
	first := r.parts[0]
	if !strings.HasPrefix(path, first) {
		return false
	}
	if len(r.parts) == 1 {
		return !r.end || len(path) == len(first)
	}
	rest := path[len(first):]
	middle, last := r.parts[1:len(r.parts)-1], r.parts[len(r.parts)-1]
	for _, p := range middle {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	if r.end {
		return strings.HasSuffix(rest, last)
	}
	return strings.Contains(rest, last)
}
