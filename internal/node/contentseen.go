package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/dedup"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/replicate"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// contentSeen gives the crawler the network's content-seen test: a payload
// archived by any node is stored as a revisit record that points at it.
//
// The digest's owner says where the payload was first archived, but not
// whether it is still there: a capture can be lost with its disk, and a
// faulty peer can name one that never was, or answer for a site it owns
// that it holds one. Before the crawler drops a payload it has fetched,
// the capture named must be in the archive, and a node holding it must
// prove, over a fresh nonce, that it has the payload's bytes
// (archive.PayloadProof); a payload whose capture fails either is stored
// again, and its new capture replaces the stale entry, so that later
// copies point at it.
//
// A new payload is registered only once its capture's copies have reached
// its replicas: until then the capture is on one disk, whose loss would
// take with it the payload of every revisit other nodes made meanwhile,
// however many copies those have. One whose copy could not be sent is
// never registered.
type contentSeen struct {
	c      *dedup.Client
	arc    provingArchive                         // the network's captures
	copies func(c index.Capture) replicate.Copies // where c's copies stand (nil: none are made)
	log    *slog.Logger

	mu       sync.Mutex
	verified map[string]verifiedRef // digest → a hit found in the archive lately
	stale    map[string]string      // digest → the record ID of a hit not archived, until its payload is stored
	waiting  []registration         // new payloads whose copies are on their way

	notArchived atomic.Uint64 // hits whose capture was not found
	unproven    atomic.Uint64 // hits whose holder did not prove it has the payload
	unheld      atomic.Uint64 // registrations given up: too many waiting, or a copy given up
}

// registration is a new payload to register: its capture, and the record
// ID of the stale entry it replaces, if any.
type registration struct {
	capture index.Capture
	stale   string
}

// maxWaiting bounds the registrations waiting for their copies; beyond
// it, new ones are given up (which costs duplicates later, never data).
const maxWaiting = 1 << 16

// provingArchive is the archive contentSeen looks captures up in, whose
// holders prove they have a payload (archive.Network, archive.Local).
type provingArchive interface {
	archive.Archive
	ProvePayload(ctx context.Context, c index.Capture, payload []byte) (bool, error)
}

type verifiedRef struct {
	ref recrawl.Ref
	at  time.Time
	// proven is the SHA-256 of the payload a holder proved it has, zero
	// if none was proved: a later payload with the same (SHA-1) digest is
	// trusted only if it is the same.
	proven [sha256.Size]byte
}

// A hit found in the archive is trusted again for verifiedFor without a
// look; at most maxVerified are remembered (a popular script is asked for
// on every site, most payloads once).
const (
	verifiedFor = 10 * time.Minute
	maxVerified = 4096
)

func newContentSeen(c *dedup.Client, arc provingArchive, copies func(index.Capture) replicate.Copies, log *slog.Logger) *contentSeen {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &contentSeen{c: c, arc: arc, copies: copies, log: log, verified: make(map[string]verifiedRef), stale: make(map[string]string)}
}

func (s *contentSeen) Lookup(ctx context.Context, digest string, payload []byte) (recrawl.Ref, bool, error) {
	found, ok, err := s.c.Lookup(ctx, digest)
	if err != nil || !ok {
		return recrawl.Ref{}, false, err
	}
	ref := recrawl.Ref{URL: found.URL, Time: found.Time, RecordID: found.RecordID}
	now := time.Now()
	s.mu.Lock()
	v, seen := s.verified[digest]
	s.mu.Unlock()
	var sum [sha256.Size]byte
	if payload != nil {
		sum = sha256.Sum256(payload)
	}
	if seen && v.ref == ref && now.Sub(v.at) < verifiedFor && (payload == nil || v.proven == sum) {
		return ref, true, nil
	}
	c, held, err := s.find(ctx, digest, ref)
	if err != nil {
		return recrawl.Ref{}, false, fmt.Errorf("node: is the capture of %s still archived: %w", digest, err)
	}
	if !held {
		s.notArchived.Add(1)
		s.forget(digest, ref)
		return recrawl.Ref{}, false, nil
	}
	if payload != nil {
		proven, err := s.arc.ProvePayload(ctx, c, payload)
		if err != nil {
			return recrawl.Ref{}, false, fmt.Errorf("node: does a holder of %s have its payload: %w", digest, err)
		}
		if !proven {
			s.unproven.Add(1)
			holder := c.Node
			if holder == "" {
				holder = "this node"
			}
			s.log.Warn("node: no holder of a content-seen hit's capture proved it has the payload; storing it", "digest", digest,
				"holder", holder, "url", ref.URL, "record", ref.RecordID)
			s.forget(digest, ref)
			return recrawl.Ref{}, false, nil
		}
	}
	s.mu.Lock()
	if len(s.verified) >= maxVerified {
		clear(s.verified)
	}
	s.verified[digest] = verifiedRef{ref: ref, at: now, proven: sum}
	s.mu.Unlock()
	return ref, true, nil
}

