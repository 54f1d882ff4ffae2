package crawl

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestHostTurns: results of one host are handed over in the order of
// their leases even when processing ends in the opposite order; another
// host's first lease waits for nothing.
func TestHostTurns(t *testing.T) {
	var turns hostTurns
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	hand := func(name string, prev <-chan struct{}, done func(), work time.Duration) {
		defer wg.Done()
		time.Sleep(work) // later leases finish their processing first
		if prev != nil {
			<-prev
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		done()
	}
	for i := range 5 {
		prev, done := turns.take("a")
		wg.Add(1)
		go hand(fmt.Sprintf("a%d", i), prev, done, time.Duration(5-i)*20*time.Millisecond)
	}
	prev, done := turns.take("b")
	if prev != nil {
		t.Fatal("the first lease of a host waits for another host's")
	}
	wg.Add(1)
	go hand("b0", prev, done, 0)
	wg.Wait()
	var as []string
	for _, n := range order {
		if n[0] == 'a' {
			as = append(as, n)
		}
	}
	if fmt.Sprint(as) != "[a0 a1 a2 a3 a4]" || len(order) != 6 {
		t.Fatalf("handed over in the order %v; want a0..a4 in order, and b0", order)
	}
	if len(turns.last) != 0 {
		t.Fatalf("%d hosts still have a turn after every result was handed over", len(turns.last))
	}
}
