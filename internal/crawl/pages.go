package crawl

import (
	"bytes"
	"context"
	"slices"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// pagesLooked bounds how many captures of a URL, newest first, are looked
// at for the metadata record that lists its links: the newest visits of an
// unchanged page are revisits, which have none.
const pagesLooked = 8

// PageBatch is how many URLs' pages ArchivedPages reads at a time, so that
// a site of any size is read in bounded memory.
const PageBatch = 500

// Sites lists the sites this crawler's archive holds captures of, in key
// order.
func (c *Crawler) Sites(ctx context.Context) ([]string, error) {
	var sites []string
	err := index.New(c.db).Range(ctx, "", "", false, func(cp index.Capture) (bool, error) {
		if s := urlkey.SiteOfKey(cp.URLKey); len(sites) == 0 || sites[len(sites)-1] != s {
			sites = append(sites, s)
		}
		return true, nil
	})
	return sites, err
}

// ArchivedPages calls fn with the archived pages of site, batch URLs at a
// time, with what their metadata records say: for each URL, the record of
// its newest capture that has one, looking no further back than its last
// change (a response, or a revisit of a payload other than the last one:
// older links are of older content), however many unchanged revisits,
// which have none, came after it. URLs that share a key (a host and its
// www. alias, http and https, parameters in another order) are pages of
// their own, each with its own captures. These are what Rediscover
// follows the links of again.
func (c *Crawler) ArchivedPages(ctx context.Context, site string, batch int, fn func([]Page) error) error {
	type looked struct {
		// Its newest captures since its last change, oldest first: the
		// first capture of a URL is a change too, so that newest[0] is the
		// change until change is set.
		newest []index.Capture
		change *index.Capture // the change, once older than those
	}
	idx := index.New(c.db)
	local := archive.NewLocal(idx, c.warcDir)
	lo, hi := site+")/", site+")0"
	for {
		var urls []*looked
		ofKey := map[string]*looked{} // the URLs of the key being read
		key, next := "", ""
		err := idx.Range(ctx, lo, hi, false, func(cp index.Capture) (bool, error) {
			if cp.URLKey != key {
				// A batch ends between keys, so that the next starts at one.
				if len(urls) >= batch {
					next = cp.URLKey
					return false, nil
				}
				key = cp.URLKey
				clear(ofKey)
			}
			k := ofKey[cp.URL]
			if k == nil {
				k = &looked{}
				ofKey[cp.URL] = k
				urls = append(urls, k)
			}
			if len(k.newest) == 0 || cp.Type == warc.TypeResponse || cp.Digest != k.newest[len(k.newest)-1].Digest {
				k.newest, k.change = k.newest[:0], nil
			}
			if len(k.newest) == pagesLooked {
				if dropped := k.newest[0]; k.change == nil {
					k.change = &dropped
				}
				k.newest = k.newest[1:]
			}
			k.newest = append(k.newest, cp)
			return true, nil
		})
		if err != nil {
			return err
		}
		var pages []Page
		for _, k := range urls {
			caps := slices.Clone(k.newest)
			slices.Reverse(caps)
			if k.change != nil {
				caps = append(caps, *k.change)
			}
			for _, cp := range caps {
				if p, found := c.metadataOf(ctx, local, cp); found {
					p.URL, p.CSS = cp.URL, cp.MIME == "text/css"
					pages = append(pages, p)
					break
				}
			}
		}
		if err := fn(pages); err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		lo = next
	}
}

// metadataOf reads what capture cp's metadata record says, if it has one.
// A record that cannot be read whole (a line over ParseMetadata's bound:
// our records have none) is logged, and the links read before the fault
// are followed; one that cannot be read at all is logged and passed over:
// its page's links are then not followed again.
func (c *Crawler) metadataOf(ctx context.Context, local *archive.Local, cp index.Capture) (Page, bool) {
	members, err := local.Companions(ctx, cp)
	if err != nil {
		c.cfg.Logger.Warn("reading the records written with a capture", "url", cp.URL, "err", err)
		return Page{}, false
	}
	for _, m := range members {
		rd, err := warc.NewReader(bytes.NewReader(m))
		if err != nil {
			continue
		}
		rec, _, err := rd.Next()
		if err != nil || rec.Type() != warc.TypeMetadata {
			continue
		}
		p, err := ParseMetadata(rec.Block)
		if err != nil {
			c.cfg.Logger.Warn("reading the metadata record of a capture", "url", cp.URL, "err", err)
		}
		return p, true
	}
	return Page{}, false
}