// forget marks the registry's entry for digest, naming ref, as stale:
// the payload's next capture here replaces it.
func (s *contentSeen) forget(digest string, ref recrawl.Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.verified, digest)
	if len(s.stale) >= maxVerified {
		clear(s.stale) // a replacement forgotten costs a later duplicate
	}
	s.stale[digest] = ref.RecordID
}

// Holds reports whether the network's archive has the response capture
// ref names, with this payload digest.
func (s *contentSeen) Holds(ctx context.Context, digest string, ref recrawl.Ref) (bool, error) {
	_, held, err := s.find(ctx, digest, ref)
	return held, err
}

// find returns the response capture ref names, with this payload digest,
// as the network's archive has it (Node naming its holder).
func (s *contentSeen) find(ctx context.Context, digest string, ref recrawl.Ref) (index.Capture, bool, error) {
	key, err := urlkey.SURT(ref.URL)
	if err != nil {
		return index.Capture{}, false, nil // names no URL: nothing to point at
	}
	var found index.Capture
	held := false
	err = s.arc.CapturesBetween(ctx, key, ref.Time.Add(-time.Second), ref.Time.Add(time.Second), false, func(c index.Capture) (bool, error) {
		held = c.RecordID == ref.RecordID && c.Digest == digest && c.Type == warc.TypeResponse
		found = c
		return !held, nil
	})
	return found, held, err
}

func (s *contentSeen) Stored(caps []index.Capture) {
	ready := make([]registration, 0, len(caps))
	s.mu.Lock()
	for _, c := range caps {
		if c.Digest == "" {
			continue
		}
		r := registration{capture: c}
		if stale, ok := s.stale[c.Digest]; ok {
			delete(s.stale, c.Digest)
			r.stale = stale
		}
		switch s.copiesOf(c) {
		case replicate.CopiesArrived:
			ready = append(ready, r)
		case replicate.CopiesQueued:
			if len(s.waiting) < maxWaiting {
				s.waiting = append(s.waiting, r)
				continue
			}
			s.giveUp(r)
		default:
			s.giveUp(r)
		}
	}
	s.mu.Unlock()
	s.register(ready)
}

// Replicated says whether every copy of c has reached its replicas.
func (s *contentSeen) Replicated(c index.Capture) bool {
	return s.copiesOf(c) == replicate.CopiesArrived
}

// giveUp drops a registration; the stale entry it was to replace stays
// known, for the payload's next capture here to replace. s.mu is held.
func (s *contentSeen) giveUp(r registration) {
	s.unheld.Add(1)
	if r.stale != "" && len(s.stale) < maxVerified {
		s.stale[r.capture.Digest] = r.stale
	}
}

// copiesOf says where c's copies stand.
func (s *contentSeen) copiesOf(c index.Capture) replicate.Copies {
	if s.copies == nil {
		return replicate.CopiesArrived
	}
	return s.copies(c)
}

// registerReplicated registers the waiting payloads whose copies have all
// arrived, and gives up those one of whose copies was.
func (s *contentSeen) registerReplicated() {
	s.mu.Lock()
	var ready []registration
	s.waiting = slices.DeleteFunc(s.waiting, func(r registration) bool {
		switch s.copiesOf(r.capture) {
		case replicate.CopiesQueued:
			return false
		case replicate.CopiesArrived:
			ready = append(ready, r)
		default:
			s.giveUp(r)
		}
		return true
	})
	s.mu.Unlock()
	s.register(ready)
}

// registerEvery is how often registerReplicated looks at the waiting
// payloads: replication takes about as long.
const registerEvery = time.Second

