package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
)

// flipBytes damages 32 bytes in the middle of c's gzip member in dir.
func flipBytes(t *testing.T, data string, c index.Capture) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(data, "warc", c.Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 32)
	at := c.Offset + c.Length/2
	if _, err := f.ReadAt(buf, at); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] ^= 0xff
	}
	if _, err := f.WriteAt(buf, at); err != nil {
		t.Fatal(err)
	}
}

// A record damaged on every node is unrepairable: the scrub keeps it in
// the index and counts it unrepairable (logged, for a restore from
// backup). Another copy is read, not only listed, before one is dropped.
func TestScrubKeepsCaptureWhoseOtherCopiesAreDamaged(t *testing.T) {
	nodes, cfgs, victim := crawledWithVictim(t, func(c *Config) { c.ScrubRate = -1 })
	// The copies on the other two nodes rot too (their scrubs are off, and no one reads).
	for _, n := range nodes[1:] {
		cp, ok, err := index.Lookup(n.db, victim.URLKey, victim.Time)
		if err != nil || !ok || cp.RecordID != victim.RecordID {
			t.Fatalf("%s lacks the victim: %v %v", n.name, ok, err)
		}
		flipBytes(t, n.data, cp)
		if _, err := n.local.Record(context.Background(), cp); err == nil {
			t.Fatalf("%s's copy still reads", n.name)
		}
	}
	nodes[0].stop(t)
	flipBytes(t, nodes[0].data, victim)
	cfgs[0].ScrubRate = 0 // default: scrub
	nodes[0] = start(t, nodes[0].name, cfgs[0])
	waitMembers(t, 3, nodes...)

	deadline := time.Now().Add(20 * time.Second)
	for nodes[0].scrubStats().Damaged == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	st := nodes[0].scrubStats()
	_, ok, _ := index.Lookup(nodes[0].db, victim.URLKey, victim.Time)
	if st.Damaged == 0 {
		t.Fatalf("scrub found nothing: %+v", st)
	}
	if st.Unrepairable == 0 || !ok {
		t.Errorf("no good copy exists anywhere, yet the scrub counted it repairable (%+v) and %s's index holds it: %v", st, nodes[0].name, ok)
	}
}

// When the other nodes cannot be asked (down, partitioned, restarting), a
// damaged record is not called unrepairable: the next pass looks again.
func TestScrubDoesNotCallUnaskedCopiesUnrepairable(t *testing.T) {
	nodes, victim := damagedOnOwnerOthersDown(t)
	deadline := time.Now().Add(20 * time.Second)
	for nodes[0].scrubStats().Damaged == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	st := nodes[0].scrubStats()
	if st.Damaged == 0 {
		t.Fatalf("scrub found nothing: %+v", st)
	}
	if st.Unrepairable != 0 {
		t.Errorf("%s and %s hold good copies of %s (only stopped), yet the scrub counted it unrepairable: %+v", nodes[1].name, nodes[2].name, victim.URL, st)
	}
}

func damagedOnOwnerOthersDown(t *testing.T) ([]*testNode, index.Capture) {
	t.Helper()
	nodes, cfgs, victim := crawledWithVictim(t, func(c *Config) { c.ScrubRate = -1 })
	for _, n := range nodes {
		n.stop(t)
	}
	flipBytes(t, nodes[0].data, victim)
	cfgs[0].ScrubRate = 0
	nodes[0] = start(t, nodes[0].name, cfgs[0])
	return nodes, victim
}
