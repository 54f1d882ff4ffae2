package dedup

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func openDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// quiet drops pebble's informational messages.
type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

func newRegistry(t testing.TB) *Registry {
	t.Helper()
	db := openDB(t, t.TempDir())
	t.Cleanup(func() { db.Close() })
	return NewRegistry(db)
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)

// ref returns a valid Ref for digest number i, stored by capture c.
func ref(i, c int) Ref {
	return Ref{
		Digest:   fmt.Sprintf("sha1:%032d", i),
		URL:      fmt.Sprintf("https://example.com/p/%d?c=%d", i, c),
		Time:     t0.Add(time.Duration(c) * time.Second),
		RecordID: fmt.Sprintf("<urn:uuid:00000000-0000-0000-%04d-%012d>", c, i),
	}
}

func digest(i int) string { return ref(i, 0).Digest }

func TestRegistryFirstWinsAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	r := NewRegistry(db)

	// Within one call the first of a digest wins.
	added, err := r.Register([]Ref{ref(1, 1), ref(2, 1), ref(1, 2)})
	if err != nil || added != 2 {
		t.Fatalf("Register = %d, %v; want 2 added", added, err)
	}
	// Across calls too.
	added, err = r.Register([]Ref{ref(2, 3), ref(3, 3)})
	if err != nil || added != 1 {
		t.Fatalf("second Register = %d, %v; want 1 added", added, err)
	}
	added, err = r.Register([]Ref{ref(1, 4)})
	if err != nil || added != 0 {
		t.Fatalf("third Register = %d, %v; want 0 added", added, err)
	}
	want := []Ref{ref(3, 3), ref(1, 1), ref(2, 1)}
	check := func(r *Registry) {
		t.Helper()
		got, err := r.Lookup([]string{digest(3), digest(9), digest(1), digest(3), digest(2)})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("Lookup = %v, want %v", got, want)
		}
		for i := range got {
			if !equalRef(got[i], want[i]) {
				t.Errorf("Lookup[%d] = %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	check(r)

	// Register commits with Sync; what it returned is there after a reopen.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, dir)
	defer db.Close()
	check(NewRegistry(db))
}

func equalRef(a, b Ref) bool {
	return a.Digest == b.Digest && a.URL == b.URL && a.Time.Equal(b.Time) && a.RecordID == b.RecordID
}

func TestRegistryRefusesInvalidRefsWhole(t *testing.T) {
	bad := map[string]func(*Ref){
		"empty digest":       func(r *Ref) { r.Digest = "" },
		"digest no colon":    func(r *Ref) { r.Digest = "sha1ABC" },
		"digest empty value": func(r *Ref) { r.Digest = "sha1:" },
		"digest space":       func(r *Ref) { r.Digest = "sha1:AB CD" },
		"long digest":        func(r *Ref) { r.Digest = "sha1:" + strings.Repeat("A", MaxDigestBytes) },
		"empty URL":          func(r *Ref) { r.URL = "" },
		"URL with newline":   func(r *Ref) { r.URL = "http://a/\n" },
		"URL not UTF-8":      func(r *Ref) { r.URL = "http://a/\xff" },
		"long URL":           func(r *Ref) { r.URL = "http://a/" + strings.Repeat("a", MaxURLBytes) },
		"zero time":          func(r *Ref) { r.Time = time.Time{} },
		"time before 1970":   func(r *Ref) { r.Time = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) },
		"time after 2262":    func(r *Ref) { r.Time = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"empty record ID":    func(r *Ref) { r.RecordID = "" },
		"long record ID":     func(r *Ref) { r.RecordID = strings.Repeat("<", MaxRecordIDBytes+1) },
	}
	r := newRegistry(t)
	for name, spoil := range bad {
		x := ref(7, 1)
		spoil(&x)
		if _, err := r.Register([]Ref{ref(6, 1), x}); err == nil {
			t.Errorf("%s: Register succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "dedup: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	got, err := r.Lookup([]string{digest(6), digest(7)})
	if err != nil || len(got) != 0 {
		t.Errorf("after refused registrations Lookup = %v, %v; want nothing", got, err)
	}
}

// A corrupt entry is a miss, counted, and the next registration of its
// digest overwrites it: one bad entry must not fail every request that
// asks about its digest.
func TestRegistryCorruptEntryIsAMiss(t *testing.T) {
	r := newRegistry(t)
	if err := r.db.Set([]byte(keyPrefix+digest(1)), []byte{entryVersion, 200}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup([]string{digest(1), digest(2)}); err != nil || len(got) != 0 {
		t.Errorf("Lookup of a corrupt entry and a missing one = %v, %v; want two misses", got, err)
	}
	if n := r.CorruptEntries(); n != 1 {
		t.Errorf("CorruptEntries = %d, want 1", n)
	}
	if added, err := r.Register([]Ref{ref(1, 1)}); err != nil || added != 1 {
		t.Errorf("Register over a corrupt entry = %d, %v; want it registered", added, err)
	}
	if got, err := r.Lookup([]string{digest(1)}); err != nil || len(got) != 1 || !equalRef(got[0], ref(1, 1)) {
		t.Errorf("Lookup after re-registering = %v, %v", got, err)
	}
}
