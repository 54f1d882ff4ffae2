package index

import (
	"fmt"
	"strconv"
	"time"
)

// timestampLayout is the Wayback timestamp: 14 digits, UTC, to the second.
const timestampLayout = "20060102150405"

// Timestamp formats t as a 14-digit Wayback timestamp.
func Timestamp(t time.Time) string { return t.UTC().Format(timestampLayout) }

// ParseTimestamp reads a Wayback timestamp of 1 to 14 digits, as replay
// paths, CDX queries and export selections give them. A partial timestamp is
// a prefix and names every second whose timestamp starts with it; ParseTimestamp
// returns the first of them, or the last when last is true: "2014" is
// 2014-01-01 00:00:00 or 2014-12-31 23:59:59, "20141" is October 1st or
// December 31st. Fields out of range are clamped, as Wayback machines do,
// so that a hand-typed "20140231" means the last day of February.
func ParseTimestamp(s string, last bool) (time.Time, error) {
	if len(s) == 0 || len(s) > 14 {
		return time.Time{}, fmt.Errorf("timestamp %q: want 1 to 14 digits (yyyyMMddhhmmss)", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, fmt.Errorf("timestamp %q: want digits only (yyyyMMddhhmmss)", s)
		}
	}
	pad := "00000000000000"
	if last {
		pad = "99999999999999"
	}
	full := s + pad[len(s):]
	field := func(i, j int) int { n, _ := strconv.Atoi(full[i:j]); return n }
	year, month := field(0, 4), clamp(field(4, 6), 1, 12)
	lastDay := time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
	return time.Date(year, time.Month(month), clamp(field(6, 8), 1, lastDay),
		clamp(field(8, 10), 0, 23), clamp(field(10, 12), 0, 59), clamp(field(12, 14), 0, 59), 0, time.UTC), nil
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }
