package replay

import (
	"fmt"
	"strconv"
	"time"
)

// ts14 is the Wayback timestamp layout: 14 digits, UTC, to the second.
const ts14 = "20060102150405"

// ParseTimestamp reads a Wayback timestamp of 1 to 14 digits. A partial
// timestamp is padded towards the start of the period it names ("2014" is
// 2014-01-01 00:00:00) when low, towards its end when !low ("2014" is
// 2014-12-31 23:59:59). Out-of-range fields are clamped, as Wayback
// machines do, so that a hand-typed "20140231" still finds something.
func ParseTimestamp(s string, low bool) (time.Time, error) {
	if len(s) == 0 || len(s) > 14 {
		return time.Time{}, fmt.Errorf("replay: timestamp %q: want 1 to 14 digits", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, fmt.Errorf("replay: timestamp %q: want digits only", s)
		}
	}
	// Pad the year to four digits with zeros, then each later field with its
	// lowest or highest value.
	pad := "00000101000000"
	if !low {
		pad = "99991231235959"
	}
	if len(s) < 4 {
		s += pad[len(s):4]
	}
	full := s + pad[len(s):]
	field := func(i, j int) int { n, _ := strconv.Atoi(full[i:j]); return n }
	year, month, day := field(0, 4), clamp(field(4, 6), 1, 12), field(6, 8)
	hour, minute, sec := clamp(field(8, 10), 0, 23), clamp(field(10, 12), 0, 59), clamp(field(12, 14), 0, 59)
	last := time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
	day = clamp(day, 1, last)
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC), nil
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

// Timestamp formats t as a 14-digit Wayback timestamp.
func Timestamp(t time.Time) string { return t.UTC().Format(ts14) }

// httpDate formats t as Memento-Datetime and Link datetimes want (RFC 1123, GMT).
func httpDate(t time.Time) string { return t.UTC().Format(time.RFC1123[:len(time.RFC1123)-3] + "GMT") }
