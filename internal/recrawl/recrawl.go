// Package recrawl keeps what a node remembers of every URL it has visited,
// so that it can visit each again on its schedule (package schedule) and
// ask the server only for what changed: the validators of the last capture
// for a conditional GET, the payload digest and the record that holds it
// for a revisit record, and the links the page had, so that only new ones
// are routed again.
//
// Entries live in the node's pebble database, written into the crawler's
// batches so that they change atomically with the capture they describe:
//
//	v/u/<key>                               → entry
//	v/d/<due, Unix seconds BE u64><key>     → ""     due queue
//
// Entries are per Key: URLs that differ only in a session ID or the order
// of their query parameters are one resource, visited once per schedule.
// An entry whose URL is queued for its visit has no due key: the visit's
// commit writes it again with the next due time.
package recrawl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

const (
	entryPrefix = "v/u/"
	duePrefix   = "v/d/"
)

// Ref names the response record that holds a payload, as a revisit
// record's WARC-Refers-To fields do.
type Ref struct {
	URL      string
	Time     time.Time
	RecordID string
}

// Entry is what is remembered of one URL.
type Entry struct {
	// Key is the entry's identity (see Key), set by Get and Due; Put
	// computes it from URL when it is empty.
	Key   string
	URL   string // the URL last visited
	Depth int    // hops from a seed, as first queued
	Embed bool   // a page requisite
	// Redirects and OffScopeHops are the frontier item's, as first
	// queued: a revisit is queued with them, so that a chain of trap
	// hosts naming fresh URLs on each visit does not start its count
	// afresh at every re-crawl.
	Redirects, OffScopeHops int

	State schedule.State
	// Due is when the URL is to be visited next; zero while it is queued
	// for a visit.
	Due time.Time

	// Of the last capture; all empty when the last visit captured nothing.
	ETag         string
	LastModified string
	Digest       string // payload digest ("sha1:…")
	MIME         string
	SimHash      uint64
	Payload      Ref // the response record holding the payload
	// Cut is the body bytes the last capture kept when it was cut at a
	// size limit (WARC-Truncated: length), 0 when it is whole. A 304 may
	// then stand for it only while the limit is no higher: otherwise the
	// cut copy would be kept for good.
	Cut int64
	// Head is HeadHash of what the last capture answered besides its
	// payload; 0 when not known (an entry made from the index or a copy,
	// or before it was kept), and then not compared.
	Head uint64
	// Links are hashes (LinkHash) of the outlinks of the last capture
	// whose payload changed, sorted.
	Links []uint64
}

// Captured reports whether the last visit left a capture to compare with.
func (e *Entry) Captured() bool { return e.Payload.RecordID != "" }

// Changed reports whether a capture with this payload digest and head
// (HeadHash) shows the page changed since the entry's last capture. A head
// not known, on either side (0), is not compared.
func (e *Entry) Changed(digest string, head uint64) bool {
	return digest != e.Digest || e.Head != 0 && head != 0 && head != e.Head
}

// HasLink reports whether the last changed capture linked to u.
func (e *Entry) HasLink(h uint64) bool {
	_, ok := slices.BinarySearch(e.Links, h)
	return ok
}

// LinkHash is the 64-bit FNV-1a hash of a URL, the form Entry.Links keeps.
// A collision can only make a new link look old, for one visit of one page.
func LinkHash(u string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(u); i++ {
		h ^= uint64(u[i])
		h *= 1099511628211
	}
	return h
}

// HeadHash is the form Entry.Head keeps of a response's status, media
// type and redirect target: a page whose payload is the same bytes but
// which now answers 404, or as text/plain, or redirects elsewhere, has
// changed. It is never 0.
func HeadHash(status int, mediaType, location string) uint64 {
	return max(LinkHash(strconv.Itoa(status)+" "+mediaType+" "+location), 1)
}

// MaxLinks bounds the links an entry remembers; a page with more has its
// first MaxLinks remembered, and the rest count as new on every change.
const MaxLinks = 4096

// SetLinks remembers the hashes of urls.
func (e *Entry) SetLinks(urls []string) {
	hs := make([]uint64, 0, min(len(urls), MaxLinks))
	for _, u := range urls {
		if len(hs) == MaxLinks {
			break
		}
		hs = append(hs, LinkHash(u))
	}
	slices.Sort(hs)
	e.Links = slices.Compact(hs)
}

