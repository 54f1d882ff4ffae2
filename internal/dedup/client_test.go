package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// fakeNet is a network of registries that a Client's Send reaches through
// the wire format, with nodes that can be taken down.
type fakeNet struct {
	mu        sync.Mutex
	regs      map[string]*Registry
	down      map[string]bool
	lookups   []int         // size of each lookup request, in arrival order
	registers int           // register requests
	gate      chan struct{} // if not nil, lookup requests wait for it to close
	calls     sync.WaitGroup
}

func newFakeNet(t testing.TB, nodes ...string) *fakeNet {
	n := &fakeNet{regs: make(map[string]*Registry), down: make(map[string]bool)}
	for _, node := range nodes {
		n.regs[node] = newRegistry(t)
	}
	// A request a caller gave up on may still be running when the test
	// returns; it must be done before the registries' databases close.
	t.Cleanup(n.calls.Wait)
	return n
}

func (n *fakeNet) setDown(node string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[node] = down
}

func (n *fakeNet) lookupSizes() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.lookups...)
}

func (n *fakeNet) send(ctx context.Context, node, path string, body []byte) ([]byte, error) {
	n.calls.Add(1)
	defer n.calls.Done()
	n.mu.Lock()
	reg, down, gate := n.regs[node], n.down[node], n.gate
	n.mu.Unlock()
	if reg == nil || down {
		return nil, fmt.Errorf("dial %s: connection refused", node)
	}
	switch path {
	case lookupPath:
		digests, err := decodeLookup(body)
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.lookups = append(n.lookups, len(digests))
		n.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		found, err := reg.Lookup(digests)
		if err != nil {
			return nil, err
		}
		return encodeRefs(kindFound, found), nil
	case registerPath:
		regs, err := decodeRegistrations(body)
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.registers++
		n.mu.Unlock()
		added, err := reg.register(regs)
		if err != nil {
			return nil, err
		}
		return encodeAdded(added), nil
	}
	return nil, fmt.Errorf("404 %s", path)
}

// refusingReplacements is send for nodes of an older release, which
// refuse the replacement kind of register body as malformed (400).
func (n *fakeNet) refusingReplacements(ctx context.Context, node, path string, body []byte) ([]byte, error) {
	if path == registerPath && body[4] == kindReplace {
		return nil, fmt.Errorf("%w: 400 dedup: body of kind 'x', want 'r'", ErrRefused)
	}
	return n.send(ctx, node, path, body)
}

// to returns an Owner that names node for every digest.
func to(node string) func(string) (string, bool) {
	return func(string) (string, bool) { return node, true }
}

// run runs c.Run until the test ends.
func run(t *testing.T, c *Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestClientCoalescesLookups(t *testing.T) {
	const n = 64
	net := newFakeNet(t, "b")
	for i := 0; i < n; i += 2 { // the even ones are archived
		if _, err := net.regs["b"].Register([]Ref{ref(i, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	net.gate = make(chan struct{})
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, Window: 20 * time.Millisecond})

	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got, ok, err := c.Lookup(context.Background(), digest(i))
			switch {
			case err != nil:
				errs[i] = err
			case ok != (i%2 == 0):
				errs[i] = fmt.Errorf("lookup %d: found = %v", i, ok)
			case ok && !equalRef(got, ref(i, 1)):
				errs[i] = fmt.Errorf("lookup %d = %+v, want %+v", i, got, ref(i, 1))
			}
		})
	}
	// Once every caller's digest is in a batch, let the requests through:
	// at most maxInFlight went out before, and the rest wait in one batch.
	waitFor(t, func() bool { return c.Stats().Lookups == n })
	close(net.gate)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	sizes := net.lookupSizes()
	total := 0
	for _, s := range sizes {
		total += s
	}
	if len(sizes) > maxInFlight+1 || total != n {
		t.Errorf("%d lookups went in %d requests of %v digests; want at most %d requests carrying %d",
			n, len(sizes), sizes, maxInFlight+1, n)
	}
	if st := c.Stats(); st.Lookups != n || st.Hits != n/2 || st.Requests != uint64(len(sizes)) || st.Errors != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestClientSplitsAtMaxBatch(t *testing.T) {
	net := newFakeNet(t, "b")
	// A window that never passes: only full batches are sent.
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, Window: time.Hour, MaxBatch: 16})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			if _, _, err := c.Lookup(context.Background(), digest(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if sizes := net.lookupSizes(); !slices.Equal(sizes, []int{16, 16, 16, 16}) {
		t.Errorf("requests of %v digests, want 4 of 16", sizes)
	}

	// A digest asked twice while its batch is open is asked once.
	c = NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, Window: time.Hour})
	b1, err1 := c.enqueue("b", digest(1))
	b2, err2 := c.enqueue("b", digest(1))
	if err1 != nil || err2 != nil || b1 != b2 || !slices.Equal(b1.digests, []string{digest(1)}) {
		t.Errorf("two lookups of one digest: batches %p, %p holding %v (%v, %v)", b1, b2, b1.digests, err1, err2)
	}
	b1.timer.Stop()
}

