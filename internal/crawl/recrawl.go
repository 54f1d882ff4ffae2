package crawl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/robots"
	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Dedup is a content-seen test wider than this node's own index: the
// network's, in which every payload digest has an owner that knows where
// the payload was first archived (package dedup). A crawler with a Dedup
// stores a payload archived anywhere in the network as a revisit record
// that points at it.
type Dedup interface {
	// Lookup says where a payload is archived, if anywhere. Given the
	// payload's bytes (nil when the crawler has none, as after a 304), it
	// has the holder prove that it has them. An error (the digest's owner
	// cannot be asked) makes the crawler store the payload: a miss never
	// loses data.
	Lookup(ctx context.Context, digest string, payload []byte) (recrawl.Ref, bool, error)
	// Holds says whether the network still archives the response
	// capture ref names, with this payload digest: the owner's entry
	// for a payload can go with a node that failed while the capture
	// lives on its replicas.
	Holds(ctx context.Context, digest string, ref recrawl.Ref) (bool, error)
	// Stored tells of new response captures once they are durable.
	Stored(caps []index.Capture)
	// Replicated says whether every copy of c, a capture of this node's,
	// has reached its replicas. Only then may a revisit of another site,
	// whose copies go to other nodes, point at it: until then the payload
	// is on this disk alone, and its loss would leave that revisit's
	// copies pointing at nothing.
	Replicated(c index.Capture) bool
}

// revisitOf says which record a capture is to point at instead of storing
// its payload.
type revisitOf struct {
	profile string // warc.ProfileIdenticalPayload or warc.ProfileServerNotModified
	digest  string
	ref     recrawl.Ref
	mime    string // the original's media type (a 304 has none of its own)
	simhash uint64
	ofLast  bool // the URL's last capture, unchanged (else a payload archived before under any URL)
}

// recrawlPumpEvery bounds how long a continuous crawl waits before it
// looks for URLs that fell due.
const recrawlPumpEvery = time.Minute

// recrawlBatch is how many due URLs are queued in one commit.
const recrawlBatch = 4096

// conditional returns the headers that make a fetch of a URL visited before
// conditional on the last capture's validators.
func conditional(prev *recrawl.Entry) http.Header {
	if !hasValidators(prev) {
		return nil
	}
	h := http.Header{}
	if prev.ETag != "" {
		h.Set("If-None-Match", prev.ETag)
	}
	if prev.LastModified != "" {
		h.Set("If-Modified-Since", prev.LastModified)
	}
	return h
}

// confirms says whether a 304's headers h agree with the validators prev
// sent: an ETag that matches If-None-Match (weakly, as RFC 9110 §13.1.2
// has it), a Last-Modified no later than If-Modified-Since. A 304 without
// them agrees; one that names another version does not.
func confirms(prev *recrawl.Entry, h http.Header) bool {
	if etag := h.Get("ETag"); etag != "" && prev.ETag != "" && strings.TrimPrefix(etag, "W/") != strings.TrimPrefix(prev.ETag, "W/") {
		return false
	}
	if lm := h.Get("Last-Modified"); lm != "" && prev.LastModified != "" && lm != prev.LastModified {
		now, err1 := http.ParseTime(lm)
		sent, err2 := http.ParseTime(prev.LastModified)
		return err1 == nil && err2 == nil && !now.After(sent)
	}
	return true
}

// maxValidator is the longest ETag or Last-Modified kept for a revisit
// (real ones are tens of bytes): a hostile server's megabyte would be
// held in every entry read and sent back with every visit.
const maxValidator = 1 << 10

// validator returns v if it is short enough to keep, else "".
func validator(v string) string {
	if len(v) > maxValidator {
		return ""
	}
	return v
}

// cutLength is Entry.Cut for a response: the body bytes it kept when it
// was cut at the size limit, else 0.
func cutLength(truncated string, raw []byte) int64 {
	if truncated != "length" {
		return 0
	}
	end := max(warc.HTTPHeaderEnd(raw), 0)
	return max(int64(len(raw)-end), 1)
}