// Key is the identity of url's entry: the canonical URL without the
// session IDs the frontier leaves out (urlkey.WithoutSessionIDs) and with
// its query parameters in order. One resource whatever session ID or
// parameter order its address carries; but paths and queries keep their
// case and their trailing slash, unlike a SURT key's: "/news" and
// "/news/", "?id=Ab" and "?id=ab" are different resources, crawled as
// different URLs, often with different validators — and "/dir" usually
// only redirects to "/dir/". The host stays whole too, because
// example.com often only redirects to www.example.com. A URL that is not
// http or https is its own key.
func Key(url string) string {
	c, err := urlkey.Canonical("", url)
	if err != nil || !strings.HasPrefix(c, "http://") && !strings.HasPrefix(c, "https://") {
		return url
	}
	c = urlkey.WithoutSessionIDs(c)
	base, query, ok := strings.Cut(c, "?")
	if !ok {
		return c
	}
	var args []string
	for a := range strings.SplitSeq(query, "&") {
		if a != "" {
			args = append(args, a)
		}
	}
	if len(args) == 0 {
		return base
	}
	slices.Sort(args)
	return base + "?" + strings.Join(args, "&")
}

// Get returns the entry of url. r is the database or an indexed batch.
func Get(r pebble.Reader, url string) (Entry, bool, error) { return GetKey(r, Key(url)) }

// GetKey returns the entry whose Key is key. An entry that cannot be
// decoded (a value damaged on disk) reads as none: the URL's next visit
// writes it anew, and one bad value costs one URL its schedule, not every
// URL due after it, nor a crawl whose commit reads it.
func GetKey(r pebble.Reader, key string) (Entry, bool, error) {
	v, closer, err := r.Get(entryKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("recrawl: %w", err)
	}
	defer closer.Close()
	e, err := decodeEntry(v)
	if err != nil {
		return Entry{}, false, nil
	}
	e.Key = key
	return e, true, nil
}

// Entries returns up to limit entries whose Keys follow after, in Key
// order: a walk over every URL, a batch at a time. Entries that cannot be
// decoded are passed over, as GetKey reads them.
func Entries(db *pebble.DB, after string, limit int) ([]Entry, error) {
	lo := entryKey(after)
	if after != "" {
		lo = append(lo, 0)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte("v/v")})
	if err != nil {
		return nil, fmt.Errorf("recrawl: %w", err)
	}
	defer it.Close()
	var es []Entry
	for it.First(); it.Valid() && len(es) < limit; it.Next() {
		key := string(it.Key()[len(entryPrefix):])
		e, err := decodeEntry(it.Value())
		if err != nil {
			continue
		}
		e.Key = key
		es = append(es, e)
	}
	return es, it.Error()
}

// Put stages e into b, replacing old (the entry as it was, or nil) and its
// place in the due queue. Writing over an entry without giving old leaves
// its due key behind, which Due reports as stale.
func Put(b *pebble.Batch, old *Entry, e Entry) error {
	key := e.Key
	if key == "" {
		key = Key(e.URL)
	}
	if old != nil && !old.Due.IsZero() {
		if err := b.Delete(dueKey(old.Due, key), nil); err != nil {
			return fmt.Errorf("recrawl: %w", err)
		}
	}
	if err := b.Set(entryKey(key), encodeEntry(e), nil); err != nil {
		return fmt.Errorf("recrawl: %w", err)
	}
	if !e.Due.IsZero() {
		if err := b.Set(dueKey(e.Due, key), nil, nil); err != nil {
			return fmt.Errorf("recrawl: %w", err)
		}
	}
	return nil
}

// Rekey stages into b the move of e to Key(e.URL), if it is stored under
// another key (an earlier form of Key), and reports whether it was. When
// that key has an entry already, e is dropped instead: the entry stored
// under the URL's own key has the better claim. b is an indexed batch.
func Rekey(b *pebble.Batch, e Entry) (bool, error) {
	key := Key(e.URL)
	if key == e.Key {
		return false, nil
	}
	if err := b.Delete(entryKey(e.Key), nil); err != nil {
		return false, fmt.Errorf("recrawl: %w", err)
	}
	if !e.Due.IsZero() {
		if err := b.Delete(dueKey(e.Due, e.Key), nil); err != nil {
			return false, fmt.Errorf("recrawl: %w", err)
		}
	}
	if _, ok, err := GetKey(b, key); err != nil || ok {
		return true, err
	}
	e.Key = key
	return true, Put(b, nil, e)
}

// Take stages into b that e is queued for its visit: it leaves the due
// queue, and the visit's commit puts it back with its next due time.
func Take(b *pebble.Batch, e Entry) error {
	taken := e
	taken.Due = time.Time{}
	return Put(b, &e, taken)
}