func TestClientLocalOwnerMakesNoRequest(t *testing.T) {
	local := newRegistry(t)
	if _, err := local.Register([]Ref{ref(1, 1)}); err != nil {
		t.Fatal(err)
	}
	send := func(context.Context, string, string, []byte) ([]byte, error) {
		t.Error("Send called for a digest this node owns")
		return nil, errors.New("no")
	}
	c := NewClient(ClientConfig{Self: "a", Owner: to("a"), Local: local, Send: send})
	got, ok, err := c.Lookup(context.Background(), digest(1))
	if err != nil || !ok || !equalRef(got, ref(1, 1)) {
		t.Errorf("Lookup = %+v, %v, %v; want ref 1", got, ok, err)
	}
	if _, ok, err := c.Lookup(context.Background(), digest(2)); err != nil || ok {
		t.Errorf("Lookup(unregistered) = %v, %v", ok, err)
	}
	// Registrations of its own digests go to the local registry.
	run(t, c)
	c.Register([]Ref{ref(2, 1), ref(3, 1)})
	waitFor(t, func() bool { st := c.Stats(); return st.Registered == 2 && st.Queued == 0 })
	if found, err := local.Lookup([]string{digest(2), digest(3)}); err != nil || len(found) != 2 {
		t.Errorf("local registry holds %v, %v; want refs 2 and 3", found, err)
	}
	if st := c.Stats(); st.Requests != 0 || st.Lookups != 2 || st.Hits != 1 || st.Queued != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestClientUnreachableOwner(t *testing.T) {
	net := newFakeNet(t, "b")
	net.setDown("b", true)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send})
	c.minBackoff, c.maxBackoff = time.Millisecond, 4*time.Millisecond

	if _, _, err := c.Lookup(context.Background(), digest(1)); err == nil {
		t.Fatal("Lookup with the owner down succeeded")
	}
	run(t, c)
	refs := []Ref{ref(1, 1), ref(2, 1), ref(3, 1)}
	c.Register(refs)
	// Register tries, fails and keeps the refs.
	waitFor(t, func() bool { return c.Stats().Errors >= 3 })
	if st := c.Stats(); st.Queued != 3 || st.Registered != 0 {
		t.Errorf("with the owner down, Stats = %+v; want 3 queued", st)
	}
	net.setDown("b", false)
	// Registered counts a batch when the owner takes it; the flush it was
	// sent in leaves Queued a moment later.
	waitFor(t, func() bool { st := c.Stats(); return st.Registered == 3 && st.Queued == 0 })
	if st := c.Stats(); st.Queued != 0 || st.Dropped != 0 {
		t.Errorf("after delivery Stats = %+v", st)
	}
	for _, r := range refs {
		got, ok, err := c.Lookup(context.Background(), r.Digest)
		if err != nil || !ok || !equalRef(got, r) {
			t.Errorf("Lookup(%s) after delivery = %+v, %v, %v", r.Digest, got, ok, err)
		}
	}
}

func TestClientQueueDropsOldest(t *testing.T) {
	net := newFakeNet(t, "b")
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, MaxQueue: 10})
	for i := 0; i < 25; i += 5 {
		c.Register([]Ref{ref(i, 1), ref(i+1, 1), ref(i+2, 1), ref(i+3, 1), ref(i+4, 1)})
	}
	bad := ref(99, 1)
	bad.URL = ""
	c.Register([]Ref{bad})
	if st := c.Stats(); st.Queued != 10 || st.Dropped != 16 {
		t.Fatalf("Stats = %+v; want 10 queued, 15 dropped by the bound and 1 invalid", st)
	}
	run(t, c)
	waitFor(t, func() bool { return c.Stats().Registered == 10 })
	reg := net.regs["b"]
	for i := range 25 {
		found, err := reg.Lookup([]string{digest(i)})
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 15; (len(found) == 1) != want {
			t.Errorf("ref %d registered = %v, want %v (the newest 10 kept)", i, len(found) == 1, want)
		}
	}
}

