package crawl

import (
	"context"
	"maps"
	"testing"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// ArchivedPages reads a site in batches; where a batch ends changes
// nothing: every archived page is read once, with the links its metadata
// record lists, however many times it was captured (changed and not).
func TestArchivedPagesReadsEveryPageOnce(t *testing.T) {
	// modern-arrow.test's www. alias redirects to it: two pages of one key.
	web, srv := startWeb(t, websim.Config{Seed: 3, Hosts: 4, Pages: 60})
	cfg := testConfig(t, srv.URL(), append(web.Seeds(), "http://www.modern-arrow.test/")...)
	runCrawl(t, cfg)
	again := cfg
	again.Seeds, again.RecrawlAll = nil, true
	web.SetVersion(100) // most pages change
	runCrawl(t, again)

	// read opens the archive, and returns the pages of each site read
	// batch URLs at a time, the URLs with a metadata record, and how many
	// URL keys have more than one of those.
	read := func(batch int) (pages map[string]map[string]int, withRecord map[string]map[string]bool, sharedKeys int) {
		t.Helper()
		c, err := Open(again)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		sites, err := c.Sites(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(sites) < 2 {
			t.Fatalf("sites %v, want websim's two and more", sites)
		}
		pages = map[string]map[string]int{}
		for _, site := range sites {
			got := map[string]int{}
			err := c.ArchivedPages(ctx, site, batch, func(ps []Page) error {
				keys := map[string]bool{}
				for _, p := range ps {
					k, err := urlkey.SURT(p.URL)
					if err != nil {
						t.Fatal(err)
					}
					keys[k] = true
				}
				if len(keys) > batch {
					t.Errorf("a batch of %d URL keys, over %d", len(keys), batch)
				}
				for _, p := range ps {
					got[p.URL] += 1000 + len(p.Links) // read once: the thousands count the reads
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			pages[site] = got
		}
		// Every URL with a metadata record is a page, those that share a
		// key (a www. alias redirecting to its site) too.
		withRecord = map[string]map[string]bool{}
		urlsOfKey := map[string]map[string]bool{}
		idx := index.New(c.db)
		local := archive.NewLocal(idx, c.warcDir)
		err = idx.Range(ctx, "", "", false, func(cp index.Capture) (bool, error) {
			if _, found := c.metadataOf(ctx, local, cp); found {
				site := urlkey.SiteOfKey(cp.URLKey)
				if withRecord[site] == nil {
					withRecord[site] = map[string]bool{}
				}
				withRecord[site][cp.URL] = true
				if urlsOfKey[cp.URLKey] == nil {
					urlsOfKey[cp.URLKey] = map[string]bool{}
				}
				urlsOfKey[cp.URLKey][cp.URL] = true
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, us := range urlsOfKey {
			if len(us) > 1 {
				sharedKeys++
			}
		}
		return pages, withRecord, sharedKeys
	}

	whole, withRecord, shared := read(1_000_000)
	if shared == 0 {
		t.Fatal("no URL key with two pages: the test proves nothing of them")
	}
	withLinks := 0
	for site, got := range whole {
		if !maps.EqualFunc(got, withRecord[site], func(int, bool) bool { return true }) {
			t.Errorf("%s: %d pages read, want the %d URLs with a metadata record", site, len(got), len(withRecord[site]))
		}
		for u, v := range got {
			if v/1000 != 1 {
				t.Errorf("%s read %d times", u, v/1000)
			}
			if v%1000 > 0 {
				withLinks++
			}
		}
	}
	if withLinks < 20 {
		t.Errorf("%d pages read with links, want websim's pages (at least 20)", withLinks)
	}
	for _, batch := range []int{1, 3, 7} {
		if got, _, _ := read(batch); !maps.EqualFunc(got, whole, maps.Equal) {
			t.Errorf("read %d URLs at a time: other pages than read at once", batch)
		}
	}

	// More unchanged visits than pagesLooked after each page's last
	// change: revisits, with no metadata record. The pages read are the
	// same.
	for range pagesLooked + 1 {
		runCrawl(t, again)
	}
	if got, _, _ := read(1_000_000); !maps.EqualFunc(got, whole, maps.Equal) {
		t.Errorf("after %d unchanged visits: other pages than read before", pagesLooked+1)
	}
}
