package index

import (
	"context"
	"math"
	"time"
)

// Bounds of the capture times the key encoding (unix nanoseconds as an
// unsigned big-endian integer) orders correctly.
var (
	minKeyTime = time.Unix(0, 0)
	maxKeyTime = time.Unix(0, math.MaxInt64)
)

// OrderedTime reports whether the index keeps a capture at t in time order
// with the others: t is from 1970 to 2262. An earlier one would sort after
// every later capture of its URL (and cursors over the index would pass it
// by), so import, where captures come with dates of their own, does not
// index it.
func OrderedTime(t time.Time) bool {
	return !t.Before(minKeyTime) && !t.After(maxKeyTime) && time.Unix(0, t.UnixNano()).Equal(t)
}

// CapturesBetween calls fn for each capture of urlKey whose time t satisfies
// from <= t <= to, in time order (newest first when reverse), until fn returns
// false or an error. A zero from or to leaves that side open. It seeks
// straight to the window, so captures of urlKey outside it are not read.
func (x *Index) CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(Capture) (bool, error)) error {
	if !from.IsZero() && !to.IsZero() && from.After(to) {
		return nil
	}
	if !to.IsZero() && to.Before(minKeyTime) {
		return nil
	}
	if !from.IsZero() && from.After(maxKeyTime) {
		return nil
	}
	lo, hi := urlKey+"\x00", urlKey+"\x01"
	if !from.IsZero() && from.After(minKeyTime) {
		lo = string(captureKey(urlKey, from)[len(capturePrefix):])
	}
	if !to.IsZero() && to.Before(maxKeyTime) {
		hi = string(captureKey(urlKey, to.Add(1))[len(capturePrefix):])
	}
	return x.scanCaptures(ctx, lo, hi, reverse, fn)
}
