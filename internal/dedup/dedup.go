// Package dedup is the content-seen test across a network of nodes
// (Apoidea's duplicate-content check): before storing a payload its own
// index does not know, a node asks whether the payload is archived anywhere
// in the network, and if so writes a revisit record pointing at the existing
// capture instead of a second copy of the payload.
//
// Each payload digest ("sha1:BASE32…", as in WARC-Payload-Digest) has an
// owner node on the ring. The owner keeps a Registry: digest → the Ref of
// the response record that first stored that payload anywhere in the
// network. A Client is the asking side:
//
//   - Client.Lookup asks a digest's owner whether the payload is archived.
//     Lookups from many crawl workers are coalesced: the digests for one
//     owner that arrive within ClientConfig.Window, or until
//     ClientConfig.MaxBatch of them, travel in one request, and at most a
//     few requests per owner are in flight at once (the digests arriving
//     meanwhile wait for the next one, so batches grow with the load).
//     Digests this node owns are answered from its own Registry. An error
//     means the owner could not be asked; the caller then stores the
//     payload, so a failed lookup costs a duplicate, never data. A request
//     is only for the digests somebody still waits for, and is cancelled
//     once nobody does; an owner that answers only after the callers of a
//     request gave up at their deadline is backed off from, as one that
//     cannot be reached is, and one with a few batches already waiting
//     for a request has further lookups fail at once.
//   - Client.Register queues the Refs of newly committed response captures
//     in memory, and Client.Run sends them in batches to their owners.
//     Only committed captures may be registered, so that a Ref never points
//     at a capture that was not made durable.
//
// The wiring, for a node:
//
//	reg := dedup.NewRegistry(db)
//	mux.Handle(dedup.Path, reg.Handler())      // behind the peer.Server
//	c := dedup.NewClient(dedup.ClientConfig{Self: id, Owner: ringOwner, Local: reg, Send: post})
//	go c.Run(ctx)
//	// worker, after a miss in its own index (index.ByDigest):
//	ref, ok, err := c.Lookup(ctx, digest) // ok: write a revisit to ref
//	// committer, after the commit batch is durable:
//	c.Register(newResponses)
//
// What is kept where, and what a failure costs:
//
//   - The registry is not replicated: an entry lives in its owner's pebble
//     database only (key prefix "x/", x/<digest> → Ref, and for an entry
//     that replaced a missing capture's, that capture's record ID, which a
//     hand-over passes on). Losing the owner loses dedup opportunities, not
//     data: the captures themselves are replicated by package replicate,
//     and every Ref names a capture by URL, time and record ID, which replay
//     finds on whichever node holds it.
//   - When the ring changes, lookups ask the new owner. Client.HandOver,
//     which a node runs on every ring change (and twice more, for what
//     peers with a lagging view registered meanwhile) and when it leaves,
//     moves the entries it keeps for digests another node now owns to that
//     node (as Apoidea's peers hand over keys), through the same register
//     requests, and removes them here once they are durable there. Until
//     an entry has arrived, and for the entries of an owner that failed
//     without leaving, a lookup misses: the first node to store such a
//     payload again registers it, so the registry refills itself at the
//     cost of one more copy per payload.
//   - The registration queue is in memory and bounded (ClientConfig.MaxQueue,
//     the oldest dropped beyond it, counted in Stats.Dropped); a registration
//     lost to the bound or a restart only costs a later duplicate. Queued
//     registrations go to whichever node owns their digest when they are
//     sent, and stay queued, with back-off, while it cannot be reached.
//   - Registration is first-wins: a Registry keeps the first Ref of a digest
//     and ignores later ones, so two nodes that stored the same payload at
//     the same time both keep their copies, and everyone else points at the
//     first registered. The one exception is Client.Replace: a node that
//     found the capture an entry names missing from the archive, and so
//     stored the payload again, registers its copy in that entry's place,
//     if the entry still names the missing capture.
//   - Any admitted node may register and replace entries, so a faulty one
//     can point an entry anywhere. That costs copies, not data: before a
//     node drops a payload on an entry's word, it checks that the archive
//     holds the capture named and that the node holding it can prove it
//     has the payload's bytes (package node, archive.PayloadProof), and
//     stores the payload, and replaces the entry, when either fails.
package dedup

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Path is the prefix of the paths a Registry's Handler serves, under which
// a node mounts it on its peer server's mux.
const Path = "/v1/dedup/"

