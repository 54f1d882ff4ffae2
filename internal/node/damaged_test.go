package node

import (
	"context"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/websim"
)

// A capture whose record is damaged on the owner of its site (bit rot:
// bytes flipped inside its gzip member) is replayed from another node's
// copy, through any node; and the owner, having found its copy damaged
// when reading it, drops it and gets it back from the others by repair.
func TestDamagedRecordIsReadElsewhereAndRepaired(t *testing.T) {
	nodes, victim := damagedOnOwner(t, -1) // no scrub: the reads find it
	// Replay through nodes[1], which holds a good copy itself.
	var found index.Capture
	err := nodes[1].arc.Captures(context.Background(), victim.URLKey, false, func(c index.Capture) (bool, error) {
		if c.RecordID == victim.RecordID {
			found = c
			return false, nil
		}
		return true, nil
	})
	if err != nil || found.RecordID == "" {
		t.Fatalf("capture not found through %s: %v", nodes[1].name, err)
	}
	if _, err := nodes[1].arc.Record(context.Background(), found); err != nil {
		t.Errorf("replaying %s through %s failed although it and %s hold good copies: %v", victim.URL, nodes[1].name, nodes[2].name, err)
	}
	// Read through the owner itself: it finds its copy damaged.
	if _, err := nodes[0].arc.Record(context.Background(), victim); err != nil {
		t.Errorf("replaying %s through %s, whose copy is damaged: %v", victim.URL, nodes[0].name, err)
	}
	waitRepaired(t, nodes[0], victim)
}

// The scrub finds a damaged record that no one reads, and has it
// repaired from another node's copy.
func TestScrubRepairsDamageNoOneRead(t *testing.T) {
	nodes, victim := damagedOnOwner(t, 0)
	waitRepaired(t, nodes[0], victim)
	if st := nodes[0].scrubStats(); st.Damaged < 1 || st.Unrepairable != 0 || st.Checked == 0 {
		t.Errorf("scrub figures %+v: want the damaged record counted, repairable", st)
	}
}

// damagedOnOwner crawls a network of three, then flips bytes inside the
// record of a capture its first node owns, while that node is stopped,
// and restarts it with scrubRate.
func damagedOnOwner(t *testing.T, scrubRate int64) ([]*testNode, index.Capture) {
	t.Helper()
	nodes, cfgs, victim := crawledWithVictim(t)
	nodes[0].stop(t)
	flipBytes(t, nodes[0].data, victim)
	cfgs[0].ScrubRate = scrubRate
	nodes[0] = start(t, nodes[0].name, cfgs[0])
	waitMembers(t, 3, nodes...)
	return nodes, victim
}

// crawledWithVictim crawls websim with a network of three configured by
// opts, each capture on all three, and returns a response capture of a
// site the first node owns, as it indexes it. Node IDs are random, so the
// node that owns the victim's site is moved to the front of nodes and
// cfgs: any of the three may be the one that owns no site at all.
func crawledWithVictim(t *testing.T, opts ...func(*Config)) ([]*testNode, []Config, index.Capture) {
	t.Helper()
	web, srv := startWeb(t, websim.Config{Seed: 7, Hosts: 12, Pages: 240})
	nodes, cfgs := startNetwork(t, 3, srv.URL(), opts...)
	if _, err := Submit(context.Background(), nodes[0].data, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, nodes...)
	waitCopies(t, 3, nodes...)
	var victim index.Capture
	owner := -1
	err := nodes[0].local.Index().Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		if c.Length <= 600 || c.MIME != "text/html" {
			return true, nil
		}
		id, _, ok := nodes[0].owner(urlkey.SiteOfKey(c.URLKey))
		for i, n := range nodes {
			if ok && id == n.ID() {
				victim, owner = c, i
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil || owner < 0 {
		t.Fatalf("no HTML capture of more than 600 bytes owned by a node: %v", err)
	}
	nodes[0], nodes[owner] = nodes[owner], nodes[0]
	cfgs[0], cfgs[owner] = cfgs[owner], cfgs[0]
	// Each node indexes the capture at its own place: return the owner's.
	cur, ok, err := index.Lookup(nodes[0].db, victim.URLKey, victim.Time)
	if err != nil || !ok || cur.RecordID != victim.RecordID {
		t.Fatalf("%s, the owner, lacks %s: %v %v", nodes[0].name, victim.URL, ok, err)
	}
	return nodes, cfgs, cur
}

// waitRepaired waits until n's index holds victim at a new place, whose
// record reads back.
func waitRepaired(t *testing.T, n *testNode, victim index.Capture) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, ok, err := index.Lookup(n.db, victim.URLKey, victim.Time)
		if err == nil && ok && cur.RecordID == victim.RecordID && (cur.Segment != victim.Segment || cur.Offset != victim.Offset) {
			if _, err := n.local.Record(context.Background(), cur); err != nil {
				t.Fatalf("the repaired copy does not read: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the damaged copy was not repaired in 30 s: index entry %+v (found %v, %v)", cur, ok, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