// TestClientQueueBoundCountsRefsPutBack checks that refs an owner did not
// take go back in front of the queue and are the first dropped.
func TestClientQueueBoundCountsRefsPutBack(t *testing.T) {
	net := newFakeNet(t, "b")
	net.setDown("b", true)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, MaxQueue: 5})
	c.minBackoff, c.maxBackoff = time.Millisecond, 4*time.Millisecond
	run(t, c)
	c.Register([]Ref{ref(0, 1), ref(1, 1), ref(2, 1), ref(3, 1), ref(4, 1)})
	waitFor(t, func() bool { return c.Stats().Errors >= 1 })
	c.Register([]Ref{ref(5, 1), ref(6, 1), ref(7, 1)})
	waitFor(t, func() bool { return c.Stats().Dropped == 3 })
	net.setDown("b", false)
	waitFor(t, func() bool { st := c.Stats(); return st.Registered == 5 && st.Queued == 0 })
	for i := range 8 {
		found, err := net.regs["b"].Lookup([]string{digest(i)})
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 3; (len(found) == 1) != want {
			t.Errorf("ref %d registered = %v, want %v (the newest 5 kept)", i, len(found) == 1, want)
		}
	}
	if st := c.Stats(); st.Dropped != 3 || st.Queued != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestClientFollowsOwnerChange(t *testing.T) {
	net := newFakeNet(t, "b", "c")
	net.setDown("b", true)
	var (
		mu    sync.Mutex
		owner = "b"
	)
	ownerOf := func(string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return owner, true
	}
	c := NewClient(ClientConfig{Self: "a", Owner: ownerOf, Local: newRegistry(t), Send: net.send})
	c.minBackoff, c.maxBackoff = time.Millisecond, 4*time.Millisecond
	run(t, c)
	c.Register([]Ref{ref(1, 1), ref(2, 1)})
	waitFor(t, func() bool { return c.Stats().Errors >= 1 })
	mu.Lock()
	owner = "c"
	mu.Unlock()
	waitFor(t, func() bool { return c.Stats().Registered == 2 })
	if found, _ := net.regs["c"].Lookup([]string{digest(1), digest(2)}); len(found) != 2 {
		t.Errorf("new owner holds %v, want refs 1 and 2", found)
	}
	if found, _ := net.regs["b"].Lookup([]string{digest(1), digest(2)}); len(found) != 0 {
		t.Errorf("old owner holds %v, want nothing", found)
	}
	// Lookups ask the current owner.
	if _, ok, err := c.Lookup(context.Background(), digest(1)); err != nil || !ok {
		t.Errorf("Lookup after the change = %v, %v", ok, err)
	}
}

func TestClientLookupErrors(t *testing.T) {
	net := newFakeNet(t, "b")
	net.gate = make(chan struct{})
	defer close(net.gate)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send})
	if _, _, err := c.Lookup(context.Background(), "not a digest"); err == nil {
		t.Error("Lookup of a malformed digest succeeded")
	}

	// A caller that gives up gets its context's error at once.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Lookup(ctx, digest(1))
		done <- err
	}()
	waitFor(t, func() bool { return len(net.lookupSizes()) == 1 }) // the request is stuck at the gate
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup with a cancelled context: err = %v, want context.Canceled", err)
	}
	// A caller that cancels, rather than reaching its deadline, says
	// nothing about the owner: its request is ended, the owner not backed
	// off from.
	idle(t, c)
	if c.backedOff("b") || c.Stats().Errors != 0 {
		t.Errorf("after a caller cancelled: backed off %v, Stats = %+v; want neither", c.backedOff("b"), c.Stats())
	}

	none := NewClient(ClientConfig{Self: "a", Owner: func(string) (string, bool) { return "", false }, Local: newRegistry(t), Send: net.send})
	if _, _, err := none.Lookup(context.Background(), digest(1)); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Lookup without an owner: err = %v, want ErrNoOwner", err)
	}
}

// TestClientIgnoresStrayAnswers checks that an owner's answer about a
// digest nobody asked for is not handed to a caller.
func TestClientIgnoresStrayAnswers(t *testing.T) {
	send := func(_ context.Context, _, _ string, body []byte) ([]byte, error) {
		if _, err := decodeLookup(body); err != nil {
			return nil, err
		}
		return encodeRefs(kindFound, []Ref{ref(2, 1)}), nil
	}
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: send})
	if _, ok, err := c.Lookup(context.Background(), digest(1)); err != nil || ok {
		t.Errorf("Lookup = %v, %v; want a miss", ok, err)
	}
}

