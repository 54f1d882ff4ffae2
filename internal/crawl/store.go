package crawl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/frontier"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/robots"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A Replicator copies the captures this node makes to the other nodes that
// must hold them.
type Replicator interface {
	// Captured stages into b, which the crawler commits and then reports
	// with Committed, the copying of capture c, whose records (its own
	// first, then its request and metadata) are at locs.
	Captured(b *pebble.Batch, c index.Capture, locs []warc.Location) error
	Committed()
}

// A Copy is a WARC record another node archived, as the gzip member it
// wrote: stored here byte for byte.
type Copy struct {
	Member []byte
	// Capture is the record's index entry when the record is a capture
	// (response, revisit); its location fields are ignored.
	Capture *index.Capture
	// Record, if not nil, is the member's record as the caller read and
	// checked it; Store then does not decompress the member again.
	Record *warc.Record
}

// copiedPrefix keys the records copied from other nodes that the capture
// index does not cover (requests, metadata): + the SHA-256 of the record ID,
// as for imports, so a copy received twice is stored once.
const copiedPrefix = importedPrefix

// Store adds copies of records made by other nodes to this node's archive
// (replication and repair) and returns once they are durable, with the
// number stored: a record already here is skipped. The caller has checked
// each member's digest; Store reads each record (or takes Copy.Record) to
// check it against its capture and to know its ID. Once the committer
// has taken copies, Store returns only when it is done with them, even if
// ctx ends.
func (c *Crawler) Store(ctx context.Context, copies []Copy) (int, error) {
	ids := make([]string, len(copies))
	facts := make([]copyFacts, len(copies))
	for i, cp := range copies {
		var id string
		var err error
		switch {
		case cp.Record != nil:
			id = cp.Record.ID()
			if id == "" {
				err = errors.New("record without WARC-Record-ID")
			} else {
				facts[i] = recordFacts(cp.Record)
			}
		default:
			// The record is read whole once: its ID and its facts.
			facts[i], id, err = factsOf(cp.Member)
		}
		if err != nil {
			return 0, fmt.Errorf("crawl: copy %d: %w", i, err)
		}
		if cp.Capture != nil && cp.Capture.RecordID != id {
			return 0, fmt.Errorf("crawl: copy %d is record %s, but its capture names %s", i, id, cp.Capture.RecordID)
		}
		ids[i] = id
	}
	done := make(chan int, 1)
	err := c.send(ctx, result{copies: copies, copyIDs: ids, copyFacts: facts, stored: done})
	if err != nil {
		return 0, err
	}
	return <-done, nil
}

// copyFacts are what this node derives from a copied capture's record
// rather than take on a peer's word: the SimHash of an HTML page (a
// revisit's, which has no text, comes from its original), the
// validators a revisit of it would send, and the original a revisit
// record names (which may be on another node).
type copyFacts struct {
	simhash            uint64
	etag, lastModified string
	head               uint64 // headOf the response; 0 for a 304, which answers nothing of its own
	cut                int64  // of a response cut at the size limit: recrawl.Entry.Cut
	refersTo           recrawl.Ref
	// payload is a response's payload, which must have the digest its
	// capture names before the capture may stand for the payload in this
	// node's digest index: a copy's index entry is its sender's word.
	payload []byte
	// Of a metadata record: the URL and capture (record ID) it describes,
	// the hop counts that led the fetching node to the URL (nil when not
	// recorded), and the URLs of the capture's outlinks.
	metadataOf, describes string
	hops                  *frontier.Item
	links                 []string
}

// factsOf reads the record in a gzip member and returns its ID and, for a
// response, revisit or metadata record, its facts (zero for others).
func factsOf(member []byte) (copyFacts, string, error) {
	r, err := warc.NewReader(bytes.NewReader(member))
	if err != nil {
		return copyFacts{}, "", err
	}
	rec, _, err := r.Next()
	if err != nil {
		return copyFacts{}, "", err
	}
	id := rec.ID()
	if id == "" {
		return copyFacts{}, "", errors.New("record without WARC-Record-ID")
	}
	return recordFacts(rec), id, nil
}

