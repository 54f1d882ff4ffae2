package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A re-crawl entry damaged on disk costs its URL's schedule alone: the
// URLs due after it are queued.
func TestCorruptEntryDoesNotStopTheDueQueue(t *testing.T) {
	const pages = 20
	cfg, _, _ := crawledSite(t, pages)
	// Every URL due now; one of them (the earliest) has a corrupt value.
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	es, err := recrawl.Entries(db, "", 1<<20)
	if err != nil || len(es) < pages {
		t.Fatalf("fixture: %d entries, %v", len(es), err)
	}
	b := db.NewIndexedBatch()
	for i, e := range es {
		old := e
		e.Due = time.Now().Add(-time.Hour + time.Duration(i)*time.Second)
		if err := recrawl.Put(b, &old, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	// Corrupt the value of the earliest one (a flipped version byte).
	bad := es[0].Key
	if err := db.Set([]byte("v/u/"+bad), []byte{9, 9, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()

	again := cfg
	again.Recrawl = true
	again.Seeds = nil
	if s := runCrawl(t, again); s.RevisitsQueued < int64(len(es)-1) {
		t.Errorf("one corrupt entry kept %d of %d due URLs from being queued", int64(len(es)-1)-s.RevisitsQueued, len(es)-1)
	}
}

// A damaged entry of a URL queued for its revisit does not stop the crawl
// (its commit reads the entry): the visit writes it anew.
func TestCorruptEntryOfAQueuedURLDoesNotStopTheCrawl(t *testing.T) {
	const pages = 40
	cfg, _, stop := crawledSite(t, pages)
	all := cfg
	all.RecrawlAll = true
	all.Workers = 1
	runStopped(t, all, stop) // leaves revisits queued, their entries without due time
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	es, err := recrawl.Entries(db, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	queued := 0
	var bad string
	for _, e := range es {
		if e.Due.IsZero() {
			queued++
			bad = e.Key
		}
	}
	if queued == 0 {
		t.Fatal("fixture: nothing queued")
	}
	if err := db.Set([]byte("v/u/"+bad), []byte{9, 9, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for i := range 2 {
		c, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Run(t.Context())
		c.Close()
		if err != nil {
			t.Errorf("run %d: one corrupt entry (%s) of %d queued stopped the crawl: %v", i, bad, queued, err)
		}
	}
}

// Scheduling an archive that has no entries (made before schedules
// existed) commits in pieces: stopped after the first, the next run
// schedules the rest, rather than taking the entries made for an archive
// scheduled.
func TestInterruptedSchedulingFromTheIndexResumes(t *testing.T) {
	cfg, _, _ := crawledSite(t, 5)
	const fake = 60000
	db, err := OpenDB(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	// An archive made before schedules: no v/ keys; many captures.
	if err := db.DeleteRange([]byte("v/"), []byte("v0"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	when := time.Now().Add(-48 * time.Hour)
	for i := range fake {
		u := fmt.Sprintf("http://legacy.example/page/%06d", i)
		key, _ := urlkey.SURT(u)
		cp := index.Capture{URLKey: key, Time: when, URL: u, Type: "response", Status: 200, MIME: "text/html",
			Digest: fmt.Sprintf("sha1:%032d", i), Segment: "none.warc.gz", Offset: 0, Length: 10, RecordID: fmt.Sprintf("<urn:uuid:%d>", i)}
		if err := index.Put(b, cp); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()

	again := cfg
	again.Recrawl = true
	again.Seeds = nil
	c, err := Open(again)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the operator's Ctrl-C (or kill -9) once the first piece is in
		for {
			if empty, err := recrawl.Empty(c.db); err == nil && !empty {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	c.scheduleFromIndex(ctx)
	cancel()
	c.Close()

	c, err = Open(again)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.scheduleFromIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _, err := recrawl.Count(c.db, time.Now())
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if entries < fake {
		t.Errorf("%d of %d archived URLs have a re-crawl entry: the rest are never revisited", entries, fake+5)
	}
}

// A plain run (no --recrawl) under other --revisit rules schedules URLs
// under those: going back to the rules the archive's URLs were last moved
// under, the next --recrawl moves those URLs into their bounds too.
func TestRulesChangedByAPlainRunAreAppliedAtTheNextRecrawl(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body>%s</body></html>", r.URL.Path)
	}))
	defer srv.Close()
	ruleA, _ := recrawl.ParseRule("24h,1h,720h")
	ruleB, _ := recrawl.ParseRule("2000h")
	a := directConfig(t, srv.URL+"/a")
	a.Recrawl = true
	a.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), ruleA)
	runCrawl(t, a) // the archive's URLs scheduled under A: marker A

	b := a
	b.Recrawl = false
	b.Seeds = []string{srv.URL + "/b"}
	b.Schedules = recrawl.NewRules(schedule.DefaultPolicy(), ruleB)
	runCrawl(t, b) // a plain run adds /b under B: 2000h

	back := a
	back.Seeds = nil
	runCrawl(t, back) // --recrawl under A again

	db, err := OpenDB(a.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, ok, err := recrawl.Get(db, srv.URL+"/b")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if e.State.Interval > 720*time.Hour {
		t.Errorf("/b keeps an interval of %v, outside the rules' 720h maximum: due %v", e.State.Interval, e.Due)
	}
}

// A data directory whose kept --revisit rules --revisit now refuses (two
// rules for one key, a wildcard) still opens without --revisit, with them.
func TestKeptRulesThatWouldNowBeRefusedStillOpen(t *testing.T) {
	for _, kept := range []string{"1h\n2h", "example.com=1h\nwww.example.com=2h", "example.com/=1h\nhttps://example.com/=2h", "*.example.com=1h"} {
		db, err := OpenDB(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set([]byte(revisitKey), []byte(kept), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		_, err = settleSchedules(db, recrawl.Rules{})
		if err != nil {
			t.Errorf("kept %q: %v", kept, err)
		}
		db.Close()
	}
}