// After a ring change, HandOver moves the entries whose digests another
// node now owns to that node and removes them here; the entries of an
// owner that cannot be reached stay until a later call, and an owner's
// own first entry is kept over the one handed to it.
func TestHandOverMovesEntriesToTheirOwners(t *testing.T) {
	net := newFakeNet(t, "a", "b", "c")
	a := net.regs["a"]
	// More entries than one read of the registry takes.
	const n = handOverBatch + 500
	refs := make([]Ref, n)
	for i := range refs {
		refs[i] = ref(i, 1)
	}
	if _, err := a.Register(refs); err != nil {
		t.Fatal(err)
	}
	// b already knows digest 1, from another capture.
	if _, err := net.regs["b"].Register([]Ref{ref(1, 2)}); err != nil {
		t.Fatal(err)
	}
	// A corrupt entry is deleted, and does not stop the hand-over.
	if err := a.db.Set([]byte(keyPrefix+"sha1:CORRUPT"), []byte{9, 9}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	ownerOf := func(d string) (string, bool) {
		var i int
		if _, err := fmt.Sscanf(d, "sha1:%d", &i); err != nil {
			return "b", true
		}
		return []string{"a", "b", "c"}[i%3], true
	}
	var owned [3][]string // digests by owner
	for i := range n {
		owned[i%3] = append(owned[i%3], digest(i))
	}

	c := NewClient(ClientConfig{Self: "a", Owner: ownerOf, Local: a, Send: net.send})
	c.minBackoff, c.maxBackoff = time.Millisecond, 4*time.Millisecond
	net.setDown("c", true)
	moved, err := c.HandOver(context.Background(), ownerOf)
	if err == nil {
		t.Error("HandOver with c down returned no error")
	}
	if moved != len(owned[1]) {
		t.Errorf("HandOver with c down moved %d entries, want b's %d", moved, len(owned[1]))
	}
	found := func(reg string, digests []string) []Ref {
		t.Helper()
		refs, err := net.regs[reg].Lookup(digests)
		if err != nil {
			t.Fatal(err)
		}
		return refs
	}
	if got := found("b", owned[1]); len(got) != len(owned[1]) {
		t.Errorf("b holds %d of its %d digests", len(got), len(owned[1]))
	}
	if _, closer, err := a.db.Get([]byte(keyPrefix + "sha1:CORRUPT")); err == nil {
		closer.Close()
		t.Error("the corrupt entry is still there")
	}
	if n := a.CorruptEntries(); n != 1 {
		t.Errorf("CorruptEntries = %d, want 1", n)
	}
	if got := found("b", []string{digest(1)}); len(got) != 1 || !equalRef(got[0], ref(1, 2)) {
		t.Errorf("b's entry for digest 1 = %+v, want its own first one", got)
	}
	if got := found("a", owned[1]); len(got) != 0 {
		t.Errorf("a still holds %d of b's digests", len(got))
	}
	if got := found("a", append(owned[0], owned[2]...)); len(got) != len(owned[0])+len(owned[2]) {
		t.Errorf("a holds %d of its own and c's %d digests", len(got), len(owned[0])+len(owned[2]))
	}

	net.setDown("c", false)
	time.Sleep(10 * time.Millisecond) // past the back-off from c
	moved, err = c.HandOver(context.Background(), ownerOf)
	if err != nil || moved != len(owned[2]) {
		t.Errorf("HandOver with c back = %d, %v; want c's %d", moved, err, len(owned[2]))
	}
	if got := found("c", owned[2]); len(got) != len(owned[2]) {
		t.Errorf("c holds %d of its %d digests", len(got), len(owned[2]))
	}
	for i, d := range owned[2] {
		if got := found("c", []string{d}); len(got) != 1 || !equalRef(got[0], ref(3*i+2, 1)) {
			t.Fatalf("c's entry for %s = %+v, want a's", d, got)
		}
	}
	if got := found("a", append(owned[1], owned[2]...)); len(got) != 0 {
		t.Errorf("a still holds %d entries it handed over", len(got))
	}
	if got := found("a", owned[0]); len(got) != len(owned[0]) {
		t.Errorf("a holds %d of its own %d digests", len(got), len(owned[0]))
	}
	if st := c.Stats(); st.HandedOver != uint64(len(owned[1])+len(owned[2])) || st.Registered != 0 {
		t.Errorf("Stats = %+v; want HandedOver %d and Registered 0", st, len(owned[1])+len(owned[2]))
	}
	// Nothing left to move: no request.
	before := net.registers
	if moved, err := c.HandOver(context.Background(), ownerOf); moved != 0 || err != nil || net.registers != before {
		t.Errorf("a third HandOver = %d, %v with %d requests", moved, err, net.registers-before)
	}
}

// A registration that replaces the entry of a capture found missing takes
// its place while the entry still names that capture; a plain
// registration never does.
func TestReplaceTakesTheStaleEntrysPlace(t *testing.T) {
	net := newFakeNet(t, "b")
	b := net.regs["b"]
	if _, err := b.Register([]Ref{ref(1, 1)}); err != nil {
		t.Fatal(err)
	}
	// A corrupt entry is replaced as a missing capture's would be.
	if err := b.db.Set([]byte(keyPrefix+digest(2)), []byte{entryVersion, 200}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send})
	run(t, c)
	entry := func(i int) Ref {
		t.Helper()
		found, err := b.Lookup([]string{digest(i)})
		if err != nil || len(found) != 1 {
			t.Fatalf("b's entry for digest %d: %v, %v", i, found, err)
		}
		return found[0]
	}
	// In one queue: plain registrations and replacements, sent in
	// separate requests.
	c.Register([]Ref{ref(1, 9), ref(3, 1)})
	c.Replace(ref(1, 2), ref(1, 1).RecordID)
	c.Replace(ref(2, 2), "<urn:uuid:whatever-was-there>")
	c.Replace(ref(4, 2), ref(4, 1).RecordID) // nothing there: registered
	waitFor(t, func() bool { return c.Stats().Registered == 5 })
	for i, want := range map[int]Ref{1: ref(1, 2), 2: ref(2, 2), 3: ref(3, 1), 4: ref(4, 2)} {
		if got := entry(i); !equalRef(got, want) {
			t.Errorf("digest %d: entry %+v, want %+v", i, got, want)
		}
	}
	// A second replacement of the capture already replaced loses: first-wins.
	c.Replace(ref(1, 3), ref(1, 1).RecordID)
	waitFor(t, func() bool { return c.Stats().Registered == 6 })
	if got := entry(1); !equalRef(got, ref(1, 2)) {
		t.Errorf("after a late replacement, entry %+v, want the first %+v", got, ref(1, 2))
	}
	if st := c.Stats(); st.Errors != 0 || st.Dropped != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

// A replacement that reaches the old owner while HandOver is sending the
// entry it replaces, or after, is not lost: the old owner keeps it, and
// the next HandOver passes it on as a replacement, which the new owner
// applies over the stale entry it was given.
func TestHandOverPassesReplacementsOn(t *testing.T) {
	net := newFakeNet(t, "a", "b")
	a, b := net.regs["a"], net.regs["b"]
	if _, err := a.Register([]Ref{ref(1, 1), ref(2, 1)}); err != nil {
		t.Fatal(err)
	}
	replaced := false
	send := func(ctx context.Context, node, path string, body []byte) ([]byte, error) {
		if path == registerPath && !replaced {
			replaced = true
			// A peer whose ring still names a replaces the lost capture 1.
			if n, err := a.register([]registration{{Ref: ref(1, 2), replaces: ref(1, 1).RecordID}}); err != nil || n != 1 {
				t.Fatalf("replacement on a: %d, %v", n, err)
			}
		}
		return net.send(ctx, node, path, body)
	}
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: a, Send: send})
	if _, err := c.HandOver(context.Background(), to("b")); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Lookup([]string{digest(1)}); len(got) != 1 || !equalRef(got[0], ref(1, 2)) {
		t.Fatalf("a after the hand-over: %v; want the replacement kept", got)
	}
	// After the hand-over, another lagging peer replaces capture 1 of
	// digest 2, which a no longer holds: a keeps it as a new entry.
	if n, err := a.register([]registration{{Ref: ref(2, 2), replaces: ref(2, 1).RecordID}}); err != nil || n != 1 {
		t.Fatalf("late replacement on a: %d, %v", n, err)
	}
	if _, err := c.HandOver(context.Background(), to("b")); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Lookup([]string{digest(1), digest(2)}); len(got) != 0 {
		t.Errorf("a after a second hand-over: %v; want everything sent on", got)
	}
	for i, want := range map[int]Ref{1: ref(1, 2), 2: ref(2, 2)} {
		if got, _ := b.Lookup([]string{digest(i)}); len(got) != 1 || !equalRef(got[0], want) {
			t.Errorf("b's entry for digest %d: %v; want the replacement %+v", i, got, want)
		}
	}
}

