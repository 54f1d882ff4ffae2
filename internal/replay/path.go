package replay

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// Modifiers pywb puts after the timestamp to say what a request is for. The
// empty modifier is a top-level page.
var modifiers = map[string]bool{
	"":    true,
	"mp_": true, // page without the banner frame (inside the frame)
	"if_": true, // iframe
	"fr_": true, // frame
	"im_": true, // image
	"js_": true, // script
	"cs_": true, // stylesheet
	"oe_": true, // other embed (object, video, fonts)
	"id_": true, // identity: the original payload, byte for byte
}

// target is what a /web/... path asks for.
type target struct {
	ts  string // 1–14 digits, "" for none (a TimeGate request), "*" for a capture list
	mod string // one of modifiers
	// within narrows a capture list to a period ("2024" in /web/2024*/<url>),
	// as Wayback machines read a timestamp prefix before '*'.
	within string
	// near asks a capture list to fold near-duplicates (nearMod after the
	// '*': /web/*near_/<url>). It is in the path, not the query, because a
	// query after the URL is the archived URL's own.
	near bool
	url  string // the archived URL as given, possibly without scheme, possibly ending in "*"
}

// nearMod, after the '*' of a capture list, folds near-duplicate captures.
const nearMod = "near_"

var errNoURL = errors.New("no URL after the timestamp")

// errBadTimestamp is a first segment that starts as a timestamp does, before
// an absolute URL, but is none: "2026x", "2024near_".
var errBadTimestamp = errors.New("not a timestamp: give up to 14 digits (YYYYMMDDhhmmss, or a prefix of it such as 2024), then optionally a modifier (" + strings.Join(modifierNames(), ", ") + "), as in /web/2024/http://example.com/")

// modifierNames lists the modifiers but the empty one, sorted.
func modifierNames() []string {
	var names []string
	for m := range modifiers {
		if m != "" {
			names = append(names, m)
		}
	}
	slices.Sort(names)
	return names
}

// parseTarget splits rest, the request URI after "/web/", into timestamp,
// modifier and URL. The URL is taken from the raw request URI so that its
// query string and escaping reach us as the browser sent them.
func parseTarget(rest string) (target, error) {
	var t target
	first, after, hasSlash := strings.Cut(rest, "/")
	if f, ok := strings.CutSuffix(first, nearMod); ok && isList(f) {
		first, t.near = f, true
	}
	switch {
	case isList(first):
		if !hasSlash {
			return t, errNoURL
		}
		t.ts, t.within, t.url = "*", strings.TrimSuffix(first, "*"), after
	case hasSlash && isTimestampWithMod(first):
		i := 0
		for i < len(first) && first[i] >= '0' && first[i] <= '9' {
			i++
		}
		// Digits past the 14th (milliseconds, as some tools print a WARC
		// date) are dropped: the closest capture is found from the second.
		t.ts, t.mod, t.url = first[:min(i, 14)], first[i:], after
	case hasSlash && first != "" && first[0] >= '0' && first[0] <= '9' && !hostLike(first) && absoluteHTTP(after):
		return t, fmt.Errorf("%w (%.40q)", errBadTimestamp, first)
	case hasSlash && strings.Contains(first, "*") && (first[0] == '*' || first[0] >= '0' && first[0] <= '9') && !strings.ContainsAny(first, "?#"):
		// A capture list mistyped ("*near", "2024*x"): no host has a '*'
		// (a URL's query may, hence the '?').
		return t, fmt.Errorf("%w (%.40q); a capture list is /web/*/<url>, /web/2024*/<url>, or with near-duplicates folded /web/*%s/<url>", errBadTimestamp, first, nearMod)
	default:
		t.url = rest // /web/<url>: a TimeGate
	}
	if t.url == "" {
		return t, errNoURL
	}
	return t, nil
}

// isList reports the first segment of a capture list: "*" or a timestamp
// prefix and "*".
func isList(s string) bool {
	return s == "*" || strings.HasSuffix(s, "*") && isDigits(strings.TrimSuffix(s, "*"))
}

func isTimestampWithMod(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i >= 1 && modifiers[s[i:]]
}

// hostLike reports whether s, which starts with a digit, reads as a host
// rather than a mistyped timestamp: an IPv4 address, or a name whose last
// label has a letter ("1password.com", a final dot allowed), with or
// without a numeric port. /web/1.2.3.4/http://x is the URL
// http://1.2.3.4/http://x; 2024-01-01T12:00:00Z, 20240101:1200 and
// 2024.01.01 are no hosts (nor, so, is a one-label name with a port).
func hostLike(s string) bool {
	if h, port, ok := strings.Cut(s, ":"); ok {
		if !isDigits(port) {
			return false
		}
		s = h
	}
	s = strings.TrimSuffix(s, ".")
	if net.ParseIP(s) != nil {
		return true
	}
	i := strings.LastIndexByte(s, '.')
	return i >= 0 && strings.ContainsFunc(s[i+1:], func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' })
}

// absoluteHTTP reports whether u starts as an http or https URL does, a
// slash of "//" possibly lost (see fixURL).
func absoluteHTTP(u string) bool {
	l := strings.ToLower(u)
	return strings.HasPrefix(l, "http:/") || strings.HasPrefix(l, "https:/")
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// fixURL turns what a user or a browser put after the timestamp into an
// absolute URL: it adds a missing scheme and repairs the single slash that
// some clients and proxies leave of "http://".
func fixURL(u string) string {
	for _, scheme := range []string{"http:", "https:"} {
		if len(u) > len(scheme) && strings.EqualFold(u[:len(scheme)], scheme) {
			rest := strings.TrimLeft(u[len(scheme):], "/")
			return strings.ToLower(scheme) + "//" + rest
		}
	}
	return "http://" + strings.TrimLeft(u, "/")
}