// recordFacts returns the facts of a response, revisit or metadata record
// (zero for other records).
func recordFacts(rec *warc.Record) copyFacts {
	if rec.Type() == warc.TypeMetadata {
		hops, ok, links := metadataFacts(rec.Block)
		f := copyFacts{metadataOf: rec.Header.Get("WARC-Target-URI"), describes: rec.Header.Get("WARC-Concurrent-To"), links: links}
		if ok {
			f.hops = &hops
		}
		return f
	}
	if rec.Type() != warc.TypeResponse && rec.Type() != warc.TypeRevisit {
		return copyFacts{}
	}
	status, h, ok := parseHTTPHead(rec.Block)
	if !ok {
		return copyFacts{}
	}
	var f copyFacts
	if status != http.StatusNotModified {
		f.head = headOf(status, h, rec.TargetURI())
	}
	if rec.Type() == warc.TypeRevisit {
		// A revisit of a 2xx stands for a whole 2xx capture, and a 304 may
		// send new validators; one of an error page (all of a site's 404s
		// share a body) makes no revisit conditional, as noteVisit has it.
		if status >= 200 && status < 300 || status == http.StatusNotModified {
			f.etag, f.lastModified = validator(h.Get("ETag")), validator(h.Get("Last-Modified"))
		}
		when, err := warc.ParseDate(rec.Header.Get("WARC-Refers-To-Date"))
		uri, id := rec.Header.Get("WARC-Refers-To-Target-URI"), rec.Header.Get("WARC-Refers-To")
		if err == nil && uri != "" && id != "" {
			f.refersTo = recrawl.Ref{URL: uri, Time: when, RecordID: id}
		}
		return f
	}
	if truncated := rec.Header.Get("WARC-Truncated"); status >= 200 && status < 300 && (truncated == "" || truncated == "length") {
		// As for the node's own visits (noteVisit): only a 2xx capture,
		// whole or cut at the size limit, makes a revisit conditional.
		f.etag, f.lastModified = validator(h.Get("ETag")), validator(h.Get("Last-Modified"))
		f.cut = cutLength(truncated, rec.Block)
	}
	payload, _ := warc.HTTPBody(rec.Block, h)
	f.simhash = pageSimHash(status, h, payload)
	f.payload = payload
	return f
}