const (
	lookupPath   = Path + "lookup"
	registerPath = Path + "register"
)

// Limits of the wire format and of a Ref.
const (
	// MaxDigestBytes is the longest payload digest a Ref may have.
	MaxDigestBytes = 128
	// MaxURLBytes is the longest URL a Ref may have.
	MaxURLBytes = 8192
	// MaxRecordIDBytes is the longest record ID a Ref may have.
	MaxRecordIDBytes = 256
	// MaxEntries is the most digests or Refs one request or answer holds.
	MaxEntries = 4096
	// MaxBodyBytes is the largest request or answer body.
	MaxBodyBytes = 4 << 20
)

// A Ref says where a payload is archived: the response record that stored
// it. It holds what a revisit record needs to refer to that record
// (WARC-Refers-To-Target-URI, WARC-Refers-To-Date, WARC-Refers-To) and what
// replay needs to find it on any node (URL and time).
type Ref struct {
	Digest   string    // WARC-Payload-Digest, "sha1:BASE32…"
	URL      string    // WARC-Target-URI of the response record
	Time     time.Time // WARC-Date of the response record
	RecordID string    // WARC-Record-ID of the response record, "<urn:uuid:…>"
}

// A registration is a Ref to register and, if it replaces the entry of a
// capture found missing from the archive, that capture's record ID.
type registration struct {
	Ref
	replaces string
}

// plain returns refs as registrations that replace nothing.
func plain(refs []Ref) []registration {
	regs := make([]registration, len(refs))
	for i, ref := range refs {
		regs[i].Ref = ref
	}
	return regs
}

func (r registration) check() error {
	if err := r.Ref.check(); err != nil {
		return err
	}
	if r.replaces != "" {
		if err := checkToken("record ID replaced", r.replaces, MaxRecordIDBytes); err != nil {
			return fmt.Errorf("%w (digest %s)", err, r.Digest)
		}
	}
	return nil
}

// check reports why r may not be registered or sent, or nil.
func (r Ref) check() error {
	if err := checkDigest(r.Digest); err != nil {
		return err
	}
	if err := checkURL(r.URL); err != nil {
		return fmt.Errorf("%w (digest %s)", err, r.Digest)
	}
	// Unix nanoseconds cover 1970 to 2262; no web capture is older.
	if ns := r.Time.UnixNano(); ns <= 0 || !time.Unix(0, ns).Equal(r.Time) {
		return fmt.Errorf("dedup: time %v of %s is outside 1970–2262", r.Time, r.Digest)
	}
	if err := checkToken("record ID", r.RecordID, MaxRecordIDBytes); err != nil {
		return fmt.Errorf("%w (digest %s)", err, r.Digest)
	}
	return nil
}

// checkDigest reports why d is not a payload digest, "algorithm:value" in
// printable ASCII, or nil.
func checkDigest(d string) error {
	if err := checkToken("digest", d, MaxDigestBytes); err != nil {
		return err
	}
	for i := 0; i < len(d); i++ {
		if d[i] == ':' {
			if i == 0 || i == len(d)-1 {
				break
			}
			return nil
		}
	}
	return fmt.Errorf("dedup: digest %q is not algorithm:value", d)
}

// checkToken reports why s is not 1 to max bytes of printable ASCII
// without spaces, or nil.
func checkToken(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("dedup: empty %s", what)
	case len(s) > max:
		return fmt.Errorf("dedup: %s of %d bytes is longer than %d", what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("dedup: %s %q has byte %#02x, not printable ASCII", what, s, s[i])
		}
	}
	return nil
}

// checkURL reports why u is not a URL a capture may have, or nil.
func checkURL(u string) error {
	switch {
	case u == "":
		return errors.New("dedup: empty URL")
	case len(u) > MaxURLBytes:
		return fmt.Errorf("dedup: URL of %d bytes is longer than %d", len(u), MaxURLBytes)
	case !utf8.ValidString(u):
		return errors.New("dedup: URL is not valid UTF-8")
	}
	for _, c := range u {
		// C0, DEL and C1 controls never belong in an archived URL.
		if c < 0x20 || (c >= 0x7f && c <= 0x9f) {
			return fmt.Errorf("dedup: URL contains control character %U", c)
		}
	}
	return nil
}
