package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/robots"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// result is what a worker hands the committer: a fetched capture to archive
// with the links to queue, or a lease that ends without a capture.
type result struct {
	lease      frontier.Lease
	hasLease   bool // false for robots.txt captures, which have no queue entry
	resp       *fetch.Response
	record     *warc.Record              // resp's response record, digests computed by the worker
	urlKey     string                    // resp's SURT key
	companions []*warc.Record            // its request record, and metadata record when there are outlinks (concurrent to record)
	outlinks   []extract.Outlink         // everything found, for the metadata record
	queue      []frontier.Item           // the in-scope subset to add to the frontier
	outcome    string                    // why there is no capture: "robots", "error", "unanswered", "retry", "forbidden", "forward"
	forward    string                    // the node the lease is handed to, for "forward"
	ack        chan<- error              // for Submit, Accept and AddSeeds: told when committed
	seeds      []string                  // seeds to record (Submit, Accept, AddSeeds)
	queueSeeds bool                      // queue seeds too (Submit)
	keep       bool                      // queue here whoever owns the host (Accept)
	update     func(*pebble.Batch) error // staged into the commit's batch (Update)
	refused    error                     // what update answered instead (a refusal), for its ack
	copies     []Copy                    // records from other nodes (Store)
	copyIDs    []string                  // their record IDs
	copyFacts  []copyFacts               // what their records tell (Store)
	stored     chan<- int                // told how many copies were new (Store), or records moved (Compact)
	move       *relocation               // records carried over from a segment being compacted
	revisit    *revisitOf                // the capture is a revisit of this record
	simhash    uint64                    // of an HTML page's text
	head       uint64                    // headOf the response; 0 for a 304, which answers nothing of its own
	// payloadHere says the last capture's payload, prev's, is this node's
	// own (payloadStillArchived): no holder elsewhere has to prove it.
	payloadHere bool
}

// visit is a leased URL's request: the robots.txt check, then the fetch,
// conditional when the URL is queued for a revisit. The result says why
// there is no capture when resp is nil.
func (c *Crawler) visit(ctx context.Context, l frontier.Lease) (r result, resp *fetch.Response, prev *recrawl.Entry) {
	r = result{lease: l, hasLease: true}
	log := urlLog{c.cfg.Logger, l.URL}
	// A URL queued for a revisit is compared with its last visit; a URL
	// new to the frontier is fetched whole.
	if l.Revisit {
		e, ok, err := recrawl.Get(c.db, l.URL)
		if err != nil {
			log.Error("re-crawl entry unreadable; fetching in full", "err", err)
		} else if ok {
			prev = &e
		}
	}
	if c.cfg.Recover != nil {
		var since time.Time
		if prev != nil {
			since = prev.State.LastVisit
		}
		if c.cfg.Recover(ctx, l.URL, since) {
			c.stats.recovered.Add(1)
			r.outcome = "recovered"
			return r, nil, nil
		}
	}
	if c.robots != nil {
		d, err := c.robots.Check(ctx, l.URL)
		if err != nil {
			// Only a cancelled context ends up here; the URL stays queued.
			r.outcome = "cancelled"
			return r, nil, nil
		}
		if d.CrawlDelay > 0 {
			c.front.SetHostDelay(l.Host, d.CrawlDelay)
		}
		if !d.Allowed && errors.Is(d.Err, fetch.ErrForbiddenAddress) {
			log.Warn("fetch refused", "err", d.Err)
			c.stats.errors.Add(1)
			c.stats.forbidden.Add(1)
			r.outcome = "forbidden"
			return r, nil, nil
		}
		if !d.Allowed && (fetch.Transient(d.Err) || errors.Is(d.Err, robots.ErrServerError)) {
			// The host is down, not disallowing: RFC 9309 has the URL
			// wait, not dropped.
			log.Warn("robots.txt unreachable; the URL is tried again later", "err", d.Err)
			c.stats.errors.Add(1)
			r.outcome = "retry"
			return r, nil, nil
		}
		if !d.Allowed {
			log.Debug("robots.txt disallows", "reason", d.Reason)
			c.stats.robots.Add(1)
			r.outcome = "robots"
			return r, nil, nil
		}
	}
	if prev != nil {
		prev, r.payloadHere = c.payloadStillArchived(ctx, prev)
	}
	prev = withinLimit(prev, c.cfg.MaxBodySize)
	resp, err := c.fetcher.Fetch(ctx, fetch.Request{URL: l.URL, Header: conditional(prev)})
	if err == nil && resp.StatusCode == http.StatusNotModified && hasValidators(prev) && !confirms(prev, resp.Header) {
		// A server that judged by the date alone while its ETag moved on
		// (RFC 9111 §4.3.4: such a 304 freshens nothing): the page may
		// have changed, and is fetched whole, compared by its payload.
		log.Warn("304 Not Modified names other validators than were sent; fetching in full",
			"etag", resp.Header.Get("ETag"), "last-modified", resp.Header.Get("Last-Modified"))
		p := *prev
		p.ETag, p.LastModified = "", ""
		prev = &p
		// A second request of the lease, as polite as the next lease to
		// the host would be.
		t := time.NewTimer(c.front.HostDelay(l.Host))
		select {
		case <-ctx.Done():
			t.Stop()
			r.outcome = "cancelled"
			return r, nil, nil
		case <-t.C:
		}
		resp, err = c.fetcher.Fetch(ctx, fetch.Request{URL: l.URL})
	}
	if err != nil {
		if ctx.Err() != nil {
			r.outcome = "cancelled"
			return r, nil, nil
		}
		c.stats.errors.Add(1)
		switch {
		case errors.Is(err, fetch.ErrForbiddenAddress):
			c.stats.forbidden.Add(1)
			r.outcome = "forbidden"
			log.Warn("fetch failed", "err", err)
		case fetch.Transient(err):
			r.outcome = "retry"
			log.Warn("fetch failed; the URL is tried again later", "err", err)
		default:
			r.outcome = "error"
			log.Warn("fetch failed", "err", err)
		}
		return r, nil, nil
	}
	return r, resp, prev
}

