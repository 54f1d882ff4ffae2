package archive

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// ErrNoOriginal reports a revisit whose payload no capture of the archive
// holds.
var ErrNoOriginal = errors.New("archive: the payload the revisit refers to is not in the archive")

// ErrRevisitLoop reports revisits that name each other in a loop, or in a
// chain of more than MaxRevisitChain: they lead to no payload, and never
// will, unlike a capture named that is missing (which on a network may be
// on a node that is away). It is an ErrNoOriginal too (errors.Is): no
// capture holding the payload is found.
var ErrRevisitLoop error = revisitLoop{}

type revisitLoop struct{}

func (revisitLoop) Error() string        { return "archive: the revisits named lead to no payload" }
func (revisitLoop) Is(target error) bool { return target == ErrNoOriginal }

// ErrChainRecord wraps the error reading a revisit met halfway along a
// chain of revisits: its record is damaged or cannot be had.
var ErrChainRecord = errors.New("archive: a revisit the chain passes through cannot be read")

// Original finds the capture holding the payload of revisit c, whose
// record header is h: the capture of WARC-Refers-To-Target-URI at
// WARC-Refers-To-Date when h names them — which may sit on any node, as
// the network's content-seen test names captures wherever they are — else
// the first capture of c's payload digest on c's node. A revisit named
// instead is followed to the capture it names in turn, and returned in via
// with those after it (see Chains.Resolve). The error wraps ErrNoOriginal
// when no capture holding the payload is found.
func Original(ctx context.Context, a Archive, c index.Capture, h warc.Header) (orig index.Capture, via []index.Capture, err error) {
	return (*Chains)(nil).Resolve(ctx, a, c, h)
}

// Chains remembers where the revisits of chains resolved, for a caller that
// resolves many revisits of one chain (an export of a URL's captures):
// each is then walked once, not once per revisit. Only revisits that are
// part of a chain are remembered, up to maxRemembered of them at a time.
// Safe for concurrent use; a nil *Chains remembers nothing.
type Chains struct {
	mu   sync.Mutex
	ends map[chainLink]chainEnd
}

// maxRemembered bounds the revisits a Chains remembers (a few hundred
// bytes each, the map's own included): past it, it forgets them all and
// starts again, which costs only walks.
const maxRemembered = 1 << 16

// A chainEnd is where a revisit resolved: the capture holding the payload,
// or why none was found (ErrNoOriginal), and how many revisits it took.
type chainEnd struct {
	orig  index.Capture
	err   error
	steps int
}

// NewChains returns an empty Chains.
func NewChains() *Chains { return &Chains{ends: map[chainLink]chainEnd{}} }

// Resolve is Original that also returns the revisits it passed through,
// in order: some tools write each server-not-modified revisit against the
// visit before, itself a revisit, with no payload digest to look the
// payload up by, so that a copy of c resolves only with them. Up to
// MaxRevisitChain revisits are followed, never one twice; an error reading
// one wraps ErrChainRecord. It starts from what cs remembers: from a
// revisit resolved before, the revisits on are not returned again (they
// were then). When the revisits named lead to no payload, c's own payload
// digest may still name one the archive holds, as a digest index (pywb's)
// would find it.
func (cs *Chains) Resolve(ctx context.Context, a Archive, c index.Capture, h warc.Header) (index.Capture, []index.Capture, error) {
	o, via, err := cs.resolve(ctx, a, c, h)
	if errors.Is(err, ErrNoOriginal) && len(via) > 0 && c.Digest != "" {
		if orig, ok, derr := a.ByDigest(ctx, c, c.Digest); derr == nil && ok && orig.Type != warc.TypeRevisit {
			return orig, via, nil
		}
	}
	return o, via, err
}