// An owner that refuses a batch (ErrRefused: 400, as a node of an older
// release answers a body kind it does not know) loses only that batch: the
// registrations behind it are delivered, and lookups are not backed off.
func TestRefusedRegistrationsAreDropped(t *testing.T) {
	net := newFakeNet(t, "b")
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.refusingReplacements})
	c.Replace(ref(1, 2), ref(1, 1).RecordID)
	c.Register([]Ref{ref(2, 1), ref(3, 1)})
	run(t, c)
	waitFor(t, func() bool { st := c.Stats(); return st.Registered == 2 && st.Queued == 0 })
	if got, _ := net.regs["b"].Lookup([]string{digest(2), digest(3)}); len(got) != 2 {
		t.Errorf("b holds %v; want the two plain registrations", got)
	}
	if st := c.Stats(); st.Dropped != 1 {
		t.Errorf("Stats = %+v; want the refused replacement dropped", st)
	}
	if _, ok, err := c.Lookup(context.Background(), digest(2)); err != nil || !ok {
		t.Errorf("a lookup after the refusal = %v, %v; want it answered", ok, err)
	}
}

// Entries a new owner refuses in a hand-over are deleted, not sent again
// on every pass: sending them again cannot succeed.
func TestHandOverDropsRefusedEntries(t *testing.T) {
	net := newFakeNet(t, "a", "b")
	a := net.regs["a"]
	if _, err := a.Register([]Ref{ref(1, 1), ref(2, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.register([]registration{{Ref: ref(1, 2), replaces: ref(1, 1).RecordID}}); err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: a, Send: net.refusingReplacements})
	moved, err := c.HandOver(context.Background(), to("b"))
	if err != nil || moved != 1 {
		t.Errorf("HandOver = %d, %v; want 1 moved and no error", moved, err)
	}
	if got, _ := a.Lookup([]string{digest(1), digest(2)}); len(got) != 0 {
		t.Errorf("a keeps %v", got)
	}
	if st := c.Stats(); st.Dropped != 1 || st.HandedOver != 1 {
		t.Errorf("Stats = %+v; want 1 dropped, 1 handed over", st)
	}
	before := net.registers
	if moved, err := c.HandOver(context.Background(), to("b")); moved != 0 || err != nil || net.registers != before {
		t.Errorf("a second HandOver = %d, %v with %d requests; want nothing to do", moved, err, net.registers-before)
	}
}

// lookupAsync runs c.Lookup(ctx, d) in a goroutine and sends its error.
func lookupAsync(ctx context.Context, c *Client, d string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Lookup(ctx, d)
		done <- err
	}()
	return done
}

