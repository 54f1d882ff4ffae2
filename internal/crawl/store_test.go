package crawl

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/robots"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// member reads the gzip member at loc in dir.
func member(t *testing.T, dir string, loc warc.Location) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, loc.Segment))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, loc.Length)
	if _, err := f.ReadAt(b, loc.Offset); err != nil {
		t.Fatal(err)
	}
	return b
}

// Records copied from another node are stored byte for byte, indexed at
// their new place, once only, and survive a restart.
func TestStoreCopies(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 4, Pages: 40})
	src := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, src)
	srcDir := filepath.Join(src.Data, "warc")
	var copies []Copy
	var want []index.Capture
	for _, cs := range archived(t, src.Data) {
		for _, cp := range cs {
			cp := cp
			copies = append(copies, captureCopy(t, srcDir, cp))
			want = append(want, cp)
		}
	}
	if len(copies) < 20 {
		t.Fatalf("only %d captures to copy", len(copies))
	}
	// Every other copy comes with its record read, as replication hands
	// them over; the rest Store reads itself. Both must end the same.
	for i := 1; i < len(copies); i += 2 {
		r, err := warc.NewReader(bytes.NewReader(copies[i].Member))
		if err != nil {
			t.Fatal(err)
		}
		if copies[i].Record, _, err = r.Next(); err != nil {
			t.Fatal(err)
		}
	}

	dst := testConfig(t, srv.URL())
	store := func(cs []Copy) int {
		c, stop := running(t, dst)
		defer stop()
		n, err := c.Store(context.Background(), cs)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	half := len(copies) / 2
	if n := store(copies[:half]); n != half {
		t.Errorf("first Store stored %d of %d", n, half)
	}
	// Again, with the rest: only the rest is new; then nothing is.
	if n := store(copies); n != len(copies)-half {
		t.Errorf("second Store stored %d, want %d", n, len(copies)-half)
	}
	if n := store(copies); n != 0 {
		t.Errorf("third Store stored %d, want 0", n)
	}
	got := archived(t, dst.Data)
	dstDir := filepath.Join(dst.Data, "warc")
	for i, w := range want {
		var found *index.Capture
		for _, g := range got[w.URL] {
			if g.RecordID == w.RecordID {
				found = &g
			}
		}
		if found == nil {
			t.Errorf("%s (%s) not stored", w.URL, w.RecordID)
			continue
		}
		if len(got[w.URL]) != len(archived(t, src.Data)[w.URL]) {
			t.Errorf("%s stored %d times", w.URL, len(got[w.URL]))
		}
		b := member(t, dstDir, warc.Location{Segment: found.Segment, Offset: found.Offset, Length: found.Length})
		if !bytes.Equal(b, copies[i].Member) {
			t.Errorf("%s: stored bytes differ from the original member", w.URL)
		}
		if !found.Time.Equal(w.Time) || found.Digest != w.Digest || found.Status != w.Status || found.SimHash != w.SimHash {
			t.Errorf("%s: index entry %+v, want %+v", w.URL, found, w)
		}
	}
	verifyWARCs(t, dst.Data, got)

	// The copies are scheduled for revisits here as at their source, with
	// the same validators: whichever node holds a site next revisits it.
	srcDB, err := OpenDB(src.Data)
	if err != nil {
		t.Fatal(err)
	}
	dstDB, err := OpenDB(dst.Data)
	if err != nil {
		t.Fatal(err)
	}
	scheduled, robotsFiles := 0, 0
	for _, w := range want {
		if robots.IsFile(w.URL) {
			// Fetched by the robots check, as at the source: not a page.
			if _, ok, err := recrawl.Get(dstDB, w.URL); err != nil || ok {
				t.Errorf("%s: the copy of a robots.txt is scheduled as a page (%v)", w.URL, err)
			}
			robotsFiles++
			continue
		}
		se, ok, err := recrawl.Get(srcDB, w.URL)
		if err != nil || !ok || se.URL != w.URL || !se.Payload.Time.Equal(w.Time) {
			continue // a URL whose entry a later variant took
		}
		de, ok, err := recrawl.Get(dstDB, w.URL)
		if err != nil || !ok {
			t.Errorf("%s: no re-crawl entry on the copy's node (%v)", w.URL, err)
			continue
		}
		if de.ETag != se.ETag || de.LastModified != se.LastModified || de.Digest != se.Digest || de.Payload != se.Payload || de.Due.IsZero() {
			t.Errorf("%s: copy's entry %+v, source's %+v", w.URL, de, se)
		}
		scheduled++
	}
	srcDB.Close()
	dstDB.Close()
	if robotsFiles == 0 {
		t.Error("no robots.txt among the copies: the test proves nothing of them")
	}
	if scheduled < len(want)/2 {
		t.Errorf("only %d of %d copies were compared with their source's schedule", scheduled, len(want))
	}

	// A copy whose member is not the record its capture names is refused.
	bad := copies[0]
	other := *copies[1].Capture
	bad.Capture = &other
	c, _ := running(t, dst)
	ctx := context.Background()
	if _, err := c.Store(ctx, []Copy{bad}); err == nil {
		t.Error("a copy with the wrong capture was stored")
	}
	bad.Record = copies[1].Record
	bad.Capture = copies[0].Capture
	if _, err := c.Store(ctx, []Copy{bad}); err == nil {
		t.Error("a copy whose record is not its capture's was stored")
	}
	if _, err := c.Store(ctx, []Copy{{Member: []byte("not gzip")}}); err == nil {
		t.Error("garbage was stored")
	}
}