// process turns a visit's response into the result to commit: its WARC
// records, and the links to queue.
func (c *Crawler) process(ctx context.Context, r result, resp *fetch.Response, prev *recrawl.Entry) result {
	log := urlLog{c.cfg.Logger, r.lease.URL}
	r = c.examine(ctx, r, resp, prev, log)
	if r.resp != nil {
		// The capture's other records are built here, in parallel, not
		// by the committer.
		if err := r.prepare(); err != nil {
			log.Warn("unarchivable response", "err", err)
			c.stats.errors.Add(1)
			return result{lease: r.lease, hasLease: true, outcome: "error"}
		}
	}
	return r
}

// examine makes the result of a response: its WARC record, or a revisit of
// prev when nothing changed, and the links to queue.
func (c *Crawler) examine(ctx context.Context, r result, resp *fetch.Response, prev *recrawl.Entry, log urlLog) result {
	if resp.StatusCode == http.StatusNotModified && !hasValidators(prev) {
		// Nothing was asked to be compared: a 304 here says nothing of
		// the page, and archived it would replay as an empty answer. A
		// cache in the way may answer so for a while: the page is tried
		// again at its interval, not backed off as one that fails.
		log.Warn("fetch failed", "err", "304 Not Modified to an unconditional request")
		c.stats.errors.Add(1)
		r.outcome = "unanswered"
		return r
	}
	var err error
	if r.record, err = warc.NewFetchedResponse(resp.URL, resp.Start, resp.Raw); err != nil {
		log.Warn("unarchivable response", "err", err)
		c.stats.errors.Add(1)
		r.outcome = "error"
		return r
	}
	r.resp = resp
	if resp.DecodeError != nil {
		log.Warn("content decoding", "err", resp.DecodeError)
	}
	if resp.Truncated != "" {
		log.Warn("response truncated", "why", resp.Truncated, "bytes", len(resp.Raw))
	}
	digest := r.record.Header.Get("WARC-Payload-Digest")
	if resp.StatusCode != http.StatusNotModified {
		r.head = headOf(resp.StatusCode, resp.Header, resp.URL)
	}
	r.revisit = unchanged(prev, resp, digest, r.head)
	asked := false
	if rv := r.revisit; rv != nil && rv.profile == warc.ProfileIdenticalPayload && !r.payloadHere {
		// The last payload is on another node, found in the network's
		// index only: with the payload in hand, its holder proves it has
		// those bytes before they are dropped, as for any payload.
		asked = true
		if elsewhere := c.seenElsewhere(ctx, digest, resp); elsewhere != nil {
			rv.ref = elsewhere.ref
		} else {
			r.revisit = nil
		}
	}
	if r.revisit != nil {
		// The page is as it was: nothing new to store or to follow.
		r.simhash = r.revisit.simhash
		return r
	}
	if !asked {
		r.revisit = c.seenElsewhere(ctx, digest, resp)
	}
	r.outlinks, r.simhash = c.extract(resp, log.Warn)
	r.queue = c.follow(r.lease.Item, mediaType(resp.Header, nil) == "text/css", r.outlinks)
	if prev != nil && prev.Captured() {
		// A changed page: its links that were there before were routed then.
		r.queue = slices.DeleteFunc(r.queue, func(it frontier.Item) bool { return prev.HasLink(recrawl.LinkHash(it.URL)) })
	}
	return r
}

