package antientropy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
)

// Path is the prefix of the paths Handler serves, under which a node
// mounts it on its peer server's mux.
const Path = "/v1/ae/"

const (
	summaryPath  = Path + "summary"
	childrenPath = Path + "children"
	diffPath     = Path + "diff"

	contentType = "application/x-waggle-ae"
)

// How the server keeps the trees it builds: a tree is rebuilt for a new
// round once treeTTL old or when the Source's version has changed (a
// round's later requests use it whatever its age, so a round sees one
// tree), and forgotten treeIdle after its last use. At most maxTrees are kept (a depth-5 tree is 9 MB) and maxBuilds
// built at once (each reads the whole index).
const (
	treeTTL   = 30 * time.Second
	treeIdle  = 2 * time.Minute
	maxTrees  = 8
	maxBuilds = 2
)

// A Source is what Handler serves: this node's index and its view of which
// sites it shares with which peer.
type Source interface {
	Index() *index.Index
	// Shared reports whether this node and peer (by certified ID) should
	// both hold site.
	Shared(peerID, site string) bool
	// Version changes whenever the index or the answers of Shared may
	// have: a kept tree of another version is not served again.
	Version() uint64
}

// Handler serves anti-entropy rounds to the other nodes of the network,
// behind a peer.Server (it refuses a request that did not come through
// one, 403). Each caller is served the tree of the captures of the sites
// src says it shares with that caller:
//
//	GET  /v1/ae/summary?depth=   the tree's Summary
//	POST /v1/ae/children         child hashes of some nodes of that tree
//	POST /v1/ae/diff             the captures of some buckets the caller lacks
//
// The bodies are described in wire.go. children answers 409 Conflict when
// the tree the caller names by its root is no longer kept: the caller
// starts its round again.
func Handler(src Source) http.Handler {
	return &server{src: src, trees: make(map[treeKey]*cachedTree), builds: make(chan struct{}, maxBuilds)}
}

type server struct {
	src    Source
	builds chan struct{} // a semaphore on tree builds

	mu    sync.Mutex
	trees map[treeKey]*cachedTree
}

type treeKey struct {
	peer    string
	depth   int
	version uint64
}

