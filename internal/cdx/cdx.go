// Package cdx is the CDX server API of a node: pywb's query parameters (url,
// matchType and wildcards, from, to, limit, sort, closest, filter, collapse,
// fl, output)
// answered from the capture index, streamed so that a query matching millions
// of captures needs no more memory than one matching a single capture.
//
// The parameters and their semantics are pywb's ("CDXJ Server API" in the
// pywb manual); the output lines are those of index.AppendCDXJ, the node's
// own CDXJ export, so a line means the same thing wherever it comes from.
package cdx

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Match types.
const (
	MatchExact  = "exact"
	MatchPrefix = "prefix"
	MatchHost   = "host"
	MatchDomain = "domain"
)

// Output formats.
const (
	OutputCDXJ = "cdxj"
	OutputJSON = "json"
	OutputLink = "link"
	OutputText = "text"
)

// Query is a parsed CDX request.
type Query struct {
	URL       string // the url parameter as given (wildcards included)
	MatchType string // exact, prefix, host or domain; empty: from URL's wildcards

	// From and To bound the capture time, inclusively, at the one-second
	// resolution of a 14-digit timestamp; zero leaves a side open.
	From, To time.Time

	Limit   int       // at most this many captures; 0: all
	Reverse bool      // last first (key then time, descending)
	Closest time.Time // non-zero: order by distance from it (exact match only)

	Filters []Filter // a capture is returned when all match
	Fields  []string // fl: fields to output, in order; nil: all
	Output  string   // cdxj (default), json, link or text

	// Collapse drops captures equal to the last one kept on a field (see
	// Collapse); several are chained, in order. Limit counts the captures
	// kept.
	Collapse []Collapse

	// LinkPrefix makes output=link point at replay: the memento URL is
	// LinkPrefix + timestamp + "/" + URL. Empty, it is the original URL,
	// as pywb's CDX server writes it.
	LinkPrefix string
}

