package recrawl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/schedule"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// quiet drops pebble's informational messages.
type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// commit runs fn on an indexed batch and commits it.
func commit(t *testing.T, db *pebble.DB, fn func(b *pebble.Batch) error) {
	t.Helper()
	b := db.NewIndexedBatch()
	defer b.Close()
	if err := fn(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, db *pebble.DB, old *Entry, e Entry) {
	t.Helper()
	commit(t, db, func(b *pebble.Batch) error { return Put(b, old, e) })
}

func get(t *testing.T, r pebble.Reader, url string) Entry {
	t.Helper()
	e, ok, err := Get(r, url)
	if err != nil || !ok {
		t.Fatalf("Get(%q) = %v, %v", url, ok, err)
	}
	return e
}

// countPrefix counts the raw keys under prefix.
func countPrefix(t *testing.T, db *pebble.DB, prefix string) int {
	t.Helper()
	hi := []byte(prefix)
	hi[len(hi)-1]++
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return n
}

// fullEntry has every field set, with a State that has seen visits.
func fullEntry(t testing.TB) Entry {
	p := schedule.DefaultPolicy()
	s, due := p.First(t0)
	for i := range 4 {
		s, due = p.Next(s, due, i%2 == 0)
	}
	if s.Visits != 4 || s.Changes != 2 {
		t.Fatalf("state after 4 visits: %+v", s)
	}
	e := Entry{
		URL:          "https://www.example.com/news/index.html?a=1&b=2",
		Depth:        3,
		Embed:        true,
		State:        s,
		Due:          due,
		ETag:         `W/"5f-abc"`,
		LastModified: "Sun, 01 Mar 2026 11:00:00 GMT",
		Digest:       "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ",
		MIME:         "text/html",
		SimHash:      0xfedcba9876543210,
		Head:         HeadHash(200, "text/html", ""),
		Cut:          50 << 20,
		Payload: Ref{
			URL:      "https://www.example.com/news/index.html?b=2&a=1",
			Time:     time.Date(2026, 2, 28, 9, 30, 15, 123456789, time.UTC),
			RecordID: "<urn:uuid:0c4f6a1e-0000-4000-8000-000000000001>",
		},
	}
	e.SetLinks([]string{"https://www.example.com/a", "https://www.example.com/b", "https://other.test/"})
	return e
}

// equalEntry compares entries field by field: a nil and an empty link
// list are the same, and times are compared as instants.
func equalEntry(a, b Entry) bool {
	sa, _ := a.State.MarshalBinary()
	sb, _ := b.State.MarshalBinary()
	return a.URL == b.URL && a.Depth == b.Depth && a.Embed == b.Embed &&
		a.Redirects == b.Redirects && a.OffScopeHops == b.OffScopeHops &&
		bytes.Equal(sa, sb) && a.State.Interval == b.State.Interval &&
		a.State.LastVisit.Equal(b.State.LastVisit) &&
		a.State.Visits == b.State.Visits && a.State.Changes == b.State.Changes &&
		a.Due.Equal(b.Due) && a.ETag == b.ETag && a.LastModified == b.LastModified &&
		a.Digest == b.Digest && a.MIME == b.MIME && a.SimHash == b.SimHash &&
		a.Payload.URL == b.Payload.URL && a.Payload.Time.Equal(b.Payload.Time) &&
		a.Payload.RecordID == b.Payload.RecordID && a.Head == b.Head && a.Cut == b.Cut && slices.Equal(a.Links, b.Links)
}

func TestEncodeRoundTrip(t *testing.T) {
	full := fullEntry(t)
	for name, e := range map[string]Entry{
		"full":            full,
		"zero":            {},
		"url only":        {URL: "http://x.test/"},
		"queued":          {URL: "http://x.test/q", Depth: 1, State: full.State},
		"uncaptured":      {URL: "http://x.test/u", State: full.State, Due: full.Due},
		"max simhash":     {URL: "http://x.test/s", SimHash: ^uint64(0)},
		"before epoch":    {URL: "http://x.test/old", Payload: Ref{Time: time.Date(1996, 1, 1, 0, 0, 0, 1, time.UTC)}, Due: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)},
		"empty links":     {URL: "http://x.test/l", Links: []uint64{}},
		"max links":       {URL: "http://x.test/m", Links: manyLinks(MaxLinks)},
		"unicode fields":  {URL: "http://x.test/ü", ETag: "\"é\"", MIME: "text/html; charset=utf-8"},
		"hops":            {URL: "http://x.test/h", Embed: true, Redirects: 2, OffScopeHops: 3, State: full.State, Due: full.Due},
		"max hops":        {URL: "http://x.test/mh", Redirects: maxHops, OffScopeHops: maxHops},
		"head":            {URL: "http://x.test/r", Head: HeadHash(302, "text/html", "http://x.test/a")},
		"head and hops":   {URL: "http://x.test/rh", Redirects: 1, Head: ^uint64(0)},
		"cut":             {URL: "http://x.test/c", Cut: 1},
		"cut, head, hops": {URL: "http://x.test/ch", OffScopeHops: 1, Head: 7, Cut: math.MaxInt64},
	} {
		v := encodeEntry(e)
		got, err := decodeEntry(v)
		if err != nil {
			t.Errorf("%s: decode: %v", name, err)
			continue
		}
		if !equalEntry(got, e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, e)
		}
		if !bytes.Equal(encodeEntry(got), v) {
			t.Errorf("%s: re-encoding differs", name)
		}
	}
	// The decoded full entry is the very same value, State's unexported
	// statistics included.
	got, err := decodeEntry(encodeEntry(full))
	if err != nil || !reflect.DeepEqual(got, full) {
		t.Fatalf("full entry: %v\n got %#v\nwant %#v", err, got, full)
	}
	if zero := (Entry{}); !got.Captured() || zero.Captured() {
		t.Error("Captured")
	}
}

