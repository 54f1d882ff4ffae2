package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// members returns members with IDs shaped like certified identities (hex
// SHA-256), derived from seed so that every run sees the same ring, with the
// given capacities (1 for all if caps is empty).
func members(seed string, n int, caps ...int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		s := sha256.Sum256(fmt.Appendf(nil, "%s/%d", seed, i))
		c := 1
		if len(caps) > 0 {
			c = caps[i%len(caps)]
		}
		ms[i] = Member{ID: hex.EncodeToString(s[:]), Capacity: c}
	}
	return ms
}

// hosts returns n distinct host names of the shapes a crawl meets: www and
// other subdomains of registrable domains under several suffixes, sequential
// names (hosts of one site differing in a digit), and IPv4 addresses with and
// without a port.
func hosts(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	tlds := []string{"com", "org", "net", "de", "fr", "co.uk", "com.br", "edu", "io", "jp"}
	subs := []string{"www", "blog", "shop", "cdn", "static", "news", "m", "en", "api", "docs"}
	word := func() string {
		const letters = "abcdefghijklmnopqrstuvwxyz"
		b := make([]byte, 3+rng.IntN(10))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		var h string
		switch i % 5 {
		case 0:
			h = "www." + word() + "." + tlds[rng.IntN(len(tlds))]
		case 1:
			h = subs[rng.IntN(len(subs))] + "." + word() + "-" + word() + "." + tlds[rng.IntN(len(tlds))]
		case 2:
			h = fmt.Sprintf("host%07d.example.org", i)
		case 3:
			h = fmt.Sprintf("%d.%d.%d.%d", rng.IntN(223)+1, rng.IntN(256), rng.IntN(256), rng.IntN(256))
		case 4:
			h = fmt.Sprintf("%s.%s:%d", word(), tlds[rng.IntN(len(tlds))], 1024+rng.IntN(60000))
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

func mustNew(t testing.TB, ms []Member, opts Options) *Ring {
	t.Helper()
	r, err := New(ms, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func owner(t testing.TB, r *Ring, key string) string {
	t.Helper()
	m, ok := r.Owner(key)
	if !ok {
		t.Fatalf("Owner(%q) on a ring of %d members: none", key, r.Len())
	}
	return m.ID
}

func without(ms []Member, id string) []Member {
	return slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.ID == id })
}

// maxDeviation returns max |share − capacity share| / capacity share over the
// members of r, for the given shares in the order of r.members.
func maxDeviation(r *Ring, shares []float64) float64 {
	total := 0
	for _, m := range r.members {
		total += m.Capacity
	}
	d := 0.0
	for i, m := range r.members {
		want := float64(m.Capacity) / float64(total)
		d = math.Max(d, math.Abs(shares[i]-want)/want)
	}
	return d
}

// hostShares returns each member's fraction of hs, in the order of r.members.
func hostShares(r *Ring, hs []string) []float64 {
	counts := make([]int, len(r.members))
	for _, h := range hs {
		counts[r.owners[r.search(Hash(h))]]++
	}
	out := make([]float64, len(counts))
	for i, c := range counts {
		out[i] = float64(c) / float64(len(hs))
	}
	return out
}

func TestAgreement(t *testing.T) {
	base := members("agree", 20, 1, 2, 1, 3, 1)
	want := mustNew(t, base, Options{})
	hs := hosts(1, 100_000)
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := range 4 {
		ms := slices.Clone(base)
		rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		r := mustNew(t, ms, Options{})
		if r.Digest() != want.Digest() {
			t.Fatalf("order %d: digest %x, want %x", trial, r.Digest(), want.Digest())
		}
		if !slices.Equal(r.Members(), want.Members()) {
			t.Fatalf("order %d: members differ", trial)
		}
		for _, h := range hs {
			if a, b := owner(t, r, h), owner(t, want, h); a != b {
				t.Fatalf("order %d: Owner(%q) = %s, another order gives %s", trial, h, a, b)
			}
		}
	}
	// New must not keep or reorder the caller's slice.
	ms := slices.Clone(base)
	r := mustNew(t, ms, Options{})
	if !slices.Equal(ms, base) {
		t.Fatal("New changed its argument")
	}
	ms[0].Capacity = 9
	if r.Members()[slices.IndexFunc(r.Members(), func(m Member) bool { return m.ID == base[0].ID })].Capacity != base[0].Capacity {
		t.Fatal("ring shares memory with the caller's slice")
	}
}

func TestDigest(t *testing.T) {
	ms := members("digest", 5)
	d := mustNew(t, ms, Options{}).Digest()
	changed := slices.Clone(ms)
	changed[2].Capacity = 2
	for name, other := range map[string]*Ring{
		"capacity":  mustNew(t, changed, Options{}),
		"member":    mustNew(t, ms[:4], Options{}),
		"density":   mustNew(t, ms, Options{VnodesPerCapacity: 100}),
		"empty":     mustNew(t, nil, Options{}),
		"ID suffix": mustNew(t, append(slices.Clone(ms[:4]), Member{ID: ms[4].ID + "0", Capacity: 1}), Options{}),
	} {
		if other.Digest() == d {
			t.Errorf("%s change keeps the digest %x", name, d)
		}
	}
	if got := mustNew(t, ms, Options{MaxVnodes: 1 << 20}).Digest(); got != d {
		t.Errorf("MaxVnodes changes the digest (%x, want %x) though not the owners", got, d)
	}
}

func TestContravarianceLeave(t *testing.T) {
	ms := members("leave", 10, 1, 1, 2)
	r := mustNew(t, ms, Options{})
	hs := hosts(3, 200_000)
	for _, gone := range []Member{ms[0], ms[2], ms[7]} {
		after := mustNew(t, without(ms, gone.ID), Options{})
		moved, owned := 0, 0
		for _, h := range hs {
			before, now := owner(t, r, h), owner(t, after, h)
			if before == gone.ID {
				owned++
				// The new owner is the next member on the ring: the
				// first replica after the owner (UbiCrawler §5.1.1).
				if next := r.Replicas(h, 2)[1].ID; now != next {
					t.Fatalf("%q: owner left; new owner %s, want its former second replica %s", h, now, next)
				}
			} else if now != before {
				t.Fatalf("%q moved from %s to %s when %s left", h, before, now, gone.ID)
			}
			if now != before {
				moved++
			}
		}
		if moved != owned || owned == 0 {
			t.Fatalf("%s left: %d hosts moved, it owned %d", gone.ID, moved, owned)
		}
	}
}

func TestContravarianceJoin(t *testing.T) {
	ms := members("join", 10)
	r := mustNew(t, ms, Options{})
	hs := hosts(4, 200_000)
	for _, c := range []int{1, 3} {
		newcomer := Member{ID: fmt.Sprintf("newcomer-capacity-%d", c), Capacity: c}
		after := mustNew(t, append(slices.Clone(ms), newcomer), Options{})
		moved := 0
		for _, h := range hs {
			before, now := owner(t, r, h), owner(t, after, h)
			if now == before {
				continue
			}
			if now != newcomer.ID {
				t.Fatalf("%q moved from %s to %s, not to the newcomer", h, before, now)
			}
			moved++
		}
		// The newcomer takes about its capacity share.
		want := float64(c) / float64(len(ms)+c)
		if got := float64(moved) / float64(len(hs)); math.Abs(got-want)/want > 0.2 {
			t.Fatalf("newcomer of capacity %d took %.2f%% of hosts, want about %.2f%%", c, 100*got, 100*want)
		}
	}
}

// Raising a member's capacity adds virtual nodes and keeps the old ones, so
// hosts move only to that member; lowering it moves only that member's hosts.
func TestCapacityChange(t *testing.T) {
	ms := members("capacity", 6)
	r := mustNew(t, ms, Options{})
	up := slices.Clone(ms)
	up[3].Capacity = 3
	after := mustNew(t, up, Options{})
	moved := 0
	for _, h := range hosts(5, 100_000) {
		before, now := owner(t, r, h), owner(t, after, h)
		if now != before {
			moved++
			if now != ms[3].ID {
				t.Fatalf("%q moved from %s to %s when %s grew", h, before, now, ms[3].ID)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no host moved to the member that grew")
	}
}

func TestBalance(t *testing.T) {
	hs := hosts(6, 1_000_000)
	for _, tc := range []struct {
		name  string
		ms    []Member
		bound float64 // max relative deviation of the host shares
	}{
		{"3 equal", members("balance3", 3), 0.05},
		{"10 equal", members("balance10", 10), 0.10},
		{"100 equal", members("balance100", 100), 0.15},
		{"12 of capacity 1,2,4", members("balancemixed", 12, 1, 2, 4), 0.10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.ms, Options{})
			exact := r.shares()
			sampled := hostShares(r, hs)
			sum := 0.0
			for i, s := range exact {
				sum += s
				// 1M hosts follow the key-space shares: xxHash spreads
				// real host names uniformly.
				if d := math.Abs(sampled[i] - s); d > 5*math.Sqrt(s/float64(len(hs))) {
					t.Errorf("member %d: %.4f%% of hosts, %.4f%% of the key space", i, 100*sampled[i], 100*s)
				}
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("shares sum to %v", sum)
			}
			dExact, dHosts := maxDeviation(r, exact), maxDeviation(r, sampled)
			t.Logf("max deviation from capacity share: key space %.2f%%, 1M hosts %.2f%%", 100*dExact, 100*dHosts)
			if dHosts > tc.bound || dExact > tc.bound {
				t.Errorf("max deviation %.2f%% (hosts) %.2f%% (key space), want ≤ %.0f%%", 100*dHosts, 100*dExact, 100*tc.bound)
			}
		})
	}
}

func TestShare(t *testing.T) {
	ms := members("share", 7, 1, 5)
	r := mustNew(t, ms, Options{})
	sum, small, large := 0.0, 0.0, 1.0
	for _, m := range ms {
		s := r.Share(m.ID)
		sum += s
		if m.Capacity == 1 {
			small = math.Max(small, s)
		} else {
			large = math.Min(large, s)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares sum to %v", sum)
	}
	if small*4 > large {
		t.Errorf("largest share of capacity 1 is %v, smallest of capacity 5 is %v", small, large)
	}
	if got := r.Share("nobody"); got != 0 {
		t.Errorf("Share of a non-member = %v", got)
	}
	if got := mustNew(t, ms[:1], Options{}).Share(ms[0].ID); got != 1 {
		t.Errorf("sole member's share = %v, want 1", got)
	}
	if got := mustNew(t, nil, Options{}).Share("a"); got != 0 {
		t.Errorf("share in an empty ring = %v", got)
	}
}

func TestReplicas(t *testing.T) {
	ms := members("replicas", 8, 1, 2)
	r := mustNew(t, ms, Options{})
	ringsWithout := map[string]*Ring{}
	for _, h := range hosts(7, 20_000) {
		rs := r.Replicas(h, 3)
		if len(rs) != 3 {
			t.Fatalf("Replicas(%q, 3) has %d members", h, len(rs))
		}
		if rs[0].ID != owner(t, r, h) {
			t.Fatalf("Replicas(%q) starts with %s, owner is %s", h, rs[0].ID, owner(t, r, h))
		}
		if rs[0] == rs[1] || rs[0] == rs[2] || rs[1] == rs[2] {
			t.Fatalf("Replicas(%q, 3) = %v: not distinct", h, rs)
		}
		// The replicas are the successive owners as members leave: when
		// the owner goes, the second takes over; when both go, the third.
		less1, ok := ringsWithout[rs[0].ID]
		if !ok {
			less1 = mustNew(t, without(ms, rs[0].ID), Options{})
			ringsWithout[rs[0].ID] = less1
		}
		if got := owner(t, less1, h); got != rs[1].ID {
			t.Fatalf("%q: without %s owner is %s, want replica %s", h, rs[0].ID, got, rs[1].ID)
		}
		// All members: a permutation, of which every shorter list is a
		// prefix.
		all := r.Replicas(h, 100)
		if len(all) != len(ms) || !slices.Equal(all[:3], rs) {
			t.Fatalf("Replicas(%q, 100) = %d members, prefix %v, want %d and %v", h, len(all), all[:min(3, len(all))], len(ms), rs)
		}
		ids := make([]string, len(all))
		for i, m := range all {
			ids[i] = m.ID
		}
		slices.Sort(ids)
		if len(slices.Compact(ids)) != len(ms) {
			t.Fatalf("Replicas(%q, 100) repeats a member", h)
		}
	}
	if got := r.Replicas("example.org", 0); got != nil {
		t.Errorf("Replicas(_, 0) = %v", got)
	}
	if got := r.Replicas("example.org", -1); got != nil {
		t.Errorf("Replicas(_, -1) = %v", got)
	}
}

func TestEmptyAndSingle(t *testing.T) {
	for _, ms := range [][]Member{nil, {}} {
		r := mustNew(t, ms, Options{})
		if m, ok := r.Owner("example.org"); ok {
			t.Errorf("empty ring: Owner = %v, true", m)
		}
		if got := r.Replicas("example.org", 3); got != nil {
			t.Errorf("empty ring: Replicas = %v", got)
		}
		if r.Len() != 0 || len(r.Members()) != 0 {
			t.Errorf("empty ring has members")
		}
	}
	m := Member{ID: "solo", Capacity: 1}
	for _, vpc := range []int{1, 2, 5} {
		r := mustNew(t, []Member{m}, Options{VnodesPerCapacity: vpc})
		for _, h := range []string{"", "a", "example.org", "\xff"} {
			if got, ok := r.Owner(h); !ok || got != m {
				t.Errorf("vpc %d: Owner(%q) = %v, %v", vpc, h, got, ok)
			}
			if got := r.Replicas(h, 3); len(got) != 1 || got[0] != m {
				t.Errorf("vpc %d: Replicas(%q, 3) = %v", vpc, h, got)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	ok := Member{ID: "a", Capacity: 1}
	for _, tc := range []struct {
		name string
		ms   []Member
		opts Options
		want string
	}{
		{"empty ID", []Member{ok, {ID: "", Capacity: 1}}, Options{}, "empty ID"},
		{"long ID", []Member{{ID: strings.Repeat("x", MaxIDLen+1), Capacity: 1}}, Options{}, "longer than"},
		{"duplicate", []Member{ok, {ID: "b", Capacity: 1}, {ID: "a", Capacity: 2}}, Options{}, `duplicate member ID "a"`},
		{"zero capacity", []Member{ok, {ID: "b"}}, Options{}, `"b" has capacity 0`},
		{"negative capacity", []Member{{ID: "b", Capacity: -3}}, Options{}, "capacity -3"},
		{"huge capacity", []Member{ok, {ID: "b", Capacity: math.MaxInt}}, Options{}, "virtual nodes"},
		{"over MaxVnodes", []Member{ok, {ID: "b", Capacity: 2}}, Options{VnodesPerCapacity: 10, MaxVnodes: 29}, "more than 29 virtual nodes"},
		{"many members", members("many", 5000), Options{}, "virtual nodes"},
		{"negative density", []Member{ok}, Options{VnodesPerCapacity: -1}, "VnodesPerCapacity"},
		{"negative max", []Member{ok}, Options{MaxVnodes: -1}, "MaxVnodes"},
	} {
		r, err := New(tc.ms, tc.opts)
		if err == nil {
			t.Errorf("%s: New succeeded with %d virtual nodes", tc.name, len(r.points))
			continue
		}
		if !strings.HasPrefix(err.Error(), "ring: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want one containing %q", tc.name, err, tc.want)
		}
	}
	// Exactly at the bound is allowed.
	if _, err := New([]Member{ok, {ID: "b", Capacity: 2}}, Options{VnodesPerCapacity: 10, MaxVnodes: 30}); err != nil {
		t.Errorf("30 virtual nodes with MaxVnodes 30: %v", err)
	}
}

// The placement and the key hash are protocol: nodes running different
// builds must agree. These values were computed once by this package; a
// change here moves hosts in every running network.
func TestGolden(t *testing.T) {
	for key, want := range map[string]uint64{
		"":            0xef46db3751d8e999, // XXH64 of nothing, seed 0
		"example.org": 0xaf2e84d72d027535,
		"www.bnf.fr":  0xadf234f140375580,
	} {
		if got := Hash(key); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", key, got, want)
		}
	}
	r := mustNew(t, []Member{{"alpha", 1}, {"bravo", 2}, {"charlie", 1}}, Options{})
	if got, want := r.Digest(), uint64(0x225cbf054067a2ac); got != want {
		t.Errorf("Digest = %#x, want %#x", got, want)
	}
	for key, want := range map[string]string{
		"example.org":          "bravo",
		"www.bnf.fr":           "bravo",
		"archive.org":          "charlie",
		"en.wikipedia.org":     "charlie",
		"127.0.0.1:8080":       "alpha",
		"host0000042.test.org": "bravo",
	} {
		if got := owner(t, r, key); got != want {
			t.Errorf("Owner(%q) = %s, want %s", key, got, want)
		}
	}
}

// reference is a plain implementation of the ring's definition, written
// independently of New's bucket sort and index: every virtual node in a
// sorted slice, the owner found by a binary search of the whole slice.
type reference struct {
	ms  []Member
	pos []uint64
	own []int
}

func newReference(ms []Member, vpc int) *reference {
	ms = slices.Clone(ms)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	type vn struct {
		pos uint64
		own int
	}
	var vs []vn
	for i, m := range ms {
		seed := sha256.Sum256([]byte("waggle/ring/v1\x00" + m.ID))
		for v := range m.Capacity * vpc {
			var in []byte
			in = append(in, seed[:]...)
			in = binary.BigEndian.AppendUint32(in, uint32(v/4))
			sum := sha256.Sum256(in)
			vs = append(vs, vn{binary.BigEndian.Uint64(sum[8*(v%4):]), i})
		}
	}
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].pos != vs[j].pos {
			return vs[i].pos < vs[j].pos
		}
		return ms[vs[i].own].ID < ms[vs[j].own].ID
	})
	ref := &reference{ms: ms}
	for _, v := range vs {
		ref.pos = append(ref.pos, v.pos)
		ref.own = append(ref.own, v.own)
	}
	return ref
}

func (ref *reference) replicas(key string, n int) []Member {
	if len(ref.pos) == 0 {
		return nil
	}
	h := Hash(key)
	i := sort.Search(len(ref.pos), func(i int) bool { return ref.pos[i] >= h }) % len(ref.pos)
	var out []Member
	for k := range ref.pos {
		m := ref.ms[ref.own[(i+k)%len(ref.pos)]]
		if len(out) < n && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

func TestAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	hs := hosts(9, 5_000)
	for trial := range 30 {
		n := 1 + rng.IntN(12)
		var caps []int
		for range n {
			caps = append(caps, 1+rng.IntN(4))
		}
		ms := members(fmt.Sprintf("ref%d", trial), n, caps...)
		vpc := 1 + rng.IntN(300)
		r := mustNew(t, ms, Options{VnodesPerCapacity: vpc})
		ref := newReference(ms, vpc)
		if !slices.Equal(r.points, ref.pos) {
			t.Fatalf("trial %d: points differ from the reference", trial)
		}
		for _, h := range hs {
			want := ref.replicas(h, 3)
			if got := r.Replicas(h, 3); !slices.Equal(got, want) {
				t.Fatalf("trial %d: Replicas(%q) = %v, reference %v", trial, h, got, want)
			}
		}
	}
}

// Equal positions are ordered by member ID; the index must find the first
// point at or after a key across bucket edges and at both ends of the circle.
func TestIndexTies(t *testing.T) {
	ms := []Member{{"a", 1}, {"b", 1}, {"c", 1}}
	pos := []uint64{
		1 << 63, 5, math.MaxUint64, // a
		5, 0, // b
		math.MaxUint64, 1 << 63, 7, // c
	}
	r := &Ring{members: ms}
	r.index(pos, []int{3, 2, 3})
	wantPos := []uint64{0, 5, 5, 7, 1 << 63, 1 << 63, math.MaxUint64, math.MaxUint64}
	wantOwn := []uint32{1, 0, 1, 2, 0, 2, 0, 2}
	if !slices.Equal(r.points, wantPos) || !slices.Equal(r.owners, wantOwn) {
		t.Fatalf("index: points %v owners %v, want %v %v", r.points, r.owners, wantPos, wantOwn)
	}
	for h, want := range map[uint64]int{0: 0, 1: 1, 5: 1, 6: 3, 7: 3, 8: 4, 1 << 63: 4, 1<<63 + 1: 6, math.MaxUint64 - 1: 6, math.MaxUint64: 6} {
		if got := r.search(h); got != want {
			t.Errorf("search(%#x) = %d, want %d", h, got, want)
		}
	}
}

func TestSimulation1000(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rings of 4 million virtual nodes")
	}
	ms := members("sim", 1000, 1, 1, 1, 2)
	// Two nodes build their views independently, from member lists in
	// different orders (as gossip delivers them).
	shuffled := slices.Clone(ms)
	rand.New(rand.NewPCG(10, 10)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	a, b := mustNew(t, ms, Options{}), mustNew(t, shuffled, Options{})
	if a.Digest() != b.Digest() {
		t.Fatal("same members, different digests")
	}
	hs := hosts(11, 1_000_000)
	for _, h := range hs[:100_000] {
		if owner(t, a, h) != owner(t, b, h) {
			t.Fatalf("views disagree on %q", h)
		}
	}
	// A third view has not yet heard that one member died: the views
	// disagree only about that member's hosts (UbiCrawler §5.1).
	dead := ms[123].ID
	c := mustNew(t, without(ms, dead), Options{})
	if c.Digest() == a.Digest() {
		t.Fatal("different members, same digest")
	}
	for _, h := range hs[:100_000] {
		if x, y := owner(t, a, h), owner(t, c, h); x != y && x != dead {
			t.Fatalf("views disagree on %q, owned by %s in one and %s in the other", h, x, y)
		}
	}
	dExact, dHosts := maxDeviation(a, a.shares()), maxDeviation(a, hostShares(a, hs))
	t.Logf("1,000 members: max deviation from capacity share: key space %.2f%%, 1M hosts %.2f%%", 100*dExact, 100*dHosts)
	if dExact > 0.15 {
		t.Errorf("max deviation of key-space shares %.2f%% at 1,000 members, want ≤ 15%%", 100*dExact)
	}
}

// FuzzRing builds rings from arbitrary member lists and checks that New
// either refuses them with an error or gives a ring whose owners are members
// and agree with the reference.
func FuzzRing(f *testing.F) {
	f.Add([]byte("a\x01b\x02c\x01"), uint8(3), "example.org")
	f.Add([]byte("node-1\x00node-2\x05"), uint8(1), "")
	f.Add([]byte("x\x01x\x01"), uint8(2), "dup")
	f.Add([]byte("\x00"), uint8(0), "www.bnf.fr:8080")
	f.Add([]byte(""), uint8(4), "empty")
	f.Fuzz(func(t *testing.T, spec []byte, vpc uint8, key string) {
		// spec is a list of ID bytes, each ended by a capacity byte.
		var ms []Member
		start := 0
		for i := 0; i < len(spec) && len(ms) < 64; i++ {
			if spec[i] < 0x08 {
				ms = append(ms, Member{ID: string(spec[start:i]), Capacity: int(spec[i]) - 1})
				start = i + 1
			}
		}
		opts := Options{VnodesPerCapacity: int(vpc % 16), MaxVnodes: 4096}
		r, err := New(ms, opts)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ring: ") {
				t.Fatalf("error without package prefix: %v", err)
			}
			return
		}
		m, ok := r.Owner(key)
		if ok != (len(ms) > 0) {
			t.Fatalf("Owner ok=%v with %d members", ok, len(ms))
		}
		if ok && !slices.Contains(r.Members(), m) {
			t.Fatalf("Owner %v is not a member", m)
		}
		if sh := r.Share(m.ID); ok && (sh < 0 || sh > 1) {
			t.Fatalf("Share(%q) = %v", m.ID, sh)
		}
		vp := opts.VnodesPerCapacity
		if vp == 0 {
			vp = DefaultVnodesPerCapacity
		}
		want := newReference(ms, vp).replicas(key, 3)
		if got := r.Replicas(key, 3); !slices.Equal(got, want) {
			t.Fatalf("Replicas = %v, reference %v", got, want)
		}
	})
}

// A ring is read-only after New: goroutines share it and get the answers a
// single one gets (run with -race).
func TestConcurrent(t *testing.T) {
	r := mustNew(t, members("concurrent", 5), Options{})
	hs := hosts(12, 2_000)
	want := make([]string, len(hs))
	for i, h := range hs {
		want[i] = owner(t, r, h)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range hs {
				i = (i + g*500) % len(hs)
				m, _ := r.Owner(hs[i])
				if rs := r.Replicas(hs[i], 2); m.ID != want[i] || rs[0].ID != want[i] {
					errs <- fmt.Errorf("goroutine %d: %q owned by %s, replicas %v, want %s", g, hs[i], m.ID, rs, want[i])
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
