package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// maxGroup bounds how many results share one WARC fsync and one pebble
// commit: enough to amortize the two fsyncs, small enough that a result is
// not kept waiting long.
const maxGroup = 256

// commitLoop makes results durable in groups until the results channel is
// closed. See the package comment for the order of writes.
func (c *Crawler) commitLoop() error {
	// The WARC writer is opened at the first capture, so a run that archives
	// nothing leaves no empty segment behind.
	var w *warc.Writer
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	open := func() (*warc.Writer, error) {
		if w == nil {
			var err error
			w, err = warc.NewWriter(c.warcDir, warc.WriterOptions{
				Prefix:         "waggle",
				MaxSegmentSize: c.cfg.SegmentSize,
				Info:           c.warcInfo(),
			})
			if err != nil {
				return nil, fmt.Errorf("crawl: %w", err)
			}
		}
		return w, nil
	}
	group := make([]result, 0, maxGroup)
	for r := range c.results {
		group = append(group[:0], r)
	more:
		for len(group) < maxGroup {
			select {
			case r, ok := <-c.results:
				if !ok {
					break more
				}
				group = append(group, r)
			default:
				break more
			}
		}
		if err := c.commit(open, group); err != nil {
			for _, r := range group {
				if r.ack != nil {
					r.ack <- err
				}
			}
			// Drain so workers blocked on sending can see the stop.
			go func() {
				for r := range c.results {
					if r.ack != nil {
						r.ack <- ErrNotRunning
					}
				}
			}()
			return err
		}
	}
	return nil
}