// TestEncodeTruncatesToStoredPrecision checks what the encoding does not
// keep: Due is kept to the second, negative depths are stored as zero and
// depths beyond maxDepth as maxDepth, so that what Put writes is readable.
func TestEncodeTruncatesToStoredPrecision(t *testing.T) {
	e := Entry{URL: "http://x.test/", Due: t0.Add(1500 * time.Millisecond), Depth: -4}
	got, err := decodeEntry(encodeEntry(e))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Due.Equal(t0.Add(time.Second)) || got.Depth != 0 {
		t.Fatalf("got Due %v Depth %d", got.Due, got.Depth)
	}
	e.Depth = 1 << 30
	if got, err = decodeEntry(encodeEntry(e)); err != nil || got.Depth != maxDepth {
		t.Fatalf("deep entry: depth %d, %v", got.Depth, err)
	}
}

func manyLinks(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	slices.Sort(hs)
	return hs
}

func TestDecodeCorrupt(t *testing.T) {
	v := encodeEntry(fullEntry(t))
	for i := range len(v) {
		if _, err := decodeEntry(v[:i]); err == nil {
			t.Errorf("truncated to %d of %d bytes: no error", i, len(v))
		}
	}
	bad := map[string][]byte{
		"nil":           nil,
		"version 0":     append([]byte{0}, v[1:]...),
		"version 2":     append([]byte{2}, v[1:]...),
		"trailing byte": append(slices.Clone(v), 0),
		"trailing link": append(slices.Clone(v), 1, 2, 3, 4, 5, 6, 7, 8),
		"bad flags":     encodeWith(t, func(b []byte) []byte { b[2] = 2; return b }),
		"unknown flag":  encodeWith(t, func(b []byte) []byte { b[2] = 16; return b }),
		"cut of 0":      encodeWith(t, func(b []byte) []byte { b[2] = flagCut; return slices.Insert(b, 3, 0) }),
		"cut too big": encodeWith(t, func(b []byte) []byte {
			b[2] = flagCut
			return slices.Insert(b, 3, binary.AppendUvarint(nil, math.MaxInt64+1)...)
		}),
		"state garbage":  encodeRaw([]string{"http://x.test/", "\x07garbage", "", "", "", "", "", ""}),
		"state empty":    encodeRaw([]string{"http://x.test/", "", "", "", "", "", "", ""}),
		"string too big": append(encodeRaw(nil)[:13], binary.AppendUvarint(nil, 1<<40)...),
		"string 1<<64-1": append(encodeRaw(nil)[:13], binary.AppendUvarint(nil, ^uint64(0))...),
		"depth too big":  append(append([]byte{entryVersion}, binary.AppendUvarint(nil, maxDepth+1)...), v[2:]...),
		"bad varint":     append([]byte{entryVersion}, bytes.Repeat([]byte{0xff}, 11)...),
	}
	// The link count lies: one more, one fewer, and counts that wrap
	// around when multiplied by the size of a hash.
	links := len(fullEntry(t).Links)
	head := v[:len(v)-8*links-1]
	for _, n := range []uint64{uint64(links) + 1, uint64(links) - 1, MaxLinks + 1, 1 << 61, 1<<61 + uint64(links), ^uint64(0)} {
		bad[fmt.Sprintf("link count %d", n)] = append(binary.AppendUvarint(slices.Clone(head), n), v[len(v)-8*links:]...)
	}
	bad["link count 1<<61, no links"] = binary.AppendUvarint(slices.Clone(head), 1<<61)
	bad["too many links"] = encodeEntry(Entry{URL: "http://x.test/", Links: make([]uint64, MaxLinks+1)})
	for name, b := range bad {
		if e, err := decodeEntry(b); err == nil {
			t.Errorf("%s: decoded %+v", name, e)
		}
	}
}

