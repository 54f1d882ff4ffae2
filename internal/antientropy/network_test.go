package antientropy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/waggle-archive/waggle/internal/admission"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// sharedSite is the test's ring: of the sites com,exampleNNN, those with
// NNN not a multiple of 3 are held by both nodes.
func sharedSite(site string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(site, "com,example"))
	return err == nil && n%3 != 0
}

type source struct {
	idx    *index.Index
	shared func(peerID, site string) bool
}

func (s source) Index() *index.Index             { return s.idx }
func (s source) Shared(peerID, site string) bool { return s.shared(peerID, site) }
func (s source) Version() uint64                 { return 0 }

// countingListener counts the bytes of every connection it accepts, TLS
// and HTTP/2 framing included.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// pair is two nodes of one network: a runs Sync against b, which serves h.
type pair struct {
	a, b   *admission.Credential
	addr   string
	client *peer.Client
	wire   *atomic.Int64 // bytes through b's server connections
}

func newPair(t *testing.T, h func(aID string) http.Handler) *pair {
	t.Helper()
	dir := t.TempDir()
	if err := admission.Init(dir); err != nil {
		t.Fatal(err)
	}
	p := &pair{wire: new(atomic.Int64)}
	for _, c := range []struct {
		name string
		cred **admission.Credential
	}{{"node-a", &p.a}, {"node-b", &p.b}} {
		cred, err := admission.Admit(dir, c.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		*c.cred = &cred
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle(Path, h(p.a.ID()))
	go func() { done <- peer.NewServer(p.b, mux, nil).Serve(ctx, countingListener{ln, p.wire}) }()
	p.client = peer.NewClient(p.a)
	t.Cleanup(func() {
		p.client.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p
}

// serveIndex is a handler factory serving idx to a as sharing the sites
// sharedSite passes, and nothing to any other node.
func serveIndex(idx *index.Index) func(string) http.Handler {
	return func(aID string) http.Handler {
		return Handler(source{idx: idx, shared: func(peerID, site string) bool {
			return peerID == aID && sharedSite(site)
		}})
	}
}

func (p *pair) config(idx *index.Index, budget *Budget) SyncConfig {
	return SyncConfig{Index: idx, Client: p.client, PeerID: p.b.ID(), PeerAddr: p.addr, Shared: sharedSite, Budget: budget}
}

// unshared reports whether capture i belongs to a site not shared.
func unshared(i int) bool { return !sharedSite(urlkey.SiteOfKey(capture(i).URLKey)) }

// TestSyncEqual measures a round between nodes that hold the same captures
// of their shared sites. They differ on sites they do not share, which the
// round must not see.
func TestSyncEqual(t *testing.T) {
	for _, n := range []int{10_000, 100_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			// Every 7th capture of an unshared site exists on a only, and
			// every 11th on b only.
			var ca, cb []index.Capture
			shared := 0
			for i := range n {
				c := capture(i)
				if !unshared(i) {
					shared++
				}
				if !unshared(i) || i%11 != 0 {
					ca = append(ca, c)
				}
				if !unshared(i) || i%7 != 0 {
					cb = append(cb, c)
				}
			}
			ia, ib := openIndex(t, ca), openIndex(t, cb)
			p := newPair(t, serveIndex(ib))
			budget := NewBudget(0)
			res, err := Sync(ctx, p.config(ia, budget))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Equal || len(res.MissingHere) != 0 || res.MissingThere != 0 || res.Truncated {
				t.Fatalf("equal data: %+v", res)
			}
			if int64(res.Bytes) != budget.Charged() || res.Bytes == 0 || res.Bytes > 100 {
				t.Fatalf("round of %d bytes, budget charged %d", res.Bytes, budget.Charged())
			}
			first := p.wire.Load()
			// A second round, on the connection the first opened.
			res, err = Sync(ctx, p.config(ia, budget))
			if err != nil || !res.Equal {
				t.Fatalf("second round: %+v, %v", res, err)
			}
			t.Logf("%d shared captures: %d payload bytes per round; on the wire %d bytes for the first round (TLS handshake included), %d for the next",
				shared, res.Bytes, first, p.wire.Load()-first)
		})
	}
}

func TestSyncMissing(t *testing.T) {
	ctx := context.Background()
	const n = 20_000
	full := captures(n, nil)
	// a lacks some shared captures and some unshared ones; b lacks others.
	lackA, lackB := map[int]bool{}, map[int]bool{}
	var want []index.Capture
	for i := 0; i < n; i += 1001 {
		lackA[i] = true
		if !unshared(i) {
			want = append(want, full[i])
		}
	}
	lackB[4], lackB[5], lackB[6] = true, true, true // 6 is of an unshared site
	wantThere := 2
	var ca, cb []index.Capture
	for i, c := range full {
		if !lackA[i] {
			ca = append(ca, c)
		}
		if !lackB[i] {
			cb = append(cb, c)
		}
	}
	ia, ib := openIndex(t, ca), openIndex(t, cb)
	p := newPair(t, serveIndex(ib))
	budget := NewBudget(1 << 30)
	res, err := Sync(ctx, p.config(ia, budget))
	if err != nil {
		t.Fatal(err)
	}
	if res.Equal || res.MissingThere != wantThere || res.Truncated {
		t.Fatalf("result %+v", res)
	}
	got := slices.Clone(res.MissingHere)
	for i := range got {
		if got[i].Node != p.b.ID() {
			t.Fatalf("capture from node %q, want %q", got[i].Node, p.b.ID())
		}
		got[i].Node = ""
	}
	sortCaptures(got)
	sortCaptures(want)
	if len(got) != len(want) {
		t.Fatalf("%d missing here, want %d", len(got), len(want))
	}
	for i := range got {
		if !got[i].Time.Equal(want[i].Time) {
			t.Fatalf("capture %d: time %v, want %v", i, got[i].Time, want[i].Time)
		}
		got[i].Time = want[i].Time
		if got[i] != want[i] {
			t.Fatalf("capture %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if int64(res.Bytes) != budget.Charged() {
		t.Fatalf("round of %d bytes, budget charged %d", res.Bytes, budget.Charged())
	}
	t.Logf("%d missing here, %d there, of %d: %d bytes", len(got), res.MissingThere, n, res.Bytes)

	// Once a has copied them, the shared captures are equal.
	ia2 := openIndex(t, append(slices.Clone(ca), want...))
	cb2 := cb
	for i := range lackB {
		cb2 = append(cb2, full[i])
	}
	p2 := newPair(t, serveIndex(openIndex(t, cb2)))
	if res, err := Sync(ctx, p2.config(ia2, nil)); err != nil || !res.Equal {
		t.Fatalf("after copying: %+v, %v", res, err)
	}
}

func sortCaptures(cs []index.Capture) {
	slices.SortFunc(cs, func(x, y index.Capture) int {
		if c := strings.Compare(x.URLKey, y.URLKey); c != 0 {
			return c
		}
		return x.Time.Compare(y.Time)
	})
}

// TestSyncEmpty has an empty node catch up: more differs than one answer
// carries, and the round stops at MaxMissing.
func TestSyncEmpty(t *testing.T) {
	ctx := context.Background()
	const n = 60_000
	full := captures(n, nil)
	shared := 0
	for i := range n {
		if !unshared(i) {
			shared++
		}
	}
	ia, ib := openIndex(t, nil), openIndex(t, full)
	p := newPair(t, serveIndex(ib))
	res, err := Sync(ctx, p.config(ia, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.MissingHere) != shared || res.Truncated || res.MissingThere != 0 {
		t.Fatalf("empty node: %d missing (want %d), truncated %v", len(res.MissingHere), shared, res.Truncated)
	}
	cfg := p.config(ia, nil)
	cfg.MaxMissing = 100
	res, err = Sync(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.MissingHere) < 100 || len(res.MissingHere) >= shared {
		t.Fatalf("MaxMissing 100: %d missing, truncated %v", len(res.MissingHere), res.Truncated)
	}
}

func TestHandlerRefuses(t *testing.T) {
	ia := openIndex(t, captures(1000, nil))
	h := Handler(source{idx: ia, shared: func(string, string) bool { return true }})
	for _, path := range []string{summaryPath + "?depth=1", childrenPath, diffPath} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s without a peer caller: %d", path, rec.Code)
		}
	}

	notIn0 := uint64(1)
	for bucketAt(notIn0, 1) == 0 {
		notIn0++
	}
	p := newPair(t, serveIndex(ia))
	do := func(method, target string, body []byte) int {
		t.Helper()
		var rd *strings.Reader
		if body != nil {
			rd = strings.NewReader(string(body))
		} else {
			rd = strings.NewReader("")
		}
		req, err := http.NewRequest(method, target, rd)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.client.Do(context.Background(), p.addr, p.b.ID(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, target string
		body           []byte
		want           int
	}{
		{"GET", summaryPath, nil, 400},
		{"GET", summaryPath + "?depth=6", nil, 400},
		{"GET", summaryPath + "?depth=-1", nil, 400},
		{"GET", summaryPath + "?depth=1&x=2", nil, 400},
		{"POST", summaryPath + "?depth=1", nil, 405},
		{"GET", childrenPath, nil, 405},
		{"GET", Path + "nothing", nil, 404},
		{"POST", childrenPath, []byte("garbage"), 400},
		{"POST", diffPath, []byte{}, 400},
		{"POST", diffPath, diffRequest{depth: 1, buckets: []diffBucket{{bucket: 0, fps: []uint64{notIn0}}}}.append(nil), 400},
		{"POST", diffPath, diffRequest{depth: 1, buckets: []diffBucket{{bucket: 16}}}.append(nil), 400},
		{"POST", diffPath, make([]byte, maxDiffRequest+1), 413},
		// A tree that was never summarised.
		{"POST", childrenPath, childrenRequest{depth: 2, root: 1, level: 0, parents: []uint64{0}}.append(nil), 409},
		{"GET", summaryPath + "?depth=2", nil, 200},
		{"POST", childrenPath, childrenRequest{depth: 2, root: 12345, level: 0, parents: []uint64{0}}.append(nil), 409},
	} {
		if got := do(c.method, c.target, c.body); got != c.want {
			t.Errorf("%s %s %.20x: %d, want %d", c.method, c.target, c.body, got, c.want)
		}
	}
}

// TestSyncGarbage has a peer answer nonsense: every round fails with an
// error.
func TestSyncGarbage(t *testing.T) {
	ctx := context.Background()
	caps := captures(2000, nil)
	ia := openIndex(t, caps)
	// sum answers a summary at the depth asked, changed by edit.
	sum := func(edit func(*Summary)) func(int) []byte {
		return func(d int) []byte {
			s := Summary{Depth: d, Root: 1}
			edit(&s)
			return appendSummary(nil, s)
		}
	}
	keep := func(*Summary) {}
	mine := caps[1] // a shared capture a has
	other := capture(5000)
	for i := 5001; !sharedSite(urlkey.SiteOfKey(other.URLKey)); i++ {
		other = capture(i)
	}
	answer := func(a diffAnswer) []byte {
		b, err := a.append(nil, wireVersion)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name     string
		summary  func(depth int) []byte
		children func(q childrenRequest) []byte
		diff     func(q diffRequest) []byte
		status   int
	}{
		{name: "status", status: 500},
		{name: "empty summary", summary: func(int) []byte { return nil }},
		{name: "bad version", summary: func(int) []byte { return []byte{9} }},
		{name: "range", summary: sum(func(s *Summary) { s.Lo = "a" })},
		{name: "depth", summary: sum(func(s *Summary) { s.Depth++ })},
		{name: "stray", summary: func(d int) []byte { return append(sum(keep)(d), 0) }},
		{name: "short children", summary: sum(keep), children: func(childrenRequest) []byte { return []byte{wireVersion, 1, 2, 3} }},
		{name: "inconsistent children", summary: sum(keep), children: func(q childrenRequest) []byte {
			return appendHashes(nil, make([]uint64, Fanout*len(q.parents))) // all zero: no child differs
		}},
		{name: "diff garbage", diff: func(diffRequest) []byte { return []byte{wireVersion, 200} }},
		{name: "diff answers nothing", diff: func(diffRequest) []byte { return answer(diffAnswer{}) }},
		{name: "diff answers too much", diff: func(q diffRequest) []byte { return answer(diffAnswer{answered: len(q.buckets) + 1}) }},
		{name: "diff lacks too much", diff: func(q diffRequest) []byte {
			return answer(diffAnswer{answered: 1, missingThere: len(q.buckets[0].fps) + 1})
		}},
		{name: "diff sends what a has", diff: func(q diffRequest) []byte {
			return answer(diffAnswer{answered: len(q.buckets), captures: []index.Capture{mine}})
		}},
		{name: "diff sends another bucket", diff: func(q diffRequest) []byte {
			return answer(diffAnswer{answered: 1, captures: []index.Capture{other}})
		}},
		{name: "diff sends twice", diff: func(q diffRequest) []byte {
			return answer(diffAnswer{answered: len(q.buckets), captures: []index.Capture{other, other}})
		}},
		{name: "diff truncated", diff: func(q diffRequest) []byte {
			b := answer(diffAnswer{answered: len(q.buckets), captures: []index.Capture{other}})
			return b[:len(b)-1]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, func(string) http.Handler {
				real := Handler(source{idx: openIndex(t, caps[:1000]), shared: func(_, site string) bool { return sharedSite(site) }})
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					var body []byte
					switch {
					case c.status != 0:
						http.Error(w, "broken", c.status)
						return
					case r.URL.Path == summaryPath && c.summary != nil:
						d, _ := strconv.Atoi(r.URL.Query().Get("depth"))
						body = c.summary(d)
					case r.URL.Path == childrenPath && c.children != nil:
						b, _ := readBody(r, maxChildrenRequest)
						q, err := decodeChildrenRequest(b)
						if err != nil {
							t.Errorf("the client sent a bad children request: %v", err)
						}
						body = c.children(q)
					case r.URL.Path == diffPath && c.diff != nil:
						b, _ := readBody(r, maxDiffRequest)
						q, err := decodeDiffRequest(b)
						if err != nil {
							t.Errorf("the client sent a bad diff request: %v", err)
						}
						body = c.diff(q)
					default:
						real.ServeHTTP(w, r)
						return
					}
					w.Write(body)
				})
			})
			res, err := Sync(ctx, p.config(ia, nil))
			if err == nil {
				t.Fatalf("Sync succeeded: %+v", res)
			}
			if !strings.HasPrefix(err.Error(), "antientropy: ") {
				t.Errorf("error %q does not name the package", err)
			}
			t.Log(err)
		})
	}
}

func TestBudget(t *testing.T) {
	var zero Budget
	if err := zero.Throttle(context.Background(), 1<<40); err != nil || zero.Charged() != 1<<40 {
		t.Fatalf("zero budget: %v, charged %d", err, zero.Charged())
	}
	var none *Budget
	if err := none.Throttle(context.Background(), 10); err != nil || none.Charged() != 0 {
		t.Fatal("nil budget")
	}
	b := NewBudget(100)
	// The first second's worth is there at once; beyond it, a charge
	// waits, so a cancelled context ends the wait.
	if err := b.Throttle(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Throttle(ctx, 1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("over budget with a cancelled context: %v", err)
	}
	if b.Charged() != 1100 || b.BytesPerSecond() != 100 {
		t.Fatalf("charged %d, rate %d", b.Charged(), b.BytesPerSecond())
	}
	// Sync stops when its budget's wait is cancelled.
	ia := openIndex(t, captures(100, nil))
	p := newPair(t, serveIndex(openIndex(t, nil)))
	if _, err := Sync(ctx, p.config(ia, NewBudget(1))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a cancelled context: %v", err)
	}
}

func TestBuildFiltered(t *testing.T) {
	ctx := context.Background()
	caps := captures(3000, nil)
	idx := openIndex(t, caps)
	asked := map[string]int{}
	tr, err := BuildFiltered(ctx, idx, func(site string) bool { asked[site]++; return sharedSite(site) }, 2)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := New("", "", 2)
	for i, c := range caps {
		if !unshared(i) {
			want.Add(EntryOf(c))
		}
	}
	if tr.Root() != want.Root() || tr.Len() != want.Len() {
		t.Fatalf("filtered tree: %d captures, want %d", tr.Len(), want.Len())
	}
	for site, n := range asked {
		if n != 1 {
			t.Fatalf("keep asked %d times about %s", n, site)
		}
	}
	// A deep tree cut short is the tree of the shallower depth.
	deep, err := BuildFiltered(ctx, idx, sharedSite, MaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	for d := 0; d <= 2; d++ {
		if !slices.Equal(deep.truncate(2).Level(d), tr.Level(d)) {
			t.Fatalf("level %d of a truncated tree differs", d)
		}
	}
	if _, err := BuildFiltered(ctx, idx, sharedSite, MaxDepth+1); err == nil {
		t.Fatal("depth beyond MaxDepth accepted")
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder of the protocol: each
// returns an error or a message that encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(appendSummary(nil, Summary{Depth: 3, Root: 42, Count: 1000}))
	f.Add(childrenRequest{depth: 3, root: 7, level: 1, parents: []uint64{0, 3, 15}}.append(nil))
	f.Add(appendHashes(nil, make([]uint64, 16)))
	fp := EntryOf(capture(1)).Fingerprint()
	f.Add(diffRequest{depth: 2, buckets: []diffBucket{{bucket: 3}, {bucket: bucketAt(fp, 2), fps: []uint64{fp}}}}.append(nil))
	if bucketAt(fp, 2) <= 3 {
		f.Add(diffRequest{depth: 2, buckets: []diffBucket{{bucket: bucketAt(fp, 2), fps: []uint64{fp}}}}.append(nil))
	}
	withSimHash := capture(2)
	withSimHash.SimHash = 0xfedcba9876543210
	for _, v := range []byte{wireVersion, diffVersionSimHash} {
		a, err := diffAnswer{answered: 2, missingThere: 1, captures: []index.Capture{capture(1), withSimHash, capture(1002)}}.append(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a)
	}
	f.Add([]byte{wireVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		// What decodes must encode to something that decodes the same.
		if s, err := decodeSummary(b); err == nil {
			if s2, err := decodeSummary(appendSummary(nil, s)); err != nil || s2 != s {
				t.Fatalf("summary %+v re-decodes as %+v, %v", s, s2, err)
			}
		}
		if q, err := decodeChildrenRequest(b); err == nil {
			if q2, err := decodeChildrenRequest(q.append(nil)); err != nil || !reflect.DeepEqual(q, q2) {
				t.Fatalf("children request %+v re-decodes as %+v, %v", q, q2, err)
			}
		}
		if len(b) > 0 && (len(b)-1)%8 == 0 {
			if h, err := decodeHashes(b, (len(b)-1)/8); err == nil && string(appendHashes(nil, h)) != string(b) {
				t.Fatal("hashes do not re-encode")
			}
		}
		if q, err := decodeDiffRequest(b); err == nil {
			if q2, err := decodeDiffRequest(q.append(nil)); err != nil || !reflect.DeepEqual(q, q2) {
				t.Fatalf("diff request %+v re-decodes as %+v, %v", q, q2, err)
			}
		}
		if a, err := decodeDiffAnswer(b); err == nil {
			enc, err := a.append(nil, b[0])
			if err != nil {
				t.Fatal(err)
			}
			if a2, err := decodeDiffAnswer(enc); err != nil || !reflect.DeepEqual(a, a2) {
				t.Fatalf("diff answer %+v re-decodes as %+v, %v", a, a2, err)
			}
		}
	})
}