// commit archives one group of results.
func (c *Crawler) commit(openWriter func() (*warc.Writer, error), group []result) error {
	b := c.db.NewIndexedBatch()
	defer b.Close()
	var recs []*warc.Record
	type pending struct {
		capture index.Capture
		rec     int // index in recs of its response or revisit record
	}
	var caps []pending
	var recCount []int                         // records of each capture in caps
	firstInGroup := map[string]index.Capture{} // payload digest → first capture of this group
	var captures, bytes int64
	now := time.Now()
	for i := range group {
		r := &group[i]
		if r.resp != nil {
			cp, rs, err := c.records(b, r, firstInGroup)
			if err != nil {
				return err
			}
			if r.hasLease {
				if err := c.noteVisit(b, r, &cp, now); err != nil {
					return err
				}
			}
			caps = append(caps, pending{capture: cp, rec: len(recs)})
			recCount = append(recCount, len(rs))
			recs = append(recs, rs...)
			if r.hasLease {
				captures++
			}
			bytes += int64(len(r.resp.Raw))
		}
		if r.update != nil {
			if err := r.update(b); err != nil {
				if !errors.As(err, new(refusal)) {
					return err
				}
				r.refused = err
			}
			clear(c.recentPayloads) // it may have deleted digest entries
		}
		if len(r.seeds) > 0 {
			items, err := c.addSeeds(b, r.seeds)
			if err != nil {
				return err
			}
			if r.queueSeeds {
				r.queue = append(r.queue, items...)
			}
		}
		switch {
		case !r.hasLease || r.resp != nil:
		case r.outcome == "error" || r.outcome == "unanswered" || r.outcome == "retry" || r.outcome == "robots" || r.outcome == "recovered":
			if err := c.noteVisit(b, r, nil, now); err != nil {
				return err
			}
		case r.outcome == "forward" || r.outcome == "forbidden" && c.cfg.Continuous:
			// A node's rules do not change until it restarts: a URL it
			// refuses waits its interval, as one handed over does.
			if err := c.rescheduleLease(b, r.lease, now); err != nil {
				return err
			}
		}
		switch {
		case r.outcome == "forward":
			if err := c.front.Forget(b, r.lease); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
			it := r.lease.Item
			it.Seed = c.isSeed(it)
			if err := c.cfg.Router.Handover(b, r.forward, []frontier.Item{it}); err != nil {
				return fmt.Errorf("crawl: route: %w", err)
			}
			continue
		case r.outcome == "retry" && !revisitFailed(r):
			if err := c.front.Defer(b, r.lease); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		case r.outcome == "forbidden" && !c.cfg.Continuous:
			// Refused by this run's own rules (a private address, the flag
			// allowing it forgotten): nothing was learnt of the URL, and a
			// revisit's entry stays queued. The next run takes it up.
			if err := c.front.Hold(b, r.lease); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		case r.outcome == "forbidden" && !r.lease.Revisit:
			// A node's rules do not change until it restarts, and what it
			// holds aside it would hand over when it leaves: the URL is
			// forgotten instead, to be taken when found again.
			if err := c.front.Forget(b, r.lease); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		case r.hasLease && r.outcome != "cancelled":
			if err := c.front.Done(b, r.lease); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		case r.ack == nil:
			// Robots captures have no queue entry; a cancelled fetch stays
			// queued for the next run.
			continue
		}
		switch {
		case len(r.queue) == 0:
		case r.keep:
			if _, err := c.front.Add(b, r.queue); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		default:
			if err := c.queue(b, r.queue); err != nil {
				return fmt.Errorf("crawl: frontier: %w", err)
			}
		}
	}
	// The links just staged may be fetched while this batch is written and
	// synced: their results commit after it.
	c.front.Publish()
	ends := map[string]int64{}
	var stored int64
	var newPayloads []index.Capture
	if len(recs) > 0 {
		w, err := openWriter()
		if err != nil {
			return err
		}
		locs, err := w.WriteGroup(recs)
		if err != nil {
			return fmt.Errorf("crawl: warc: %w", err)
		}
		if err := w.Sync(); err != nil {
			return fmt.Errorf("crawl: warc sync: %w", err)
		}
		for _, l := range locs {
			ends[l.Segment] = max(ends[l.Segment], l.Offset+l.Length)
			stored += l.Length
		}
		for k, p := range caps {
			cp, loc := p.capture, locs[p.rec]
			cp.Segment, cp.Offset, cp.Length = loc.Segment, loc.Offset, loc.Length
			if err := index.Put(b, cp); err != nil {
				return err
			}
			if cp.Type == warc.TypeResponse {
				if err := index.PutDigest(b, cp); err != nil {
					return err
				}
				c.digests.AddString(cp.Digest)
				newPayloads = append(newPayloads, cp)
			}
			if c.cfg.Replicator != nil {
				if err := c.cfg.Replicator.Captured(b, cp, locs[p.rec:p.rec+recCount[k]]); err != nil {
					return fmt.Errorf("crawl: replicate: %w", err)
				}
			}
		}
	}
	copied, err := c.stageCopies(b, openWriter, group, ends)
	if err != nil {
		return err
	}
	for i := range group {
		if mv := group[i].move; mv != nil {
			if copied[i], err = c.stageMove(b, openWriter, mv, ends); err != nil {
				return err
			}
		}
	}
	if len(ends) > 0 {
		w, err := openWriter()
		if err != nil {
			return err
		}
		c.compactMu.Lock()
		c.writing = w.Segment()
		c.compactMu.Unlock()
	}
	st := c.stats.state()
	st.Captures += captures
	st.Bytes += bytes
	if err := saveState(b, st, ends); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("crawl: commit: %w", err)
	}
	c.front.Committed()
	if c.cfg.Router != nil {
		c.cfg.Router.Committed()
	}
	if c.cfg.Replicator != nil {
		c.cfg.Replicator.Committed()
	}
	for i, r := range group {
		if r.stored != nil {
			r.stored <- copied[i]
		}
		if r.ack != nil {
			r.ack <- r.refused
		}
	}
	for _, cp := range newPayloads {
		c.rememberPayload(cp)
	}
	c.stats.captures.Add(captures)
	c.stats.bytes.Add(bytes)
	c.stats.stored.Add(stored)
	if c.cfg.Dedup != nil && len(newPayloads) > 0 {
		c.cfg.Dedup.Stored(newPayloads)
	}
	c.committed(len(group))
	if c.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		for _, r := range group {
			if r.resp != nil {
				c.cfg.Logger.Debug("archived", "url", r.resp.URL, "status", r.resp.StatusCode)
			}
		}
	}
	return nil
}

