package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run visits a page n times, each visit at the due time, with changed
// deciding the outcome from the time since the previous visit.
func run(p Policy, s State, now time.Time, n int, changed func(dt time.Duration) bool) (State, time.Time) {
	due := now.Add(s.Interval)
	for range n {
		dt := due.Sub(now)
		now = due
		s, due = p.Next(s, now, changed(dt))
	}
	return s, now
}

func TestValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Policy{
		{},
		{Default: time.Hour, Min: 2 * time.Hour, Max: 3 * time.Hour},
		{Default: 4 * time.Hour, Min: time.Hour, Max: 3 * time.Hour},
		{Default: time.Hour, Min: time.Millisecond, Max: 3 * time.Hour},
		{Default: time.Hour, Min: time.Hour, Max: 200 * 365 * 24 * time.Hour},
		{Default: time.Hour, Min: time.Hour, Max: time.Hour, Miss: 1},
		{Default: time.Hour, Min: time.Hour, Max: time.Hour, Miss: math.NaN()},
		{Default: time.Hour, Min: time.Hour, Max: time.Hour, Miss: -0.1},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

func TestFirst(t *testing.T) {
	p := DefaultPolicy()
	s, due := p.First(t0)
	if s.Interval != p.Default || !due.Equal(t0.Add(p.Default)) || !s.LastVisit.Equal(t0) {
		t.Fatalf("First = %+v, %v", s, due)
	}
}

func TestNeverChangesDriftsToMax(t *testing.T) {
	p := DefaultPolicy()
	s, _ := p.First(t0)
	s, now := run(p, s, t0, 20, func(time.Duration) bool { return false })
	if s.Interval != p.Max {
		t.Fatalf("after 20 unchanged visits interval = %v, want %v", s.Interval, p.Max)
	}
	for range 50 {
		var due time.Time
		s, due = p.Next(s, now.Add(s.Interval), false)
		now = due.Add(-s.Interval)
		if s.Interval != p.Max {
			t.Fatalf("interval left Max: %v", s.Interval)
		}
	}
}

func TestGrowthAtMostDoubles(t *testing.T) {
	p := DefaultPolicy()
	s, _ := p.First(t0)
	s2, _ := p.Next(s, t0.Add(s.Interval), false)
	if s2.Interval != 2*s.Interval {
		t.Fatalf("one unchanged visit: %v → %v, want doubling", s.Interval, s2.Interval)
	}
}

// Unchanged visits made seconds apart (forced re-crawls) are no evidence
// that a page is static: they leave the interval where it was, and the
// next visit on schedule grows it as it would have. A change seen early
// counts.
func TestEarlyUnchangedVisitsDoNotGrow(t *testing.T) {
	p := DefaultPolicy()
	s, _ := p.First(t0)
	now := t0
	for i := range 5 {
		// The first in the same second as the visit before: early, not
		// a visit an interval later.
		now = now.Add(time.Duration(i) * time.Second)
		var due time.Time
		s, due = p.Next(s, now, false)
		if s.Interval != p.Default || !due.Equal(now.Add(p.Default)) {
			t.Fatalf("unchanged %v after the first visit: interval %v due %v, want %v after it", now.Sub(t0), s.Interval, due, p.Default)
		}
	}
	if s.Visits != 5 || s.Changes != 0 {
		t.Errorf("counts %d/%d, want 0/5", s.Changes, s.Visits)
	}
	if on, _ := p.Next(s, now.Add(s.Interval), false); on.Interval != 2*p.Default {
		t.Errorf("unchanged on schedule after them: interval %v, want %v", on.Interval, 2*p.Default)
	}
	if ch, _ := p.Next(s, now.Add(time.Minute), true); ch.Interval >= p.Default {
		t.Errorf("changed a minute after the last visit: interval %v, want shorter than %v", ch.Interval, p.Default)
	}
}

func TestAlwaysChangesDriftsToMin(t *testing.T) {
	p := DefaultPolicy()
	s, _ := p.First(t0)
	s, _ = run(p, s, t0, 20, func(time.Duration) bool { return true })
	if s.Interval != p.Min {
		t.Fatalf("after 20 changed visits interval = %v, want %v", s.Interval, p.Min)
	}
	if s.Visits != 20 || s.Changes != 20 {
		t.Fatalf("counts %d/%d", s.Changes, s.Visits)
	}
}

// poisson returns a change oracle for a page changing at rate 1/period.
func poisson(rng *rand.Rand, period time.Duration) func(time.Duration) bool {
	return func(dt time.Duration) bool {
		return rng.Float64() < 1-math.Exp(-dt.Seconds()/period.Seconds())
	}
}

func TestPoissonConverges(t *testing.T) {
	p := DefaultPolicy()
	for _, period := range []time.Duration{6 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour} {
		rng := rand.New(rand.NewPCG(1, uint64(period)))
		s, now := p.First(t0)
		s, now = run(p, s, now, 200, poisson(rng, period)) // settle
		// Geometric mean of the intervals chosen over many more visits.
		var sum float64
		const visits = 2000
		for range visits {
			s, now = run(p, s, now, 1, poisson(rng, period))
			sum += math.Log(s.Interval.Seconds())
		}
		got := math.Exp(sum / visits)
		want := p.target() * period.Seconds()
		t.Logf("period %v: analytic %v, simulated %v", period, time.Duration(want*1e9).Round(time.Minute), time.Duration(got*1e9).Round(time.Minute))
		if r := got / want; r < 0.5 || r > 2 {
			t.Errorf("period %v: mean interval %v, analytic %v", period,
				time.Duration(got*1e9), time.Duration(want*1e9))
		}
	}
}

func TestTargetSolvesMiss(t *testing.T) {
	for _, miss := range []float64{0, 0.01, 0.1, 0.5} {
		p := Policy{Miss: miss}
		x := p.target()
		if miss == 0 {
			miss = DefaultMiss
		}
		if got := 1 - math.Exp(-x)*(1+x); math.Abs(got-miss) > 1e-9 {
			t.Errorf("Miss %v: x = %v gives %v", miss, x, got)
		}
	}
}

func TestAdaptsToBehaviourChange(t *testing.T) {
	p := DefaultPolicy()
	s, now := p.First(t0)
	// Static for a year: the interval is Max.
	s, now = run(p, s, now, 20, func(time.Duration) bool { return false })
	for now.Before(t0.AddDate(1, 0, 0)) {
		s, now = run(p, s, now, 1, func(time.Duration) bool { return false })
	}
	if s.Interval != p.Max {
		t.Fatalf("static page at %v", s.Interval)
	}
	// Now it changes hourly; every visit finds a change.
	rng := rand.New(rand.NewPCG(3, 4))
	hourly := poisson(rng, time.Hour)
	for i := 1; ; i++ {
		s, now = run(p, s, now, 1, hourly)
		if s.Interval <= 2*p.Min {
			t.Logf("adapted in %d visits", i)
			break
		}
		if i == 20 {
			t.Fatalf("after %d visits of an hourly page interval is still %v", i, s.Interval)
		}
	}
	// And back: it goes static again and the interval climbs to Max.
	s, _ = run(p, s, now, 40, func(time.Duration) bool { return false })
	if s.Interval != p.Max {
		t.Fatalf("static again, interval %v", s.Interval)
	}
}

func TestBoundsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		min := time.Duration(1+rng.IntN(7200)) * time.Second
		def := min + time.Duration(rng.Int64N(48*3600))*time.Second
		p := Policy{Min: min, Default: def, Max: def + time.Duration(rng.Int64N(60*24*3600))*time.Second, Miss: rng.Float64() * 0.5}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		s, now := p.First(t0)
		for range 300 {
			// Visits early, late or on time; changes at random; the
			// clock occasionally steps backwards.
			now = now.Add(time.Duration(rng.Float64()*3*float64(s.Interval)) - time.Duration(rng.Int64N(int64(time.Hour))))
			var due time.Time
			s, due = p.Next(s, now, rng.IntN(3) == 0)
			if s.Interval < p.Min || s.Interval > p.Max {
				t.Fatalf("%+v: interval %v out of bounds", p, s.Interval)
			}
			if got := due.Sub(s.LastVisit); got != s.Interval {
				t.Fatalf("due %v after the visit, interval %v", got, s.Interval)
			}
			round(t, s)
		}
	}
}

