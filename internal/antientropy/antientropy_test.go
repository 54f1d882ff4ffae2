package antientropy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/waggle-archive/waggle/internal/index"
)

// treeRemote serves a tree as a peer would, counting round trips.
type treeRemote struct {
	t     *Tree
	trips int
}

func (r *treeRemote) Summary(context.Context) (Summary, error) { return r.t.Summary(), nil }

func (r *treeRemote) Children(_ context.Context, d int, parents []uint64) ([]uint64, error) {
	r.trips++
	return r.t.Children(d, parents)
}

func capture(i int) index.Capture {
	var sh uint64 // an HTML page's, on some captures
	if i%2 == 0 {
		sh = 0x9e3779b97f4a7c15*uint64(i) + 1
	}
	return index.Capture{
		SimHash:  sh,
		URLKey:   fmt.Sprintf("com,example%03d)/page/%d", i%997, i),
		Time:     time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second),
		URL:      fmt.Sprintf("http://example%03d.com/page/%d", i%997, i),
		Type:     "response",
		Status:   200,
		MIME:     "text/html",
		Digest:   fmt.Sprintf("sha1:%032X", i),
		Segment:  "seg-1.warc.gz",
		Offset:   int64(i) * 1000,
		Length:   1000,
		RecordID: fmt.Sprintf("<urn:uuid:%d>", i),
	}
}

