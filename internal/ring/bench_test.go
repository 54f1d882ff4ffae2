package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"testing"
	"unsafe"
)

var sweep = flag.Bool("ring.sweep", false, "TestBalanceSweep: print balance against virtual nodes per capacity (minutes)")

var sizes = []int{3, 10, 100, 1000}

// bytes returns the memory a ring keeps.
func (r *Ring) bytes() int {
	n := int(unsafe.Sizeof(*r)) + 8*cap(r.points) + 4*cap(r.owners) + 4*cap(r.bucket)
	n += int(unsafe.Sizeof(Member{})) * cap(r.members)
	for _, m := range r.members {
		n += len(m.ID)
	}
	return n
}

func BenchmarkOwner(b *testing.B) {
	hs := hosts(20, 1<<16)
	for _, n := range sizes {
		r := mustNew(b, members("bench", n), Options{})
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				r.Owner(hs[i&(len(hs)-1)])
				i++
			}
		})
	}
}

func BenchmarkReplicas(b *testing.B) {
	hs := hosts(21, 1<<16)
	for _, n := range []int{10, 1000} {
		r := mustNew(b, members("bench", n), Options{})
		b.Run(fmt.Sprintf("members=%d/r=3", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				r.Replicas(hs[i&(len(hs)-1)], 3)
				i++
			}
		})
	}
}

// BenchmarkKeyHash compares key hashes for hosts: their cost, and the
// balance they give over 1M hosts on the same 10-member ring (all uniform
// enough; xxHash is the cheapest).
func BenchmarkKeyHash(b *testing.B) {
	hs := hosts(22, 1_000_000)
	r := mustNew(b, members("balance10", 10), Options{})
	for _, h := range []struct {
		name string
		fn   func(string) uint64
	}{
		{"xxhash", Hash},
		{"sha256", func(s string) uint64 { sum := sha256.Sum256([]byte(s)); return binary.BigEndian.Uint64(sum[:]) }},
		{"fnv1a", func(s string) uint64 { f := fnv.New64a(); f.Write([]byte(s)); return f.Sum64() }},
	} {
		counts := make([]int, r.Len())
		for _, s := range hs {
			counts[r.owners[r.search(h.fn(s))]]++
		}
		shares := make([]float64, len(counts))
		for i, c := range counts {
			shares[i] = float64(c) / float64(len(hs))
		}
		dev := maxDeviation(r, shares)
		b.Run(h.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				h.fn(hs[i&4095])
				i++
			}
			b.ReportMetric(100*dev, "hosts-maxdev-%")
		})
	}
}

// BenchmarkNew measures building a ring at the default density, and the
// memory it keeps.
func BenchmarkNew(b *testing.B) {
	for _, n := range sizes {
		ms := members("bench", n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var r *Ring
			for b.Loop() {
				r = mustNew(b, ms, Options{})
			}
			b.ReportMetric(float64(r.bytes())/(1<<20), "MiB/ring")
			b.ReportMetric(float64(len(r.points)), "vnodes")
		})
	}
}

// BenchmarkBalance reports the largest deviation of a member's share from
// its capacity share, max |share − capacity share| / capacity share, at the
// default density for members of equal capacity. Each iteration builds the
// ring of another set of member IDs; the figures are the mean and the worst
// over those sets (more with -benchtime=Nx), for the exact key-space shares
// and for the shares of 1M host names. At 1,000 members the host figure is
// mostly sampling noise (1,000 hosts a member).
func BenchmarkBalance(b *testing.B) {
	hs := hosts(23, 1_000_000)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var sum, worst, hostSum float64
			sets := 0
			for b.Loop() {
				r := mustNew(b, members(fmt.Sprintf("set%d", sets), n), Options{})
				d := maxDeviation(r, r.shares())
				sum += d
				worst = math.Max(worst, d)
				hostSum += maxDeviation(r, hostShares(r, hs))
				sets++
			}
			b.ReportMetric(100*sum/float64(sets), "maxdev-%")
			b.ReportMetric(100*worst, "worst-maxdev-%")
			b.ReportMetric(100*hostSum/float64(sets), "hosts-maxdev-%")
			b.ReportMetric(float64(sets), "sets")
		})
	}
	b.Run("members=12/capacity=1,2,4", func(b *testing.B) {
		var sum, worst float64
		sets := 0
		for b.Loop() {
			r := mustNew(b, members(fmt.Sprintf("set%d", sets), 12, 1, 2, 4), Options{})
			d := maxDeviation(r, r.shares())
			sum += d
			worst = math.Max(worst, d)
			sets++
		}
		b.ReportMetric(100*sum/float64(sets), "maxdev-%")
		b.ReportMetric(100*worst, "worst-maxdev-%")
		b.ReportMetric(float64(sets), "sets")
	})
}

// TestBalanceSweep prints, for several network sizes and virtual-node
// densities, the distribution over random member IDs of the largest
// deviation from the capacity share: the measurement behind
// DefaultVnodesPerCapacity. Run it with
//
//	go test -run BalanceSweep -ring.sweep -v ./internal/ring
func TestBalanceSweep(t *testing.T) {
	if !*sweep {
		t.Skip("runs for minutes; enable with -ring.sweep")
	}
	fmt.Println("| members | vnodes per capacity | ID sets | median | p90 | worst | sets within 5% |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range sizes {
		for _, vpc := range []int{100, 200, 500, 1000, 2000, 4000, 8000} {
			sets := 400
			switch {
			case n*vpc > 2_000_000:
				sets = 8
			case n*vpc > 200_000:
				sets = 40
			}
			if n*vpc > 4_000_000 {
				continue
			}
			var ds []float64
			for s := range sets {
				r := mustNew(t, members(fmt.Sprintf("sweep%d", s), n), Options{VnodesPerCapacity: vpc})
				ds = append(ds, maxDeviation(r, r.shares()))
			}
			slices.Sort(ds)
			within := 0
			for _, d := range ds {
				if d <= 0.05 {
					within++
				}
			}
			fmt.Printf("| %d | %d | %d | %.1f%% | %.1f%% | %.1f%% | %.0f%% |\n", n, vpc, sets,
				100*ds[len(ds)/2], 100*ds[len(ds)*9/10], 100*ds[len(ds)-1], 100*float64(within)/float64(sets))
		}
	}
}
