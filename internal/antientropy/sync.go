package antientropy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// DefaultMaxMissing is the default bound on the captures one Sync reports
// missing.
const DefaultMaxMissing = 100_000

const (
	// requestTimeout bounds one request of a round, whatever ctx allows:
	// the slowest is a diff, one read of the peer's index.
	requestTimeout = 2 * time.Minute
	// maxAttempts bounds the rounds started again because the peer's
	// tree changed under one.
	maxAttempts  = 3
	maxErrorBody = 512
)

// SyncConfig is what Sync needs for a round with one peer.
type SyncConfig struct {
	Index    *index.Index // this node's
	Client   *peer.Client
	PeerID   string // the peer's certified ID
	PeerAddr string // host:port of its peer server
	// Shared reports whether this node and the peer should both hold
	// site. The peer's Source must say the same, or the two trees differ
	// by the sites they disagree on (Sync ignores captures the peer sends
	// of sites Shared refuses).
	Shared func(site string) bool
	// Depth is the depth of the trees compared; 0 lets Sync choose from
	// the larger of the two sides' counts (DepthFor).
	Depth int
	// Budget, if not nil, is charged for every byte of the round, which
	// waits for it; the caller charges it for the records it fetches.
	Budget *Budget
	// MaxMissing bounds len(Result.MissingHere) (DefaultMaxMissing if 0);
	// the round stops early once it is reached, and the next round finds
	// the rest.
	MaxMissing int
}

// Result is what a round found.
type Result struct {
	Equal bool // the trees were equal: nothing to copy either way
	// Bytes counts what the round moved: request targets and bodies,
	// and answer bodies. HTTP/2 framing and TLS are not counted.
	Bytes int
	// MissingHere are the captures of shared sites the peer has and this
	// node lacks, as the peer's index has them, with Node set to the
	// peer's ID: fetch their records from it.
	MissingHere []index.Capture
	// MissingThere counts the captures of this node the peer lacks, in
	// the buckets compared. The peer copies them in its own round.
	MissingThere int
	// Truncated is set when the round stopped at MaxMissing, before it
	// compared every differing bucket.
	Truncated bool
}

// Sync runs one anti-entropy round with the peer cfg names, which must
// serve Handler: it compares the trees of the captures of the sites both
// share, walking down only where they differ, and returns what each side
// lacks. Copying records is the caller's business. It moves bytes in
// proportion to the difference: when nothing differs, one request and a
// summary.
func Sync(ctx context.Context, cfg SyncConfig) (Result, error) {
	switch {
	case cfg.Index == nil || cfg.Client == nil || cfg.Shared == nil:
		return Result{}, errors.New("antientropy: sync: Index, Client and Shared are required")
	case cfg.PeerID == "" || cfg.PeerAddr == "":
		return Result{}, errors.New("antientropy: sync: no peer")
	case cfg.Depth < 0 || cfg.Depth > MaxDepth:
		return Result{}, fmt.Errorf("antientropy: sync: depth %d outside 0..%d", cfg.Depth, MaxDepth)
	}
	if cfg.MaxMissing <= 0 {
		cfg.MaxMissing = DefaultMaxMissing
	}
	s := &syncer{cfg: &cfg}
	// One scan at the deepest depth gives the tree at any depth.
	depth := cfg.Depth
	if depth == 0 {
		depth = MaxDepth
	}
	full, err := BuildFiltered(ctx, cfg.Index, cfg.Shared, depth)
	if err != nil {
		return Result{}, err
	}
	var buckets []uint64
	for attempt := 1; ; attempt++ {
		buckets, depth, err = s.compare(ctx, full)
		if err == nil || !errors.Is(err, errTreeChanged) || attempt == maxAttempts {
			break
		}
	}
	if err != nil {
		return s.res, err
	}
	if len(buckets) == 0 {
		s.res.Equal = true
		return s.res, nil
	}
	if err := s.diff(ctx, depth, buckets); err != nil {
		return s.res, err
	}
	return s.res, nil
}

type syncer struct {
	cfg *SyncConfig
	res Result
}