// idle waits until c has no lookup batch waiting or in flight.
func idle(t *testing.T, c *Client) {
	t.Helper()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.owners) == 0
	})
}

// gate makes net's lookup requests wait, and returns what lets them go
// (at the latest when the test ends).
func gate(t *testing.T, net *fakeNet) (open func()) {
	g := make(chan struct{})
	net.gate = g
	open = sync.OnceFunc(func() { close(g) })
	t.Cleanup(open)
	return open
}

// lateOwner returns a Send to net whose lookups are answered, whatever
// their context says, only when the test sends on answer: an owner that
// answers, but later than its callers wait. Registrations are answered at
// once.
func lateOwner(net *fakeNet, answer <-chan struct{}) func(context.Context, string, string, []byte) ([]byte, error) {
	return func(ctx context.Context, node, path string, body []byte) ([]byte, error) {
		if path == lookupPath {
			<-answer
			ctx = context.Background()
		}
		return net.send(ctx, node, path, body)
	}
}

// lateClient returns a Client of owner b, a lateOwner on answer, backed
// off from for minBackoff first.
func lateClient(t *testing.T, minBackoff time.Duration) (c *Client, answer chan struct{}) {
	answer = make(chan struct{})
	c = NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: lateOwner(newFakeNet(t, "b"), answer)})
	c.minBackoff, c.maxBackoff = minBackoff, time.Hour
	return c, answer
}

