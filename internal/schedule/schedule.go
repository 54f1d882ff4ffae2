// Package schedule decides when waggle revisits a URL it has seen before.
//
// Every URL ever archived is fetched again on a schedule (Herodotus §4.7–4.8
// re-crawls everything daily); waggle adapts the interval per URL. Each visit
// reports whether the page changed (a new payload digest; a 304 or an
// identical digest is "unchanged"), and the policy estimates the page's change
// rate λ, modelling changes as a Poisson process, with the estimator of Cho
// and Garcia-Molina for an incomplete change history ("Estimating frequency
// of change", ACM TOIT 3(3), 2003): of n visits I apart X̄ found no change, so
//
//	r̂ = −log((X̄ + 0.5) / (n + 0.5))
//
// estimates λ·I, the expected number of changes per visit interval, and
// λ̂ = r̂ / I. Unlike counting changes (X/n, which can never exceed one per
// visit), it does not saturate when a page changes several times between
// visits, and the 0.5 terms make it nearly unbiased and finite when every
// visit saw a change. The counts are exponentially decayed, so the estimate
// follows a page whose behaviour changes within a few visits, and restated
// at each new interval (see Next), so that visits need not be evenly spaced.
//
// The next interval is the one in which the probability of more than one
// change — a version that would never be archived — is Policy.Miss:
// 1 − e^{−λI}(1 + λI) = Miss, clamped to [Policy.Min, Policy.Max]. Growth is
// limited to doubling per visit, because "unchanged" is weak evidence, and an
// unchanged visit made before half the interval had passed is not counted at
// all; a shrink is not limited beyond Min, because missed versions are lost
// for good.
//
// The package does no I/O: callers keep a State per URL (MarshalBinary is a
// couple of dozen bytes) and spread due times with Jitter.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"
)

// DefaultMiss is the miss probability a Policy with Miss zero uses.
const DefaultMiss = 0.1

// decay weighs the previous statistics at each visit: the estimate rests on
// about 1/(1−decay) = 2.5 recent visits, enough to smooth one unlucky visit and
// few enough to follow a page that went from static to hourly.
const decay = 0.6

// Policy bounds the revisit interval of the URLs of one scope.
type Policy struct {
	// Default is the interval after the first visit, before anything is
	// known about the page.
	Default time.Duration
	// Min and Max bound every interval.
	Min, Max time.Duration
	// Miss is the target probability that a page changes more than once
	// between two visits, so that a version is never archived. Zero means
	// DefaultMiss; smaller values revisit sooner.
	Miss float64
}

// DefaultPolicy revisits daily at first, and adapts between hourly and
// every 30 days.
func DefaultPolicy() Policy {
	return Policy{Default: 24 * time.Hour, Min: time.Hour, Max: 30 * 24 * time.Hour}
}

// maxInterval bounds every duration in a Policy and a State, so that
// arithmetic on them (doubling, jitter, adding to a time) cannot overflow.
const maxInterval = 100 * 365 * 24 * time.Hour

// Validate reports whether p is usable: 0 < Min ≤ Default ≤ Max ≤ 100 years,
// all whole seconds or longer, and 0 ≤ Miss < 1.
func (p Policy) Validate() error {
	switch {
	case p.Min < time.Second:
		return fmt.Errorf("schedule: minimum interval %v is shorter than a second", p.Min)
	case p.Default < p.Min:
		return fmt.Errorf("schedule: default interval %v is shorter than the minimum %v", p.Default, p.Min)
	case p.Max < p.Default:
		return fmt.Errorf("schedule: maximum interval %v is shorter than the default %v", p.Max, p.Default)
	case p.Min%time.Second != 0 || p.Default%time.Second != 0 || p.Max%time.Second != 0:
		return errors.New("schedule: intervals must be whole seconds")
	case p.Max > maxInterval:
		return fmt.Errorf("schedule: maximum interval %v is longer than 100 years", p.Max)
	case !(p.Miss >= 0 && p.Miss < 1):
		return fmt.Errorf("schedule: miss probability %v is not in [0, 1)", p.Miss)
	}
	return nil
}

// State is what the policy keeps about one URL between visits. The zero
// State is a URL never visited. Durations and times are kept to the second.
type State struct {
	// Interval is the interval chosen at the last visit, before jitter.
	Interval time.Duration
	// LastVisit is the time of the last visit.
	LastVisit time.Time
	// Visits and Changes count the visits after the first, and those that
	// found the page changed; they saturate rather than wrap.
	Visits, Changes uint32

	// The decayed statistics of the estimator, in fixed point so that a
	// State survives MarshalBinary unchanged: n visits and u of them
	// unchanged (both in units of 1/fixedOne), made t seconds apart.
	n, u uint32
	t    uint64
}