// ParseQuery parses the parameters of a CDX request.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	q.URL = v.Get("url")
	if q.URL == "" {
		return Query{}, errors.New(`cdx: the "url" parameter is required`)
	}
	mt, _, err := resolve(q.URL, v.Get("matchType"))
	if err != nil {
		return Query{}, err
	}
	q.MatchType = mt

	if s := v.Get("from"); s != "" {
		if q.From, err = parseTimestamp("from", s, false); err != nil {
			return Query{}, err
		}
	}
	if s := v.Get("to"); s != "" {
		if q.To, err = parseTimestamp("to", s, true); err != nil {
			return Query{}, err
		}
	}
	if !q.From.IsZero() && !q.To.IsZero() && q.From.After(q.To) {
		return Query{}, fmt.Errorf("cdx: from=%s is after to=%s", v.Get("from"), v.Get("to"))
	}

	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return Query{}, fmt.Errorf("cdx: limit=%q: want a positive integer", s)
		}
		q.Limit = n
	}

	switch sort := v.Get("sort"); sort {
	case "", "closest":
		if sort == "closest" && v.Get("closest") == "" {
			return Query{}, errors.New("cdx: sort=closest needs a closest=<timestamp> parameter")
		}
	case "reverse":
		q.Reverse = true
	default:
		return Query{}, fmt.Errorf("cdx: sort=%q: want reverse or closest", sort)
	}
	if isTrue(v.Get("reverse")) {
		q.Reverse = true
	}
	// As in pywb, closest= alone asks for closest order, and overrides reverse.
	if s := v.Get("closest"); s != "" {
		if q.Closest, err = parseTimestamp("closest", s, false); err != nil {
			return Query{}, err
		}
		if q.Closest.IsZero() {
			return Query{}, fmt.Errorf("cdx: closest=%q is out of range", s)
		}
		q.Reverse = false
		if q.MatchType != MatchExact {
			return Query{}, fmt.Errorf("cdx: closest order needs matchType=exact, not %s", q.MatchType)
		}
	}

	for _, s := range v["filter"] {
		f, err := ParseFilter(s)
		if err != nil {
			return Query{}, err
		}
		q.Filters = append(q.Filters, f)
	}

	for _, s := range v["collapse"] {
		if s == "" {
			continue // as fl=: an empty form field asks for nothing
		}
		if len(q.Collapse) == maxCollapses {
			return Query{}, fmt.Errorf("cdx: more than %d collapse parameters", maxCollapses)
		}
		c, err := ParseCollapse(s)
		if err != nil {
			return Query{}, err
		}
		q.Collapse = append(q.Collapse, c)
	}

	fl := v.Get("fl")
	if fl == "" {
		fl = v.Get("fields") // pywb's other name for it
	}
	if fl != "" {
		if q.Fields, err = parseFields(fl); err != nil {
			return Query{}, err
		}
	}

	q.Output = v.Get("output")
	switch q.Output {
	case "", OutputCDXJ, OutputJSON, OutputLink, OutputText:
	default:
		return Query{}, fmt.Errorf("cdx: output=%q: want cdxj, json, link or text", q.Output)
	}

	// pywb parameters this server does not implement are refused rather
	// than ignored: a client relying on them would get wrong answers.
	if s := v.Get("page"); s != "" && s != "0" {
		return Query{}, errors.New("cdx: pagination (page=) is not supported: the result is streamed whole, use limit and from/to")
	}
	for _, name := range []string{"showNumPages", "showPagedIndex", "resolveRevisits", "allowFuzzy"} {
		if isTrue(v.Get(name)) {
			return Query{}, fmt.Errorf("cdx: %s is not supported", name)
		}
	}
	// pywb's collapseTime=N keeps a row when the first N digits of its
	// timestamp or its status differ from the last row's; refused rather
	// than half-done, with the nearest parameter named.
	if v.Get("collapseTime") != "" {
		return Query{}, errors.New("cdx: collapseTime is not supported: use collapse=timestamp:N (which, unlike pywb's collapseTime, ignores the status)")
	}
	// The Internet Archive's CDX server pages with resume keys and offsets:
	// a client that pages so would loop over, or repeat, the first rows.
	for _, name := range []string{"resumeKey", "showResumeKey", "offset", "fastLatest", "showDupeCount", "showSkipCount", "lastSkipTimestamp", "gzip"} {
		if v.Has(name) && (name == "resumeKey" || name == "offset" || isTrue(v.Get(name))) {
			return Query{}, fmt.Errorf("cdx: %s (of the Internet Archive's CDX server) is not supported: the result is streamed whole; narrow the query (from, to, a longer prefix) or raise limit", name)
		}
	}
	// A parameter named in the wrong case (matchtype=prefix) would be
	// ignored, and the query answered as another.
	for name := range v {
		if known := knownParam(name); known != "" && known != name {
			return Query{}, fmt.Errorf("cdx: unknown parameter %q: did you mean %q?", name, known)
		}
	}
	return q, nil
}

// params are the parameters a query reads, as they are spelled.
var params = []string{"url", "matchType", "from", "to", "closest", "sort", "reverse", "limit", "filter", "fl", "fields", "collapse", "output",
	"page", "showNumPages", "showPagedIndex", "resolveRevisits", "allowFuzzy", "collapseTime"}

// knownParam returns the parameter name is a spelling of, ignoring case,
// or "".
func knownParam(name string) string {
	for _, p := range params {
		if strings.EqualFold(p, name) {
			return p
		}
	}
	return ""
}

// isTrue is pywb's to_bool: anything but empty, 0, false, f and off.
func isTrue(s string) bool {
	switch strings.ToLower(s) {
	case "", "0", "false", "f", "off":
		return false
	}
	return true
}

func parseFields(fl string) ([]string, error) {
	var fields []string
	seen := make(map[int]bool)
	for _, name := range strings.Split(fl, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		id, ok := fieldByName(name)
		if !ok {
			return nil, fmt.Errorf("cdx: fl: unknown field %q (fields: %s)", name, strings.Join(fieldNames[:], ", "))
		}
		if seen[id] {
			return nil, fmt.Errorf("cdx: fl: field %q listed twice", name)
		}
		seen[id] = true
		fields = append(fields, fieldNames[id])
	}
	return fields, nil
}

