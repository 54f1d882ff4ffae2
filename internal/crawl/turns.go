package crawl

import "sync"

// hostTurns hands each host's results to the committer in the order of
// their leases. A host's lease ends when its response is read, so its next
// page may be fetched while this one is processed; were their results
// committed in whichever order processing ends, the host's links would be
// queued in that order too, and a host cut by its page limit (a trap) would
// be cut at different URLs from one run to the next, and by one node and by
// a network (TestNetworkCrawl compares them).
type hostTurns struct {
	mu   sync.Mutex
	last map[string]chan struct{} // closed when the host's latest lease has handed over its result
}

// take gives a new lease of host its turn: wait on prev (nil when there is
// none), hand the result over, then call done.
func (t *hostTurns) take(host string) (prev <-chan struct{}, done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[string]chan struct{}{}
	}
	if p, ok := t.last[host]; ok {
		prev = p
	}
	ch := make(chan struct{})
	t.last[host] = ch
	return prev, func() {
		t.mu.Lock()
		if t.last[host] == ch {
			delete(t.last, host)
		}
		t.mu.Unlock()
		close(ch)
	}
}
