package index

import (
	"testing"
	"time"
)

func TestParseTimestamp(t *testing.T) {
	for _, tc := range []struct {
		ts          string
		first, last string
	}{
		{"2024", "2024-01-01T00:00:00Z", "2024-12-31T23:59:59Z"},
		{"202402", "2024-02-01T00:00:00Z", "2024-02-29T23:59:59Z"},
		{"201402", "2014-02-01T00:00:00Z", "2014-02-28T23:59:59Z"},
		{"20230215", "2023-02-15T00:00:00Z", "2023-02-15T23:59:59Z"},
		{"20240231", "2024-02-29T00:00:00Z", "2024-02-29T23:59:59Z"}, // clamped to the month's last day
		{"20141399", "2014-12-31T00:00:00Z", "2014-12-31T23:59:59Z"},
		{"2024123123", "2024-12-31T23:00:00Z", "2024-12-31T23:59:59Z"},
		{"20141", "2014-10-01T00:00:00Z", "2014-12-31T23:59:59Z"},
		{"20140", "2014-01-01T00:00:00Z", "2014-09-30T23:59:59Z"},
		{"2016022", "2016-02-20T00:00:00Z", "2016-02-29T23:59:59Z"},
		{"201", "2010-01-01T00:00:00Z", "2019-12-31T23:59:59Z"},
		{"20240102030405", "2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"},
		{"2", "2000-01-01T00:00:00Z", "2999-12-31T23:59:59Z"},
		{"20249999999999", "2024-12-31T23:59:59Z", "2024-12-31T23:59:59Z"},
	} {
		for _, last := range []bool{false, true} {
			want := tc.first
			if last {
				want = tc.last
			}
			got, err := ParseTimestamp(tc.ts, last)
			if err != nil || got.Format(time.RFC3339) != want {
				t.Errorf("ParseTimestamp(%q, %v) = %v, %v; want %s", tc.ts, last, got, err, want)
			}
		}
	}
	for _, bad := range []string{"", "2024-01", "202401021234567", "abc", "2024 ", "２０２４"} {
		if got, err := ParseTimestamp(bad, false); err == nil {
			t.Errorf("ParseTimestamp(%q) = %v, want an error", bad, got)
		}
	}
	if got := Timestamp(time.Date(2024, 3, 1, 12, 0, 0, 999, time.FixedZone("x", 3600))); got != "20240301110000" {
		t.Errorf("Timestamp = %s", got)
	}
}