const fixedOne = 1 << 16

// First returns the state of a URL visited for the first time at now, and
// when to visit it next.
func (p Policy) First(now time.Time) (State, time.Time) {
	now = now.Truncate(time.Second)
	d := p.clamp(p.Default)
	return State{Interval: d, LastVisit: now}, now.Add(d)
}

// Next returns the state after a visit at now that found the page changed
// or not, and when to visit next. Next assumes p is valid (see Validate);
// for any State, even one from a different policy, the interval it returns
// is within [p.Min, p.Max].
func (p Policy) Next(s State, now time.Time, changed bool) (State, time.Time) {
	now = now.Truncate(time.Second)
	prev := s.Interval
	if prev <= 0 {
		prev = p.Default
	}
	// The observation spans the time since the last visit, which is later
	// than planned when the crawler fell behind. A gap beyond Max says
	// little more than Max about the rate, and a clock that went backwards
	// says nothing, so both fall back to bounded values.
	elapsed := prev
	if !s.LastVisit.IsZero() && !now.Before(s.LastVisit) {
		elapsed = now.Sub(s.LastVisit)
	}
	elapsed = min(max(elapsed, time.Second), p.Max, maxInterval)

	// An unchanged visit made well before the page was due (a forced
	// re-crawl, `--recrawl-all`) leaves the estimate as it was: no change
	// over a short time says little about a long one, and counting it
	// would let a few visits seconds apart double the interval each time,
	// up to Max. The next visit is timed from this one.
	if !changed && !s.LastVisit.IsZero() && elapsed < prev/2 {
		s.Interval = p.clamp(min(prev, maxInterval))
		s.LastVisit = now
		if s.Visits < math.MaxUint32 {
			s.Visits++
		}
		return s, now.Add(s.Interval)
	}

	// The counts describe visits made ref apart. Under the Poisson model
	// at the current estimate, "unchanged over ref" with probability q is
	// "unchanged over elapsed" with probability q^(elapsed/ref), so the
	// history is restated at the new interval before the new visit joins
	// it: the estimate stays λ̂·I for the interval just observed, even
	// while the intervals move quickly.
	n := float64(s.n) / fixedOne
	u := float64(s.u) / fixedOne
	if ref := float64(s.t); n > 0 && ref > 0 {
		q := math.Pow((u+0.5)/(n+0.5), elapsed.Seconds()/ref)
		u = min(max(q*(n+0.5)-0.5, 0), n)
	}
	n = decay*n + 1
	u = decay * u
	if !changed {
		u++
	}

	var next time.Duration
	r := -math.Log((u + 0.5) / (n + 0.5)) // λ̂ · elapsed
	if r <= 0 {
		next = p.Max // no change seen: λ̂ = 0
	} else {
		secs := p.target() * elapsed.Seconds() / r // target / λ̂
		if secs >= maxInterval.Seconds() {
			next = maxInterval
		} else {
			next = time.Duration(secs * float64(time.Second))
		}
	}
	next = min(next, 2*min(prev, maxInterval))
	next = p.clamp(next.Round(time.Second))

	s.Interval = next
	s.LastVisit = now
	if s.Visits < math.MaxUint32 {
		s.Visits++
		if changed {
			s.Changes++
		}
	}
	s.n = uint32(math.Round(n * fixedOne))
	s.u = min(uint32(math.Round(u*fixedOne)), s.n)
	s.t = uint64(elapsed / time.Second)
	return s, now.Add(next)
}

// Rebound returns s with its interval moved within p's bounds, for a URL
// scheduled under other bounds; ok is false when the interval was within
// them already, or s is of a URL never visited.
func (p Policy) Rebound(s State) (_ State, ok bool) {
	if s.LastVisit.IsZero() || s.Interval <= 0 {
		return s, false
	}
	d := p.clamp(min(s.Interval, maxInterval))
	if d == s.Interval {
		return s, false
	}
	s.Interval = d
	return s, true
}

// clamp bounds d to [Min, Max], preferring Min if a bad policy has Min > Max.
func (p Policy) clamp(d time.Duration) time.Duration {
	return max(min(d, p.Max), p.Min)
}

