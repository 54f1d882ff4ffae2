package antientropy

import (
	"context"
	"sync"
	"time"
)

// A Budget caps the bytes per second that maintenance moves between nodes,
// so that anti-entropy never starves crawling or replay. Sync charges it
// for every byte of a comparison; the caller charges it for the records it
// then fetches, with Throttle. A Budget is a token bucket holding at most
// one second's worth of bytes; a charge larger than that is allowed and
// paid off by waiting. The zero Budget (and a nil *Budget) has no cap but
// still counts. A Budget is safe for concurrent use.
type Budget struct {
	rate float64 // bytes per second; 0 for no cap

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	charged int64
}

// NewBudget returns a budget of bytesPerSecond (no cap if not positive).
func NewBudget(bytesPerSecond int64) *Budget {
	b := &Budget{last: time.Now()}
	if bytesPerSecond > 0 {
		b.rate = float64(bytesPerSecond)
		b.tokens = b.rate
	}
	return b
}

// Throttle charges n bytes to b and waits until the budget allows them,
// or until ctx is done (then it returns ctx's error; the bytes stay
// charged, as they may already have moved). Charges are served in the
// order they are made.
func (b *Budget) Throttle(ctx context.Context, n int) error {
	if b == nil || n <= 0 {
		return nil
	}
	b.mu.Lock()
	b.charged += int64(n)
	if b.rate <= 0 {
		b.mu.Unlock()
		return nil
	}
	now := time.Now()
	b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	// Taking the tokens at once, into debt if need be, reserves them: a
	// later charge waits for this one's debt too.
	b.tokens -= float64(n)
	var wait time.Duration
	if b.tokens < 0 {
		wait = time.Duration(-b.tokens / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Charged returns the bytes charged to b so far.
func (b *Budget) Charged() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charged
}

// BytesPerSecond returns b's cap, 0 for none.
func (b *Budget) BytesPerSecond() int64 {
	if b == nil {
		return 0
	}
	return int64(b.rate)
}