// openIndex returns an index holding caps.
func openIndex(tb testing.TB, caps []index.Capture) *index.Index {
	tb.Helper()
	db, err := pebble.Open(tb.TempDir(), &pebble.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	b := db.NewBatch()
	for _, c := range caps {
		if err := index.Put(b, c); err != nil {
			tb.Fatal(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		tb.Fatal(err)
	}
	return index.New(db)
}

func captures(n int, skip map[int]bool) []index.Capture {
	out := make([]index.Capture, 0, n)
	for i := range n {
		if !skip[i] {
			out = append(out, capture(i))
		}
	}
	return out
}

// round runs a whole round between a and b as the package documents it and
// returns what each side lacks and the bytes both directions carried, not
// counting the copied records: Compare, then a sends the differing buckets
// and its fingerprints in them, b answers with the fingerprints it lacks.
// a's own view of the difference is computed too, to check it agrees.
func round(tb testing.TB, a, b *Tree, ia, ib *index.Index) (missingA, missingB []Entry, bytes int) {
	tb.Helper()
	ctx := context.Background()
	buckets, bytes, err := Compare(ctx, a, &treeRemote{t: b})
	if err != nil {
		tb.Fatal(err)
	}
	if len(buckets) == 0 {
		return nil, nil, bytes
	}
	for _, x := range buckets {
		bytes += uvarintLen(x) // a names the buckets to b
	}
	ea, err := a.Entries(ctx, ia, buckets)
	if err != nil {
		tb.Fatal(err)
	}
	eb, err := b.Entries(ctx, ib, buckets)
	if err != nil {
		tb.Fatal(err)
	}
	fa, fb := Fingerprints(ea), Fingerprints(eb)
	hereA, thereA := MissingCaptures(ea, fb)
	hereB, thereB := MissingCaptures(eb, fa)
	bytes += 8 * (len(fa) + len(hereB))
	// Each side's view of the other's lack must agree with the other's own.
	if !slices.Equal(hereA, Fingerprints(thereB)) || !slices.Equal(hereB, Fingerprints(thereA)) {
		tb.Fatalf("sides disagree: A lacks %d by A, %d by B", len(hereA), len(thereB))
	}
	return thereB, thereA, bytes
}

func sortEntries(es []Entry) []Entry {
	slices.SortFunc(es, func(x, y Entry) int {
		if c := strings.Compare(x.URLKey, y.URLKey); c != 0 {
			return c
		}
		if c := x.Time.Compare(y.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Digest, y.Digest)
	})
	return es
}

func entriesOf(caps []index.Capture) []Entry {
	out := make([]Entry, len(caps))
	for i, c := range caps {
		out[i] = EntryOf(c)
	}
	return sortEntries(out)
}

func equalEntries(x, y []Entry) bool {
	return slices.EqualFunc(sortEntries(x), sortEntries(y), func(a, b Entry) bool {
		return a.URLKey == b.URLKey && a.Time.Equal(b.Time) && a.Digest == b.Digest
	})
}

const archiveSize = 100_000

func TestIdenticalArchives(t *testing.T) {
	ctx := context.Background()
	caps := captures(archiveSize, nil)
	ia, ib := openIndex(t, caps), openIndex(t, caps)
	depth := DepthFor(archiveSize)
	a, err := Build(ctx, ia, "", "", depth)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(ctx, ib, "", "", depth)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != archiveSize || a.Root() != b.Root() {
		t.Fatalf("len %d, roots %x %x", a.Len(), a.Root(), b.Root())
	}
	r := &treeRemote{t: b}
	buckets, bytes, err := Compare(ctx, a, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != 0 || r.trips != 0 {
		t.Fatalf("identical archives: %d buckets differ after %d round trips", len(buckets), r.trips)
	}
	// Only the two summaries: range, depth, root, count.
	if want := a.Summary().WireSize() + b.Summary().WireSize(); bytes != want || bytes > 64 {
		t.Fatalf("identical archives cost %d bytes, want %d", bytes, want)
	}
	t.Logf("%d captures, depth %d: equal round costs %d bytes", archiveSize, depth, bytes)
}

func TestMissingCaptures(t *testing.T) {
	ctx := context.Background()
	full := captures(archiveSize, nil)
	ia := openIndex(t, full)
	depth := DepthFor(archiveSize)
	a, err := Build(ctx, ia, "", "", depth)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prev := 0
	for _, k := range []int{1, 10, 1000} {
		skip := map[int]bool{}
		for len(skip) < k {
			skip[rng.IntN(archiveSize)] = true
		}
		var want []index.Capture
		for i := range skip {
			want = append(want, full[i])
		}
		ib := openIndex(t, captures(archiveSize, skip))
		b, err := Build(ctx, ib, "", "", depth)
		if err != nil {
			t.Fatal(err)
		}
		missA, missB, bytes := round(t, a, b, ia, ib)
		if len(missA) != 0 || !equalEntries(missB, entriesOf(want)) {
			t.Fatalf("%d missing: found A lacks %d, B lacks %d", k, len(missA), len(missB))
		}
		// The cost follows the difference: at most a leaf path and a
		// leaf's fingerprints (on average 100000/4096 ≈ 25) per capture.
		if bytes <= prev || bytes > 100+k*(2*8*Fanout*depth+2*8*64) {
			t.Fatalf("%d missing: %d bytes (previous %d)", k, bytes, prev)
		}
		prev = bytes
		t.Logf("%d of %d captures missing: round costs %d bytes", k, archiveSize, bytes)
	}
}

func TestDigestOnly(t *testing.T) {
	ctx := context.Background()
	ca, cb := captures(500, nil), captures(500, nil)
	cb[123].Digest = "sha1:CHANGED"
	ia, ib := openIndex(t, ca), openIndex(t, cb)
	a, err := Build(ctx, ia, "", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(ctx, ib, "", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Root() == b.Root() {
		t.Fatal("a changed digest does not change the root")
	}
	missA, missB, _ := round(t, a, b, ia, ib)
	if !equalEntries(missA, []Entry{EntryOf(cb[123])}) || !equalEntries(missB, []Entry{EntryOf(ca[123])}) {
		t.Fatalf("A lacks %v, B lacks %v", missA, missB)
	}
}

func TestRange(t *testing.T) {
	ctx := context.Background()
	ca := captures(2000, nil)
	// B lacks captures inside and outside [lo, hi).
	lo, hi := "com,example100)", "com,example200)"
	var cb []index.Capture
	var inside []Entry
	for i, c := range ca {
		in := c.URLKey >= lo && c.URLKey < hi
		if i%7 == 0 {
			if in {
				inside = append(inside, EntryOf(c))
			}
			continue
		}
		cb = append(cb, c)
	}
	if len(inside) == 0 {
		t.Fatal("test data: nothing missing inside the range")
	}
	ia, ib := openIndex(t, ca), openIndex(t, cb)
	a, err := Build(ctx, ia, lo, hi, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(ctx, ib, lo, hi, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range ca {
		if c.URLKey >= lo && c.URLKey < hi {
			n++
		}
	}
	if a.Len() != int64(n) {
		t.Fatalf("tree over [%q, %q) holds %d captures, want %d", lo, hi, a.Len(), n)
	}
	missA, missB, _ := round(t, a, b, ia, ib)
	if len(missA) != 0 || !equalEntries(missB, inside) {
		t.Fatalf("B lacks %d captures in range, found %d", len(inside), len(missB))
	}
	if err := a.Add(EntryOf(ca[0])); err == nil { // com,example000)
		t.Fatal("Add accepted a key outside the range")
	}
	// Trees over different ranges are not compared.
	c, err := Build(ctx, ib, lo, "com,example300)", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Compare(ctx, a, &treeRemote{t: c}); !errors.Is(err, errShape) {
		t.Fatalf("different ranges: %v", err)
	}
}

func TestAddRemove(t *testing.T) {
	ctx := context.Background()
	caps := captures(300, nil)
	ia := openIndex(t, caps)
	built, err := Build(ctx, ia, "", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	inc, err := New("", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	// In reverse order, with a detour: sums do not depend on order.
	for i := len(caps) - 1; i >= 0; i-- {
		if err := inc.Add(EntryOf(caps[i])); err != nil {
			t.Fatal(err)
		}
	}
	extra := Entry{URLKey: "org,example)/", Time: time.Unix(1, 0), Digest: "sha1:X"}
	inc.Add(extra)
	inc.Add(extra) // twice: a sum does not cancel like XOR would
	if inc.Root() == built.Root() {
		t.Fatal("duplicate additions cancelled out")
	}
	inc.Remove(extra)
	inc.Remove(extra)
	for d := 0; d <= 2; d++ {
		if !slices.Equal(inc.Level(d), built.Level(d)) {
			t.Fatalf("level %d differs between built and incremental trees", d)
		}
	}
	if inc.Len() != built.Len() || inc.Level(3) != nil || inc.Level(-1) != nil {
		t.Fatal("Len or Level out of range")
	}
	// A clone does not follow later changes.
	clone := inc.Clone()
	inc.Add(extra)
	if clone.Root() != built.Root() || inc.Root() == built.Root() {
		t.Fatal("clone shares state with its tree")
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, d := range []int{-1, MaxDepth + 1} {
		if _, err := New("", "", d); err == nil {
			t.Errorf("depth %d accepted", d)
		}
	}
	if _, err := New("b", "a", 1); err == nil {
		t.Error("empty range accepted")
	}
	tr, _ := New("", "", 2)
	for _, c := range []struct {
		d       int
		parents []uint64
	}{
		{-1, []uint64{0}}, {2, []uint64{0}}, {0, []uint64{1}}, {1, []uint64{16}},
		{1, make([]uint64, 17)}, {1, []uint64{1 << 63}},
	} {
		if _, err := tr.Children(c.d, c.parents); err == nil {
			t.Errorf("Children(%d, %v) accepted", c.d, c.parents)
		}
	}
	if _, err := tr.Entries(ctx, nil, []uint64{256}); err == nil {
		t.Error("Entries accepted a bucket beyond the leaves")
	}
	a, _ := New("", "", 2)
	a.Add(Entry{URLKey: "a"})
	for name, r := range map[string]Remote{
		"short reply":  badRemote{tr: tr, short: true},
		"inconsistent": badRemote{tr: a.Clone(), lie: true},
		"error":        badRemote{tr: tr, err: errors.New("gone")},
	} {
		if _, _, err := Compare(ctx, a, r); err == nil {
			t.Errorf("%s: Compare succeeded", name)
		}
	}
	if _, _, err := Compare(ctx, a, &treeRemote{t: mustNew(t, "", "", 3)}); !errors.Is(err, errShape) {
		t.Errorf("different depths: %v", err)
	}
}

func mustNew(t *testing.T, lo, hi string, depth int) *Tree {
	tr, err := New(lo, hi, depth)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

type badRemote struct {
	tr         *Tree
	short, lie bool
	err        error
}

func (r badRemote) Summary(context.Context) (Summary, error) {
	s := r.tr.Summary()
	if r.lie {
		s.Root++ // a root its children do not sum to
	}
	return s, r.err
}

func (r badRemote) Children(_ context.Context, d int, parents []uint64) ([]uint64, error) {
	h, err := r.tr.Children(d, parents)
	if r.short {
		h = h[1:]
	}
	return h, err
}

func TestDepthFor(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want int
	}{{0, 0}, {32, 0}, {33, 1}, {512, 1}, {513, 2}, {100_000, 3}, {1e12, MaxDepth}} {
		if got := DepthFor(c.n); got != c.want {
			t.Errorf("DepthFor(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	e := Entry{URLKey: "com,example)/", Time: time.Unix(0, 1), Digest: "sha1:A"}
	f := e.Fingerprint()
	for _, o := range []Entry{
		{URLKey: "com,example)/x", Time: e.Time, Digest: e.Digest},
		{URLKey: e.URLKey, Time: time.Unix(0, 2), Digest: e.Digest},
		{URLKey: e.URLKey, Time: e.Time, Digest: "sha1:B"},
	} {
		if o.Fingerprint() == f {
			t.Errorf("%v has the fingerprint of %v", o, e)
		}
	}
	// The same instant in another location is the same capture.
	if (Entry{URLKey: e.URLKey, Time: e.Time.In(time.FixedZone("x", 3600)), Digest: e.Digest}).Fingerprint() != f {
		t.Error("fingerprint depends on the time's location")
	}
}

// FuzzCompare checks on random archives with random differences that a
// round finds exactly the symmetric difference.
func FuzzCompare(f *testing.F) {
	f.Add(uint64(1), uint16(100), uint8(0), uint8(0), uint8(2))
	f.Add(uint64(2), uint16(0), uint8(5), uint8(0), uint8(1))
	f.Add(uint64(3), uint16(1000), uint8(40), uint8(40), uint8(3))
	f.Add(uint64(4), uint16(10), uint8(3), uint8(7), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, shared uint16, onlyA, onlyB, depth uint8) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		d := int(depth) % 4
		a, b := mustNew(t, "", "", d), mustNew(t, "", "", d)
		var ea, eb, wantA, wantB []Entry
		entry := func() Entry {
			return Entry{
				URLKey: fmt.Sprintf("com,h%d)/%d", rng.IntN(50), rng.IntN(100)),
				Time:   time.Unix(0, rng.Int64N(1e6)),
				Digest: fmt.Sprintf("sha1:%d", rng.IntN(1000)),
			}
		}
		seen := map[uint64]bool{}
		fresh := func() Entry {
			for {
				e := entry()
				if fp := e.Fingerprint(); !seen[fp] {
					seen[fp] = true
					return e
				}
			}
		}
		for range int(shared) % 2000 {
			e := fresh()
			ea, eb = append(ea, e), append(eb, e)
		}
		for range onlyA {
			e := fresh()
			ea, wantB = append(ea, e), append(wantB, e)
		}
		for range onlyB {
			e := fresh()
			eb, wantA = append(eb, e), append(wantA, e)
		}
		for _, e := range ea {
			a.Add(e)
		}
		for _, e := range eb {
			b.Add(e)
		}
		buckets, _, err := Compare(ctx, a, &treeRemote{t: b})
		if err != nil {
			t.Fatal(err)
		}
		var wantBuckets []uint64
		for _, e := range append(slices.Clone(wantA), wantB...) {
			wantBuckets = append(wantBuckets, a.Bucket(e))
		}
		slices.Sort(wantBuckets)
		if wantBuckets = slices.Compact(wantBuckets); !slices.Equal(buckets, wantBuckets) {
			t.Fatalf("buckets %v, want %v", buckets, wantBuckets)
		}
		inBuckets := func(es []Entry) []Entry {
			var out []Entry
			for _, e := range es {
				if slices.Contains(buckets, a.Bucket(e)) {
					out = append(out, e)
				}
			}
			return out
		}
		la, lb := inBuckets(ea), inBuckets(eb)
		hereA, thereA := MissingCaptures(la, Fingerprints(lb))
		hereB, thereB := MissingCaptures(lb, Fingerprints(la))
		if !equalEntries(thereB, wantA) || !equalEntries(thereA, wantB) ||
			!slices.Equal(hereA, Fingerprints(wantA)) || !slices.Equal(hereB, Fingerprints(wantB)) {
			t.Fatalf("A lacks %d want %d, B lacks %d want %d", len(thereB), len(wantA), len(thereA), len(wantB))
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	idx := openIndex(b, captures(archiveSize, nil))
	depth := DepthFor(archiveSize)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Build(context.Background(), idx, "", "", depth); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(archiveSize, "captures")
}

func BenchmarkRound(b *testing.B) {
	ctx := context.Background()
	depth := DepthFor(archiveSize)
	full := captures(archiveSize, nil)
	ia := openIndex(b, full)
	a, err := Build(ctx, ia, "", "", depth)
	if err != nil {
		b.Fatal(err)
	}
	for _, pct := range []int{0, 1} {
		skip := map[int]bool{}
		for i := 0; i < archiveSize && pct > 0; i += 100 / pct {
			skip[i] = true
		}
		ib := openIndex(b, captures(archiveSize, skip))
		t, err := Build(ctx, ib, "", "", depth)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("differ=%d%%", pct), func(b *testing.B) {
			var bytes int
			for b.Loop() {
				_, missB, n := round(b, a, t, ia, ib)
				if len(missB) != len(skip) {
					b.Fatalf("found %d missing, want %d", len(missB), len(skip))
				}
				bytes = n
			}
			b.ReportMetric(float64(bytes), "bytes/round")
		})
	}
}
