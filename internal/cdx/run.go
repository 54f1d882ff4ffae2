package cdx

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// A Source is the capture index a query reads: an *index.Index, or an
// archive.Archive that spans the network. Captures are ordered by URL key,
// then time, as in package index.
type Source interface {
	// Range calls fn for each capture whose URL key k satisfies
	// lo <= k < hi (hi empty: no upper bound), by key then time.
	Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error
	// CapturesBetween calls fn for each capture of urlKey with
	// from <= time <= to (a zero bound is open), in time order.
	CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error
}

// missing reports a Source that is nil, or a nil pointer in an interface
// (a nil *index.Index), which would panic on first use.
func missing(src Source) bool {
	if src == nil {
		return true
	}
	v := reflect.ValueOf(src)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Run streams the captures matching q to fn, in the query's order: key then
// time, reversed with Reverse; by distance from Closest (older first on a
// tie, as pywb) when Closest is set; Collapse drops captures in that order.
// It stops when fn returns false or an error, or after Limit captures.
//
// Run holds O(1) captures in memory whatever the order: closest order is
// a merge of two index scans going away from Closest in both directions.
// An exact match reads only the captures between From and To.
func (q Query) Run(ctx context.Context, src Source, fn func(index.Capture) (bool, error)) error {
	if missing(src) {
		return errors.New("cdx: no index")
	}
	return q.run(ctx, src, fn)
}

func (q Query) run(ctx context.Context, src Source, fn func(index.Capture) (bool, error)) error {
	if q.Limit < 0 {
		return fmt.Errorf("cdx: limit %d is negative", q.Limit)
	}
	mt, key, err := resolve(q.URL, q.MatchType)
	if err != nil {
		return err
	}
	if !q.Closest.IsZero() && mt != MatchExact {
		return fmt.Errorf("cdx: closest order needs matchType=exact, not %s", mt)
	}

	// The bounds, at the resolution of a 14-digit timestamp: a capture at
	// 12:00:00.5 has the timestamp ...120000 and is within to=...120000.
	var lo, hi time.Time
	if !q.From.IsZero() {
		lo = q.From.Truncate(time.Second)
	}
	if !q.To.IsZero() {
		hi = q.To.Truncate(time.Second).Add(time.Second - 1)
	}
	if !lo.IsZero() && !hi.IsZero() && lo.After(hi) {
		return nil
	}

	var m matcher
	col := newCollapser(q.Collapse)
	n := 0
	done := false
	// emit passes a capture that matched, unless collapsed, to fn and
	// counts it against Limit. Collapsing is here, after the ordering, so
	// that it compares rows as they are output.
	emit := func(c index.Capture) (bool, error) {
		if col != nil && !col.keep(&c) {
			return true, nil
		}
		more, err := fn(c)
		n++
		if err != nil || !more || (q.Limit > 0 && n >= q.Limit) {
			done = true
			return false, err
		}
		return true, nil
	}
	match := func(c *index.Capture) bool { return m.all(q.Filters, c) }

	if mt == MatchExact {
		if !q.Closest.IsZero() {
			return q.runClosest(ctx, src, key, lo, hi, match, emit)
		}
		return wrap(src.CapturesBetween(ctx, key, lo, hi, q.Reverse, func(c index.Capture) (bool, error) {
			if !match(&c) {
				return true, nil
			}
			return emit(c)
		}))
	}

	_, ranges, err := Ranges(q.URL, mt)
	if err != nil {
		return err
	}
	for i := range ranges {
		r := ranges[i]
		if q.Reverse {
			r = ranges[len(ranges)-1-i]
		}
		err := src.Range(ctx, r[0], r[1], q.Reverse, func(c index.Capture) (bool, error) {
			if (!lo.IsZero() && c.Time.Before(lo)) || (!hi.IsZero() && c.Time.After(hi)) || !match(&c) {
				return true, nil
			}
			return emit(c)
		})
		if err != nil || done {
			return wrap(err)
		}
	}
	return nil
}

// runClosest emits the captures of key between lo and hi by distance from
// q.Closest, measured between 14-digit timestamps as pywb does. It merges a
// forward scan from Closest with a backward scan from just before it; each
// yields captures in order of growing distance.
func (q Query) runClosest(ctx context.Context, src Source, key string, lo, hi time.Time,
	match func(*index.Capture) bool, emit func(index.Capture) (bool, error)) error {
	at := q.Closest.Truncate(time.Second)
	fwdFrom, bwdTo := at, at.Add(-1)
	if !lo.IsZero() && lo.After(fwdFrom) {
		fwdFrom = lo
	}
	if !hi.IsZero() && hi.Before(bwdTo) {
		bwdTo = hi
	}
	fwd := newStream(ctx, src, key, fwdFrom, hi, false, match)
	defer fwd.stop()
	bwd := newStream(ctx, src, key, lo, bwdTo, true, match)
	defer bwd.stop()

	dist := func(c index.Capture) int64 {
		d := c.Time.Truncate(time.Second).Unix() - at.Unix()
		if d < 0 {
			return -d
		}
		return d
	}
	var group []index.Capture
	for {
		f, fok := fwd.peek()
		b, bok := bwd.peek()
		if !fok && !bok {
			break
		}
		if fok && (!bok || dist(f) < dist(b)) {
			fwd.advance()
			if more, err := emit(f); !more {
				return wrap(err)
			}
			continue
		}
		// Older first on a tie: the backward scan's captures of one second
		// come newest first, so they are gathered and emitted reversed.
		sec := b.Time.Truncate(time.Second)
		group = group[:0]
		for {
			g, ok := bwd.peek()
			if !ok || !g.Time.Truncate(time.Second).Equal(sec) {
				break
			}
			group = append(group, g)
			bwd.advance()
		}
		for i := len(group) - 1; i >= 0; i-- {
			if more, err := emit(group[i]); !more {
				return wrap(err)
			}
		}
	}
	fwd.stop()
	bwd.stop()
	if fwd.err != nil {
		return wrap(fwd.err)
	}
	return wrap(bwd.err)
}

// stream is a pull iterator over the matching captures of one key.
type stream struct {
	next   func() (index.Capture, bool)
	stop   func()
	err    error
	cur    index.Capture
	ok     bool
	primed bool
}

func newStream(ctx context.Context, src Source, key string, from, to time.Time, reverse bool, match func(*index.Capture) bool) *stream {
	s := new(stream)
	if !from.IsZero() && !to.IsZero() && from.After(to) {
		s.next = func() (index.Capture, bool) { return index.Capture{}, false }
		s.stop = func() {}
		return s
	}
	s.next, s.stop = iter.Pull(func(yield func(index.Capture) bool) {
		s.err = src.CapturesBetween(ctx, key, from, to, reverse, func(c index.Capture) (bool, error) {
			if !match(&c) {
				return true, nil
			}
			return yield(c), nil
		})
	})
	return s
}

func (s *stream) peek() (index.Capture, bool) {
	if !s.primed {
		s.cur, s.ok = s.next()
		s.primed = true
	}
	return s.cur, s.ok
}

func (s *stream) advance() { s.primed = false }

// wrap prefixes an error with the package name, unless it is the caller's
// own cancellation, which callers test for with errors.Is.
func wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("cdx: %w", err)
}