func (cs *Chains) resolve(ctx context.Context, a Archive, c index.Capture, h warc.Header) (index.Capture, []index.Capture, error) {
	first := c
	followed := map[chainLink]bool{linkOf(c): true}
	var via []index.Capture
	for {
		o, next, named, err := original(ctx, a, c, h)
		if err != nil || next == nil {
			cs.remember(first, via, chainEnd{orig: o, err: err})
			return o, via, err
		}
		if end, ok := cs.lookup(*next); ok {
			via = append(via, *next)
			if len(via)+end.steps > MaxRevisitChain {
				// Too long from first, not from those it passed.
				return index.Capture{}, via, tooLong()
			}
			cs.remember(first, via, end)
			return end.orig, via, end.err
		}
		if followed[linkOf(*next)] {
			// A revisit named again by WARC-Refers-To is a loop, for good;
			// one found again by digest is the first capture of the payload
			// here, which is then held only by a node that may be away.
			err := fmt.Errorf("%w: the capture named is another revisit, and the payload is stored nowhere else", ErrNoOriginal)
			if named {
				err = fmt.Errorf("%w: they name each other in a loop, back to %s at %s", ErrRevisitLoop, next.URL, next.Timestamp14())
			}
			cs.remember(first, via, chainEnd{err: err})
			return index.Capture{}, via, err
		}
		if len(via) == MaxRevisitChain {
			return index.Capture{}, via, tooLong()
		}
		followed[linkOf(*next)] = true
		rec, err := a.Record(ctx, *next)
		if err != nil {
			return index.Capture{}, via, fmt.Errorf("%w: %s at %s: %w", ErrChainRecord, next.URL, next.Timestamp14(), err)
		}
		if rec.Type() != warc.TypeRevisit {
			// The index was wrong: the record holds a payload.
			o := *next
			o.Type = rec.Type()
			cs.remember(first, via, chainEnd{orig: o})
			return o, via, nil
		}
		via = append(via, *next)
		c, h = *next, rec.Header
	}
}

func tooLong() error {
	return fmt.Errorf("%w: more than %d revisits in a row name each other", ErrRevisitLoop, MaxRevisitChain)
}