// withinLimit returns prev as a fetch under a body size limit is to be
// compared with: the last capture cut at a lower limit than this one
// stands for nothing a 304 could keep, and the page is fetched as far as
// the limit now goes.
func withinLimit(prev *recrawl.Entry, limit int64) *recrawl.Entry {
	if prev == nil || prev.Cut == 0 || prev.Cut >= limit {
		return prev
	}
	p := *prev
	p.ETag, p.LastModified = "", ""
	return &p
}

// hasValidators says whether a fetch after prev is conditional.
func hasValidators(prev *recrawl.Entry) bool {
	return prev != nil && prev.Captured() && (prev.ETag != "" || prev.LastModified != "")
}

// payloadStillArchived returns prev as a revisit is to be compared with.
// A URL whose payload this node does not hold (a revisit of a capture on
// another node) has it asked of the network again: a pointer to a capture
// since lost would otherwise pass to every later revisit, even after a
// fetch of the payload whole. The digest's owner names where the payload
// is now; when it names none, the capture pointed at is looked for in the
// network's archive (the owner's entry may have gone with a failed node).
// When the network no longer has the payload, the fetch is unconditional
// and compares with nothing, so the payload is stored; when the network
// cannot be asked, the pointer stays, as good as when it was made. here
// says the payload is this node's own (a single crawler's always is).
func (c *Crawler) payloadStillArchived(ctx context.Context, prev *recrawl.Entry) (_ *recrawl.Entry, here bool) {
	if c.cfg.Dedup == nil || !prev.Captured() || prev.Digest == "" {
		return prev, true
	}
	if held, err := c.holds(ctx, prev.Payload); err == nil && held {
		return prev, true
	}
	ctx, cancel := context.WithTimeout(ctx, dedupWait)
	defer cancel()
	ref, ok, err := c.cfg.Dedup.Lookup(ctx, prev.Digest, nil)
	if err != nil {
		return prev, false
	}
	e := *prev
	if ok && ref.RecordID != "" {
		e.Payload = ref
		return &e, false
	}
	if held, err := c.cfg.Dedup.Holds(ctx, prev.Digest, prev.Payload); err != nil || held {
		return prev, false
	}
	c.cfg.Logger.Info("the payload of the last capture is no longer archived; fetching in full", "url", prev.URL, "digest", prev.Digest)
	e.ETag, e.LastModified, e.Digest = "", "", ""
	return &e, false
}

// holds reports whether this node's index has the capture ref names. A
// ref may give the time to the microsecond (WARC-Refers-To-Date, read
// from a copied revisit), the index to the nanosecond: the capture is
// looked for by record ID around it.
func (c *Crawler) holds(ctx context.Context, ref recrawl.Ref) (bool, error) {
	key, err := urlkey.SURT(ref.URL)
	if err != nil {
		return false, nil
	}
	found := false
	err = index.New(c.db).CapturesBetween(ctx, key, ref.Time.Add(-time.Second), ref.Time.Add(time.Second), false, func(cp index.Capture) (bool, error) {
		found = cp.RecordID == ref.RecordID
		return !found, nil
	})
	return found, err
}

// unchanged says how a fetched response relates to the last capture of its
// URL: a 304 to a conditional request, or a 200 whose payload digest and
// head (headOf) are the last capture's, is a revisit of it; anything else
// is new content (nil).
func unchanged(prev *recrawl.Entry, resp *fetch.Response, digest string, head uint64) *revisitOf {
	if prev == nil || !prev.Captured() {
		return nil
	}
	rv := &revisitOf{digest: prev.Digest, ref: prev.Payload, mime: prev.MIME, simhash: prev.SimHash, ofLast: true}
	switch {
	case resp.StatusCode == http.StatusNotModified && hasValidators(prev):
		rv.profile = warc.ProfileServerNotModified
	case (resp.Truncated == "" || resp.Truncated == "length" && prev.Cut > 0) && !prev.Changed(digest, head) &&
		resp.StatusCode >= 200 && resp.StatusCode < 300 && payloadWorthDeduplicating(resp.Raw):
		rv.profile = warc.ProfileIdenticalPayload
	default:
		return nil
	}
	return rv
}