// round checks that s survives encoding unchanged.
func round(t *testing.T, s State) {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got State
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatalf("%x: %v", b, err)
	}
	if !got.LastVisit.Equal(s.LastVisit) {
		t.Fatalf("LastVisit %v → %v", s.LastVisit, got.LastVisit)
	}
	got.LastVisit, s.LastVisit = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip %+v → %+v", s, got)
	}
}

func TestStateRoundTrip(t *testing.T) {
	round(t, State{})
	p := DefaultPolicy()
	s, now := p.First(t0)
	round(t, s)
	s, _ = run(p, s, now, 30, poisson(rand.New(rand.NewPCG(7, 8)), 24*time.Hour))
	round(t, s)
	b, _ := s.MarshalBinary()
	if len(b) > 24 {
		t.Errorf("state is %d bytes", len(b))
	}
	// A decoded state continues exactly as the original would.
	var d State
	if err := d.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	now = s.LastVisit.Add(s.Interval)
	a1, due1 := p.Next(s, now, true)
	a2, due2 := p.Next(d, now, true)
	if a1.Interval != a2.Interval || !due1.Equal(due2) {
		t.Fatalf("decoded state diverges: %v vs %v", a1.Interval, a2.Interval)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good, _ := State{Interval: time.Hour, LastVisit: t0, Visits: 3, Changes: 1, n: 2 * fixedOne, u: fixedOne, t: 7200}.MarshalBinary()
	bad := map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{2}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"overflow":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"changes":   {1, 1, 0, 1, 2, 0, 0, 0},
		"unchanged": {1, 1, 0, 1, 0, 1, 2, 0},
		"nonmin":    {1, 0x81, 0x00, 0, 0, 0, 0, 0, 0},
	}
	for name, b := range bad {
		var s State
		if err := s.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: %x decoded as %+v", name, b, s)
		}
	}
}