// lookUpLate looks d up through a lateOwner, gives up at the deadline
// once the request is out, and then lets the owner answer.
func lookUpLate(t *testing.T, c *Client, answer chan<- struct{}, d string) {
	t.Helper()
	sent := c.Stats().Requests
	ctx, giveUp := context.WithCancelCause(context.Background())
	done := lookupAsync(ctx, c, d)
	waitFor(t, func() bool { return c.Stats().Requests == sent+1 })
	giveUp(context.DeadlineExceeded)
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lookup(%s) given up at its deadline: err = %v", d, err)
	}
	answer <- struct{}{}
	idle(t, c)
}

// An owner that answers every lookup, but only after its callers gave up
// at their deadline (the crawler waits 2s for an answer, a request may
// take Timeout, 10s), saves nothing and holds every caller for its whole
// wait. Its answer counts as a failure: the owner is backed off from, and
// the next lookups fail at once, so that their payloads are stored
// without waiting.
func TestClientBacksOffOwnerThatAnswersTooLate(t *testing.T) {
	c, answer := lateClient(t, time.Hour)
	lookUpLate(t, c, answer, digest(1))
	if st := c.Stats(); st.Errors != 1 {
		t.Errorf("after an answer that came too late, Stats = %+v; want 1 error", st)
	}
	if !c.backedOff("b") {
		t.Fatal("the owner that answered too late is not backed off from")
	}
	if _, _, err := c.Lookup(context.Background(), digest(2)); err == nil {
		t.Error("Lookup from the owner backed off from succeeded")
	}
	if st := c.Stats(); st.Requests != 1 {
		t.Errorf("Stats = %+v; want the one request", st)
	}
}

// A request whose callers have all given up is cancelled rather than kept
// until Timeout: its answer would only keep the owner busy, and hold a
// request slot that lookups still waited for need.
func TestClientCancelsRequestsNobodyWaitsFor(t *testing.T) {
	net := newFakeNet(t, "b")
	gate(t, net)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, Timeout: time.Hour})
	c.minBackoff, c.maxBackoff = time.Hour, time.Hour
	ctx, giveUp := context.WithCancelCause(context.Background())
	done := lookupAsync(ctx, c, digest(1))
	waitFor(t, func() bool { return len(net.lookupSizes()) == 1 })
	giveUp(context.DeadlineExceeded)
	<-done
	idle(t, c) // the gate stays closed: only a cancelled request ends
	if st := c.Stats(); st.Errors != 1 || !c.backedOff("b") {
		t.Errorf("after a request cancelled at its callers' deadline: Stats = %+v, backed off %v; want an error and a back-off",
			st, c.backedOff("b"))
	}
}

// A batch waiting for a request slot is sent without the digests whose
// callers have all given up, and not at all if none is left.
func TestClientDoesNotAskForAbandonedDigests(t *testing.T) {
	net := newFakeNet(t, "b")
	open := gate(t, net)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, MaxBatch: 2, Window: time.Hour})
	var lookups uint64
	ask := func(ctx context.Context, d string) <-chan error {
		done := lookupAsync(ctx, c, d)
		lookups++
		waitFor(t, func() bool { return c.Stats().Lookups == lookups }) // in its batch
		return done
	}
	var busy []<-chan error
	for i := range 2 * maxInFlight {
		busy = append(busy, ask(context.Background(), digest(i)))
	}
	waitFor(t, func() bool { return len(net.lookupSizes()) == maxInFlight })
	// Two batches wait for a slot: x and y, and two digests of z.
	xctx, xcancel := context.WithCancel(context.Background())
	x := ask(xctx, digest(100))
	y := ask(context.Background(), digest(101))
	zctx, zcancel := context.WithCancel(context.Background())
	z := []<-chan error{ask(zctx, digest(102)), ask(zctx, digest(103))}
	xcancel()
	zcancel()
	for _, done := range append(z, x) {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Lookup: err = %v", err)
		}
	}
	open()
	for _, done := range append(busy, y) {
		if err := <-done; err != nil {
			t.Errorf("Lookup: %v", err)
		}
	}
	idle(t, c)
	if got, want := net.lookupSizes(), []int{2, 2, 2, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("lookup request sizes = %v, want %v", got, want)
	}
}