// headOf is what the response to pageURL answered besides its payload, as
// recrawl.Entry.Head keeps it: its status, media type and, for a
// redirect, its target, resolved as the fetcher does and without session
// IDs (a target that differs only by one at every visit is no change).
func headOf(status int, h http.Header, pageURL string) uint64 {
	var target string
	if loc := h.Get("Location"); loc != "" && status >= 300 && status < 400 {
		if base, err := url.Parse(pageURL); err == nil {
			if lu, err := base.Parse(loc); err == nil {
				target = urlkey.WithoutSessionIDs(lu.String())
			}
		}
	}
	return recrawl.HeadHash(status, mediaType(h, nil), target)
}

// passing says whether a response is an answer of the moment (a server
// error, a request to slow down), which does not stand for the page.
func passing(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}

// noteVisit stages the entry of a leased URL after its visit: what the
// capture cp (nil when nothing was archived) tells of the page, and when to
// come back.
func (c *Crawler) noteVisit(b *pebble.Batch, r *result, cp *index.Capture, now time.Time) error {
	u := r.lease.URL
	key := recrawl.Key(u)
	var old recrawl.Entry
	had := false
	// A URL that is its key's own form (no session ID, parameters in order)
	// and new to the frontier takes the key's entry without a look: any
	// entry there is a variant's, which it replaces (its due key is left
	// for queueDue to drop). Every other visit reads the entry first, so
	// that a variant never takes over its page's.
	if r.lease.Revisit || cp == nil || u != key {
		var err error
		if old, had, err = recrawl.GetKey(b, key); err != nil {
			return err
		}
	}
	policy := c.cfg.Schedules.For(u)
	e := old
	if !had {
		// The first URL of a key names it for its revisits: usually the
		// one without a session ID, which replay lists the page under.
		e = recrawl.Entry{Key: key, URL: u, Depth: r.lease.Depth, Embed: r.lease.Embed,
			Redirects: r.lease.Redirects, OffScopeHops: r.lease.OffScopeHops}
	}
	switch {
	case cp == nil && had && (r.outcome == "error" || r.outcome == "robots" || revisitFailed(r)):
		// A page that cannot be archived (an answer that is not HTTP, a
		// name that no longer resolves) or may not be (robots.txt), or
		// whose revisit failed for a reason that may pass (the host down,
		// perhaps for good): as for a server error, a visit that found no
		// change, which backs off a page that stays so, and keeps its
		// last capture's fields.
		e.State, _ = policy.Next(old.State, now, false)
	case cp == nil && had:
		// Nothing learnt of the page: try again after its interval, within
		// the rules as they are now (a URL queued when they changed was
		// left to take them at this visit).
		e.State = rebound(policy, e.State)
	case cp != nil && r.resp != nil && old.Captured() && passing(r.resp.StatusCode):
		// An error of the moment, archived, but the page is still what
		// its last capture was: a visit that found no change, which
		// backs off a page that answers so for good.
		e.State, _ = policy.Next(old.State, now, false)
	case cp == nil:
		e.State, _ = policy.First(now)
	default:
		head := r.head
		if head == 0 {
			head = old.Head // a 304 answers nothing of its own
		}
		changed := !old.Captured() || old.Changed(cp.Digest, head)
		if old.Captured() {
			e.State, _ = policy.Next(old.State, now, changed && !sameText(&old, cp, head))
		} else {
			e.State, _ = policy.First(now)
		}
		switch code := r.resp.StatusCode; {
		case code == http.StatusNotModified:
			// A 304 may send new validators (RFC 9110 §15.4.5).
			if v := validator(r.resp.Header.Get("ETag")); v != "" {
				e.ETag = v
			}
			if v := validator(r.resp.Header.Get("Last-Modified")); v != "" {
				e.LastModified = v
			}
		case code >= 200 && code < 300 && (r.resp.Truncated == "" || r.resp.Truncated == "length"):
			e.ETag = validator(r.resp.Header.Get("ETag"))
			e.LastModified = validator(r.resp.Header.Get("Last-Modified"))
			e.Cut = cutLength(r.resp.Truncated, r.resp.Raw)
		default:
			// Only a 2xx capture, whole or cut at the size limit, can
			// stand for the page: one cut short by a timeout or a dropped
			// connection would be kept for good by a 304, and servers
			// evaluate preconditions for 2xx responses only (RFC 9110
			// §13.2.1). The next visit fetches in full.
			e.ETag, e.LastModified, e.Cut = "", "", 0
		}
		e.Digest, e.MIME, e.SimHash, e.Head = cp.Digest, cp.MIME, cp.SimHash, head
		if r.revisit != nil {
			e.Payload = r.revisit.ref
		} else {
			e.Payload = refTo(*cp)
		}
		if changed {
			urls := make([]string, len(r.outlinks))
			for i, l := range r.outlinks {
				urls[i] = l.URL
			}
			e.SetLinks(urls)
		}
	}
	interval := e.State.Interval
	if interval <= 0 {
		interval = policy.Default
	}
	e.Due = now.Add(policy.Jitter(u, interval))
	if r.outcome == "retry" && !revisitFailed(r) {
		// The frontier keeps the URL aside and queues it again itself
		// (Frontier.Defer): queued, as the schedule sees it, so that it is
		// not queued twice.
		e.Due = time.Time{}
	}
	var prev *recrawl.Entry
	if had {
		prev = &old
	}
	return recrawl.Put(b, prev, e)
}

