package replay

import "time"

// httpDate formats t as Memento-Datetime and Link datetimes want (RFC 1123, GMT).
func httpDate(t time.Time) string { return t.UTC().Format(time.RFC1123[:len(time.RFC1123)-3] + "GMT") }
