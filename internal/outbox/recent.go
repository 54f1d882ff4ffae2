package outbox

// recentSet holds the hashes of the URLs queued for a peer lately: at
// least the last size/2 and at most the last size, in two generations, the
// older dropped whole when the newer fills. A map grows with use, so a
// peer sent little costs little memory. With 64-bit hashes, a false
// "seen" is as likely as two random 64-bit numbers being equal.
type recentSet struct {
	cur, old map[uint64]struct{}
	gen      int // entries per generation
}

func newRecentSet(size int) *recentSet {
	gen := max(size/2, 1)
	return &recentSet{cur: map[uint64]struct{}{}, gen: gen}
}

func (s *recentSet) has(h uint64) bool {
	if _, ok := s.cur[h]; ok {
		return true
	}
	_, ok := s.old[h]
	return ok
}

func (s *recentSet) add(h uint64) {
	if len(s.cur) >= s.gen {
		s.old, s.cur = s.cur, make(map[uint64]struct{}, s.gen/4)
	}
	s.cur[h] = struct{}{}
}

func (s *recentSet) remove(h uint64) {
	delete(s.cur, h)
	delete(s.old, h)
}
