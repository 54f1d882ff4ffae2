package index

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func TestCapturesBetween(t *testing.T) {
	db := openDB(t)
	b := db.NewBatch()
	// Three captures of one key, a neighbour key on either side.
	for i, c := range []Capture{
		capture("com,example)/", "20240101000000", 0),
		capture("com,example)/", "20240201000000", 1),
		capture("com,example)/", "20240301000000", 2),
		capture("com,example)", "20240201000000", 3),
		capture("com,example)/a", "20240201000000", 4),
	} {
		if err := Put(b, c); err != nil {
			t.Fatal(i, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	x := New(db)
	ts := func(s string) time.Time {
		v, err := time.Parse("20060102150405", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	get := func(from, to time.Time, reverse bool) []int64 {
		var got []int64
		err := x.CapturesBetween(context.Background(), "com,example)/", from, to, reverse, func(c Capture) (bool, error) {
			got = append(got, c.Offset)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	var zero time.Time
	for _, tc := range []struct {
		name     string
		from, to time.Time
		reverse  bool
		want     []int64
	}{
		{"open", zero, zero, false, []int64{0, 1, 2}},
		{"open reverse", zero, zero, true, []int64{2, 1, 0}},
		{"inclusive both ends", ts("20240201000000"), ts("20240301000000"), false, []int64{1, 2}},
		{"to just before", zero, ts("20240301000000").Add(-1), false, []int64{0, 1}},
		{"from just after", ts("20240101000000").Add(1), zero, true, []int64{2, 1}},
		{"empty window", ts("20240102000000"), ts("20240103000000"), false, nil},
		{"from after to", ts("20240301000000"), ts("20240101000000"), false, nil},
		{"before 1970", time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), zero, false, []int64{0, 1, 2}},
		{"to before 1970", zero, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), false, nil},
		{"beyond 2262", zero, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), false, []int64{0, 1, 2}},
		{"from beyond 2262", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), zero, false, nil},
	} {
		got := get(tc.from, tc.to, tc.reverse)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func TestOrderedTime(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want bool
	}{
		{time.Unix(0, 0), true},
		{time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC), true},
		{time.Unix(0, math.MaxInt64), true},
		{time.Unix(0, -1), false}, // would sort after every capture since 1970
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Time{}, false},
	} {
		if got := OrderedTime(tc.t); got != tc.want {
			t.Errorf("OrderedTime(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}