// Due calls fn with each entry due at or before t, earliest first, until
// fn returns false. A due key that no longer matches its entry (one written
// over without its old due time, see Put) is passed with stale true: e then
// holds only Key and Due, the key's time, for DropDue.
func Due(db *pebble.DB, t time.Time, fn func(e Entry, stale bool) bool) error {
	hi := dueKey(t.Add(time.Second), "")
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(duePrefix), UpperBound: hi})
	if err != nil {
		return fmt.Errorf("recrawl: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < len(duePrefix)+8 {
			return fmt.Errorf("recrawl: corrupt due key %q", k)
		}
		key := string(k[len(duePrefix)+8:])
		at := time.Unix(int64(binary.BigEndian.Uint64(k[len(duePrefix):])), 0).UTC()
		e, ok, err := GetKey(db, key)
		if err != nil {
			return err
		}
		stale := !ok || e.Due.Unix() != at.Unix()
		if stale {
			e = Entry{Key: key, Due: at}
		}
		if !fn(e, stale) {
			break
		}
	}
	return it.Error()
}

// DropDue stages the removal of a stale due key, as Due reported it.
func DropDue(b *pebble.Batch, stale Entry) error {
	if err := b.Delete(dueKey(stale.Due, stale.Key), nil); err != nil {
		return fmt.Errorf("recrawl: %w", err)
	}
	return nil
}

// Next returns the earliest due time, if any URL is waiting.
func Next(db *pebble.DB) (time.Time, bool, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(duePrefix), UpperBound: []byte("v/e")})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("recrawl: %w", err)
	}
	defer it.Close()
	if !it.First() {
		return time.Time{}, false, it.Error()
	}
	k := it.Key()
	if len(k) < len(duePrefix)+8 {
		return time.Time{}, false, fmt.Errorf("recrawl: corrupt due key %q", k)
	}
	return time.Unix(int64(binary.BigEndian.Uint64(k[len(duePrefix):])), 0).UTC(), true, nil
}

// CountHost returns how many URLs of host (as urlkey.Host gives it) have
// entries, counting no further than limit. r is the database or an
// indexed batch.
func CountHost(r pebble.Reader, host string, limit int) (int, error) {
	n := 0
	for _, scheme := range []string{"http://", "https://"} {
		lo := entryKey(scheme + host + "/")
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: entryKey(scheme + host + "0")})
		if err != nil {
			return n, fmt.Errorf("recrawl: %w", err)
		}
		for it.First(); it.Valid() && n < limit; it.Next() {
			n++
		}
		err = it.Error()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return n, fmt.Errorf("recrawl: %w", err)
		}
	}
	return n, nil
}

// Empty reports whether no URL has an entry: one seek.
func Empty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(entryPrefix), UpperBound: []byte("v/v")})
	if err != nil {
		return false, fmt.Errorf("recrawl: %w", err)
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// Count returns how many URLs have entries and how many of them are due
// at or before t.
func Count(db *pebble.DB, t time.Time) (entries, due int, err error) {
	count := func(lo, hi []byte) (int, error) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return 0, fmt.Errorf("recrawl: %w", err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n, it.Error()
	}
	if entries, err = count([]byte(entryPrefix), []byte("v/v")); err != nil {
		return 0, 0, err
	}
	due, err = count([]byte(duePrefix), dueKey(t.Add(time.Second), ""))
	return entries, due, err
}

func entryKey(url string) []byte { return append([]byte(entryPrefix), url...) }

func dueKey(t time.Time, url string) []byte {
	k := make([]byte, 0, len(duePrefix)+8+len(url))
	k = append(k, duePrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(max(t.Unix(), 0)))
	return append(k, url...)
}

// The value encoding: a version byte, then uvarint-length-prefixed
// fields in a fixed order (see encodeEntry).
const entryVersion = 1

// maxDepth bounds the depth of a stored entry, far beyond any crawl's.
const maxDepth = 1 << 16

// maxHops bounds a stored entry's hop counts, far beyond the frontier's
// limits.
const maxHops = 255

// Bits of an entry's flags byte.
const (
	flagEmbed = 1 << iota
	flagHops  // the hop counts follow the flags
	flagHead  // Head follows them
	flagCut   // Cut follows them (after Head)
)

func encodeEntry(e Entry) []byte {
	state, _ := e.State.MarshalBinary() // cannot fail
	b := make([]byte, 0, 64+len(e.URL)+len(state)+len(e.ETag)+len(e.LastModified)+len(e.Digest)+len(e.Payload.URL)+len(e.Payload.RecordID)+8*len(e.Links))
	b = append(b, entryVersion)
	// Depth is clamped to what decodeEntry accepts: an entry that cannot
	// be read back would stop the due queue at it.
	b = binary.AppendUvarint(b, uint64(min(max(e.Depth, 0), maxDepth)))
	flags := byte(0)
	if e.Embed {
		flags |= flagEmbed
	}
	hops := e.Redirects > 0 || e.OffScopeHops > 0
	if hops {
		flags |= flagHops
	}
	if e.Head != 0 {
		flags |= flagHead
	}
	if e.Cut > 0 {
		flags |= flagCut
	}
	b = append(b, flags)
	if hops {
		b = binary.AppendUvarint(b, uint64(min(e.Redirects, maxHops)))
		b = binary.AppendUvarint(b, uint64(min(e.OffScopeHops, maxHops)))
	}
	if e.Head != 0 {
		b = binary.BigEndian.AppendUint64(b, e.Head)
	}
	if e.Cut > 0 {
		b = binary.AppendUvarint(b, uint64(e.Cut))
	}
	var due int64
	if !e.Due.IsZero() {
		due = e.Due.Unix()
	}
	b = binary.AppendVarint(b, due)
	var payloadTime int64
	if !e.Payload.Time.IsZero() {
		payloadTime = e.Payload.Time.UnixNano()
	}
	b = binary.AppendVarint(b, payloadTime)
	b = binary.BigEndian.AppendUint64(b, e.SimHash)
	for _, s := range [...]string{e.URL, string(state), e.ETag, e.LastModified, e.Digest, e.MIME, e.Payload.URL, e.Payload.RecordID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Links)))
	for _, h := range e.Links {
		b = binary.BigEndian.AppendUint64(b, h)
	}
	return b
}