// revisitFailed reports a revisit whose fetch failed for a reason that may
// pass. Unlike a URL never archived, which the frontier keeps aside and
// tries again (Frontier.Defer) so that it is not lost, the page is in the
// archive already: its schedule says when to come back, and backs off a
// host gone for good as it does a server error, where the frontier would
// try it again at every run and every hour of a node's, forever.
func revisitFailed(r *result) bool {
	return r.outcome == "retry" && r.lease.Revisit
}

// sameText reports a capture whose bytes differ from the entry's last but
// that shows the page as it was, for its schedule: the same head, and the
// same text (SimHash distance 0: markup, tokens and numbers aside — a
// request ID, a nonce, a visitor count), or an error page still answering
// so (4xx: its body is no content of the page). Such a page is stored
// again, as any new bytes are (or made a revisit of a capture that holds
// them), but backs off as one that did not change, rather than being
// fetched at the schedule's minimum forever. A 304 shows nothing of its own.
func sameText(old *recrawl.Entry, cp *index.Capture, head uint64) bool {
	if old.Head != head || head == 0 || cp.Status == http.StatusNotModified {
		return false
	}
	if cp.Status >= 400 && cp.Status < 500 {
		return true
	}
	return old.SimHash != 0 && cp.SimHash == old.SimHash
}

// rescheduleLease puts a URL that was queued for a revisit but not visited
// (handed to another node, refused) back into the due queue.
func (c *Crawler) rescheduleLease(b *pebble.Batch, l frontier.Lease, now time.Time) error {
	e, ok, err := recrawl.Get(b, l.URL)
	if err != nil || !ok || !e.Due.IsZero() {
		return err
	}
	old := e
	policy := c.cfg.Schedules.For(l.URL)
	e.State = rebound(policy, e.State)
	interval := e.State.Interval
	if interval <= 0 {
		interval = policy.Default
	}
	e.Due = now.Add(policy.Jitter(l.URL, interval))
	return recrawl.Put(b, &old, e)
}

// rebound returns s with its interval within p's bounds.
func rebound(p schedule.Policy, s schedule.State) schedule.State {
	if r, ok := p.Rebound(s); ok {
		return r
	}
	return s
}

