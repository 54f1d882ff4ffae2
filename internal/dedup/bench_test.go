package dedup

import (
	"context"
	"testing"
)

// BenchmarkHandOver measures how fast a node moves registry entries to a
// new owner after a join: half of 100,000 entries go, over the wire format
// into another pebble registry (no network: the fake one encodes and
// decodes each request). Each iteration is a fresh pair of registries.
func BenchmarkHandOver(b *testing.B) {
	const entries = 100_000
	refs := make([]Ref, entries)
	for i := range refs {
		refs[i] = ref(i, 1)
	}
	owner := func(d string) (string, bool) {
		if d[len(d)-1]%2 == 0 {
			return "b", true
		}
		return "a", true
	}
	moved := 0
	for b.Loop() {
		b.StopTimer()
		net := newFakeNet(b, "a", "b")
		for i := 0; i < entries; i += MaxEntries {
			if _, err := net.regs["a"].Register(refs[i:min(i+MaxEntries, entries)]); err != nil {
				b.Fatal(err)
			}
		}
		c := NewClient(ClientConfig{Self: "a", Owner: owner, Local: net.regs["a"], Send: net.send})
		b.StartTimer()
		n, err := c.HandOver(context.Background(), owner)
		if err != nil {
			b.Fatal(err)
		}
		moved += n
	}
	b.ReportMetric(float64(moved)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(moved)/float64(b.N), "entries/op")
}

// BenchmarkLookup measures the owner's side of the content-seen test:
// batches of MaxEntries digests, half of them registered, against a
// registry of 100,000 entries.
func BenchmarkLookup(b *testing.B) {
	const entries = 100_000
	net := newFakeNet(b, "a")
	reg := net.regs["a"]
	refs := make([]Ref, entries)
	for i := range refs {
		refs[i] = ref(2*i, 1) // even numbers registered
	}
	for i := 0; i < entries; i += MaxEntries {
		if _, err := reg.Register(refs[i:min(i+MaxEntries, entries)]); err != nil {
			b.Fatal(err)
		}
	}
	batch := make([]string, MaxEntries)
	asked, start := 0, 0
	for b.Loop() {
		for i := range batch {
			batch[i] = ref((start+i*7919)%(2*entries), 1).Digest // spread over the registry, half odd
		}
		start++
		found, err := reg.Lookup(batch)
		if err != nil || len(found) == 0 {
			b.Fatal(len(found), err)
		}
		asked += len(batch)
	}
	b.ReportMetric(float64(asked)/b.Elapsed().Seconds(), "digests/s")
}