func TestJitter(t *testing.T) {
	d := 24 * time.Hour
	// Pinned: every node and every restart must schedule a URL alike, so a
	// change to the mixing is a change to the protocol.
	if got, want := Jitter("http://example.com/", d), time.Duration(85426456796368); got != want {
		t.Fatalf("Jitter(example.com, 24h) = %d, want %d", got, want)
	}
	// Spread over ±10%: a thousand URLs fill both halves and every tenth.
	var buckets [10]int
	for i := range 1000 {
		j := Jitter("http://example.com/page/"+string(rune('a'+i%26))+string(rune('a'+i/26)), d)
		if j < d-d/10 || j >= d+d/10 {
			t.Fatalf("jitter %v outside ±10%% of %v", j, d)
		}
		buckets[int((j-(d-d/10))*10/(d/5))]++
	}
	for i, n := range buckets {
		if n < 50 {
			t.Errorf("bucket %d has %d of 1000: %v", i, n, buckets)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	p := DefaultPolicy()
	s, now := p.First(t0)
	s, _ = run(p, s, now, 10, poisson(rand.New(rand.NewPCG(9, 10)), time.Hour))
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes and schedules
		// within bounds.
		b2, _ := s.MarshalBinary()
		if string(b2) != string(b) {
			t.Fatalf("%x re-encodes as %x", b, b2)
		}
		s2, due := p.Next(s, s.LastVisit.Add(s.Interval), true)
		if s2.Interval < p.Min || s2.Interval > p.Max || due.Before(s2.LastVisit) {
			t.Fatalf("decoded %+v schedules %+v", s, s2)
		}
	})
}

// A Policy's jitter keeps a visit within its bounds: an interval at MIN or
// MAX is not moved past it, which would hold a tenth of the URLs outside
// them at every visit; between them it is the package's Jitter.
func TestPolicyJitterStaysWithinBounds(t *testing.T) {
	daily := Policy{Default: 24 * time.Hour, Min: 24 * time.Hour, Max: 24 * time.Hour}
	p := DefaultPolicy()
	moved := 0
	for i := range 1000 {
		u := fmt.Sprintf("http://example.com/p%d", i)
		if got := daily.Jitter(u, 24*time.Hour); got != 24*time.Hour {
			t.Fatalf("%s under 24h,24h,24h: due after %v", u, got)
		}
		if got := p.Jitter(u, p.Max); got > p.Max || got < p.Max*9/10 {
			t.Fatalf("%s at MAX %v: due after %v", u, p.Max, got)
		}
		if got := p.Jitter(u, p.Min); got < p.Min || got > p.Min*11/10 {
			t.Fatalf("%s at MIN %v: due after %v", u, p.Min, got)
		}
		if got := p.Jitter(u, p.Default); got != Jitter(u, p.Default) {
			t.Fatalf("%s at %v: %v, the package's Jitter %v", u, p.Default, got, Jitter(u, p.Default))
		} else if got != p.Default {
			moved++
		}
	}
	if moved < 900 {
		t.Errorf("only %d of 1000 URLs moved off the default interval: no jitter", moved)
	}
}

// A policy made in code without a maximum (never validated) bounds no
// jitter: its URLs fall due about an interval on, not at once.
func TestPolicyJitterWithoutMaximum(t *testing.T) {
	for _, p := range []Policy{{}, {Default: time.Hour}, {Default: time.Hour, Min: time.Minute}} {
		if got, want := p.Jitter("http://x.test/", time.Hour), Jitter("http://x.test/", time.Hour); got != want {
			t.Errorf("%+v.Jitter(1h) = %v; want %v", p, got, want)
		}
	}
}