// registerLoop runs registerReplicated until ctx is done.
func (s *contentSeen) registerLoop(ctx context.Context) {
	t := time.NewTicker(registerEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.registerReplicated()
		}
	}
}

func (s *contentSeen) register(rs []registration) {
	refs := make([]dedup.Ref, 0, len(rs))
	for _, r := range rs {
		c := r.capture
		ref := dedup.Ref{Digest: c.Digest, URL: c.URL, Time: c.Time, RecordID: c.RecordID}
		if r.stale != "" {
			s.c.Replace(ref, r.stale)
			continue
		}
		refs = append(refs, ref)
	}
	if len(refs) > 0 {
		s.c.Register(refs)
	}
}

// digestOwner is the node that keeps the registry entry of a payload
// digest: the ring places digests as it places sites.
func (n *Node) digestOwner(digest string) (string, bool) {
	o, ok := n.members.Ring().Owner(digest)
	return o.ID, ok
}

// registryRechecks is how many anti-entropy rounds after a ring change
// hand the registry over again: peers whose view of the ring lagged may
// have registered payloads here that this node no longer owns.
const registryRechecks = 2

// registryPasses counts the registry hand-overs still wanted.
type registryPasses struct {
	mu   sync.Mutex
	left int
}

// handOverRegistry moves the content-seen registry's entries for digests
// other nodes now own to them. After a ring change (ringChanged) it asks
// for registryRechecks more passes, one per anti-entropy round; a pass
// that leaves entries behind (an owner unreachable) asks for one more.
// Until an entry arrives, a lookup of it misses, which costs a duplicate,
// never data.
func (n *Node) handOverRegistry(ctx context.Context, ringChanged bool) {
	err := n.moveRegistry(ctx, n.digestOwner)
	p := &n.registryPasses
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ringChanged:
		p.left = registryRechecks
	case err == nil:
		p.left = max(p.left-1, 0)
	default:
		p.left = max(p.left, 1) // a failed pass does not count
	}
}

// moveRegistry runs one hand-over of the content-seen registry to the
// digests' owners as owner names them, logs what it did, and returns its
// error: what does not arrive costs a duplicate later, never data.
func (n *Node) moveRegistry(ctx context.Context, owner func(digest string) (string, bool)) error {
	moved, err := n.dedup.HandOver(ctx, owner)
	if moved > 0 {
		n.log.Info("node: handed content-seen registry entries to their new owners", "entries", moved)
	}
	if err != nil && ctx.Err() == nil {
		n.log.Warn("node: handing the content-seen registry over", "moved", moved, "err", err)
	}
	return err
}

// registryPassWanted reports whether an anti-entropy round should hand
// the registry over again.
func (n *Node) registryPassWanted() bool {
	n.registryPasses.mu.Lock()
	defer n.registryPasses.mu.Unlock()
	return n.registryPasses.left > 0
}

// sendDedup posts a content-seen request to a member.
func (n *Node) sendDedup(ctx context.Context, id, path string, body []byte) ([]byte, error) {
	addr, ok := n.resolve(id)
	if !ok {
		return nil, fmt.Errorf("node: member %.16s is not live", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	resp, err := n.client.Do(ctx, addr, id, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, dedup.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return nil, fmt.Errorf("node: %s: %w: %s: %.200s", path, dedup.ErrRefused, resp.Status, bytes.TrimSpace(data))
	default:
		return nil, fmt.Errorf("node: %s: %s: %.200s", path, resp.Status, bytes.TrimSpace(data))
	}
	if len(data) > dedup.MaxBodyBytes {
		return nil, fmt.Errorf("node: %s: answer over %d bytes", path, dedup.MaxBodyBytes)
	}
	return data, nil
}

// stats are the content-seen test's figures for Status.
func (s *contentSeen) stats() ContentSeenStats {
	d := s.c.Stats()
	s.mu.Lock()
	waiting := len(s.waiting)
	s.mu.Unlock()
	return ContentSeenStats{
		AwaitingCopies: waiting,
		Lookups:        d.Lookups, Hits: d.Hits, Requests: d.Requests, Registered: d.Registered,
		Queued: d.Queued, Dropped: d.Dropped + s.unheld.Load(), Errors: d.Errors, NotArchived: s.notArchived.Load(), Unproven: s.unproven.Load(),
		HandedOver: d.HandedOver,
	}
}
