package wacz

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Selection says which captures to export. The zero Selection is everything.
type Selection struct {
	// Host selects the captures of one host (with a port when not the
	// default one). As in SURT keys, "www." is ignored: example.com and
	// www.example.com are the same host here.
	Host string
	// Prefix selects the captures whose URL starts with it, compared as SURT
	// keys, as pywb's prefix queries do: scheme, "www." and letter case do
	// not matter. It must be an absolute http(s) URL.
	Prefix string
	// From and To bound the capture time: From <= time < To. Zero means no bound.
	From, To time.Time
}

// matcher is a Selection made ready for the index: the key range to scan
// and the test for each capture in it.
type matcher struct {
	sel    Selection
	lo, hi string // key range for index.Range ("" hi: no bound)
	prefix string // SURT key prefix ("" matches all)
	exact  string // a key matched as well: the directory itself, whose SURT has no trailing slash
}

func (s Selection) matcher() (matcher, error) {
	m := matcher{sel: s}
	if s.Host != "" && s.Prefix != "" {
		return m, errors.New("wacz: select a host or a URL prefix, not both")
	}
	if !s.From.IsZero() && !s.To.IsZero() && !s.From.Before(s.To) {
		return m, fmt.Errorf("wacz: empty time range: from %s to %s", s.From.UTC().Format(time.RFC3339), s.To.UTC().Format(time.RFC3339))
	}
	switch {
	case s.Host != "":
		if strings.ContainsAny(s.Host, "/?#@ ") {
			return m, fmt.Errorf("wacz: %q is not a host name", s.Host)
		}
		key, err := urlkey.SURT("http://" + s.Host + "/")
		if err != nil {
			return m, fmt.Errorf("wacz: host %q: %w", s.Host, err)
		}
		m.prefix = key[:strings.IndexByte(key, ')')+1]
		m.lo, m.hi = m.prefix, prefixEnd(m.prefix)
	case s.Prefix != "":
		key, err := urlkey.SURT(s.Prefix)
		if err != nil {
			return m, fmt.Errorf("wacz: prefix %q: %w", s.Prefix, err)
		}
		m.prefix, m.lo, m.hi = key, key, prefixEnd(key)
		// SURT drops a trailing slash, but a prefix ending in one means a
		// directory: what is under it, and the directory itself.
		if strings.HasSuffix(s.Prefix, "/") && !strings.HasSuffix(key, "/") {
			m.prefix, m.exact = key+"/", key
			m.hi = prefixEnd(m.prefix)
		}
	}
	return m, nil
}

// Check reports what is wrong with a selection, as Export would.
func (s Selection) Check() error {
	_, err := s.matcher()
	return err
}

// contains reports whether the selection holds c.
func (m matcher) contains(c index.Capture) bool {
	if !strings.HasPrefix(c.URLKey, m.prefix) && (m.exact == "" || c.URLKey != m.exact) {
		return false
	}
	t := c.Time
	return (m.sel.From.IsZero() || !t.Before(m.sel.From)) && (m.sel.To.IsZero() || t.Before(m.sel.To))
}

// String describes the selection for the manifest.
func (s Selection) String() string {
	var b strings.Builder
	switch {
	case s.Host != "":
		fmt.Fprintf(&b, "captures of host %s", s.Host)
	case s.Prefix != "":
		fmt.Fprintf(&b, "captures of URLs under %s", s.Prefix)
	default:
		b.WriteString("all captures")
	}
	if !s.From.IsZero() {
		fmt.Fprintf(&b, " from %s", s.From.UTC().Format(time.RFC3339Nano))
	}
	if !s.To.IsZero() {
		fmt.Fprintf(&b, " before %s", s.To.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// prefixEnd returns the smallest string greater than every string with prefix p.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}