// noteCopy gives a capture copied from another node a re-crawl entry
// here too (or brings a known one up to date), so that whichever node
// holds its site next knows when to revisit it and what to compare with.
// A node queues only the URLs of sites it holds (see queueDue).
func (c *Crawler) noteCopy(b *pebble.Batch, cp index.Capture, f copyFacts) (noted bool, err error) {
	if robots.IsFile(cp.URL) {
		return false, nil // the robots check fetches it, as on the node that did
	}
	key := recrawl.Key(cp.URL)
	old, had, err := recrawl.GetKey(b, key)
	if err != nil {
		return false, err
	}
	recent := had && !old.State.LastVisit.Before(cp.Time.Truncate(time.Second))
	if recent && old.Captured() {
		return false, nil // it knows of a visit as recent
	}
	policy := c.cfg.Schedules.For(cp.URL)
	e := old
	changed := had && old.Changed(cp.Digest, f.head)
	switch {
	case !had:
		e = recrawl.Entry{Key: key, URL: cp.URL}
		e.State, _ = policy.First(cp.Time)
	case recent:
		// A later visit here captured nothing (page recovery left the page
		// to this copy's node): its schedule stands, and the copy gives
		// it a capture to compare with.
		e.URL = cp.URL
	case old.Captured() && passing(cp.Status):
		// As noteVisit has it: an error of the moment is a visit that
		// found no change, and the page is still its last capture.
		e.State, _ = policy.Next(old.State, cp.Time, false)
		if !old.Due.IsZero() {
			e.Due = cp.Time.Add(policy.Jitter(cp.URL, e.State.Interval))
		}
		return false, recrawl.Put(b, &old, e)
	default:
		e.URL = cp.URL
		e.State, _ = policy.Next(old.State, cp.Time, changed && !sameText(&old, &cp, f.head))
	}
	if f.etag != "" || cp.Status != http.StatusNotModified {
		e.ETag = f.etag
	}
	if f.lastModified != "" || cp.Status != http.StatusNotModified {
		e.LastModified = f.lastModified
	}
	e.Digest, e.MIME, e.SimHash = cp.Digest, cp.MIME, cp.SimHash
	if f.head != 0 || cp.Status != http.StatusNotModified {
		e.Head = f.head
	}
	if changed {
		// The links of a changed page are its new capture's: its
		// metadata record's (noteMetadata), or none.
		e.Links = nil
	}
	switch {
	case cp.Type == warc.TypeResponse:
		e.Payload, e.Cut = refTo(cp), f.cut
	case cp.Digest != old.Digest || !had:
		// The revisit's own record names its original, wherever that is;
		// a record without the reference is matched by digest here.
		e.Payload = f.refersTo
		orig, held, err := index.ByDigest(b, cp.Digest)
		held = held && err == nil
		if held && e.Payload.RecordID == "" {
			e.Payload = refTo(orig)
		}
		e.Cut = 0
		if held && !c.holdsWhole(orig) {
			// A revisit of a capture cut at the size limit has its
			// validators, and a 304 would keep the cut copy for good: the
			// first revisit here fetches in full. (An original held
			// elsewhere is taken as whole, so as not to fetch every page
			// whose payload is on another node in full.)
			e.ETag, e.LastModified = "", ""
		}
	}
	if !recent && (!had || !old.Due.IsZero()) {
		e.Due = cp.Time.Add(policy.Jitter(cp.URL, e.State.Interval))
	}
	var prev *recrawl.Entry
	if had {
		prev = &old
	}
	return true, recrawl.Put(b, prev, e)
}

// noteMetadata gives the re-crawl entry of a copied capture what its
// metadata record f tells, when the entry's last capture is the one the
// record describes: the hop counts that led to the URL, and the links of
// the page. A revisit is queued with the hop counts, and a changed page's
// new links continue from them, as on the node that fetched it, rather
// than from depth 0 (a depth limit would be crossed, a trap chain counted
// afresh); the links keep a changed page's old ones from being routed
// again. The record follows its capture, in the same batch as a rule:
// noted holds the record IDs of the captures noteCopy took as their
// entries' last visit in this batch. One that comes alone is matched by
// the payload its entry names (a response's own); one that describes an
// older capture changes nothing.
func (c *Crawler) noteMetadata(b *pebble.Batch, f copyFacts, noted map[string]bool) error {
	e, ok, err := recrawl.Get(b, f.metadataOf)
	if err != nil || !ok || f.describes == "" || !noted[f.describes] && e.Payload.RecordID != f.describes {
		return err
	}
	old := e
	if h := f.hops; h != nil {
		e.Depth, e.Embed, e.Redirects, e.OffScopeHops = h.Depth, h.Embed, h.Redirects, h.OffScopeHops
	}
	if len(f.links) > 0 {
		e.SetLinks(f.links)
	}
	if e.Depth == old.Depth && e.Embed == old.Embed && e.Redirects == old.Redirects && e.OffScopeHops == old.OffScopeHops && slices.Equal(e.Links, old.Links) {
		return nil
	}
	return recrawl.Put(b, &old, e)
}