// target returns x = λI at which the probability of two or more Poisson
// events in I, 1 − e^{−x}(1+x), equals the policy's miss probability.
func (p Policy) target() float64 {
	miss := p.Miss
	if !(miss > 0 && miss < 1) {
		miss = DefaultMiss
	}
	// The left side grows monotonically from 0 to 1; bisection is exact
	// enough after 60 halvings and never fails.
	lo, hi := 0.0, 64.0
	for range 60 {
		mid := (lo + hi) / 2
		if 1-math.Exp(-mid)*(1+mid) < miss {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// Jitter is the package's Jitter kept within p's bounds: an interval at
// MIN or MAX is not moved past it, for good, for a tenth of the URLs. A
// policy without a maximum (not validated) bounds nothing.
func (p Policy) Jitter(url string, d time.Duration) time.Duration {
	if p.Max <= 0 {
		return Jitter(url, d)
	}
	return min(max(Jitter(url, d), p.Min), max(p.Max, p.Min))
}

// Jitter spreads d by a fraction in [−10%, +10%) that depends only on url,
// so that URLs discovered together do not fall due together, while each URL
// keeps a steady rhythm. The result may lie up to 10% outside a Policy's
// bounds (Policy.Jitter keeps it within).
func Jitter(url string, d time.Duration) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(url))
	// FNV's high bits hardly differ between similar URLs; the splitmix64
	// finaliser mixes every input bit into them. The top 53 bits then give
	// a uniform fraction in [0, 1).
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	f := float64(x>>11) / (1 << 53)
	d = min(d, maxInterval)
	return d + time.Duration((f*0.2-0.1)*float64(d))
}

// encoding version of State.MarshalBinary.
const stateVersion = 1

// MarshalBinary encodes s compactly: a version byte and seven varints.
func (s State) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 32)
	b = append(b, stateVersion)
	b = appendUvarint(b, uint64(max(s.Interval, 0)/time.Second))
	var unix int64
	if !s.LastVisit.IsZero() {
		unix = s.LastVisit.Unix()
	}
	b = appendVarint(b, unix)
	b = appendUvarint(b, uint64(s.Visits))
	b = appendUvarint(b, uint64(s.Changes))
	b = appendUvarint(b, uint64(s.n))
	b = appendUvarint(b, uint64(s.u))
	b = appendUvarint(b, s.t)
	return b, nil
}

// The largest decayed visit count is 1/(1−decay); anything well beyond it
// was not written by this package.
const maxN = 8 * fixedOne

// UnmarshalBinary decodes what MarshalBinary encoded, rejecting anything
// else.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		return errors.New("schedule: empty state")
	}
	if b[0] != stateVersion {
		return fmt.Errorf("schedule: unknown state version %d", b[0])
	}
	d := decoder{b: b[1:]}
	interval := d.uvarint(uint64(maxInterval / time.Second))
	unix := d.varint()
	visits := d.uvarint(math.MaxUint32)
	changes := d.uvarint(math.MaxUint32)
	n := d.uvarint(maxN)
	u := d.uvarint(maxN)
	t := d.uvarint(uint64(maxInterval / time.Second))
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("schedule: %d bytes after state", len(d.b))
	}
	if changes > visits {
		return fmt.Errorf("schedule: state has %d changes in %d visits", changes, visits)
	}
	if u > n {
		return errors.New("schedule: state has more unchanged visits than visits")
	}
	// Unix seconds within years 0–9999 keep time arithmetic exact.
	if unix < -62135596800 || unix > 253402300799 {
		return fmt.Errorf("schedule: state time %d out of range", unix)
	}
	*s = State{
		Interval: time.Duration(interval) * time.Second,
		Visits:   uint32(visits),
		Changes:  uint32(changes),
		n:        uint32(n),
		u:        uint32(u),
		t:        t,
	}
	if unix != 0 {
		s.LastVisit = time.Unix(unix, 0).UTC()
	}
	return nil
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarint(b []byte, v int64) []byte {
	return appendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

// decoder reads varints, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	var v uint64
	for i := 0; ; i++ {
		if i == len(d.b) {
			d.err = errors.New("schedule: truncated state")
			return 0
		}
		c := d.b[i]
		if i == 9 && c > 1 || i > 9 {
			d.err = errors.New("schedule: varint overflows in state")
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if i > 0 && c == 0 {
				d.err = errors.New("schedule: non-minimal varint in state")
				return 0
			}
			d.b = d.b[i+1:]
			break
		}
	}
	if v > limit {
		d.err = fmt.Errorf("schedule: state value %d exceeds %d", v, limit)
		return 0
	}
	return v
}

func (d *decoder) varint() int64 {
	v := d.uvarint(math.MaxUint64)
	return int64(v>>1) ^ -int64(v&1)
}