// records makes a result's WARC records — the response (or a revisit when
// the payload is already archived), its request, and a metadata record of
// outlinks — and its index entry, whose location is filled in once written.
// The response or revisit record comes first.
func (c *Crawler) records(b *pebble.Batch, r *result, firstInGroup map[string]index.Capture) (index.Capture, []*warc.Record, error) {
	resp := r.resp
	rec := r.record
	digest := rec.Header.Get("WARC-Payload-Digest")
	capType := warc.TypeResponse
	mime := mediaType(resp.Header, nil)
	if r.revisit == nil && payloadWorthDeduplicating(resp.Raw) && resp.Truncated == "" {
		// A payload already in the archive is stored once: later captures of
		// it are revisit records that point at the first (identical-payload
		// profile). The worker looked before; this sees what was committed
		// since, and earlier results of this group.
		ref, seen, err := c.storedPayload(b, resp.URL, digest, firstInGroup)
		if err != nil {
			return index.Capture{}, nil, err
		}
		if seen {
			r.revisit = &revisitOf{profile: warc.ProfileIdenticalPayload, digest: digest, ref: ref}
		}
	}
	if rv := r.revisit; rv != nil {
		end := warc.HTTPHeaderEnd(resp.Raw)
		if end < 0 {
			end = len(resp.Raw)
		}
		rec = warc.NewRevisit(resp.URL, resp.Start, rv.profile, resp.Raw[:end], rv.digest,
			warc.RefersTo{ID: rv.ref.RecordID, URI: rv.ref.URL, Date: rv.ref.Time})
		// The request and metadata records name the response record the
		// worker made; the revisit, written instead, takes its ID.
		rec.Header.Set("WARC-Record-ID", r.record.ID())
		capType, digest = warc.TypeRevisit, rv.digest
		if mime == "" || rv.profile == warc.ProfileServerNotModified {
			// A 304 describes no bytes of its own: some servers send a
			// wrong Content-Type with it, which replay ignores too.
			mime = rv.mime
		}
		switch {
		case rv.profile == warc.ProfileServerNotModified:
			c.stats.notModified.Add(1)
		case rv.ofLast || rv.ref.URL == resp.URL:
			c.stats.unchanged.Add(1)
		default:
			c.stats.duplicates.Add(1)
		}
	}
	if resp.IP != "" {
		rec.Header.Set("WARC-IP-Address", resp.IP)
	}
	if resp.Truncated != "" {
		rec.Header.Set("WARC-Truncated", resp.Truncated)
		c.stats.truncated.Add(1)
	}
	recs := append([]*warc.Record{rec}, r.companions...)
	cp := index.Capture{
		URLKey:   r.urlKey,
		Time:     resp.Start,
		URL:      resp.URL,
		Type:     capType,
		Status:   resp.StatusCode,
		MIME:     mime,
		Digest:   digest,
		RecordID: rec.ID(),
		Redirect: resp.Location,
		SimHash:  r.simhash,
	}
	if capType == warc.TypeResponse {
		firstInGroup[digest] = cp
	}
	return cp, recs, nil
}

// storedPayload finds the first capture of a payload already archived,
// one a revisit of u may point at (mayPointAt): in this group, among the
// payloads met lately, or in the digest index (which the Bloom filter says
// may have it).
func (c *Crawler) storedPayload(b *pebble.Batch, u, digest string, firstInGroup map[string]index.Capture) (recrawl.Ref, bool, error) {
	first, ok := firstInGroup[digest]
	if !ok {
		first, ok = c.recentPayloads[digest]
	}
	if !ok && c.digests.TestString(digest) {
		var err error
		if first, ok, err = index.ByDigest(b, digest); err != nil {
			return recrawl.Ref{}, false, err
		}
		if ok {
			c.rememberPayload(first)
		}
	}
	if !ok || !c.mayPointAt(u, first) {
		return recrawl.Ref{}, false, nil
	}
	return refTo(first), true, nil
}

// mayPointAt reports whether a revisit of u may point at first, a capture
// this node stored: on a network, one of the same site, whose copies go
// to the same nodes in the order made, or one whose copies have all
// arrived (Dedup.Replicated).
func (c *Crawler) mayPointAt(u string, first index.Capture) bool {
	return c.cfg.Dedup == nil || urlkey.Site(u) == urlkey.Site(first.URL) || c.cfg.Dedup.Replicated(first)
}

// refTo is the reference a revisit, or a URL's re-crawl entry, keeps to the
// capture that stored a payload.
func refTo(c index.Capture) recrawl.Ref {
	return recrawl.Ref{URL: c.URL, Time: c.Time, RecordID: c.RecordID}
}

// recentPayloadsMax bounds the committer's memory of recent payloads
// (about 250 bytes each).
const recentPayloadsMax = 4096

// rememberPayload notes first as where its payload was first stored,
// forgetting an arbitrary other one when the memory is full.
func (c *Crawler) rememberPayload(first index.Capture) {
	if len(c.recentPayloads) >= recentPayloadsMax {
		for d := range c.recentPayloads {
			delete(c.recentPayloads, d)
			break
		}
	}
	c.recentPayloads[first.Digest] = first
}

// payloadWorthDeduplicating reports whether a revisit record saves anything:
// empty bodies (redirects, 304s) are cheaper stored whole, and tools replay
// them more simply.
func payloadWorthDeduplicating(raw []byte) bool {
	end := warc.HTTPHeaderEnd(raw)
	return end >= 0 && len(raw)-end > 0
}

// refusal is what an update function returns when it declines to make its
// change, before writing anything: Update answers with it, and the rest of
// the commit goes ahead. Any other error of an update stops the crawl, as
// the batch may hold part of the update's writes.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }
