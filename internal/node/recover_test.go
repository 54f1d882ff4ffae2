package node

import (
	"slices"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/ring"
)

// A node whose first ring already has the others in it (it rejoined before
// it first looked) asks them before fetching, as one that saw itself alone
// first does: they held its sites while it was away.
func TestPastHoldersOfARejoiningNode(t *testing.T) {
	members := []ring.Member{{ID: "self", Capacity: 1}, {ID: "b", Capacity: 1}, {ID: "c", Capacity: 1}}
	full, err := ring.New(members, ring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := ring.New(members[:1], ring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A site this node owns, and the other that held it in its absence.
	var site, stoodIn string
	others, _ := ring.New(members[1:], ring.Options{})
	for i := 0; site == ""; i++ {
		s := "test,site" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if o, _ := full.Owner(s); o.ID == "self" {
			site = s
			o, _ := others.Owner(s)
			stoodIn = o.ID
		}
	}
	now := time.Now()
	for name, first := range map[string][]*ring.Ring{"joined at once": {full}, "alone first": {alone, full}} {
		var p pastRings
		for _, r := range first {
			p.changed(r, "self", now)
		}
		if got := p.holders(site, "self", 1, now); !slices.Contains(got, stoodIn) {
			t.Errorf("%s: holders of %s = %v, want %s, which held it while this node was away", name, site, got, stoodIn)
		}
	}
}