func (cs *Chains) lookup(c index.Capture) (chainEnd, bool) {
	if cs == nil {
		return chainEnd{}, false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	end, ok := cs.ends[linkOf(c)]
	return end, ok
}

// remember records that first, and each revisit of via after it in turn,
// resolved to end (end.steps revisits after via's last). Only what is so
// whenever asked is kept: a payload found, or none in the archive — not a
// record or a node that could not be read.
func (cs *Chains) remember(first index.Capture, via []index.Capture, end chainEnd) {
	if cs == nil || len(via) == 0 || end.err != nil && !errors.Is(end.err, ErrNoOriginal) {
		return // a revisit naming its payload's capture is one step anyway
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.ends)+len(via)+1 > maxRemembered {
		clear(cs.ends)
	}
	for i := len(via) - 1; i >= 0; i-- {
		cs.ends[linkOf(via[i])] = end
		end.steps++
	}
	cs.ends[linkOf(first)] = end
}

// MaxRevisitChain bounds the revisits Resolve follows from one revisit:
// years of daily visits, each a 304 naming the one before.
const MaxRevisitChain = 4096

// chainLink identifies a capture in a chain of revisits, whatever its index
// entry holds (an import may give no record ID).
type chainLink struct {
	key, id, segment string
	offset           int64
	time             int64
}

func linkOf(c index.Capture) chainLink {
	return chainLink{c.URLKey, c.RecordID, c.Segment, c.Offset, c.Time.UnixNano()}
}

// original is one step of Original: the capture holding c's payload, or
// else next, a revisit that c names (by WARC-Refers-To: named) or that is
// the first capture of its digest.
func original(ctx context.Context, a Archive, c index.Capture, h warc.Header) (o index.Capture, next *index.Capture, named bool, err error) {
	if uri := h.Get("WARC-Refers-To-Target-URI"); uri != "" {
		when, derr := warc.ParseDate(h.Get("WARC-Refers-To-Date"))
		if key, kerr := urlkey.SURT(uri); derr == nil && kerr == nil {
			o, ok, revisit, err := referredTo(ctx, a, key, uri, when, c.Digest)
			if err != nil {
				// The node holding the capture named may be away while the
				// revisit's own node holds the payload too (stored again
				// after the capture named was reported lost).
				if c.Digest != "" {
					if orig, ok, derr := a.ByDigest(ctx, c, c.Digest); derr == nil && ok && orig.Type != warc.TypeRevisit {
						return orig, nil, false, nil
					}
				}
				return index.Capture{}, nil, false, err
			}
			if ok {
				return o, nil, false, nil
			}
			next, named = revisit, revisit != nil
		}
	}
	if c.Digest != "" && !named {
		// A revisit named is followed even when the digest would lead
		// to the payload at once: an export takes the chain along, for
		// a tool that resolves the revisit as its record names it.
		orig, ok, err := a.ByDigest(ctx, c, c.Digest)
		if err != nil {
			return index.Capture{}, nil, false, err
		}
		if ok && orig.Type != warc.TypeRevisit {
			return orig, nil, false, nil
		}
		if ok && next == nil {
			next = &orig
		}
	}
	if next == nil {
		return index.Capture{}, nil, false, ErrNoOriginal
	}
	return index.Capture{}, next, named, nil
}

// Named finds the capture a revisit names by WARC-Refers-To-Target-URI uri
// and WARC-Refers-To-Date when, holding the payload with this digest (when
// known), as replay resolves it (see referredTo): ok with the capture that
// holds a payload, else the revisit named, if any.
func Named(ctx context.Context, a Archive, uri string, when time.Time, digest string) (found index.Capture, ok bool, revisit *index.Capture, err error) {
	key, err := urlkey.SURT(uri)
	if err != nil {
		return index.Capture{}, false, nil, nil // names no capture an index could hold
	}
	return referredTo(ctx, a, key, uri, when, digest)
}

// referredTo finds the capture of uri (URL key key) taken at when, holding
// the payload with this digest (when known). WARC dates may have only
// second precision, and one URL key covers several URLs, which a site's
// redirects between them fetch within one second: the capture at the
// exact time is preferred, then the one of uri itself; without a digest to
// vouch for its payload, a capture that is neither is not taken. When a
// revisit fits better than any response, or none fits, revisit is it: the
// capture named, which holds no payload.
func referredTo(ctx context.Context, a Archive, key, uri string, when time.Time, digest string) (found index.Capture, ok bool, revisit *index.Capture, err error) {
	canon, cerr := urlkey.Canonical("", uri)
	if cerr != nil {
		canon = uri
	}
	sec := when.Truncate(time.Second)
	best, bestRevisit := -1, 0
	// Only the second named is read: a chain of revisits takes a step per
	// capture of the URL, which a scan of all its captures would make
	// quadratic.
	err = a.CapturesBetween(ctx, key, sec, sec.Add(time.Second-1), false, func(o index.Capture) (bool, error) {
		if digest != "" && o.Digest != "" && o.Digest != digest {
			return true, nil
		}
		score := 0
		// A date to the microsecond (as this crawler writes them) names a
		// capture indexed to the nanosecond. A date to the second names
		// none exactly: import moves captures of one second apart by
		// nanoseconds, and the first of them, on the second, may be
		// another URL of the key (a redirect to the page).
		if when.Nanosecond() != 0 && (o.Time.Equal(when) || o.Time.Truncate(time.Microsecond).Equal(when)) {
			score += 2
		}
		if o.URL == canon || o.URL == uri {
			score++
		}
		if score == 0 && digest == "" {
			return true, nil // another URL of the key, at another instant: any payload
		}
		if o.Type == warc.TypeRevisit {
			if score > bestRevisit {
				revisit, bestRevisit = &o, score
			}
			return true, nil
		}
		if score > best {
			found, best = o, score
		}
		return true, nil
	})
	if bestRevisit > best {
		return index.Capture{}, false, revisit, err
	}
	return found, best >= 0, nil, err
}

// Standing returns the capture whose status and headers a server-not-
// modified revisit c says still stand (RFC 9111 §4.3.4): the first capture
// along the revisits it names (via, as Resolve returns them) that is not
// itself a 304, else c's URL's last capture before c with c's payload that
// is not (of c's URL itself: other URLs share its key, /Route and /route).
// The capture holding the payload is not it: it may be of another URL, or
// an earlier answer of this one with the same bytes (a 404 the page's 200
// repeats). ok is false when none is found, and the payload's capture
// stands.
func Standing(ctx context.Context, a Archive, c index.Capture, via []index.Capture) (st index.Capture, ok bool, err error) {
	for _, v := range via {
		if v.Status != http.StatusNotModified {
			return v, true, nil
		}
	}
	if c.Digest == "" {
		return index.Capture{}, false, nil
	}
	err = a.CapturesBetween(ctx, c.URLKey, time.Time{}, c.Time, true, func(o index.Capture) (bool, error) {
		if o.Time.Before(c.Time) && o.URL == c.URL && o.Digest == c.Digest && o.Status != http.StatusNotModified {
			st, ok = o, true
			return false, nil
		}
		return true, nil
	})
	return st, ok && err == nil, err
}