type cachedTree struct {
	ready chan struct{} // closed once tree or err is set
	tree  *Tree
	err   error
	built time.Time // when the build finished
	used  time.Time
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, _, ok := peer.Caller(r.Context())
	if !ok {
		http.Error(w, "antientropy: not a peer request", http.StatusForbidden)
		return
	}
	method := http.MethodPost
	if r.URL.Path == summaryPath {
		method = http.MethodGet
	}
	switch r.URL.Path {
	case summaryPath, childrenPath, diffPath:
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		http.Error(w, "antientropy: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	var (
		body []byte
		err  error
	)
	switch r.URL.Path {
	case summaryPath:
		body, err = s.summary(r.Context(), caller, r.URL.RawQuery)
	case childrenPath:
		body, err = s.children(caller, r)
	case diffPath:
		body, err = s.diff(r.Context(), caller, r)
	}
	if err != nil {
		var he httpError
		if !errors.As(err, &he) {
			he = httpError{http.StatusInternalServerError, err}
		}
		http.Error(w, he.Error(), he.status)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// An httpError is an error with the status to answer it with.
type httpError struct {
	status int
	err    error
}

func (e httpError) Error() string { return e.err.Error() }
func (e httpError) Unwrap() error { return e.err }

func badRequest(err error) error { return httpError{http.StatusBadRequest, err} }

func (s *server) summary(ctx context.Context, caller, rawQuery string) ([]byte, error) {
	depth, ok := strings.CutPrefix(rawQuery, "depth=")
	d, err := strconv.Atoi(depth)
	if !ok || err != nil || len(depth) != 1 || d < 0 || d > MaxDepth {
		return nil, badRequest(fmt.Errorf("antientropy: query %.100q is not depth=0..%d", rawQuery, MaxDepth))
	}
	t, err := s.tree(ctx, caller, d)
	if err != nil {
		return nil, err
	}
	return appendSummary(nil, t.Summary()), nil
}

// tree returns the caller's tree of depth d for a new round: the kept one
// if younger than treeTTL, else a new one.
func (s *server) tree(ctx context.Context, caller string, d int) (*Tree, error) {
	key := treeKey{caller, d, s.src.Version()}
	now := time.Now()
	s.mu.Lock()
	s.evict(now)
	c := s.trees[key]
	if c != nil && (c.built.IsZero() || now.Sub(c.built) < treeTTL) {
		c.used = now
		s.mu.Unlock()
		select {
		case <-c.ready:
			return c.tree, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c = &cachedTree{ready: make(chan struct{}), used: now}
	s.trees[key] = c
	s.mu.Unlock()

	t, err := s.build(ctx, caller, d)
	s.mu.Lock()
	c.tree, c.err, c.built = t, err, time.Now()
	if err != nil && s.trees[key] == c {
		delete(s.trees, key) // the next round tries again
	}
	s.mu.Unlock()
	close(c.ready)
	return t, err
}

func (s *server) build(ctx context.Context, caller string, d int) (*Tree, error) {
	select {
	case s.builds <- struct{}{}:
		defer func() { <-s.builds }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return BuildFiltered(ctx, s.src.Index(), func(site string) bool { return s.src.Shared(caller, site) }, d)
}

// evict forgets trees idle for treeIdle, then the least recently used
// until there is room for one more. Trees being built stay.
func (s *server) evict(now time.Time) {
	for k, c := range s.trees {
		if !c.built.IsZero() && now.Sub(c.used) >= treeIdle {
			delete(s.trees, k)
		}
	}
	for len(s.trees) >= maxTrees {
		var oldest treeKey
		var found bool
		for k, c := range s.trees {
			if !c.built.IsZero() && (!found || c.used.Before(s.trees[oldest].used)) {
				oldest, found = k, true
			}
		}
		if !found {
			return
		}
		delete(s.trees, oldest)
	}
}

// kept returns the caller's tree of depth d with the given root, if kept,
// of whatever version: a round goes on with the tree it started with.
func (s *server) kept(caller string, d int, root uint64) (*Tree, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.trees {
		if k.peer != caller || k.depth != d || c.built.IsZero() || c.tree == nil || c.tree.Root() != root {
			continue
		}
		c.used = time.Now()
		return c.tree, true
	}
	return nil, false
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, httpError{http.StatusRequestEntityTooLarge, fmt.Errorf("antientropy: %w", err)}
		}
		return nil, badRequest(fmt.Errorf("antientropy: reading request: %w", err))
	}
	if int64(len(b)) > limit {
		return nil, httpError{http.StatusRequestEntityTooLarge, fmt.Errorf("antientropy: request over %d bytes", limit)}
	}
	return b, nil
}

func (s *server) children(caller string, r *http.Request) ([]byte, error) {
	b, err := readBody(r, maxChildrenRequest)
	if err != nil {
		return nil, err
	}
	q, err := decodeChildrenRequest(b)
	if err != nil {
		return nil, badRequest(err)
	}
	t, ok := s.kept(caller, q.depth, q.root)
	if !ok {
		return nil, httpError{http.StatusConflict, errTreeChanged}
	}
	hashes, err := t.Children(q.level, q.parents)
	if err != nil {
		return nil, badRequest(err)
	}
	return appendHashes(make([]byte, 0, 1+8*len(hashes)), hashes), nil
}

// errTreeChanged is the error of a round whose tree the server no longer
// keeps.
var errTreeChanged = errors.New("antientropy: the peer's tree changed during the round")

// diff answers which captures of the asked buckets the caller lacks, and
// how many of the caller's the server lacks. It reads the live index, not
// the kept tree: captures written since the tree was built are simply
// found missing too. An answer is bounded: if the captures of all the
// asked buckets do not fit, it answers the buckets that do, from the
// first, and the caller asks again for the rest.
func (s *server) diff(ctx context.Context, caller string, r *http.Request) ([]byte, error) {
	b, err := readBody(r, maxDiffRequest)
	if err != nil {
		return nil, err
	}
	q, err := decodeDiffRequest(b)
	if err != nil {
		return nil, badRequest(err)
	}
	pos := make(map[uint64]int, len(q.buckets)) // bucket → its place in q
	theirs := make(map[uint64]bool)             // caller's fingerprints → seen here
	for i, x := range q.buckets {
		pos[x.bucket] = i
		for _, fp := range x.fps {
			theirs[fp] = false
		}
	}
	lack := make([][]index.Capture, len(q.buckets))
	cutoff := len(q.buckets) // buckets from cutoff on are not answered
	count, size := 0, 0
	err = scanShared(ctx, s.src.Index(), func(site string) bool { return s.src.Shared(caller, site) },
		func(c index.Capture, fp uint64) error {
			i, ok := pos[bucketAt(fp, q.depth)]
			if !ok || i >= cutoff {
				return nil
			}
			if _, ok := theirs[fp]; ok {
				theirs[fp] = true
				return nil
			}
			lack[i] = append(lack[i], c)
			count, size = count+1, size+encodedSize(c)
			for count > maxAnswerCaptures || size > maxAnswerBytes-64 {
				// Give up the last bucket holding captures.
				j := cutoff - 1
				for len(lack[j]) == 0 {
					j--
				}
				if j == 0 {
					return fmt.Errorf("antientropy: bucket %d alone holds more than %d captures or %d bytes the caller lacks; a deeper tree is needed",
						q.buckets[0].bucket, maxAnswerCaptures, maxAnswerBytes)
				}
				for _, c := range lack[j] {
					count, size = count-1, size-encodedSize(c)
				}
				lack[j], cutoff = nil, j
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	a := diffAnswer{answered: cutoff}
	for _, x := range q.buckets[:cutoff] {
		for _, fp := range x.fps {
			if !theirs[fp] {
				a.missingThere++
			}
		}
	}
	for _, l := range lack[:cutoff] {
		a.captures = append(a.captures, l...)
	}
	// In key order, so that front coding shares what it can.
	slices.SortFunc(a.captures, func(x, y index.Capture) int {
		if c := strings.Compare(x.URLKey, y.URLKey); c != 0 {
			return c
		}
		return x.Time.Compare(y.Time)
	})
	version := byte(wireVersion)
	if r.Header.Get(acceptVersion) == strconv.Itoa(diffVersionSimHash) {
		version = diffVersionSimHash
	}
	return a.append(make([]byte, 0, size+64), version)
}
