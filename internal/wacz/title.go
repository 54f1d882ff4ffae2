package wacz

import (
	"bytes"
	"mime"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/warc"
)

const (
	// A page's title is looked for in the first titleScan bytes of its
	// record, then, if not found there, in the first maxTitleScan.
	titleScan    = 16 << 10
	maxTitleScan = 256 << 10
	maxTitleLen  = 1000
)

// title returns the title of an HTML response record whose block is
// block, looked for in its first titleScan bytes, then, if not found
// there, its first maxTitleScan.
func title(block []byte) string {
	t := pageTitle(block[:min(len(block), titleScan)])
	if t == "" && len(block) > titleScan {
		t = pageTitle(block[:min(len(block), maxTitleScan)])
	}
	return t
}

// pageTitle returns the <title> of an HTML response record whose block starts
// with block, or "" when it cannot be had cheaply and reliably (a
// body in an unknown coding, no title in the part read).
func pageTitle(block []byte) string {
	end := warc.HTTPHeaderEnd(block)
	if end < 0 {
		return ""
	}
	h := warc.ReadHTTPHead(block[:end]).Header
	body, _ := warc.HTTPBody(block, h)
	// Decode what there is of a compressed body: the start is enough.
	ce := h.Get("Content-Encoding")
	for _, c := range strings.Split(ce, ",") {
		switch strings.ToLower(strings.TrimSpace(c)) {
		case "", "identity", "gzip", "x-gzip", "br", "deflate", "zstd":
		default:
			return ""
		}
	}
	body, _ = fetch.DecodeContent(body, ce, maxTitleScan)
	ct := h.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt != "text/html" && mt != "application/xhtml+xml" {
		return ""
	}
	r, err := charset.NewReader(bytes.NewReader(body), ct)
	if err != nil {
		r = bytes.NewReader(body)
	}
	z := html.NewTokenizer(r)
	z.SetMaxBuf(maxTitleScan)
	depth := 0 // inside <svg> or <math>, whose <title> is not the page's
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return ""
		case html.StartTagToken, html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Svg || a == atom.Math:
				if tt == html.StartTagToken {
					depth++
				} else if depth > 0 {
					depth--
				}
			case a == atom.Body && tt == html.StartTagToken:
				return "" // no title in the head
			case a == atom.Title && tt == html.StartTagToken && depth == 0:
				if z.Next() != html.TextToken {
					return ""
				}
				return cleanTitle(string(z.Text()))
			}
		}
	}
}

func cleanTitle(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) > maxTitleLen {
		s = s[:maxTitleLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
