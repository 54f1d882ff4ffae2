package crawl

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/recrawl"
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
