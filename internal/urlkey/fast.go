package urlkey

import "strings"

// fastCanonical resolves the common, simple references — an absolute
// http(s) URL or a relative reference made only of unreserved path
// characters, against a base that is itself canonical — with string
// operations, and reports false for anything else, which the WHATWG parser
// then handles. FuzzFastPath checks that whenever it answers, its answer is
// the WHATWG parser's.
func fastCanonical(base, ref string) (string, bool) {
	if i := strings.IndexByte(ref, '#'); i >= 0 {
		ref = ref[:i]
	}
	var origin, path string
	if base != "" {
		// The base must be in canonical shape: an absolute, simple path.
		var ok bool
		origin, path, ok = splitSimple(base)
		if !ok || path == "" || path[0] != '/' || !simplePathRef(path) {
			return "", false
		}
	}
	if strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://") {
		return fastAbsolute(ref)
	}
	if base == "" {
		return "", false
	}
	switch {
	case ref == "":
		// "" and "#top" are the base itself.
		return base, true
	case strings.HasPrefix(ref, "//"):
		// Scheme-relative: the base's scheme, the reference's host.
		return fastAbsolute(origin[:strings.IndexByte(origin, ':')+1] + ref)
	case ref[0] == '/':
		if !simplePathRef(ref) {
			return "", false
		}
		return origin + ref, true
	case ref[0] == '.':
		return fastDotted(origin, path, ref)
	case ref[0] == '?':
		if !simpleQuery(ref[1:]) {
			return "", false
		}
		if q := strings.IndexByte(path, '?'); q >= 0 {
			path = path[:q]
		}
		return origin + path + ref, true
	case simplePathRef(ref):
		if q := strings.IndexByte(path, '?'); q >= 0 {
			path = path[:q]
		}
		return origin + path[:strings.LastIndexByte(path, '/')+1] + ref, true
	}
	return "", false
}

// fastDotted resolves a reference that starts with "./" and "../" steps
// followed by a simple relative path (or nothing): each "../" takes a
// segment off the base's directory, never above the root.
func fastDotted(origin, basePath, ref string) (string, bool) {
	if q := strings.IndexByte(basePath, '?'); q >= 0 {
		basePath = basePath[:q]
	}
	dir := basePath[:strings.LastIndexByte(basePath, '/')+1]
	for {
		if rest, ok := strings.CutPrefix(ref, "./"); ok {
			ref = rest
		} else if rest, ok := strings.CutPrefix(ref, "../"); ok {
			ref = rest
			if dir != "/" {
				dir = dir[:strings.LastIndexByte(dir[:len(dir)-1], '/')+1]
			}
		} else {
			break
		}
	}
	if ref != "" && (ref[0] == '/' || ref[0] == '?' || !simplePathRef(ref)) {
		return "", false
	}
	return origin + dir + ref, true
}

// fastAbsolute accepts "http(s)://host/path?query" with a lowercase DNS
// host (no port, no IP) and a simple path and query.
func fastAbsolute(ref string) (string, bool) {
	origin, path, ok := splitSimple(ref)
	if !ok {
		return "", false
	}
	if path == "" {
		return origin + "/", true
	}
	if path[0] == '?' {
		if !simpleQuery(path[1:]) {
			return "", false
		}
		return origin + "/" + path, true
	}
	if !simplePathRef(path) {
		return "", false
	}
	return ref, true
}

// splitSimple splits a URL into origin and the rest, if its host is simple.
func splitSimple(u string) (origin, rest string, ok bool) {
	n := len("http://")
	if strings.HasPrefix(u, "https://") {
		n++
	} else if !strings.HasPrefix(u, "http://") {
		return "", "", false
	}
	end := n
	for end < len(u) && u[end] != '/' && u[end] != '?' {
		end++
	}
	if !simpleHost(u[n:end]) {
		return "", "", false
	}
	return u[:end], u[end:], true
}

// simpleHost: lowercase letters, digits, '-' and '.', labels non-empty, no
// punycode (IDNA validation is the parser's job), and a last label that
// starts with a letter, so it is never read as an IPv4 number ("0x1", "10").
func simpleHost(h string) bool {
	if h == "" || len(h) > 253 || h[0] == '.' || h[len(h)-1] == '.' || strings.Contains(h, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	return last[0] >= 'a' && last[0] <= 'z' && !strings.HasPrefix(h, "xn--") && !strings.Contains(h, ".xn--")
}

// simplePathRef: a path (relative or absolute) of unreserved characters,
// optionally followed by a simple query, with no dot segments.
func simplePathRef(p string) bool {
	path, query, hasQuery := strings.Cut(p, "?")
	if hasQuery && !simpleQuery(query) {
		return false
	}
	if path == "" {
		return hasQuery
	}
	for i := 0; i < len(path); i++ {
		if !pathByte(path[i]) {
			return false
		}
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	// A first segment with ':' would be a scheme.
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ":")
}

func simpleQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		if c := q[i]; !pathByte(c) && c != '?' && c != ':' {
			return false
		}
	}
	return true
}

// pathByte is an ASCII byte that WHATWG leaves alone in paths and queries.
func pathByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&()*+,;=@/", c) >= 0
}