// queueDue queues the URLs due by before and returns how many.
func (c *Crawler) queueDue(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		var due, stale []recrawl.Entry
		err := recrawl.Due(c.db, before, func(e recrawl.Entry, isStale bool) bool {
			if isStale {
				stale = append(stale, e)
			} else {
				due = append(due, e)
			}
			return len(due)+len(stale) < recrawlBatch
		})
		if err != nil || len(due)+len(stale) == 0 {
			return total, err
		}
		n := 0
		err = c.Update(ctx, func(b *pebble.Batch) error {
			for _, e := range stale {
				if err := recrawl.DropDue(b, e); err != nil {
					return err
				}
			}
			items := make([]frontier.Item, 0, len(due))
			handedOver := 0
			now := time.Now()
			for _, d := range due {
				e, ok, err := recrawl.GetKey(b, d.Key)
				if err != nil {
					return err
				}
				if !ok || e.Due.IsZero() || e.Due.After(before) {
					continue // queued or rescheduled meanwhile
				}
				switch {
				case c.handedOver(&e):
					// Queued: the crawler leases it, hands it over and puts
					// it back in the due queue (rescheduleLease).
					handedOver++
				case c.owner(e.URL) != "":
					// Another node holds the host now; its schedule is its own,
					// and its copies bring this entry up to date. Keep the
					// entry for when the host comes back, looking again after
					// an interval, an hour at most: an owner behind (the site
					// down, a backlog) may leave, and this node then takes
					// the site over with its entries due as their schedule
					// says, not a whole interval late.
					old := e
					e.State = rebound(c.cfg.Schedules.For(e.URL), e.State)
					e.Due = now.Add(schedule.Jitter(e.URL, notOwnedRecheck(e.State.Interval)))
					if err := recrawl.Put(b, &old, e); err != nil {
						return err
					}
					continue
				}
				if err := recrawl.Take(b, e); err != nil {
					return err
				}
				items = append(items, revisitItem(e))
			}
			n = len(items) - handedOver
			return c.front.Requeue(b, items)
		})
		if err != nil {
			return total, fmt.Errorf("crawl: queue revisits: %w", err)
		}
		total += n
		c.stats.revisitsQueued.Add(int64(n))
		if len(due)+len(stale) < recrawlBatch {
			return total, nil
		}
	}
}

// handedOver reports whether a due entry is a URL to hand over to the node
// that holds its site rather than to keep here: one whose last visit here
// captured nothing (robots.txt refused it, the name did not resolve). No
// copy of a capture brings its entry to that node, which would otherwise
// never visit the URL again, as its links are routed only once new. A
// robots.txt is not: the robots check fetches it there.
func (c *Crawler) handedOver(e *recrawl.Entry) bool {
	return !e.Captured() && !robots.IsFile(e.URL) && c.owner(e.URL) != ""
}

// revisitItem is the frontier item that visits entry e.
func revisitItem(e recrawl.Entry) frontier.Item {
	return frontier.Item{URL: e.URL, Host: urlkey.Host(e.URL), Depth: e.Depth, Embed: e.Embed,
		Redirects: e.Redirects, OffScopeHops: e.OffScopeHops}
}