// compare finds the leaf buckets where the trees differ and the depth at
// which it compared them.
func (s *syncer) compare(ctx context.Context, full *Tree) ([]uint64, int, error) {
	depth := s.cfg.Depth
	if depth == 0 {
		depth = DepthFor(full.Len())
	}
	sum, err := s.summary(ctx, depth)
	if err != nil {
		return nil, 0, err
	}
	if s.cfg.Depth == 0 && DepthFor(sum.Count) > depth && sum.Root != full.truncate(depth).Root() {
		// The peer holds many more: leaves sized for this side's count
		// would be too full for the peer's.
		depth = DepthFor(sum.Count)
		if sum, err = s.summary(ctx, depth); err != nil {
			return nil, 0, err
		}
	}
	local := full.truncate(depth)
	if local.Root() == sum.Root {
		return nil, depth, nil
	}
	buckets, _, err := Compare(ctx, local, &remote{s: s, sum: sum})
	return buckets, depth, err
}

func (s *syncer) summary(ctx context.Context, depth int) (Summary, error) {
	b, err := s.call(ctx, http.MethodGet, summaryPath+"?depth="+strconv.Itoa(depth), nil, maxSummaryBytes)
	if err != nil {
		return Summary{}, err
	}
	sum, err := decodeSummary(b)
	if err != nil {
		return Summary{}, fmt.Errorf("antientropy: summary from %s: %w", s.cfg.PeerAddr, err)
	}
	if sum.Lo != "" || sum.Hi != "" || sum.Depth != depth {
		return Summary{}, fmt.Errorf("%w: asked for the whole key space at depth %d, the peer answers [%.100q, %.100q) at depth %d",
			errShape, depth, sum.Lo, sum.Hi, sum.Depth)
	}
	return sum, nil
}

// remote is the peer's tree of one round.
type remote struct {
	s     *syncer
	sum   Summary
	known map[[2]uint64]uint64 // (level, node) → hash the peer sent
}

func (r *remote) Summary(context.Context) (Summary, error) { return r.sum, nil }

func (r *remote) Children(ctx context.Context, d int, parents []uint64) ([]uint64, error) {
	q := childrenRequest{depth: r.sum.Depth, root: r.sum.Root, level: d, parents: parents}
	b, err := r.s.call(ctx, http.MethodPost, childrenPath, q.append(nil), int64(1+8*Fanout*len(parents)))
	if err != nil {
		return nil, err
	}
	hashes, err := decodeHashes(b, Fanout*len(parents))
	if err != nil {
		return nil, fmt.Errorf("antientropy: children from %s: %w", r.s.cfg.PeerAddr, err)
	}
	// A node's hash is the sum of its children's: check the peer's
	// answers against each other, so that a broken peer cannot send this
	// node hunting through buckets that do not differ.
	if r.known == nil {
		r.known = map[[2]uint64]uint64{{0, 0}: r.sum.Root}
	}
	for i, p := range parents {
		var sum uint64
		for c, h := range hashes[i*Fanout : (i+1)*Fanout] {
			sum += h
			r.known[[2]uint64{uint64(d + 1), p*Fanout + uint64(c)}] = h
		}
		if want, ok := r.known[[2]uint64{uint64(d), p}]; !ok || sum != want {
			return nil, fmt.Errorf("%w: the children of node %d at depth %d do not sum to its hash", errWire, p, d)
		}
	}
	return hashes, nil
}