// prepare computes what the committer needs of a result with a response
// and can be known before it: the SURT key, and the request and metadata
// records, concurrent to r.record (a revisit the committer makes instead
// takes r.record's ID).
func (r *result) prepare() error {
	resp := r.resp
	key, err := urlkey.SURT(resp.URL)
	if err != nil {
		return fmt.Errorf("surt: %w", err)
	}
	r.urlKey = key
	req := warc.NewRequest(resp.URL, resp.Start, resp.RawRequest)
	req.Header.Set("WARC-Concurrent-To", r.record.ID())
	if resp.IP != "" {
		req.Header.Set("WARC-IP-Address", resp.IP)
	}
	r.companions = []*warc.Record{req}
	if len(r.outlinks) > 0 {
		meta := warc.NewMetadata(resp.URL, resp.Start, append(hopFields(r.lease.Item), outlinkFields(r.outlinks)...))
		meta.Header.Set("WARC-Concurrent-To", r.record.ID())
		r.companions = append(r.companions, meta)
	}
	return nil
}

// dedupWait bounds how long a worker waits for the network's content-seen
// answer.
const dedupWait = 2 * time.Second

// seenElsewhere returns, for a crawler with a Dedup, the record to point
// at when a payload new to this URL is archived already: by this node (its
// digest index), or anywhere in the network. (Without one, the committer's
// look at the digest index is enough.)
func (c *Crawler) seenElsewhere(ctx context.Context, digest string, resp *fetch.Response) *revisitOf {
	if c.cfg.Dedup == nil || digest == "" || resp.Truncated != "" || !payloadWorthDeduplicating(resp.Raw) {
		return nil
	}
	rv := &revisitOf{profile: warc.ProfileIdenticalPayload, digest: digest}
	if first, ok, err := index.ByDigest(c.db, digest); err == nil && ok && c.mayPointAt(resp.URL, first) {
		rv.ref = refTo(first)
		return rv
	}
	// An owner slow to answer costs a stored duplicate, not a stalled
	// worker.
	ctx, cancel := context.WithTimeout(ctx, dedupWait)
	defer cancel()
	payload, _ := warc.HTTPPayload(resp.Raw)
	ref, ok, err := c.cfg.Dedup.Lookup(ctx, digest, payload)
	if err != nil {
		c.cfg.Logger.Debug("content-seen test unavailable; storing the payload", "url", resp.URL, "err", err)
		return nil
	}
	if !ok || ref.RecordID == "" {
		return nil
	}
	rv.ref = ref
	return rv
}