// Ranges returns the SURT key ranges [lo, hi) of the capture index (bounds
// for index.Index.Range) that rawURL and matchType cover, in key order, and
// the match type in effect. With matchType empty, pywb's wildcards decide it:
// "example.com/path*" is a prefix match, "*.example.com" a domain match,
// anything else exact. A URL without a scheme is taken as http.
//
// Prefix covers the keys starting with the URL's key (with its trailing "/"
// or "?" kept, as pywb does); host, every key of the URL's host; domain, the
// host and all its subdomains (keys starting "com,example)/" or "com,example,").
func Ranges(rawURL, matchType string) (string, [][2]string, error) {
	mt, key, err := resolve(rawURL, matchType)
	if err != nil {
		return "", nil, err
	}
	switch mt {
	case MatchExact:
		return mt, [][2]string{{key + "\x00", key + "\x01"}}, nil
	case MatchPrefix:
		return mt, [][2]string{prefixRange(key)}, nil
	case MatchHost:
		return mt, [][2]string{prefixRange(key + ")/")}, nil
	default: // domain
		return mt, [][2]string{prefixRange(key + ")/"), prefixRange(key + ",")}, nil
	}
}

// resolve returns the match type in effect and the key it works on: the
// URL's SURT key for exact, the start of its range for prefix, the host part
// of the key for host and domain.
func resolve(rawURL, matchType string) (string, string, error) {
	u := rawURL
	switch matchType {
	case "":
		switch {
		case strings.HasPrefix(u, "*."):
			u, matchType = u[2:], MatchDomain
		case strings.HasSuffix(u, "*"):
			u, matchType = u[:len(u)-1], MatchPrefix
		default:
			matchType = MatchExact
		}
	case MatchDomain:
		u = strings.TrimPrefix(u, "*.")
	case MatchPrefix:
		u = strings.TrimSuffix(u, "*")
	case MatchExact, MatchHost:
	default:
		return "", "", fmt.Errorf("cdx: matchType=%q: want exact, prefix, host or domain", matchType)
	}
	if u == "" {
		return "", "", fmt.Errorf("cdx: url=%q names no URL", rawURL)
	}
	key, err := urlkey.SURT(withScheme(u))
	if err != nil {
		return "", "", fmt.Errorf("cdx: url=%q: %w", rawURL, err)
	}
	switch matchType {
	case MatchExact:
	case MatchPrefix:
		// The SURT drops a trailing slash and an empty query; the user
		// asked for what lies under them.
		if strings.HasSuffix(u, "/") && !strings.HasSuffix(key, "/") {
			key += "/"
		} else if strings.HasSuffix(u, "?") && !strings.HasSuffix(key, "?") {
			key += "?"
		}
	default:
		i := strings.Index(key, ")/")
		if i < 0 {
			return "", "", fmt.Errorf("cdx: url=%q: no host in key %q", rawURL, key)
		}
		key = key[:i]
	}
	return matchType, key, nil
}

// withScheme makes "example.com/a" and "//example.com/a" http URLs, as pywb
// takes them; a URL with another scheme is left for SURT to refuse.
func withScheme(u string) string {
	l := strings.ToLower(u)
	switch {
	case strings.HasPrefix(l, "http:"), strings.HasPrefix(l, "https:"), strings.Contains(u, "://"):
		return u
	case strings.HasPrefix(u, "//"):
		return "http:" + u
	}
	return "http://" + u
}

// prefixRange returns the range of keys starting with p.
func prefixRange(p string) [2]string {
	end := []byte(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return [2]string{p, string(end[:i+1])}
		}
	}
	return [2]string{p, ""} // all 0xff: no upper bound
}

// parseTimestamp parses the timestamp parameter name, padded to the first
// second it names or, when high, to the last.
func parseTimestamp(name, s string, high bool) (time.Time, error) {
	t, err := index.ParseTimestamp(s, high)
	if err != nil {
		return time.Time{}, fmt.Errorf("cdx: %s: %w", name, err)
	}
	return t, nil
}