// stageCopies writes the copies of a group's results that are not in the
// archive yet and stages their index entries; it returns the number stored
// per result.
func (c *Crawler) stageCopies(b *pebble.Batch, openWriter func() (*warc.Writer, error), group []result, ends map[string]int64) ([]int, error) {
	stored := make([]int, len(group))
	var members [][]byte
	type entry struct {
		result int
		cp     *index.Capture
		facts  copyFacts
		id     string
	}
	var entries []entry
	seen := map[string]bool{} // record IDs in this group
	for i := range group {
		r := &group[i]
		// Whether the capture these copies follow is being stored: its
		// request and metadata records then go right after it, even if
		// they are here already — after a copy of the capture that left
		// the index (released, damaged), where export and hand-over,
		// which look for them after the capture, would not find them.
		withCapture := false
		for j, cp := range r.copies {
			id := r.copyIDs[j]
			have, err := haveRecord(b, id, cp.Capture)
			if err != nil {
				return nil, err
			}
			if cp.Capture != nil {
				withCapture = !have && !seen[id]
			} else if withCapture {
				have = false // a companion goes with its capture's new copy
			}
			if have || seen[id] {
				continue
			}
			seen[id] = true
			members = append(members, cp.Member)
			entries = append(entries, entry{i, cp.Capture, r.copyFacts[j], id})
		}
	}
	if len(members) == 0 {
		return stored, nil
	}
	w, err := openWriter()
	if err != nil {
		return nil, err
	}
	locs, err := w.WriteMembers(members)
	if err != nil {
		return nil, fmt.Errorf("crawl: warc: %w", err)
	}
	// Durable before the index says they are here and the sender is told
	// so: a copy acknowledged is one of the r a capture counts on.
	if err := w.Sync(); err != nil {
		return nil, fmt.Errorf("crawl: warc sync: %w", err)
	}
	noted := map[string]bool{} // captures noteCopy took as their URL's last visit
	for k, e := range entries {
		l := locs[k]
		ends[l.Segment] = max(ends[l.Segment], l.Offset+l.Length)
		stored[e.result]++
		if e.cp == nil {
			if e.facts.metadataOf != "" {
				if err := c.noteMetadata(b, e.facts, noted); err != nil {
					return nil, err
				}
			}
			// Marked with where it lies, so that a segment lost later takes
			// its marks along (see dropLostCaptures) and a repair can bring
			// the record back.
			if err := b.Set(index.RecordKey(copiedPrefix, e.id), markValue(l), nil); err != nil {
				return nil, fmt.Errorf("crawl: %w", err)
			}
			continue
		}
		cp := *e.cp
		cp.Segment, cp.Offset, cp.Length, cp.Node = l.Segment, l.Offset, l.Length, ""
		if cp.Type == warc.TypeRevisit {
			// A revisit has no text to hash: its original's, if this node
			// holds it and it has one, else the one the owner sent (an
			// original that is an error page with the same body has none,
			// where the owner hashed the page's text when it fetched it).
			if first, ok, err := index.ByDigest(b, cp.Digest); err == nil && ok && first.SimHash != 0 {
				cp.SimHash = first.SimHash
			}
		} else {
			cp.SimHash = e.facts.simhash
		}
		if err := index.Put(b, cp); err != nil {
			return nil, err
		}
		if cp.Type == warc.TypeResponse && warc.DigestMatches(cp.Digest, e.facts.payload) {
			if _, ok, err := index.ByDigest(b, cp.Digest); err != nil {
				return nil, err
			} else if !ok {
				if err := index.PutDigest(b, cp); err != nil {
					return nil, err
				}
				c.digests.AddString(cp.Digest)
			}
		}
		ok, err := c.noteCopy(b, cp, e.facts)
		if err != nil {
			return nil, err
		}
		if ok {
			noted[cp.RecordID] = true
		}
	}
	return stored, nil
}

// markValue is the value of a record's copied mark: its location.
func markValue(l warc.Location) []byte {
	v := binary.AppendUvarint(nil, uint64(len(l.Segment)))
	v = append(v, l.Segment...)
	return binary.AppendVarint(v, l.Offset)
}