// encodeWith encodes a small entry and lets edit corrupt it.
func encodeWith(t *testing.T, edit func([]byte) []byte) []byte {
	t.Helper()
	v := encodeEntry(Entry{URL: "http://x.test/"})
	if v[2] != 0 { // version, depth 0, flags
		t.Fatalf("layout changed: %x", v)
	}
	return edit(v)
}

// encodeRaw builds an encoding by hand: empty numbers, the given
// length-prefixed strings (URL, State, ETag, …) and links.
func encodeRaw(strs []string, links ...uint64) []byte {
	b := []byte{entryVersion, 0, 0, 0, 0}
	b = append(b, make([]byte, 8)...)
	for _, s := range strs {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(links)))
	for _, h := range links {
		b = binary.BigEndian.AppendUint64(b, h)
	}
	return b
}

func TestEncodeRaw(t *testing.T) {
	// The hand-made layout of TestDecodeCorrupt is the real one.
	st, _ := schedule.State{}.MarshalBinary()
	e := Entry{URL: "http://x.test/", MIME: "text/html", Links: []uint64{7}}
	raw := encodeRaw([]string{e.URL, string(st), "", "", "", e.MIME, "", ""}, 7)
	if !bytes.Equal(raw, encodeEntry(e)) {
		t.Fatalf("encodeRaw = %x, encodeEntry = %x", raw, encodeEntry(e))
	}
}