// While an owner has maxWaiting batches waiting for a request slot, a
// lookup that would need another fails at once, and is not queued without
// limit behind an owner that cannot keep up; batches whose callers all
// gave up do not count.
func TestClientBoundsLookupsWaitingForAnOwner(t *testing.T) {
	net := newFakeNet(t, "b")
	open := gate(t, net)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, MaxBatch: 1})
	var lookups uint64
	ask := func(ctx context.Context, d string) <-chan error {
		done := lookupAsync(ctx, c, d)
		lookups++
		waitFor(t, func() bool { return c.Stats().Lookups == lookups }) // queued, or refused
		return done
	}
	var waited []<-chan error
	for i := range maxInFlight {
		waited = append(waited, ask(context.Background(), digest(i)))
	}
	waitFor(t, func() bool { return len(net.lookupSizes()) == maxInFlight })
	ctx, cancel := context.WithCancel(context.Background())
	var abandoned []<-chan error
	for i := range maxWaiting {
		abandoned = append(abandoned, ask(ctx, digest(100+i)))
	}
	cancel()
	for _, done := range abandoned {
		<-done
	}
	for i := range maxWaiting {
		waited = append(waited, ask(context.Background(), digest(200+i)))
	}
	var err error
	over := ask(context.Background(), digest(300))
	waitFor(t, func() bool {
		select {
		case err = <-over:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, errBusy) {
		t.Errorf("Lookup beyond maxWaiting batches: err = %v, want errBusy", err)
	}
	open()
	for _, done := range waited {
		if err := <-done; err != nil {
			t.Errorf("Lookup: %v", err)
		}
	}
	idle(t, c)
	if got := len(net.lookupSizes()); got != maxInFlight+maxWaiting {
		t.Errorf("%d lookup requests, want %d", got, maxInFlight+maxWaiting)
	}
}

// The batches waiting for a request slot when the owner comes to be
// backed off from fail at once, rather than being sent to it.
func TestClientFailsWaitingLookupsOnceBackedOff(t *testing.T) {
	net := newFakeNet(t, "b")
	open := gate(t, net)
	c := NewClient(ClientConfig{Self: "a", Owner: to("b"), Local: newRegistry(t), Send: net.send, MaxBatch: 1})
	c.minBackoff, c.maxBackoff = time.Hour, time.Hour
	ctx, giveUp := context.WithCancelCause(context.Background())
	late := lookupAsync(ctx, c, digest(0))
	waitFor(t, func() bool { return len(net.lookupSizes()) == 1 })
	var waited []<-chan error
	for i := 1; i < maxInFlight; i++ {
		waited = append(waited, lookupAsync(context.Background(), c, digest(i)))
		waitFor(t, func() bool { return len(net.lookupSizes()) == i+1 })
	}
	queued := lookupAsync(context.Background(), c, digest(100))
	waitFor(t, func() bool { return c.Stats().Lookups == maxInFlight+1 })
	giveUp(context.DeadlineExceeded)
	<-late
	waitFor(t, func() bool { return c.backedOff("b") })
	open()
	if err := <-queued; err == nil {
		t.Error("a lookup waiting when its owner came to be backed off from was sent")
	}
	for _, done := range waited {
		if err := <-done; err != nil {
			t.Errorf("Lookup: %v", err)
		}
	}
	idle(t, c)
	if got := len(net.lookupSizes()); got != maxInFlight {
		t.Errorf("%d lookup requests, want %d", got, maxInFlight)
	}
}

// An owner backed off from for answering lookups too late still takes
// the registrations queued for it once the back-off ends (none is
// dropped), but taking them does not end the back-off: the next late
// answer doubles it, instead of starting over at minBackoff.
func TestClientRegistersWithOwnerTooSlowForLookups(t *testing.T) {
	c, answer := lateClient(t, time.Millisecond)
	lookUpLate(t, c, answer, digest(100))
	waitFor(t, func() bool { return !c.backedOff("b") })
	run(t, c)
	c.Register([]Ref{ref(1, 1), ref(2, 1), ref(3, 1)})
	waitFor(t, func() bool { st := c.Stats(); return st.Registered == 3 && st.Queued == 0 })
	if st := c.Stats(); st.Dropped != 0 {
		t.Errorf("Stats = %+v; want nothing dropped", st)
	}
	delay := func() time.Duration {
		c.mu.Lock()
		defer c.mu.Unlock()
		if bo := c.backoff["b"]; bo != nil {
			return bo.delay
		}
		return 0
	}
	if d := delay(); d != c.minBackoff {
		t.Fatalf("after registrations were taken, back-off delay = %v, want %v", d, c.minBackoff)
	}
	lookUpLate(t, c, answer, digest(101))
	if d := delay(); d != 2*c.minBackoff {
		t.Errorf("after a second late answer, back-off delay = %v, want %v", d, 2*c.minBackoff)
	}
}
