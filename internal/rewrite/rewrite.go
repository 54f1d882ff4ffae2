// Package rewrite rewrites archived HTML, CSS and JavaScript for replay, the
// way Wayback machines and pywb do: every URL a replayed page would load is
// turned into an archive URL chosen by the caller's Mapper, so the page loads
// everything from the archive and nothing from the live web.
//
// HTML is rewritten token by token with golang.org/x/net/html's tokenizer;
// whatever is not rewritten is copied byte for byte, and the page's bytes are
// never transcoded. CSS is rewritten by a small tokenizer that follows CSS
// Syntax Level 3 closely enough to find url(), @import and image-set()
// references. JavaScript is only touched where it reads or sets the page's
// location; the client-side half of that lives in ClientJS.
package rewrite

import (
	"errors"
	"strings"

	"github.com/waggle-archive/waggle/internal/urlkey"
)

// Mapper returns the URL the browser should load for absURL (an absolute
// http(s) URL the page refers to, canonical as urlkey.Canonical makes it,
// without fragment), given the modifier naming what kind of resource it is:
//
//	"mp_" a page or navigation: a, area, form action, meta refresh, base
//	"if_" iframe and frame src
//	"im_" images: img src and srcset, picture source, input type=image,
//	      video poster, background, icons, CSS url() other than fonts
//	"cs_" stylesheets: link rel=stylesheet, @import
//	"js_" scripts: script src, link rel=modulepreload or preload as=script
//	"oe_" object and embed data, audio, video and track src, fonts, and
//	      other embedded things
//	""    anything else (link rel=alternate, canonical …)
//
// The fragment of a reference, if any, is appended to what Mapper returns.
type Mapper func(absURL, mod string) string

// Modifiers passed to a Mapper.
const (
	modPage   = "mp_"
	modFrame  = "if_"
	modImage  = "im_"
	modCSS    = "cs_"
	modJS     = "js_"
	modEmbed  = "oe_"
	modOther  = ""
	wombatLoc = "WB_wombat_location"
)

// canonicalBase returns the canonical form of a document's URL for resolving
// references against, or "" when it is not a usable http(s) URL (then only
// absolute references are rewritten; relative ones resolve in the browser
// against the archive URL of the document anyway).
func canonicalBase(u string) string {
	c, err := urlkey.Canonical("", strings.TrimSpace(u))
	if err != nil {
		return ""
	}
	return c
}

// resolve resolves ref against base (canonical, or "") and reports the
// absolute canonical URL without fragment, the fragment ("#…" or ""), and
// whether ref is an http(s) reference that should be mapped at all. Empty
// references, pure fragments and other schemes (javascript:, data:, mailto:,
// tel:, about:, blob: …) are not.
func resolve(base, ref string) (abs, frag string, ok bool) {
	ref = trimHTMLSpace(ref)
	if ref == "" || ref[0] == '#' {
		return "", "", false
	}
	if s, has := scheme(ref); has && s != "http" && s != "https" {
		return "", "", false
	}
	main := ref
	if i := strings.IndexByte(ref, '#'); i >= 0 {
		main, frag = ref[:i], ref[i:]
	}
	abs, err := urlkey.Canonical(base, main)
	if errors.Is(err, urlkey.ErrTooLong) {
		// Too long to be archived under waggle's rules, yet a browser would
		// fetch it: map it all the same, resolved but not length-checked.
		abs, err = urlkey.CanonicalAnyLength(base, main)
	}
	if err != nil {
		return "", "", false
	}
	return abs, frag, true
}

// scheme returns the lowercased scheme of ref if it starts with one. Tabs
// and newlines are ignored, as the URL parser removes them ("java\nscript:").
func scheme(ref string) (string, bool) {
	var b []byte
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		switch {
		case c == '\t' || c == '\n' || c == '\r':
			continue
		case c == ':':
			return string(b), len(b) > 0
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z':
		case (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') && len(b) > 0:
		default:
			return "", false
		}
		if len(b) >= 32 {
			return "", false
		}
		b = append(b, c)
	}
	return "", false
}

// mapRef returns what ref (a reference found in a document whose base is
// base) should become, or ok=false to leave it as it is.
func mapRef(base, ref, mod string, m Mapper) (string, bool) {
	abs, frag, ok := resolve(base, ref)
	if !ok {
		return "", false
	}
	return m(abs, mod) + frag, true
}

func isHTMLSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// trimHTMLSpace strips leading and trailing ASCII whitespace, as browsers do
// to URL attribute values.
func trimHTMLSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isHTMLSpace(s[i]) {
		i++
	}
	for j > i && isHTMLSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}

// edit replaces src[start:end] with repl.
type edit struct {
	start, end int
	repl       string
}

// apply returns src with edits (sorted, not overlapping) applied; src itself
// when there are none.
func apply(src []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return src
	}
	n := len(src)
	for _, e := range edits {
		n += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	prev := 0
	for _, e := range edits {
		out = append(out, src[prev:e.start]...)
		out = append(out, e.repl...)
		prev = e.end
	}
	return append(out, src[prev:]...)
}