func TestKey(t *testing.T) {
	const sid = "0123456789ABCDEF0123456789abcdef"
	same := [][2]string{
		{"http://www.x.test/a;jsessionid=" + sid, "http://www.x.test/a"},
		{"http://www.x.test/a?jsessionid=" + sid + "&q=1", "http://www.x.test/a?q=1"},
		{"http://www.x.test/a?b=1&a=2", "http://www.x.test/a?a=2&b=1"},
		{"http://www.x.test:80/a", "http://www.x.test/a"},
		{"HTTP://WWW.X.TEST/a", "http://www.x.test/a"},
		{"http://user:pw@www.x.test/a", "http://www.x.test/a"},
		{"http://www.x.test/a#frag", "http://www.x.test/a"},
		{"http://www.x.test#frag", "http://www.x.test/"},
	}
	for _, c := range same {
		if a, b := Key(c[0]), Key(c[1]); a != b {
			t.Errorf("Key(%q) = %q, Key(%q) = %q; want equal", c[0], a, c[1], b)
		}
	}
	differ := [][2]string{
		{"http://x.test/", "http://www.x.test/"},
		{"https://www.x.test/a", "http://www.x.test/a"},
		{"http://www.x.test:8080/a", "http://www.x.test/a"},
		{"http://www.x.test/a", "http://www.x.test/b"},
		{"http://www.x.test/a?q=1", "http://www.x.test/a?q=2"},
		{"http://www.x.test/a?q=1", "http://www.x.test/a"},
		// Paths and queries are case-sensitive, and a directory's address
		// without its slash usually only redirects to it.
		{"http://www.x.test/a/", "http://www.x.test/a"},
		{"http://www.x.test/News", "http://www.x.test/news"},
		{"http://www.x.test/v?id=Ab3", "http://www.x.test/v?id=ab3"},
		// Only session IDs of the length IA strips are dropped.
		{"http://www.x.test/a;jsessionid=ABC", "http://www.x.test/a"},
	}
	for _, c := range differ {
		if a, b := Key(c[0]), Key(c[1]); a == b {
			t.Errorf("Key(%q) = Key(%q) = %q; want different", c[0], c[1], a)
		}
	}
	if got, want := Key("http://www.x.test/a?b=1&a=2"), "http://www.x.test/a?a=2&b=1"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	// What is not an http URL is its own key.
	for _, u := range []string{"", "x", "ftp://x.test/", "http://"} {
		if got := Key(u); got != u {
			t.Errorf("Key(%q) = %q", u, got)
		}
	}
}

