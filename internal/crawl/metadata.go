package crawl

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// The metadata record written with a capture that has links: the page's
// hop counts and its outlinks, which Rediscover reads back from a copy.

// maxRecordedCount bounds the hop counts a metadata record may claim (a
// peer's records are read too): with a larger one, or one that does not
// read, the record's counts are not believed.
const maxRecordedCount = 1 << 20

// Fields of the metadata record that say where the crawl found the page
// (frontier.Item's counts), so that its links can be followed again as
// they were from a copy of the records (Rediscover): a node that stores a
// copy knows the page from its records only.
const (
	fieldDepth        = "waggle-depth"
	fieldEmbed        = "waggle-embed"
	fieldRedirects    = "waggle-redirects"
	fieldOffScopeHops = "waggle-off-scope-hops"
)

// hopFields gives an item's counts as metadata record fields: the depth,
// and the others when they are not zero.
func hopFields(it frontier.Item) []warc.Field {
	fs := []warc.Field{{Name: fieldDepth, Value: strconv.Itoa(it.Depth)}}
	if it.Embed {
		fs = append(fs, warc.Field{Name: fieldEmbed, Value: "true"})
	}
	if it.Redirects > 0 {
		fs = append(fs, warc.Field{Name: fieldRedirects, Value: strconv.Itoa(it.Redirects)})
	}
	if it.OffScopeHops > 0 {
		fs = append(fs, warc.Field{Name: fieldOffScopeHops, Value: strconv.Itoa(it.OffScopeHops)})
	}
	return fs
}

// outlinkFields lists outlinks in the metadata record in Heritrix's form:
// "outlink: <url> <hop> <path>", hop L (link), E (embed) or R (redirect).
func outlinkFields(links []extract.Outlink) []warc.Field {
	fs := make([]warc.Field, 0, len(links))
	for _, l := range links {
		hop := "L"
		switch l.Kind {
		case extract.Embed:
			hop = "E"
		case extract.Redirect:
			hop = "R"
		}
		fs = append(fs, warc.Field{Name: "outlink", Value: l.URL + " " + hop + " " + l.Path})
	}
	return fs
}

// ParseMetadata reads what a metadata record's block says of its page, as
// hopFields and outlinkFields write it: the outlinks, in Heritrix's form ("outlink:
// <url> <hop> <path>", those whose URL is canonical), and the hop counts
// (hopFields). The URL and CSS of the Page are the caller's to set.
func ParseMetadata(block []byte) (Page, error) {
	var p Page
	err := parseMetadata(block, &p, func(value string) {
		if l, ok := parseOutlink(value); ok {
			p.Links = append(p.Links, l)
		}
	})
	return p, err
}

// metadataFacts reads the hop counts of a metadata record's block and its
// outlinks' URLs as written, unchecked: what a copy's re-crawl entry
// keeps of them is their hashes (recrawl.Entry.Links), to tell a changed
// page's new links from those it had.
func metadataFacts(block []byte) (hops frontier.Item, hasHops bool, links []string) {
	var p Page
	err := parseMetadata(block, &p, func(value string) {
		if u, _, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
			links = append(links, u)
		}
	})
	if err != nil {
		return frontier.Item{}, false, nil
	}
	return p.Hops, p.HasHops, links
}

// parseMetadata reads a metadata record's hop counts into p, and gives
// outlink each outlink field's value.
func parseMetadata(block []byte, p *Page, outlink func(value string)) error {
	sc := bufio.NewScanner(bytes.NewReader(block))
	sc.Buffer(nil, 1<<20)
	bad := false // a count that does not read: the counts are not believed
	count := func(v string) int {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > maxRecordedCount {
			bad = true
			return 0
		}
		return n
	}
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.ToLower(name) {
		case "outlink":
			outlink(value)
		case fieldDepth:
			p.Hops.Depth, p.HasHops = count(value), true
		case fieldEmbed:
			p.Hops.Embed = strings.TrimSpace(value) == "true"
		case fieldRedirects:
			p.Hops.Redirects = count(value)
		case fieldOffScopeHops:
			p.Hops.OffScopeHops = count(value)
		}
	}
	if bad || !p.HasHops {
		p.Hops, p.HasHops = frontier.Item{}, false
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("crawl: metadata record: %w", err)
	}
	return nil
}

func parseOutlink(value string) (extract.Outlink, bool) {
	// Split as a writer's control characters, made spaces, would be.
	fields := strings.FieldsFunc(value, func(r rune) bool { return unicode.IsSpace(r) || r < 0x20 || r == 0x7f })
	if len(fields) < 2 {
		return extract.Outlink{}, false
	}
	u, err := urlkey.Canonical("", fields[0])
	if err != nil || u != fields[0] {
		return extract.Outlink{}, false
	}
	l := extract.Outlink{URL: u, Kind: extract.Link}
	switch fields[1] {
	case "E":
		l.Kind = extract.Embed
	case "R":
		l.Kind = extract.Redirect
	}
	if len(fields) > 2 {
		l.Path = fields[2]
	}
	return l, true
}