// A revisit copied without its original (which another node holds) keeps
// the reference its record names, so that the node holding the site next
// compares its visits with that original rather than fetch in full.
func TestStoredRevisitKeepsItsOriginal(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 6, Hosts: 2, Pages: 20})
	src := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, src)
	again := src
	again.RecrawlAll = true
	runCrawl(t, again)
	srcDir := filepath.Join(src.Data, "warc")
	var copies []Copy
	for _, cs := range archived(t, src.Data) {
		for _, cp := range cs {
			if cp.Type == warc.TypeRevisit && cp.Status == http.StatusNotModified {
				cp := cp
				copies = append(copies, captureCopy(t, srcDir, cp))
			}
		}
	}
	if len(copies) < 10 {
		t.Fatalf("only %d revisits to copy", len(copies))
	}
	dst := testConfig(t, srv.URL())
	c, stop := running(t, dst)
	if _, err := c.Store(context.Background(), copies); err != nil {
		t.Fatal(err)
	}
	stop()
	srcDB, err := OpenDB(src.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	dstDB, err := OpenDB(dst.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer dstDB.Close()
	for _, cp := range copies {
		u := cp.Capture.URL
		se, ok, err := recrawl.Get(srcDB, u)
		if err != nil || !ok || se.URL != u {
			continue // a URL whose entry a variant took
		}
		de, ok, err := recrawl.Get(dstDB, u)
		if err != nil || !ok || !de.Captured() || de.Payload.RecordID != se.Payload.RecordID || !de.Payload.Time.Equal(se.Payload.Time.Truncate(time.Microsecond)) || de.Payload.URL != se.Payload.URL {
			t.Errorf("%s: the copy's entry refers to %+v (%v), the source's to %+v", u, de.Payload, err, se.Payload)
		}
		if de.ETag != se.ETag {
			t.Errorf("%s: the copy's entry has ETag %q, the source's %q", u, de.ETag, se.ETag)
		}
	}
}

// A page copied with its metadata record, as replication sends it, is
// scheduled with the hop counts the record names, those of the node that
// fetched it: its revisits and the new links found on them continue from
// them, not from depth 0. Its entry knows the page's links too, so that
// when the page changes only its new links are routed.
func TestCopiedPageKeepsItsHopCountsAndLinks(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 4, Pages: 40})
	src := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, src)
	captures := archived(t, src.Data)
	srcDB, err := OpenDB(src.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	srcDir := filepath.Join(src.Data, "warc")
	local := archive.NewLocal(index.New(srcDB), srcDir)
	var copies []Copy
	var pages []index.Capture
	for _, cs := range captures {
		for _, cp := range cs {
			cp := cp
			copies = append(copies, captureCopy(t, srcDir, cp))
			locs, err := local.CompanionLocations(cp)
			if err != nil {
				t.Fatal(err)
			}
			withRecord := false // pages without links have no metadata record
			for _, l := range locs {
				m := member(t, srcDir, l)
				copies = append(copies, Copy{Member: m})
				r, err := warc.NewReader(bytes.NewReader(m))
				if err != nil {
					t.Fatal(err)
				}
				rec, _, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				withRecord = withRecord || rec.Type() == warc.TypeMetadata
			}
			// A page's newest capture: a response, or a revisit of another
			// URL's payload (a duplicate page), which has links too.
			if cp.MIME == "text/html" && withRecord && cp.RecordID == cs[len(cs)-1].RecordID {
				pages = append(pages, cp)
			}
		}
	}
	dst := testConfig(t, srv.URL())
	storeCopies(t, dst, copies...)
	dstDB, err := OpenDB(dst.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer dstDB.Close()
	compared, deep, deepRevisits := 0, 0, 0
	for _, p := range pages {
		se, ok, err := recrawl.Get(srcDB, p.URL)
		if err != nil || !ok || se.URL != p.URL {
			continue // a URL whose entry a variant took
		}
		de, ok, err := recrawl.Get(dstDB, p.URL)
		if err != nil || !ok {
			t.Errorf("%s: no re-crawl entry on the copy's node (%v)", p.URL, err)
			continue
		}
		if de.Depth != se.Depth || de.Embed != se.Embed || de.Redirects != se.Redirects || de.OffScopeHops != se.OffScopeHops {
			t.Errorf("%s: the copy's hops (depth %d, embed %v, redirects %d, off-scope %d), the source's (%d, %v, %d, %d)",
				p.URL, de.Depth, de.Embed, de.Redirects, de.OffScopeHops, se.Depth, se.Embed, se.Redirects, se.OffScopeHops)
		}
		if len(se.Links) == 0 || !slices.Equal(de.Links, se.Links) {
			t.Errorf("%s: the copy's entry knows %d links, the source's %d", p.URL, len(de.Links), len(se.Links))
		}
		compared++
		if se.Depth > 0 {
			deep++
			if p.Type == warc.TypeRevisit {
				deepRevisits++
			}
		}
	}
	if compared < len(pages)/2 || deep == 0 || deepRevisits == 0 {
		t.Errorf("compared %d of %d pages, %d deeper than a seed, %d of them revisits: the test proves little", compared, len(pages), deep, deepRevisits)
	}
}

// A copy of a newer capture gives the entry its status and media type
// too: a page another node found as text/plain, which answers as HTML
// again at this node's next visit, has changed, and is looked into. A
// copy of a server error does not stand for the page.
func TestCopyGivesItsEntryWhatThePageAnswered(t *testing.T) {
	p := &servedPage{}
	p.set(200, "text/html", "", linkingPage)
	srv := httptest.NewServer(p)
	defer srv.Close()
	u := srv.URL + "/page"
	here := directConfig(t, u)
	runCrawl(t, here)
	// The copy must be of a later second than this node's visit, which a
	// copy of the same second would not replace.
	time.Sleep(1100 * time.Millisecond)
	p.set(200, "text/plain", "", linkingPage)
	other := directConfig(t, u)
	runCrawl(t, other)
	cp := archived(t, other.Data)[u][0]
	storeCopies(t, here, captureCopy(t, filepath.Join(other.Data, "warc"), cp))
	db, err := OpenDB(here.Data)
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := recrawl.Get(db, u)
	db.Close()
	if err != nil || e.MIME != "text/plain" || len(e.Links) != 0 {
		t.Fatalf("the entry after the copy: %s, %d links (%v); want the copy's text/plain, which links to nothing", e.MIME, len(e.Links), err)
	}

	// A copy of an error of the moment, later still, leaves the entry
	// comparing with the page.
	time.Sleep(1100 * time.Millisecond)
	p.set(503, "text/plain", "", "down for maintenance")
	down := directConfig(t, u)
	runCrawl(t, down)
	cp = archived(t, down.Data)[u][0]
	storeCopies(t, here, captureCopy(t, filepath.Join(down.Data, "warc"), cp))
	db, err = OpenDB(here.Data)
	if err != nil {
		t.Fatal(err)
	}
	after, _, err := recrawl.Get(db, u)
	db.Close()
	if err != nil || after.Digest != e.Digest || after.Head != e.Head || after.State.Visits != e.State.Visits+1 {
		t.Fatalf("the entry after a copy of a 503: %+v (%v); want the text/plain capture's, one visit more", after, err)
	}

	p.set(200, "text/html", "", linkingPage)
	all := here
	all.Seeds, all.RecrawlAll = nil, true
	runCrawl(t, all)
	caps := archived(t, here.Data)[u]
	if last := caps[len(caps)-1]; last.SimHash == 0 {
		t.Errorf("the page, HTML again after a copy of it as text/plain: %+v; want its text hashed, as a change", last)
	}
}

// storeCopies stores copies on a crawler of cfg, run for it and stopped.
func storeCopies(t *testing.T, cfg Config, copies ...Copy) {
	t.Helper()
	c, stop := running(t, cfg)
	defer stop()
	if _, err := c.Store(context.Background(), copies); err != nil {
		t.Fatal(err)
	}
}

// A capture that left the index here (released on a hand-over, dropped as
// damaged) and comes back as a copy is stored with its request and
// metadata records right after it, although they are here already: that
// is where export and hand-over look for them.
func TestCopyStoredAgainBringsItsCompanions(t *testing.T) {
	web, srv := startWeb(t, websim.Config{Seed: 5, Hosts: 2, Pages: 10})
	src := testConfig(t, srv.URL(), web.Seeds()...)
	runCrawl(t, src)
	companionsOf := func(data string, cp index.Capture) []warc.Location {
		t.Helper()
		db, err := OpenDB(data)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		locs, err := archive.NewLocal(index.New(db), filepath.Join(data, "warc")).CompanionLocations(cp)
		if err != nil {
			t.Fatal(err)
		}
		return locs
	}
	var page index.Capture
	for _, cs := range archived(t, src.Data) {
		if cs[0].Type == warc.TypeResponse && cs[0].MIME == "text/html" {
			page = cs[0]
			break
		}
	}
	srcLocs := companionsOf(src.Data, page)
	if len(srcLocs) == 0 {
		t.Fatalf("the crawl wrote no request or metadata record after %s", page.URL)
	}
	srcDir := filepath.Join(src.Data, "warc")
	copies := []Copy{{Member: member(t, srcDir, warc.Location{Segment: page.Segment, Offset: page.Offset, Length: page.Length}), Capture: &page}}
	for _, l := range srcLocs {
		copies = append(copies, Copy{Member: member(t, srcDir, l)})
	}

	dst := testConfig(t, srv.URL())
	c, stop := running(t, dst)
	ctx := context.Background()
	if n, err := c.Store(ctx, copies); err != nil || n != len(copies) {
		t.Fatalf("first copy: %d stored, %v", n, err)
	}
	err := c.Update(ctx, func(b *pebble.Batch) error {
		cur, _, err := index.Lookup(b, page.URLKey, page.Time)
		if err != nil {
			return err
		}
		return Release(b, cur, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Store(ctx, copies); err != nil || n != len(copies) {
		t.Errorf("the copy again, once released: %d stored, %v; want the capture and its %d companions", n, err, len(srcLocs))
	}
	stop()
	again := archived(t, dst.Data)[page.URL]
	if len(again) != 1 {
		t.Fatalf("%s is indexed %d times", page.URL, len(again))
	}
	if got := companionsOf(dst.Data, again[0]); len(got) != len(srcLocs) {
		t.Errorf("after the capture's second copy, %d request and metadata records follow it; want %d", len(got), len(srcLocs))
	}
}

// A URL page recovery skipped (another node archived it) has an entry with
// no capture and this visit's time: the copy of that capture, arriving
// afterwards, gives it the capture to compare with, though older.
func TestCopyAfterRecoveryGivesTheEntryItsCapture(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"e1"`)
		io.WriteString(w, `<html><body><p>some words of a page worth keeping here</p><a href="/x">x</a></body></html>`)
	}))
	defer srv.Close()
	holder := directConfig(t, srv.URL+"/page")
	runCrawl(t, holder) // the previous holder's capture
	caps := archived(t, holder.Data)
	cp := caps[srv.URL+"/page"][0]

	here := directConfig(t, srv.URL+"/page")
	here.Recover = func(context.Context, string, time.Time) bool { return true }
	if s := runCrawl(t, here); s.Recovered != 1 {
		t.Fatalf("fixture: %d recovered", s.Recovered)
	}
	cfg := here
	cfg.Seeds, cfg.Recover = nil, nil
	storeCopies(t, cfg, captureCopy(t, filepath.Join(holder.Data, "warc"), cp))
	db, err := OpenDB(here.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, srv.URL+"/page")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !e.Captured() || e.ETag != `"e1"` || e.Digest != cp.Digest || e.Due.IsZero() {
		t.Errorf("entry after the copy %+v; want the copy's capture, ETag and digest, still scheduled", e)
	}
}