func TestGetPut(t *testing.T) {
	db := openDB(t)
	if _, ok, err := Get(db, "http://x.test/"); ok || err != nil {
		t.Fatalf("empty db: %v, %v", ok, err)
	}
	e := fullEntry(t)
	// Visible in the batch before the commit, and in the db only after.
	b := db.NewIndexedBatch()
	if err := Put(b, nil, e); err != nil {
		t.Fatal(err)
	}
	if got := get(t, b, e.URL); !equalEntry(got, e) {
		t.Fatalf("from batch: %+v", got)
	}
	if _, ok, _ := Get(db, e.URL); ok {
		t.Fatal("entry visible before commit")
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if got := get(t, db, e.URL); !equalEntry(got, e) {
		t.Fatalf("from db: %+v", got)
	}
	// Any URL with the same key finds it.
	if got := get(t, db, "https://www.example.com/news/index.html?b=2&a=1#top"); got.URL != e.URL {
		t.Fatalf("by variant: %q", got.URL)
	}
}

// An entry damaged on disk reads as none: Due reports its due key stale
// and goes on to the next, Entries passes over it, and a Put writes it
// anew.
func TestCorruptEntryReadsAsNone(t *testing.T) {
	db := openDB(t)
	u, v := "http://x.test/", "http://y.test/"
	b := db.NewIndexedBatch()
	if err := Put(b, nil, Entry{URL: v, Due: t0}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Set(entryKey(Key(u)), []byte{9, 9, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(dueKey(t0.Add(-time.Second), Key(u)), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Get(db, u); err != nil || ok {
		t.Fatalf("corrupt entry: %v, %v; want none", ok, err)
	}
	var seen []string
	err := Due(db, t0, func(e Entry, stale bool) bool {
		seen = append(seen, fmt.Sprintf("%s %v", e.Key, stale))
		return true
	})
	if want := []string{Key(u) + " true", Key(v) + " false"}; err != nil || !slices.Equal(seen, want) {
		t.Fatalf("Due over a corrupt entry: %q, %v; want %q", seen, err, want)
	}
	if es, err := Entries(db, "", 10); err != nil || len(es) != 1 || es[0].URL != v {
		t.Fatalf("Entries over a corrupt entry: %+v, %v; want %s's alone", es, err, v)
	}
	b = db.NewIndexedBatch()
	if err := Put(b, nil, Entry{URL: u, Due: t0}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if e, ok, err := Get(db, u); err != nil || !ok || !e.Due.Equal(t0) {
		t.Fatalf("entry written over the corrupt one: %+v, %v, %v", e, ok, err)
	}
}

func TestDueKeyWithoutEntry(t *testing.T) {
	db := openDB(t)
	if err := db.Set(dueKey(t0, "http://x.test/"), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var stale []Entry
	if err := Due(db, t0, func(e Entry, isStale bool) bool {
		if isStale {
			stale = append(stale, e)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 || stale[0].Key != "http://x.test/" || !stale[0].Due.Equal(t0) {
		t.Fatalf("stale due keys %+v", stale)
	}
	b := db.NewIndexedBatch()
	if err := DropDue(b, stale[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Next(db); ok || err != nil {
		t.Fatalf("a dropped due key is still there (%v)", err)
	}
}

// An entry written over without its old state (as the crawler does for a
// URL new to it) leaves its old due key, which Due reports as stale.
func TestDueStaleKey(t *testing.T) {
	db := openDB(t)
	u := "http://x.test/a"
	e := Entry{URL: u, Due: t0}
	b := db.NewIndexedBatch()
	if err := Put(b, nil, e); err != nil {
		t.Fatal(err)
	}
	e.Due = t0.Add(time.Hour)
	if err := Put(b, nil, e); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var live, stale int
	if err := Due(db, t0.Add(2*time.Hour), func(got Entry, isStale bool) bool {
		if isStale {
			stale++
			if !got.Due.Equal(t0) {
				t.Errorf("stale key at %v, want %v", got.Due, t0)
			}
		} else {
			live++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if live != 1 || stale != 1 {
		t.Errorf("%d live and %d stale due keys, want 1 and 1", live, stale)
	}
}

func TestDueOrder(t *testing.T) {
	db := openDB(t)
	if _, ok, err := Next(db); ok || err != nil {
		t.Fatalf("Next on empty db: %v, %v", ok, err)
	}
	// Put out of order.
	urls := map[string]time.Duration{
		"http://x.test/4": 3 * time.Hour,
		"http://x.test/1": -time.Hour,
		"http://x.test/3": time.Hour,
		"http://x.test/2": 0,
		"http://x.test/5": time.Hour + time.Second,
		"http://x.test/q": -1, // queued: no due time
	}
	for u, d := range urls {
		e := Entry{URL: u}
		if d != -1 {
			e.Due = t0.Add(d)
		}
		put(t, db, nil, e)
	}
	if next, ok, err := Next(db); err != nil || !ok || !next.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("Next = %v, %v, %v", next, ok, err)
	}
	due := func(at time.Time, limit int) []string {
		t.Helper()
		var got []string
		err := Due(db, at, func(e Entry, _ bool) bool {
			got = append(got, e.URL)
			return len(got) < limit
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got, want := due(t0.Add(time.Hour), 100), []string{"http://x.test/1", "http://x.test/2", "http://x.test/3"}; !slices.Equal(got, want) {
		t.Errorf("Due(t0+1h) = %q, want %q", got, want)
	}
	// At or before: a second earlier leaves u3 out; a fraction of a
	// second later does not bring in u5.
	if got, want := due(t0.Add(time.Hour-time.Second), 100), []string{"http://x.test/1", "http://x.test/2"}; !slices.Equal(got, want) {
		t.Errorf("Due(t0+1h-1s) = %q, want %q", got, want)
	}
	if got := due(t0.Add(time.Hour+999*time.Millisecond), 100); len(got) != 3 {
		t.Errorf("Due(t0+1h+0.999s) = %q", got)
	}
	if got, want := due(t0.Add(time.Hour), 2), []string{"http://x.test/1", "http://x.test/2"}; !slices.Equal(got, want) {
		t.Errorf("Due stopping after 2 = %q, want %q", got, want)
	}
	if got := due(t0.Add(-2*time.Hour), 100); len(got) != 0 {
		t.Errorf("Due before all = %q", got)
	}
	if got := due(t0.Add(24*time.Hour), 100); len(got) != 5 {
		t.Errorf("Due after all = %q", got)
	}
	entries, n, err := Count(db, t0)
	if err != nil || entries != 6 || n != 2 {
		t.Fatalf("Count(t0) = %d, %d, %v; want 6, 2", entries, n, err)
	}
	if entries, n, err = Count(db, time.Time{}); err != nil || entries != 6 || n != 0 {
		t.Fatalf("Count(zero) = %d, %d, %v; want 6, 0", entries, n, err)
	}
}

func TestTake(t *testing.T) {
	db := openDB(t)
	for i := range 3 {
		put(t, db, nil, Entry{URL: fmt.Sprintf("http://x.test/%d", i), Due: t0.Add(time.Duration(i) * time.Minute)})
	}
	// Take the due entries inside Due, as a crawler queues them.
	var taken []Entry
	if err := Due(db, t0.Add(time.Minute), func(e Entry, _ bool) bool { taken = append(taken, e); return true }); err != nil {
		t.Fatal(err)
	}
	commit(t, db, func(b *pebble.Batch) error {
		for _, e := range taken {
			if err := Take(b, e); err != nil {
				return err
			}
		}
		return nil
	})
	entries, due, err := Count(db, t0.Add(time.Hour))
	if err != nil || entries != 3 || due != 1 {
		t.Fatalf("Count after Take = %d, %d, %v; want 3, 1", entries, due, err)
	}
	if n := countPrefix(t, db, duePrefix); n != 1 {
		t.Fatalf("%d due keys, want 1", n)
	}
	e := get(t, db, "http://x.test/0")
	if !e.Due.IsZero() {
		t.Fatalf("taken entry still due at %v", e.Due)
	}
	if next, ok, err := Next(db); err != nil || !ok || !next.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("Next = %v, %v, %v", next, ok, err)
	}
	// The visit's commit puts it back.
	back := e
	back.Due = t0.Add(time.Hour)
	put(t, db, &e, back)
	if entries, due, err = Count(db, t0.Add(time.Hour)); err != nil || entries != 3 || due != 2 {
		t.Fatalf("Count after visit = %d, %d, %v; want 3, 2", entries, due, err)
	}
}

func TestPutReplacesDueKey(t *testing.T) {
	db := openDB(t)
	const u = "http://www.x.test/a?a=1&b=2"
	e := Entry{URL: u, Due: t0}
	put(t, db, nil, e)
	for i := 1; i <= 5; i++ {
		old := get(t, db, u)
		next := old
		next.Due = t0.Add(time.Duration(i) * time.Hour)
		// The same resource under another spelling, as a page may
		// link to it with a session ID or its parameters reordered.
		switch i {
		case 2:
			next.URL = "http://www.x.test/a;jsessionid=0123456789abcdef0123456789abcdef?b=2&a=1"
		case 4:
			next.URL = "http://www.x.test/a?b=2&a=1"
		}
		put(t, db, &old, next)
		if n := countPrefix(t, db, duePrefix); n != 1 {
			t.Fatalf("after update %d: %d due keys", i, n)
		}
		if n := countPrefix(t, db, entryPrefix); n != 1 {
			t.Fatalf("after update %d: %d entries", i, n)
		}
		if got := get(t, db, u); got.URL != next.URL || !got.Due.Equal(next.Due) {
			t.Fatalf("after update %d: %+v", i, got)
		}
	}
	if next, ok, err := Next(db); err != nil || !ok || !next.Equal(t0.Add(5*time.Hour)) {
		t.Fatalf("Next = %v, %v, %v", next, ok, err)
	}
	// Updating to the same due time keeps the due key (the delete and the
	// set of the same key in one batch end in the set).
	old := get(t, db, u)
	put(t, db, &old, old)
	if n := countPrefix(t, db, duePrefix); n != 1 {
		t.Fatalf("same due time: %d due keys", n)
	}
}

func TestLinks(t *testing.T) {
	var e Entry
	e.SetLinks([]string{"http://x.test/b", "http://x.test/a", "http://x.test/b", "http://x.test/c", "http://x.test/a"})
	if len(e.Links) != 3 || !slices.IsSorted(e.Links) {
		t.Fatalf("Links = %x", e.Links)
	}
	for _, u := range []string{"http://x.test/a", "http://x.test/b", "http://x.test/c"} {
		if !e.HasLink(LinkHash(u)) {
			t.Errorf("HasLink(%q) = false", u)
		}
	}
	if e.HasLink(LinkHash("http://x.test/d")) {
		t.Error("HasLink of an absent link")
	}
	if LinkHash("") != 14695981039346656037 || LinkHash("a") != 0xaf63dc4c8601ec8c {
		t.Errorf("LinkHash is not FNV-1a: %x %x", LinkHash(""), LinkHash("a"))
	}

	many := make([]string, MaxLinks+100)
	for i := range many {
		many[i] = fmt.Sprintf("http://x.test/%d", i)
	}
	e.SetLinks(many)
	if len(e.Links) != MaxLinks || !slices.IsSorted(e.Links) {
		t.Fatalf("%d links, sorted %v", len(e.Links), slices.IsSorted(e.Links))
	}
	if !e.HasLink(LinkHash(many[0])) || !e.HasLink(LinkHash(many[MaxLinks-1])) || e.HasLink(LinkHash(many[MaxLinks])) {
		t.Error("not the first MaxLinks links")
	}
	// Duplicates count towards the cap before they are removed: the
	// list stays within MaxLinks whatever the page holds.
	dup := append(slices.Repeat([]string{"http://x.test/same"}, MaxLinks), "http://x.test/other")
	e.SetLinks(dup)
	if len(e.Links) != 1 {
		t.Errorf("%d links", len(e.Links))
	}
	e.SetLinks(nil)
	if len(e.Links) != 0 || e.HasLink(LinkHash("http://x.test/a")) {
		t.Errorf("no links: %x", e.Links)
	}
	// A full list survives the database.
	e.SetLinks(many)
	db := openDB(t)
	e.URL = "http://x.test/"
	put(t, db, nil, e)
	if got := get(t, db, e.URL); !slices.Equal(got.Links, e.Links) {
		t.Fatal("links changed in the database")
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(fullEntry(f)))
	f.Add(encodeEntry(Entry{}))
	f.Add(encodeEntry(Entry{URL: "http://x.test/", Due: t0, Links: []uint64{1, 2, 3}}))
	f.Add(encodeEntry(Entry{URL: "http://x.test/", Depth: maxDepth, Payload: Ref{Time: time.Unix(0, -1)}, Due: time.Unix(-1, 0)}))
	f.Add([]byte{entryVersion})
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeEntry(v)
		if err != nil {
			return
		}
		w := encodeEntry(e)
		e2, err := decodeEntry(w)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v\n%+v", err, e)
		}
		if !reflect.DeepEqual(e, e2) || !equalEntry(e, e2) {
			t.Fatalf("round trip changed the entry\n got %+v\nwant %+v", e2, e)
		}
		if !bytes.Equal(encodeEntry(e2), w) {
			t.Fatal("encoding is not stable")
		}
	})
}

func TestEmpty(t *testing.T) {
	db := openDB(t)
	if empty, err := Empty(db); err != nil || !empty {
		t.Fatalf("a new database: empty %v, %v", empty, err)
	}
	b := db.NewIndexedBatch()
	if err := Put(b, nil, Entry{URL: "http://x.test/", Due: t0}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if empty, err := Empty(db); err != nil || empty {
		t.Fatalf("with one entry: empty %v, %v", empty, err)
	}
}

// CountHost counts a host's entries under both schemes, up to the limit,
// and no other host's: neither one its name is a prefix of, nor another
// port of it.
func TestCountHost(t *testing.T) {
	db := openDB(t)
	commit(t, db, func(b *pebble.Batch) error {
		for _, u := range []string{
			"http://example.com/", "https://example.com/a", "http://example.com/b?x=1",
			"http://example.com.evil/", "http://example.com:8080/", "http://www.example.com/",
		} {
			if err := Put(b, nil, Entry{URL: u, Due: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range []struct {
		host  string
		limit int
		want  int
	}{
		{"example.com", 10, 3},
		{"example.com", 2, 2},
		{"example.com:8080", 10, 1},
		{"www.example.com", 10, 1},
		{"example.org", 10, 0},
	} {
		got, err := CountHost(db, c.host, c.limit)
		if err != nil || got != c.want {
			t.Errorf("CountHost(%s, %d) = %d, %v; want %d", c.host, c.limit, got, err, c.want)
		}
	}
}