// markLocation reads a mark's value; ok is false for a mark without one
// (written before marks had locations).
func markLocation(v []byte) (segment string, offset int64, ok bool) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)-k) {
		return "", 0, false
	}
	segment = string(v[k : k+int(n)])
	offset, k2 := binary.Varint(v[k+int(n):])
	return segment, offset, k2 > 0
}

// haveRecord reports whether the record with this ID is archived here: a
// capture by its index entry, another record by the mark Store and Import
// leave.
func haveRecord(b *pebble.Batch, id string, cp *index.Capture) (bool, error) {
	if cp == nil {
		_, closer, err := b.Get(index.RecordKey(copiedPrefix, id))
		if err == nil {
			closer.Close()
			return true, nil
		}
		if errors.Is(err, pebble.ErrNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("crawl: %w", err)
	}
	return index.HasRecord(b, cp.URLKey, cp.Time, id)
}

// DropDamaged removes capture cp from the index, if it is still there at
// the location given, because its record there is damaged and another
// node holds a good copy: the capture then reads as missing here, and
// repair (anti-entropy) copies it back, to a new location. The damaged
// bytes stay where they are, unindexed, until compaction.
func (c *Crawler) DropDamaged(ctx context.Context, cp index.Capture) error {
	dropped := false
	err := c.Update(ctx, func(b *pebble.Batch) error {
		cur, ok, err := index.Lookup(b, cp.URLKey, cp.Time)
		if err != nil || !ok || cur.RecordID != cp.RecordID || cur.Segment != cp.Segment || cur.Offset != cp.Offset {
			return err // gone, or moved (repaired, compacted) meanwhile
		}
		dropped = true
		return index.Delete(b, cur)
	})
	if err == nil && dropped {
		c.cfg.Logger.Error("a record was found damaged: its capture leaves the index until a copy comes back from another node",
			"url", cp.URL, "segment", cp.Segment, "offset", cp.Offset)
	}
	return err
}

// forgetDamagedPayload stages into b, which must be indexed, that the
// record of capture cp was found damaged and cannot be repaired here: the
// next visit of its URL, if its re-crawl entry compares with cp, fetches
// the page whole, with no condition a 304 could answer; and a payload
// fetched again with cp's digest is stored, not made a revisit of
// unreadable bytes. The capture itself stays indexed, and reported, for
// its segment to be restored from a backup.
func forgetDamagedPayload(b *pebble.Batch, cp index.Capture) error {
	if cp.Type != warc.TypeResponse && cp.Type != warc.TypeResource {
		return nil // a revisit holds no payload to compare with
	}
	if err := index.DeleteDigest(b, cp); err != nil {
		return err
	}
	e, ok, err := recrawl.Get(b, cp.URL)
	if err != nil || !ok || e.Payload.RecordID != cp.RecordID {
		return err
	}
	old := e
	e.ETag, e.LastModified, e.Digest = "", "", ""
	return recrawl.Put(b, &old, e)
}

// ForgetDamagedPayload is forgetDamagedPayload in a batch of its own, for
// a running crawler (a node's scrub).
func (c *Crawler) ForgetDamagedPayload(ctx context.Context, cp index.Capture) error {
	return c.Update(ctx, func(b *pebble.Batch) error { return forgetDamagedPayload(b, cp) })
}

// ForgetDamagedPayloads is ForgetDamagedPayload for captures of an archive
// no crawler has open (waggle index verify).
func ForgetDamagedPayloads(db *pebble.DB, caps []index.Capture) error {
	if len(caps) == 0 {
		return nil
	}
	b := db.NewIndexedBatch()
	defer b.Close()
	for _, cp := range caps {
		if err := forgetDamagedPayload(b, cp); err != nil {
			return fmt.Errorf("crawl: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	return nil
}