var errCorrupt = errors.New("corrupt entry")

func decodeEntry(v []byte) (Entry, error) {
	if len(v) == 0 || v[0] != entryVersion {
		return Entry{}, errCorrupt
	}
	r := bytes.NewReader(v[1:])
	var e Entry
	depth, err := binary.ReadUvarint(r)
	if err != nil || depth > maxDepth {
		return Entry{}, errCorrupt
	}
	e.Depth = int(depth)
	flags, err := r.ReadByte()
	if err != nil || flags&^(flagEmbed|flagHops|flagHead|flagCut) != 0 {
		return Entry{}, errCorrupt
	}
	e.Embed = flags&flagEmbed != 0
	if flags&flagHops != 0 {
		redirects, err1 := binary.ReadUvarint(r)
		offScope, err2 := binary.ReadUvarint(r)
		if err1 != nil || err2 != nil || redirects > maxHops || offScope > maxHops {
			return Entry{}, errCorrupt
		}
		e.Redirects, e.OffScopeHops = int(redirects), int(offScope)
	}
	if flags&flagHead != 0 {
		var head [8]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return Entry{}, errCorrupt
		}
		e.Head = binary.BigEndian.Uint64(head[:])
	}
	if flags&flagCut != 0 {
		cut, err := binary.ReadUvarint(r)
		if err != nil || cut == 0 || cut > math.MaxInt64 {
			return Entry{}, errCorrupt
		}
		e.Cut = int64(cut)
	}
	due, err1 := binary.ReadVarint(r)
	payloadTime, err2 := binary.ReadVarint(r)
	var sh [8]byte
	_, err3 := r.Read(sh[:])
	if err1 != nil || err2 != nil || err3 != nil || r.Len() < 0 {
		return Entry{}, errCorrupt
	}
	e.SimHash = binary.BigEndian.Uint64(sh[:])
	if due != 0 {
		e.Due = time.Unix(due, 0).UTC()
	}
	if payloadTime != 0 {
		e.Payload.Time = time.Unix(0, payloadTime).UTC()
	}
	var state string
	for _, s := range [...]*string{&e.URL, &state, &e.ETag, &e.LastModified, &e.Digest, &e.MIME, &e.Payload.URL, &e.Payload.RecordID} {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Len()) {
			return Entry{}, errCorrupt
		}
		buf := make([]byte, n)
		r.Read(buf)
		*s = string(buf)
	}
	if err := e.State.UnmarshalBinary([]byte(state)); err != nil {
		return Entry{}, err
	}
	n, err := binary.ReadUvarint(r)
	// n is bounded before it is multiplied, so that a huge count cannot
	// wrap around to match the bytes left.
	if err != nil || n > MaxLinks || n*8 != uint64(r.Len()) {
		return Entry{}, errCorrupt
	}
	e.Links = make([]uint64, n)
	for i := range e.Links {
		r.Read(sh[:])
		e.Links[i] = binary.BigEndian.Uint64(sh[:])
	}
	return e, nil
}