// HandOverUncaptured queues every URL that handedOver says is to go to
// another node, due or not, for the crawler to hand over as it leases
// them, and returns how many. A node leaving its network calls it once
// it is out of the ring, so that they all go. The entries are read in one
// pass, then queued a batch at a time: each goes once, though the crawler
// puts those it has handed over back in the due queue meanwhile. When the
// crawler is not running (or stops), the error is ErrNotRunning, with the
// number of URLs that stay behind.
func (c *Crawler) HandOverUncaptured(ctx context.Context) (int, error) {
	var keys []string
	err := recrawl.Due(c.db, time.Unix(allDue, 0), func(e recrawl.Entry, stale bool) bool {
		if !stale && c.handedOver(&e) {
			keys = append(keys, e.Key)
		}
		return ctx.Err() == nil
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("crawl: hand over URLs that left no capture: %w", err)
	}
	total := 0
	for batch := range slices.Chunk(keys, recrawlBatch) {
		err := c.Update(ctx, func(b *pebble.Batch) error {
			var items []frontier.Item
			for _, k := range batch {
				e, ok, err := recrawl.GetKey(b, k)
				if err != nil {
					return err
				}
				if !ok || e.Due.IsZero() || !c.handedOver(&e) {
					continue // queued, visited or taken back meanwhile
				}
				if err := recrawl.Take(b, e); err != nil {
					return err
				}
				items = append(items, revisitItem(e))
			}
			total += len(items)
			return c.front.Requeue(b, items)
		})
		if errors.Is(err, ErrNotRunning) {
			return len(keys) - total, err
		}
		if err != nil {
			return total, fmt.Errorf("crawl: hand over URLs that left no capture: %w", err)
		}
	}
	return total, nil
}

// allDue is a Unix time past every entry's due time.
const allDue = 1 << 40

// notOwnedRecheck is how long an entry due on a node that does not hold
// its host waits before queueDue looks at it again: its interval, an hour
// at most.
func notOwnedRecheck(interval time.Duration) time.Duration {
	if interval <= 0 || interval > time.Hour {
		return time.Hour
	}
	return interval
}

// validators returns the ETag and Last-Modified that make the first
// revisit of an imported capture cp conditional: those of its own HTTP
// headers (a revisit's may hold them), or else of orig, the capture that
// holds its payload, when that is of the same URL. Only a whole payload
// may be kept by a 304: none when orig's record is cut short (a revisit's
// own WARC-Truncated is of the payload it leaves out), or cannot be read.
func (c *Crawler) validators(cp, orig index.Capture) (etag, lastModified string) {
	fits := func(r index.Capture) bool {
		return recrawl.Key(r.URL) == recrawl.Key(cp.URL) && r.Status >= 200 && (r.Status < 300 || r.Status == http.StatusNotModified)
	}
	own := orig.RecordID != cp.RecordID // cp is a revisit whose payload orig holds
	if !own && !fits(cp) {
		return "", ""
	}
	wh, oh, err := c.httpHead(orig)
	if err != nil || wh.Get("WARC-Truncated") != "" && orig.Type != warc.TypeRevisit {
		return "", ""
	}
	if own && fits(cp) {
		if _, h, err := c.httpHead(cp); err == nil {
			if etag, lastModified = validator(h.Get("ETag")), validator(h.Get("Last-Modified")); etag != "" || lastModified != "" {
				return etag, lastModified
			}
		}
	}
	if !fits(orig) {
		return "", ""
	}
	return validator(oh.Get("ETag")), validator(oh.Get("Last-Modified"))
}

// httpHead reads the WARC header and HTTP header of capture r's record.
func (c *Crawler) httpHead(r index.Capture) (warc.Header, http.Header, error) {
	return warc.HTTPHeaderAt(c.warcDir, warc.Location{Segment: r.Segment, Offset: r.Offset, Length: r.Length})
}

// holdsWhole reports whether this node's record of capture orig, which
// holds a payload, holds all of it (no WARC-Truncated): a revisit of one
// cut short may not stand for the page at a conditional request, as a 304
// would keep the cut copy for good. A record that cannot be read does not.
func (c *Crawler) holdsWhole(orig index.Capture) bool {
	wh, _, err := c.httpHead(orig)
	return err == nil && wh.Get("WARC-Truncated") == ""
}

// keysKey holds the form of recrawl.Key the entries are stored under:
// keysVersion since paths kept their case and trailing slash (before, they
// took the SURT key's, which made "/dir" and "/dir/" one entry).
const (
	keysKey     = "k/recrawl-keys"
	keysVersion = "2"
)

// rekeyEntries moves the entries stored under an earlier form of
// recrawl.Key to their key now, once per database, and returns how many
// it moved. It costs one read once done.
func (c *Crawler) rekeyEntries(ctx context.Context) (int, error) {
	return c.walkEntriesOnce(ctx, keysKey, keysVersion, recrawl.Rekey)
}

// rulesKey holds the re-crawl rules (Config.Schedules) the archive's URLs
// were last scheduled under.
const rulesKey = "k/recrawl-rules"

// applyRules moves the due times of the URLs whose intervals lie outside
// their rule's bounds, when the rules changed since the last run: a
// narrower --revisit takes effect now, not after visits timed under the
// old one, which could be a month away. It returns how many URLs moved.
func (c *Crawler) applyRules(ctx context.Context) (int, error) {
	return c.walkEntriesOnce(ctx, rulesKey, c.cfg.Schedules.String(), func(b *pebble.Batch, e recrawl.Entry) (bool, error) {
		// Queued URLs (no due time) take the rules at their visit.
		if e.Due.IsZero() {
			return false, nil
		}
		policy := c.cfg.Schedules.For(e.URL)
		state, ok := policy.Rebound(e.State)
		if !ok {
			return false, nil
		}
		old := e
		e.State = state
		e.Due = state.LastVisit.Add(policy.Jitter(e.URL, state.Interval))
		return true, recrawl.Put(b, &old, e)
	})
}

// walkEntriesOnce calls change on every re-crawl entry, in batches, unless
// the database's marker already holds want, and sets it to want with the
// last batch: a pass over every URL that runs once per change of what
// want stands for. Each entry is read again in its commit's batch, since
// a visit or a copy may have changed it since it was listed. It returns
// how many entries change reported changed.
func (c *Crawler) walkEntriesOnce(ctx context.Context, marker, want string, change func(*pebble.Batch, recrawl.Entry) (bool, error)) (int, error) {
	if v, closer, err := c.db.Get([]byte(marker)); err == nil {
		done := string(v) == want
		closer.Close()
		if done {
			return 0, nil
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("crawl: %w", err)
	}
	changed := 0
	for after := ""; ; {
		es, err := recrawl.Entries(c.db, after, recrawlBatch)
		if err != nil {
			return changed, err
		}
		last := len(es) < recrawlBatch
		err = c.Update(ctx, func(b *pebble.Batch) error {
			for _, listed := range es {
				e, ok, err := recrawl.GetKey(b, listed.Key)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				did, err := change(b, e)
				if err != nil {
					return err
				}
				if did {
					changed++
				}
			}
			if last {
				return b.Set([]byte(marker), []byte(want), nil)
			}
			return nil
		})
		if err != nil || last {
			return changed, err
		}
		after = es[len(es)-1].Key
	}
}

// pumpDue queues URLs as they fall due until ctx ends.
func (c *Crawler) pumpDue(ctx context.Context) {
	lastRetry := time.Now() // Open queued them
	for {
		// Visits add entries all the time; looking for the earliest due
		// one is a single seek.
		wait := time.Second
		if next, ok, err := recrawl.Next(c.db); err == nil && ok {
			wait = min(recrawlPumpEvery, max(time.Until(next), time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if _, err := c.queueDue(ctx, time.Now()); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("re-crawl: cannot queue due URLs", "err", err)
		}
		if time.Since(lastRetry) >= retryEvery {
			lastRetry = time.Now()
			if err := c.RequeueDeferred(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("cannot queue again the URLs whose fetch failed", "err", err)
			}
		}
	}
}

// retryEvery is how often a long-running crawl (a node) queues again the
// URLs whose fetch failed for a reason that may pass; a run does it when
// it starts.
const retryEvery = time.Hour

// unscheduledKey is set by Import: the index has captures that may have no
// re-crawl entry yet. The next re-crawl gives them one and deletes it.
const unscheduledKey = "k/unscheduled"

// scheduleFromIndex gives every URL in the index without an entry one due
// now, for an archive made before re-crawl schedules were kept or added to
// by Import: its newest capture is what a revisit compares with. It reads
// the index only when no entry exists or Import has marked it.
func (c *Crawler) scheduleFromIndex(ctx context.Context) (int, error) {
	empty, err := recrawl.Empty(c.db)
	if err != nil {
		return 0, err
	}
	marked := false
	if _, closer, err := c.db.Get([]byte(unscheduledKey)); err == nil {
		closer.Close()
		marked = true
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("crawl: %w", err)
	}
	if !empty && !marked {
		return 0, nil
	}
	now := time.Now()
	n := 0
	b := c.db.NewIndexedBatch()
	defer func() { b.Close() }()
	scheduleURL := func(cp index.Capture) error {
		switch {
		case cp.Type == warc.TypeResource && !strings.HasPrefix(cp.URL, "http://") && !strings.HasPrefix(cp.URL, "https://"):
			return nil // a file or a DNS answer: nothing to fetch
		case cp.Type != warc.TypeResponse && cp.Type != warc.TypeRevisit && cp.Type != warc.TypeResource:
			return nil
		}
		if robots.IsFile(cp.URL) {
			// As in a crawl: robots.txt is fetched by the robots check when
			// its copy expires, not revisited as a page as well.
			return nil
		}
		if !empty {
			if _, ok, err := recrawl.Get(b, cp.URL); err != nil || ok {
				return err // a URL crawled here keeps its schedule
			}
		}
		e := recrawl.Entry{URL: cp.URL, Digest: cp.Digest, MIME: cp.MIME, SimHash: cp.SimHash, Due: now}
		// Last visited when captured, however long ago: a change found
		// at the first revisit then spans that time, not the moments
		// since this scheduling.
		e.State, _ = c.cfg.Schedules.For(cp.URL).First(cp.Time)
		orig := cp
		if cp.Type != warc.TypeRevisit {
			e.Payload = refTo(cp)
		} else if o, ok, err := index.ByDigest(c.db, cp.Digest); err == nil && ok {
			e.Payload, orig = refTo(o), o
		}
		if !e.Captured() {
			e.Digest = "" // nothing to compare with: the revisit fetches in full
		} else {
			e.ETag, e.LastModified = c.validators(cp, orig)
		}
		n++
		if err := recrawl.Put(b, nil, e); err != nil {
			return err
		}
		if b.Len() > 4<<20 {
			if !marked {
				// Committed in pieces, marked with the first: a pass
				// stopped after it resumes at the next run, rather than
				// taking the entries it made for an archive scheduled.
				if err := b.Set([]byte(unscheduledKey), nil, nil); err != nil {
					return fmt.Errorf("crawl: %w", err)
				}
				marked = true
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("crawl: %w", err)
			}
			b.Close()
			b = c.db.NewIndexedBatch()
		}
		return nil
	}
	// The index's URL keys are coarser than re-crawl keys (they fold
	// case, a trailing slash, the scheme, "www."): each URL of a key has
	// its newest capture below 400 scheduled, else its first error.
	urlKey := ""
	newest := map[string]index.Capture{} // re-crawl key → capture
	flush := func() error {
		for _, k := range slices.Sorted(maps.Keys(newest)) {
			if err := scheduleURL(newest[k]); err != nil {
				return err
			}
		}
		clear(newest)
		return nil
	}
	err = index.New(c.db).Range(ctx, "", "", false, func(cp index.Capture) (bool, error) {
		if cp.URLKey != urlKey {
			if err := flush(); err != nil {
				return false, err
			}
			urlKey = cp.URLKey
		}
		k := recrawl.Key(cp.URL)
		if _, ok := newest[k]; cp.Status < 400 || !ok {
			newest[k] = cp
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil && marked {
		err = b.Delete([]byte(unscheduledKey), nil)
	}
	if err != nil {
		return 0, fmt.Errorf("crawl: schedule the archive's URLs: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("crawl: %w", err)
	}
	return n, nil
}