// extract finds the links of a response — its redirect target, and the
// links of HTML and CSS bodies — and the SimHash of an HTML page's text
// (see hasSimHash).
func (c *Crawler) extract(resp *fetch.Response, warn func(string, ...any)) ([]extract.Outlink, uint64) {
	var links []extract.Outlink
	if resp.Location != "" {
		if u, err := urlkey.Canonical("", resp.Location); err == nil {
			links = append(links, extract.Outlink{URL: u, Kind: extract.Redirect, Path: "http/location"})
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 || len(resp.Body) == 0 {
		return links, 0
	}
	var sh uint64
	switch mediaType(resp.Header, resp.Body) {
	case "text/html", "application/xhtml+xml":
		res, err := extract.HTML(resp.Body, resp.Header.Get("Content-Type"), resp.URL, extract.Limits{})
		if err != nil {
			warn("html extraction", "err", err)
		}
		if res.Truncated {
			// A limit on links or tokens, or a charset decoding error:
			// the page's links after it are not followed.
			warn("html extraction stopped early; later links not followed", "links", len(res.Links))
		}
		links = append(links, res.Links...)
		if hasSimHash(resp.StatusCode, resp.Header) {
			sh = res.SimHash
		}
	case "text/css":
		links = append(links, extract.CSS(resp.Body, resp.URL, extract.Limits{})...)
	}
	return links, sh
}

// hasSimHash says which captures carry a SimHash: pages labelled HTML
// that answered 200. Every node decides alike from the archived record.
func hasSimHash(status int, h http.Header) bool {
	return status == http.StatusOK && mediaType(h, nil) == "text/html"
}

// follow decides which outlinks go to the frontier: links inside the scope,
// and page requisites (embeds) wherever they are. Off-scope resources bring
// no links of their own, except that an off-scope stylesheet's images, fonts
// and imports are still requisites of the page that used it. Each item
// carries the redirects in a row and the hops off the scope that led to it,
// which the frontier bounds: neither depth nor scope ends a chain of
// redirects, or of stylesheets importing the next host's.
func (c *Crawler) follow(parent frontier.Item, isCSS bool, links []extract.Outlink) []frontier.Item {
	sc := c.scope.Load()
	parentInScope := sc.contains(parent.URL)
	// A parent in scope starts the count afresh, even one queued off the
	// scope before seeds widened it.
	offHops := parent.OffScopeHops
	if parentInScope {
		offHops = 0
	}
	items := make([]frontier.Item, 0, len(links))
	for _, l := range links {
		it := newItem(l.URL, parent.Depth+1, parent.URL)
		inScope := sc.contains(l.URL)
		switch l.Kind {
		case extract.Redirect:
			// A redirect is the same resource under another name: same depth, same role.
			it.Depth, it.Embed = parent.Depth, parent.Embed
			it.Redirects = parent.Redirects + 1
			if !it.Embed && !inScope {
				continue
			}
		case extract.Embed:
			if c.cfg.NoRequisites && !inScope {
				continue
			}
			if !parentInScope && !isCSS {
				continue
			}
			// Requisites of a page at the depth limit are still part of that page.
			it.Depth, it.Embed = parent.Depth, true
		default:
			if !parentInScope || !inScope {
				continue
			}
		}
		if !inScope {
			it.OffScopeHops = offHops + 1
		}
		items = append(items, it)
	}
	return items
}

// mediaType is the response's media type, lowercased and without parameters;
// sniffed from the body when the header has none.
func mediaType(h http.Header, body []byte) string {
	ct := h.Get("Content-Type")
	if ct == "" && body != nil {
		ct = http.DetectContentType(body)
	}
	// What mime.ParseMediaType would give, valid parameters or not, without
	// parsing (and allocating) the parameters: this runs several times per
	// response.
	base, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(base))
}

// fetchRobots is the robots.Cache's way to fetch a robots.txt, or a
// redirect's next hop (the cache follows redirects itself, sharing one
// origin's file with those redirecting to it): through the same fetcher as
// everything else, archiving every response, as Heritrix does, so the
// archive shows why a page was or was not captured.
func (c *Crawler) fetchRobots(ctx context.Context, robotsURL string) (int, []byte, string, error) {
	resp, err := c.fetcher.Fetch(ctx, fetch.Request{URL: robotsURL})
	if err != nil {
		return 0, nil, "", err
	}
	rec, err := warc.NewFetchedResponse(resp.URL, resp.Start, resp.Raw)
	if err != nil {
		return 0, nil, "", err
	}
	r := result{resp: resp, record: rec}
	if err := r.prepare(); err != nil {
		return 0, nil, "", err
	}
	c.pending.Add(1)
	select {
	case c.results <- r:
	case <-ctx.Done():
		c.pending.Add(-1)
		return 0, nil, "", ctx.Err()
	}
	if resp.Location == "" || resp.StatusCode < 300 || resp.StatusCode >= 400 {
		return resp.StatusCode, resp.Body, "", nil
	}
	next, err := urlkey.Canonical("", resp.Location)
	if err != nil {
		return 0, nil, "", fmt.Errorf("robots.txt redirect: %w", err)
	}
	return resp.StatusCode, nil, next, nil
}

// newItem makes a frontier item.
func newItem(u string, depth int, via string) frontier.Item {
	return frontier.Item{URL: u, Host: urlkey.Host(u), Depth: depth, Via: via}
}

// urlLog logs lines about one URL. Unlike slog.Logger.With it costs nothing
// until a line is written, and almost every URL is crawled without one.
type urlLog struct {
	log *slog.Logger
	url string
}

func (l urlLog) Debug(msg string, args ...any) { l.log.Debug(msg, l.args(args)...) }
func (l urlLog) Warn(msg string, args ...any)  { l.log.Warn(msg, l.args(args)...) }
func (l urlLog) Error(msg string, args ...any) { l.log.Error(msg, l.args(args)...) }

func (l urlLog) args(args []any) []any { return append([]any{"url", l.url}, args...) }