// diff asks the peer, in as many requests as the bounds need, for the
// captures of the buckets that this node lacks.
func (s *syncer) diff(ctx context.Context, depth int, buckets []uint64) error {
	want := make(map[uint64][]uint64, len(buckets))
	for _, b := range buckets {
		want[b] = nil
	}
	err := scanShared(ctx, s.cfg.Index, s.cfg.Shared, func(_ index.Capture, fp uint64) error {
		b := bucketAt(fp, depth)
		if fps, ok := want[b]; ok {
			want[b] = append(fps, fp)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("antientropy: sync: %w", err)
	}
	seen := make(map[uint64]bool)
	for len(buckets) > 0 {
		if len(s.res.MissingHere) >= s.cfg.MaxMissing {
			s.res.Truncated = true
			return nil
		}
		q := diffRequest{depth: depth}
		nfps := 0
		for _, b := range buckets {
			fps := want[b]
			slices.Sort(fps)
			fps = slices.Compact(fps)
			if len(fps) > maxDiffFingerprints {
				return fmt.Errorf("antientropy: bucket %d holds %d captures here, more than a request carries; a deeper tree is needed", b, len(fps))
			}
			if len(q.buckets) == maxDiffBuckets || nfps+len(fps) > maxDiffFingerprints {
				break
			}
			q.buckets = append(q.buckets, diffBucket{bucket: b, fps: fps})
			nfps += len(fps)
		}
		n, err := s.diffOnce(ctx, q, seen)
		if err != nil {
			return err
		}
		buckets = buckets[n:]
	}
	return nil
}

// diffOnce sends one diff request and returns how many of its buckets the
// peer answered.
func (s *syncer) diffOnce(ctx context.Context, q diffRequest, seen map[uint64]bool) (int, error) {
	b, err := s.call(ctx, http.MethodPost, diffPath, q.append(nil), maxAnswerBytes)
	if err != nil {
		return 0, err
	}
	a, err := decodeDiffAnswer(b)
	if err != nil {
		return 0, fmt.Errorf("antientropy: diff from %s: %w", s.cfg.PeerAddr, err)
	}
	if a.answered < 1 || a.answered > len(q.buckets) {
		return 0, fmt.Errorf("%w: the peer answered %d of %d buckets", errWire, a.answered, len(q.buckets))
	}
	// What the answer may hold: captures of the answered buckets that
	// this node did not list.
	pos := make(map[uint64]int, a.answered)
	mine := make(map[uint64]bool)
	nfps := 0
	for i, x := range q.buckets[:a.answered] {
		pos[x.bucket] = i
		for _, fp := range x.fps {
			mine[fp] = true
		}
		nfps += len(x.fps)
	}
	if a.missingThere > nfps {
		return 0, fmt.Errorf("%w: the peer lacks %d of the %d captures listed", errWire, a.missingThere, nfps)
	}
	var site string
	var kept bool
	for i, c := range a.captures {
		fp := EntryOf(c).Fingerprint()
		switch _, ok := pos[bucketAt(fp, q.depth)]; {
		case !ok:
			return 0, fmt.Errorf("%w: the peer sent %.200q at %s, of a bucket not asked", errWire, c.URLKey, c.Timestamp14())
		case mine[fp]:
			return 0, fmt.Errorf("%w: the peer sent %.200q at %s, which this node has", errWire, c.URLKey, c.Timestamp14())
		case seen[fp]:
			return 0, fmt.Errorf("%w: the peer sent %.200q at %s twice", errWire, c.URLKey, c.Timestamp14())
		}
		seen[fp] = true
		if s2 := urlkey.SiteOfKey(c.URLKey); i == 0 || s2 != site {
			site, kept = s2, s.cfg.Shared(s2)
		}
		if !kept {
			continue // the peer's view of the ring differs from ours
		}
		c.Node = s.cfg.PeerID
		s.res.MissingHere = append(s.res.MissingHere, c)
	}
	s.res.MissingThere += a.missingThere
	return a.answered, nil
}

// call sends one request to the peer and returns the body of its answer,
// which must be 200 and at most limit bytes, charging the budget for both.
func (s *syncer) call(ctx context.Context, method, target string, body []byte, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	out := len(target) + len(body)
	s.res.Bytes += out
	if err := s.cfg.Budget.Throttle(ctx, out); err != nil {
		return nil, fmt.Errorf("antientropy: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("antientropy: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set(acceptVersion, strconv.Itoa(diffVersionSimHash))
	resp, err := s.cfg.Client.Do(ctx, s.cfg.PeerAddr, s.cfg.PeerID, req)
	if err != nil {
		return nil, fmt.Errorf("antientropy: %w", err)
	}
	defer resp.Body.Close()
	what := strings.TrimPrefix(target, Path)
	if i := strings.IndexByte(what, '?'); i >= 0 {
		what = what[:i]
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		s.res.Bytes += len(msg)
		err := fmt.Errorf("antientropy: %s from %s: %s: %.200q", what, s.cfg.PeerAddr, resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode == http.StatusConflict {
			err = fmt.Errorf("%w (%v)", errTreeChanged, err)
		}
		return nil, err
	}
	b, err := io.ReadAll(&throttled{r: io.LimitReader(resp.Body, limit+1), ctx: ctx, budget: s.cfg.Budget, n: &s.res.Bytes})
	if err != nil {
		return nil, fmt.Errorf("antientropy: %s from %s: %w", what, s.cfg.PeerAddr, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s answer from %s over %d bytes", errWire, what, s.cfg.PeerAddr, limit)
	}
	return b, nil
}

// throttled counts the bytes read through it and charges them to a budget.
type throttled struct {
	r      io.Reader
	ctx    context.Context
	budget *Budget
	n      *int
}

func (t *throttled) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	*t.n += n
	if terr := t.budget.Throttle(t.ctx, n); terr != nil && err == nil {
		err = terr
	}
	return n, err
}
