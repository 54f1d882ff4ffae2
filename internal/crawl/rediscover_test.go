package crawl

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A node that took over a site holds copies of its captures, made by the
// node that fetched them: a peer sending one of those URLs does not make
// it fetch the page again, Rediscover follows again the links of the
// copied pages, fetching only those not archived yet, and the links of
// what it fetches lead it to none of the archived pages either.
func TestRediscoverFollowsArchivedLinksOnly(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, `<html><body><a href="/a">a</a> <a href="/b">b</a> <a href="/c">c</a></body></html>`)
		default:
			fmt.Fprint(w, `<html><body><a href="/">home</a> <a href="/deeper`+r.URL.Path+`">on</a></body></html>`)
		}
	})
	home, a, c := srv.URL+"/", srv.URL+"/a", srv.URL+"/c"

	// The nodes that fetched them: the home page and /a, nothing more.
	var copies []Copy
	read := map[string]Page{} // what their metadata records say
	for _, u := range []string{home, a} {
		src := directConfig(t, u)
		src.MaxPages = 1
		runCrawl(t, src)
		caps := archived(t, src.Data)
		if len(caps) != 1 || len(caps[u]) != 1 {
			t.Fatalf("the fetching node archived %d URLs, want %s once", len(caps), u)
		}
		cp := caps[u][0]
		copies = append(copies, captureCopy(t, filepath.Join(src.Data, "warc"), cp))
		eachRecord(t, src.Data, func(rec *warc.Record, _ warc.Location, _ bool) {
			if rec.Type() == warc.TypeMetadata {
				p, err := ParseMetadata(rec.Block)
				if err != nil {
					t.Fatal(err)
				}
				p.URL = rec.TargetURI()
				read[p.URL] = p
			}
		})
	}
	homePage := read[home]
	if len(homePage.Links) != 3 || !homePage.HasHops || homePage.Hops.Depth != 0 {
		t.Fatalf("the home page's metadata record reads %+v; want 3 outlinks and depth 0", homePage)
	}

	dst := directConfig(t)
	dst.MaxDepth = 2
	dst.Router = &halfRouter{mine: map[string]bool{urlkey.Site(home): true}, routed: map[string]int{}}
	cr, stop := running(t, dst)
	defer stop()
	ctx := context.Background()
	if _, err := cr.Store(ctx, copies); err != nil {
		t.Fatal(err)
	}
	// A peer sends /a, archived here: it is not fetched (hits below).
	if refused, err := cr.Accept(ctx, []frontier.Item{{URL: a, Depth: 1}}); err != nil || refused != 0 {
		t.Fatalf("Accept: %d refused, %v", refused, err)
	}
	// A record written before the hop counts were: the page's depth is
	// its entry's, which for a copy says 0 and is not believed under a
	// depth limit (/deeper/a, hits below).
	if n, err := cr.Rediscover(ctx, []Page{{URL: a, Links: read[a].Links}}, func(string) bool { return true }); err != nil || n != 0 {
		t.Errorf("a copied page without hop counts, under a depth limit: %d links queued (%v), want 0", n, err)
	}
	n, err := cr.Rediscover(ctx, []Page{homePage}, func(u string) bool { return u != c })
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("Rediscover queued %d links, want 1 (/b: /a is archived, /c not selected)", n)
	}
	if got := cr.Stats().Rediscovered; got != 1 {
		t.Errorf("Stats.Rediscovered = %d, want 1", got)
	}
	deeper := srv.URL + "/deeper/b"
	for deadline := time.Now().Add(time.Minute); len(archivedBy(t, cr, deeper)) == 0 || cr.Stats().Queued > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("/b and /deeper/b were not fetched, or the crawl did not settle: %+v", cr.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	// Nothing else was fetched: /b's link to the home page, archived, is
	// not followed, and the depth the home page was fetched at holds
	// (/deeper/b, at depth 2, is not followed further).
	want := map[string]int{"/": 1, "/a": 1, "/b": 1, "/deeper/b": 1}
	for path, n := range hits() {
		if n != want[path] {
			t.Errorf("%s fetched %d times, want %d", path, n, want[path])
		}
	}
}

// archivedBy returns the captures of u that cr's index holds.
func archivedBy(t *testing.T, cr *Crawler, u string) []index.Capture {
	t.Helper()
	key, err := urlkey.SURT(u)
	if err != nil {
		t.Fatal(err)
	}
	var caps []index.Capture
	err = index.New(cr.db).Captures(context.Background(), key, false, func(c index.Capture) (bool, error) {
		caps = append(caps, c)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return caps
}

// What hopFields and outlinkFields write into a metadata record reads back
// as it was.
func TestMetadataRoundTrip(t *testing.T) {
	want := Page{
		Links: []extract.Outlink{
			{URL: "http://example.com/a", Kind: extract.Link, Path: "a/@href"},
			{URL: "http://example.com/s.css", Kind: extract.Embed, Path: "link/@href"},
			{URL: "https://example.com/", Kind: extract.Redirect, Path: "http/location"},
		},
		Hops:    frontier.Item{Depth: 3, Embed: true, Redirects: 2, OffScopeHops: 1},
		HasHops: true,
	}
	got, err := ParseMetadata(metadataBlock(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
}

// Hop counts that do not read, or are out of bounds, are not believed: the
// page is then known by its re-crawl entry, which under a depth limit a
// copy's is not.
func TestMetadataWithBadCountsHasNoHops(t *testing.T) {
	for _, block := range []string{
		"waggle-depth: -3\r\n",
		"waggle-depth: x\r\n",
		"waggle-depth: 2000000\r\n",
		"waggle-depth: 2\r\nwaggle-redirects: many\r\n",
		"waggle-embed: true\r\n", // no depth
	} {
		p, err := ParseMetadata([]byte(block + "outlink: http://example.com/a L a/@href\r\n"))
		if err != nil || p.HasHops || p.Hops != (frontier.Item{}) || len(p.Links) != 1 {
			t.Errorf("%q: %+v, %v; want the link, and no counts", block, p, err)
		}
	}
}

func metadataBlock(p Page) []byte {
	var fs []warc.Field
	if p.HasHops {
		fs = hopFields(p.Hops)
	}
	return warc.NewMetadata("http://example.com/", time.Now(), append(fs, outlinkFields(p.Links)...)).Block
}

// ParseMetadata reads blocks that come from disk and from peers: any
// bytes give canonical URLs and bounded counts, and what it reads
// survives being written and read again.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte("waggle-depth: 2\r\noutlink: http://example.com/a L a/@href\r\noutlink: http://example.com/b E img/@src\r\n"))
	f.Add([]byte("outlink: HTTP://EXAMPLE.com/../a R\r\nvia: x\r\noutlink:\r\nwaggle-redirects: -4\r\nwaggle-embed: true\r\n"))
	f.Add([]byte("Outlink: http://example.com/%zz L\n\nwaggle-off-scope-hops: 99999999999\n\x00"))
	f.Fuzz(func(t *testing.T, block []byte) {
		p, err := ParseMetadata(block)
		if err != nil {
			return
		}
		for _, n := range []int{p.Hops.Depth, p.Hops.Redirects, p.Hops.OffScopeHops} {
			if n < 0 || n > maxRecordedCount {
				t.Fatalf("a count of %d read", n)
			}
		}
		if !p.HasHops {
			p.Hops = frontier.Item{} // not written without the depth
		}
		again, err := ParseMetadata(metadataBlock(p))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("written and read again: %#v, want %#v", again, p)
		}
	})
}
