package crawl

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/extract"
	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/wacz"
	"github.com/waggle-archive/waggle/internal/warc"
)

// importedPrefix keys the records Import has written that the capture index
// does not cover (requests, metadata, warcinfo…): importedPrefix + the
// SHA-256 of the WARC-Record-ID, so importing a file again skips them too.
const importedPrefix = "k/imported/"

// Import groups: as for the committer, enough records to amortize the two
// fsyncs, and a bound on the bytes held in memory while a group is compressed.
const (
	importGroupRecords = 256
	importGroupBytes   = 64 << 20
)

// ImportStats say what Import did.
type ImportStats struct {
	Files      int   // files imported completely
	Records    int64 // WARC records read
	Written    int64 // records added to the archive
	Captures   int64 // captures indexed
	Duplicates int64 // records skipped: already in the archive
	Rejected   int64 // records not imported: their block does not match WARC-Block-Digest
	// Misdigested counts the captures whose SHA-1 WARC-Payload-Digest is
	// not their payload's: indexed by their payload's own, each named in a
	// warning.
	Misdigested int64
	// Unindexed counts the response, resource and revisit records kept in
	// the archive but not indexed — a URL that is not http(s), a date the
	// index cannot order — each named in a warning.
	Unindexed int64
	// Unresolved counts the revisits imported, by this Import or one
	// before, whose payload the archive does not hold once every file is
	// in: they replay once the records holding it are imported (or, on a
	// node, while another node holds them).
	Unresolved int64
}

// Import adds the records of WARC files (.warc or .warc.gz, a gzip member per
// record or one for the whole file, WARC/1.0 or 1.1) and WACZ files to the
// archive in the data directory data, so that they replay like crawled ones.
//
// Every record is written to a new segment as its own gzip member, its
// header fields and block unchanged (the writer labels every record
// WARC/1.1, and gives a record without WARC-Warcinfo-ID that of the segment's
// warcinfo record). Each response, resource and revisit record of an http(s)
// URL is indexed; a response or resource whose payload digest is new becomes
// the digest's first capture, for later revisits, and a revisit takes the
// SimHash of its digest's first capture, where the archive holds it.
//
// Import keeps the committer's protocol: a group of records is written and
// fsynced, then one pebble batch holds their index entries, the segments'
// committed ends and the counters, committed with fsync. A kill at any moment
// loses nothing that was committed, and the next Open or Import cuts off
// what was not.
//
// A record already in the archive is skipped. A capture is, when the index
// holds one of the same URL key within the precision of the WARC-Date with
// the same record ID, or the same URL, type, status and payload digest (see
// placeCapture); any other record by its WARC-Record-ID, which Import
// remembers, or by belonging to a duplicate capture (see knownRecord). So
// importing a file twice adds nothing the second time, and neither does
// importing a WACZ exported from the same archive.
//
// A damaged file (cut short, not a WARC, a corrupt gzip member) is imported
// up to the damage; the error names the file and the offset, and Import goes
// on with the next file. A WACZ is checked against its datapackage.json hashes
// before anything of it is imported. Failing to write or commit stops Import.
func Import(ctx context.Context, data string, files []string, log *slog.Logger) (ImportStats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	warcDir := filepath.Join(data, "warc")
	if err := os.MkdirAll(warcDir, 0o755); err != nil {
		return ImportStats{}, fmt.Errorf("import: %w", err)
	}
	db, err := OpenDB(data)
	if err != nil {
		return ImportStats{}, fmt.Errorf("import: %w", err)
	}
	defer db.Close()
	if err := reconcileSegments(db, warcDir, log, false); err != nil {
		return ImportStats{}, err
	}
	im, err := newImporter(db, warcDir, log)
	if err != nil {
		return ImportStats{}, err
	}
	var errs []error
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		err := im.importFile(ctx, f)
		if err != nil {
			errs = append(errs, err)
		}
		if im.broken != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	if im.w != nil {
		if err := im.w.Close(); err != nil && im.broken == nil {
			errs = append(errs, fmt.Errorf("import: %w", err))
		}
	}
	if im.broken == nil {
		if err := im.adoptOrphans(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return im.stats, errors.Join(errs...)
}

func newImporter(db *pebble.DB, warcDir string, log *slog.Logger) (*importer, error) {
	st, err := loadState(db)
	if err != nil {
		return nil, err
	}
	return &importer{db: db, warcDir: warcDir, log: log, state: st, dupCaptures: map[string]bool{}, seenDigests: map[string]string{},
		segInfo: map[string]string{}}, nil
}

// importer is the state of one Import.
type importer struct {
	db      *pebble.DB
	warcDir string
	log     *slog.Logger
	w       *warc.Writer
	state   state
	stats   ImportStats
	broken  error // a write or commit failed: nothing more can be made durable

	dupCaptures map[string]bool // record IDs of recent duplicate captures
	// seenDigests holds the payload digests of the responses and resources
	// this run indexed, or skipped as copies of captures held, by record
	// ID (at most maxSeenDigests): a revisit after one that names it by
	// WARC-Refers-To alone takes its digest at once, with no walk over
	// the index for it, and one naming a copy, whose ID is in no index, at
	// all.
	seenDigests map[string]string
	segInfo     map[string]string // segment name → its warcinfo record ID ("" if none)

}

// orphanPrefix keys, by record ID, the revisits Import indexed while the
// archive did not hold their payload. They are kept in the batch that
// indexes them, so that a later Import that brings the original adopts
// them too, and one cut short loses none. orphanRefPrefix keys those
// that name their original by record ID alone, by that ID (then the
// orphan's): a response indexed later, or skipped as a copy of one held,
// gives them its digest in its own batch (claimOrphans); one indexed
// before is found by a walk over the index (adoptOrphans).
const (
	orphanPrefix    = "k/import-orphan/"
	orphanRefPrefix = "k/import-orphan-ref/"
)

// orphanRefKey is the ref key of orphan recordID, which names refersTo:
// the length of refersTo first, so that the keys of one ID are exactly
// those that start as orphanRefKey(id, "") does.
func orphanRefKey(refersTo, recordID string) []byte {
	k := binary.AppendUvarint([]byte(orphanRefPrefix), uint64(len(refersTo)))
	return append(append(k, refersTo...), recordID...)
}

// orphan is what adoptOrphans needs of such a revisit.
type orphan struct {
	URLKey   string    `json:"k"`
	Time     time.Time `json:"t"`
	RecordID string    `json:"id"`
	Digest   string    `json:"d,omitempty"`
	RefersTo string    `json:"r,omitempty"` // WARC-Refers-To
	Target   string    `json:"u,omitempty"` // WARC-Refers-To-Target-URI
	TargetAt time.Time `json:"ut,omitzero"` // WARC-Refers-To-Date
	// Walk is set on one that names its original by record ID alone until
	// a walk over the index has looked for a capture indexed before it.
	Walk bool `json:"w,omitempty"`
}

// byIDAlone says whether o names its original by record ID alone.
func (o *orphan) byIDAlone() bool { return o.Digest == "" && o.RefersTo != "" }

func putOrphan(b *pebble.Batch, o orphan) error {
	v, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return b.Set([]byte(orphanPrefix+o.RecordID), v, nil)
}

// noteOrphan stages into b the orphan entry of revisit cp, from record rec.
func noteOrphan(b *pebble.Batch, cp index.Capture, rec *warc.Record) error {
	at, _ := warc.ParseDate(rec.Header.Get("WARC-Refers-To-Date"))
	o := orphan{URLKey: cp.URLKey, Time: cp.Time, RecordID: cp.RecordID, Digest: cp.Digest,
		RefersTo: rec.Header.Get("WARC-Refers-To"), Target: rec.Header.Get("WARC-Refers-To-Target-URI"), TargetAt: at}
	if o.byIDAlone() {
		o.Walk = true
		if err := b.Set(orphanRefKey(o.RefersTo, o.RecordID), nil, nil); err != nil {
			return err
		}
	}
	return putOrphan(b, o)
}

// freshOrphan returns o as b holds it now, which an adoption or a claim
// earlier in the same walk may have changed (ok false: gone), rather than
// as it was listed: writing the listed copy back would undo a claim whose
// reference is gone, for good.
func freshOrphan(b *pebble.Batch, o orphan) (orphan, bool, error) {
	v, closer, err := b.Get([]byte(orphanPrefix + o.RecordID))
	if errors.Is(err, pebble.ErrNotFound) {
		return orphan{}, false, nil
	}
	if err != nil {
		return orphan{}, false, fmt.Errorf("import: %w", err)
	}
	defer closer.Close()
	var now orphan
	if err := json.Unmarshal(v, &now); err != nil || now.RecordID != o.RecordID {
		return o, true, nil // unreadable or another record's: as listed
	}
	return now, true, nil
}

// claimOrphans stages into b, which must be indexed, the payload digest
// of the response or resource recordID for the orphans that name it by
// record ID alone: adoptOrphans then finds their original by digest.
func claimOrphans(b *pebble.Batch, recordID, digest string) error {
	if recordID == "" || digest == "" {
		return nil
	}
	prefix := orphanRefKey(recordID, "")
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	var refs [][]byte
	for it.First(); it.Valid(); it.Next() {
		refs = append(refs, bytes.Clone(it.Key()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, ref := range refs {
		id := string(ref[len(prefix):])
		v, closer, err := b.Get([]byte(orphanPrefix + id))
		if err == nil {
			var o orphan
			uerr := json.Unmarshal(v, &o)
			closer.Close()
			// Only the orphan the ref was made for: another record with
			// the same ID (a malformed file) may have taken its entry.
			if uerr == nil && o.RefersTo == recordID && o.Digest == "" {
				o.Digest, o.Walk = digest, false
				if err := putOrphan(b, o); err != nil {
					return err
				}
			}
		} else if !errors.Is(err, pebble.ErrNotFound) {
			return err
		}
		if err := b.Delete(ref, nil); err != nil {
			return err
		}
	}
	return nil
}

// adoptOrphans gives the revisits indexed before their originals, once
// the originals are in, what a revisit indexed after them has: the
// original's payload digest (for one that names it by WARC-Refers-To
// alone: claimed by a capture imported after it, or else found, once, by
// a walk over the index) and SimHash. A revisit named by URL and
// date, as replay finds its original, needs nothing more once the
// archive holds a capture there. An orphan whose revisit left the index
// (released, dropped as damaged) is deleted. It counts the revisits
// whose payload the archive still does not hold.
//
// A revisit adopted passes the digest on to those that name it by record
// ID, and one named by URL and date to those naming it so, in the next
// pass: a chain of revisits imported before its original resolves one
// link a pass, until a pass adopts nothing.
func (im *importer) adoptOrphans(ctx context.Context) error {
	for pass := 0; ; pass++ {
		im.stats.Unresolved = 0
		adopted, err := im.adoptPass(ctx)
		// A chain longer than replay follows would not replay anyway.
		if err != nil || adopted == 0 || im.stats.Unresolved == 0 || pass == archive.MaxRevisitChain {
			return err
		}
	}
}

// adoptPass is one pass of adoptOrphans over the orphans; it returns how
// many it adopted.
func (im *importer) adoptPass(ctx context.Context) (int, error) {
	b := im.db.NewIndexedBatch() // claimOrphans reads it
	defer b.Close()
	adopted := 0
	flush := func(force bool) error {
		if b.Count() == 0 || !force && b.Count() < 4096 {
			return nil
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		b.Reset()
		return nil
	}
	forget := func(o orphan) error {
		err := b.Delete([]byte(orphanPrefix+o.RecordID), nil)
		if o.RefersTo != "" {
			err = errors.Join(err, b.Delete(orphanRefKey(o.RefersTo, o.RecordID), nil))
		}
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		return flush(false)
	}
	adopt := func(o orphan, first index.Capture) error {
		cp, found, err := index.Lookup(im.db, o.URLKey, o.Time)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if found && cp.RecordID == o.RecordID && (cp.Digest != first.Digest || cp.SimHash != first.SimHash || notModifiedType(cp, first) != cp.MIME) {
			cp.Digest, cp.SimHash, cp.MIME = first.Digest, first.SimHash, notModifiedType(cp, first)
			if err := index.Put(b, cp); err != nil {
				return err
			}
		}
		if err := claimOrphans(b, o.RecordID, first.Digest); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		adopted++
		return forget(o)
	}
	byID := map[string][]orphan{} // not walked for yet, by the record ID they name
	walking := 0
	err := im.scanOrphans(ctx, func(o orphan) error {
		if held, err := index.HasRecord(im.db, o.URLKey, o.Time, o.RecordID); err != nil {
			return fmt.Errorf("import: %w", err)
		} else if !held {
			return forget(o) // released, or dropped as damaged
		}
		if o.Walk && o.byIDAlone() && walking < maxWalk {
			byID[o.RefersTo] = append(byID[o.RefersTo], o)
			walking++
			return nil
		}
		return im.placeOrphan(ctx, o, adopt)
	})
	if err != nil {
		return adopted, err
	}
	if len(byID) > 0 {
		err := index.New(im.db).Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
			os, ok := byID[c.RecordID]
			if !ok || c.Digest == "" {
				return true, nil
			}
			delete(byID, c.RecordID)
			for _, o := range os {
				o, ok, err := freshOrphan(b, o)
				if err != nil {
					return false, err
				}
				if !ok || o.Digest != "" {
					// Adopted meanwhile, or claimed by an original adopted
					// before it in this walk (claimOrphans): as it is now.
					if ok {
						err = im.placeOrphan(ctx, o, adopt)
					}
					if err != nil {
						return false, err
					}
					continue
				}
				if c.Type != warc.TypeRevisit {
					if err := adopt(o, c); err != nil {
						return false, err
					}
					continue
				}
				// A revisit named: o repeats the payload it repeats,
				// which the archive may hold or not.
				o.Digest, o.Walk = c.Digest, false
				if err := errors.Join(putOrphan(b, o), b.Delete(orphanRefKey(o.RefersTo, o.RecordID), nil)); err != nil {
					return false, fmt.Errorf("import: %w", err)
				}
				if err := im.placeOrphan(ctx, o, adopt); err != nil {
					return false, err
				}
			}
			return len(byID) > 0, nil
		})
		if err != nil {
			// Cut short: the walk is done again by the next Import.
			return adopted, errors.Join(fmt.Errorf("import: %w", err), flush(true))
		}
		for _, os := range byID {
			for _, o := range os {
				o, ok, err := freshOrphan(b, o)
				if err != nil {
					return adopted, err
				}
				if !ok {
					continue
				}
				// Walked for: from now on only an original imported later,
				// which claims it, resolves it.
				o.Walk = false
				if err := putOrphan(b, o); err != nil {
					return adopted, fmt.Errorf("import: %w", err)
				}
				if err := im.placeOrphan(ctx, o, adopt); err != nil {
					return adopted, err
				}
			}
		}
	}
	return adopted, flush(true)
}

// notModifiedType is the media type revisit cp is indexed with once its
// payload is known to be orig's: for a 304, which describes no bytes of its
// own (and may name a wrong type), orig's, as the crawler indexes its own;
// else its own.
func notModifiedType(cp, orig index.Capture) string {
	if cp.Status == http.StatusNotModified {
		return orig.MIME
	}
	return cp.MIME
}

// maxWalk bounds the orphans one Import walks the index for (and holds in
// memory meanwhile); the others wait for the next.
const maxWalk = 1 << 16

// placeOrphan adopts o if the archive now holds its payload, or leaves it
// counted as unresolved.
func (im *importer) placeOrphan(ctx context.Context, o orphan, adopt func(orphan, index.Capture) error) error {
	if o.Digest != "" {
		first, ok, err := index.ByDigest(im.db, o.Digest)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if ok {
			return adopt(o, first)
		}
	}
	if o.Target != "" && !o.TargetAt.IsZero() {
		// Named by URL and date, as Heritrix names it: replay finds the
		// original so (archive.Named), if the archive holds it.
		held, ok, revisit, err := archive.Named(ctx, archive.NewLocal(index.New(im.db), im.warcDir), o.Target, o.TargetAt, o.Digest)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if ok {
			return adopt(o, held)
		}
		if revisit != nil && revisit.Digest != "" && o.Digest == "" {
			// A revisit named, which repeats a payload replay finds by
			// its digest: held if the archive has a capture of it.
			first, ok, err := index.ByDigest(im.db, revisit.Digest)
			if err != nil {
				return fmt.Errorf("import: %w", err)
			}
			if ok {
				return adopt(o, first)
			}
		}
	}
	im.stats.Unresolved++
	return nil
}

// scanOrphans calls fn for each orphan entry; one that cannot be read is
// deleted (it can only cost a revisit its SimHash).
func (im *importer) scanOrphans(ctx context.Context, fn func(orphan) error) error {
	it, err := im.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(orphanPrefix), UpperBound: prefixEnd([]byte(orphanPrefix))})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var o orphan
		if err := json.Unmarshal(it.Value(), &o); err != nil || o.RecordID == "" {
			im.log.Warn("import: dropping an unreadable orphan entry", "key", string(it.Key()), "err", err)
			if err := im.db.Delete(bytes.Clone(it.Key()), pebble.NoSync); err != nil {
				return fmt.Errorf("import: %w", err)
			}
			continue
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return it.Error()
}

// pendingRecord is a record of the group being assembled.
type pendingRecord struct {
	rec     *warc.Record
	capture *index.Capture // nil when the record is not indexed
	ridKey  []byte         // importedPrefix key to set, or nil
}

// group is the records to be committed together.
type group struct {
	recs   []pendingRecord
	claims [][2]string // record ID and payload digest of duplicate captures skipped (see claimOrphans)
	bytes  int
	byKey  map[string][]*index.Capture // captures of this group by URL key
	rids   map[string]bool             // importedPrefix keys set in this group
}

// claim stages into b the claims of g's duplicate captures (claimOrphans).
func (g *group) claim(b *pebble.Batch) error {
	for _, c := range g.claims {
		if err := claimOrphans(b, c[0], c[1]); err != nil {
			return err
		}
	}
	return nil
}

func (g *group) reset() {
	g.recs, g.claims, g.bytes = g.recs[:0], g.claims[:0], 0
	clear(g.byKey)
	clear(g.rids)
}

// importFile imports one WARC or WACZ file.
func (im *importer) importFile(ctx context.Context, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("import: %w", err)
	} else if fi.IsDir() {
		return fmt.Errorf("import: %s is a directory, not a WARC or WACZ file", name)
	}
	var magic [4]byte
	n, _ := io.ReadFull(f, magic[:])
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if n == 4 && string(magic[:]) == "PK\x03\x04" {
		return im.importWACZ(ctx, name)
	}
	err = im.importStream(ctx, name, f)
	if err == nil {
		im.stats.Files++
	}
	return err
}

// importWACZ checks a WACZ against its manifest, then imports its WARC files.
func (im *importer) importWACZ(ctx context.Context, name string) error {
	r, err := wacz.Open(name)
	if err != nil {
		return fmt.Errorf("import: %w", err) // names the file
	}
	defer r.Close()
	warcs := r.WARCs()
	if len(warcs) == 0 {
		return fmt.Errorf("import: %s: the WACZ holds no WARC file in archive/", name)
	}
	// Verify first: a WACZ that fails its own manifest is not imported at all.
	if err := r.Verify(ctx); err != nil {
		return fmt.Errorf("import: %s: %w", name, err)
	}
	for _, w := range warcs {
		rc, err := r.Open(w)
		if err != nil {
			return fmt.Errorf("import: %s: %w", name, err)
		}
		err = im.importStream(ctx, name+": "+w, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	im.stats.Files++
	return nil
}

// importStream imports the records of one WARC stream, committing in groups.
// On a read error it commits the complete records before it and returns
// the error, which names the offset.
func (im *importer) importStream(ctx context.Context, label string, r io.Reader) error {
	rd, err := warc.NewReader(r)
	if err != nil {
		return fmt.Errorf("import: %s: %w", label, err)
	}
	g := &group{byKey: map[string][]*index.Capture{}, rids: map[string]bool{}}
	first := true
	for {
		if err := ctx.Err(); err != nil {
			if cerr := im.commit(g); cerr != nil {
				return cerr
			}
			return err
		}
		rec, loc, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if cerr := im.commit(g); cerr != nil {
				return cerr
			}
			if first && strings.Contains(err.Error(), "not a WARC record") {
				return fmt.Errorf("import: %s is neither a WARC nor a WACZ file: %w", label, err)
			}
			return fmt.Errorf("import: %s: %w (the records before it were imported)", label, err)
		}
		first = false
		im.stats.Records++
		if err := im.add(g, rec, label, loc.Offset); err != nil {
			return err
		}
		if len(g.recs) >= importGroupRecords || g.bytes >= importGroupBytes {
			if err := im.commit(g); err != nil {
				return err
			}
		}
	}
	return im.commit(g)
}

// add decides what to do with one record and stages it in the group.
func (im *importer) add(g *group, rec *warc.Record, label string, offset int64) error {
	if warc.VerifyBlock(rec) != nil {
		im.stats.Rejected++
		im.log.Warn("record rejected: its block does not match its digest", "file", label, "offset", offset,
			"record", rec.ID(), "digest", rec.Header.Get("WARC-Block-Digest"))
		return nil
	}
	cp, why := captureOf(rec)
	if cp == nil {
		dup, err := im.knownRecord(rec)
		if err != nil {
			return err
		}
		if dup {
			im.stats.Duplicates++
			return nil
		}
		// Not a capture: known by its record ID alone.
		var key []byte
		if id := rec.ID(); id != "" {
			key = index.RecordKey(importedPrefix, id)
			if g.rids[string(key)] {
				im.stats.Duplicates++
				return nil
			}
			if _, closer, err := im.db.Get(key); err == nil {
				closer.Close()
				im.stats.Duplicates++
				return nil
			} else if !errors.Is(err, pebble.ErrNotFound) {
				return fmt.Errorf("import: %w", err)
			}
			g.rids[string(key)] = true
		}
		g.recs = append(g.recs, pendingRecord{rec: rec, ridKey: key})
		g.bytes += len(rec.Block)
		if why != "" {
			im.stats.Unindexed++
			im.log.Warn("record imported but not indexed", "file", label, "offset", offset, "uri", rec.TargetURI(), "why", why)
		}
		return nil
	}
	if why != "" {
		im.stats.Misdigested++
		im.log.Warn("record indexed by its payload's digest", "file", label, "offset", offset, "uri", rec.TargetURI(), "why", why)
	}
	dup, err := im.placeCapture(g, cp, datePrecision(rec.Header.Get("WARC-Date")))
	if err != nil {
		return err
	}
	if dup {
		if cp.Type != warc.TypeRevisit && cp.RecordID != "" && cp.Digest != "" {
			// A revisit may name it by the ID of this copy: one before it
			// (its orphan is claimed), or after it in this run.
			g.claims = append(g.claims, [2]string{cp.RecordID, cp.Digest})
			im.seen(cp)
		}
		im.stats.Duplicates++
		if len(im.dupCaptures) >= maxDupCaptures {
			clear(im.dupCaptures)
		}
		if cp.RecordID != "" {
			im.dupCaptures[cp.RecordID] = true
		}
		return nil
	}
	g.byKey[cp.URLKey] = append(g.byKey[cp.URLKey], cp)
	g.recs = append(g.recs, pendingRecord{rec: rec, capture: cp})
	g.bytes += len(rec.Block)
	return nil
}

// maxSeenDigests bounds importer.seenDigests; past it, it starts again.
const maxSeenDigests = 1 << 16

// seen notes the digest of a capture this run indexed or skipped: a
// response's or resource's, or the one a revisit repeats, for a revisit
// naming that revisit in turn (a chain of 304s, each naming the visit
// before by record ID alone, as some tools write them).
func (im *importer) seen(cp *index.Capture) {
	if cp.RecordID == "" || cp.Digest == "" {
		return
	}
	if len(im.seenDigests) >= maxSeenDigests {
		clear(im.seenDigests)
	}
	im.seenDigests[cp.RecordID] = cp.Digest
}

// maxDupCaptures bounds the record IDs of duplicate captures remembered for
// knownRecord: the records that belong to a capture follow it closely.
const maxDupCaptures = 4096

// knownRecord recognizes records the archive has that Import did not write,
// so has no importedPrefix key for: the request and metadata records of a
// capture just found to be a duplicate (WARC-Concurrent-To it), and the
// warcinfo record of one of the archive's own segments (as in a WACZ
// exported from this archive).
func (im *importer) knownRecord(rec *warc.Record) (bool, error) {
	for _, f := range rec.Header.Fields() {
		if strings.EqualFold(f.Name, "WARC-Concurrent-To") && im.dupCaptures[f.Value] {
			return true, nil
		}
	}
	if rec.Type() != warc.TypeWarcinfo {
		return false, nil
	}
	name := rec.Header.Get("WARC-Filename")
	if name == "" || name != filepath.Base(name) {
		return false, nil
	}
	id, ok := im.segInfo[name]
	if !ok {
		f, err := os.Open(filepath.Join(im.warcDir, name))
		if errors.Is(err, os.ErrNotExist) {
			im.segInfo[name] = ""
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("import: %w", err)
		}
		r, _ := warc.NewReader(io.LimitReader(f, 1<<20))
		if first, _, err := r.Next(); err == nil && first.Type() == warc.TypeWarcinfo {
			id = first.ID()
		}
		f.Close()
		im.segInfo[name] = id
	}
	return id != "" && id == rec.ID(), nil
}

// maxSlotProbe bounds the search for a free index key among captures of one
// URL at one WARC-Date.
const maxSlotProbe = 1 << 16

// placeCapture finds cp's place in the index. The record's WARC-Date is
// cp.Time cut to the precision prec the date was written with, so the
// capture, if already archived, is at a time in [cp.Time, cp.Time+prec): a
// capture there with the same record ID, or the same URL, type, status and
// payload digest, makes cp a duplicate. (The crawler keeps nanoseconds in
// the index and writes microseconds in WARC-Date; other tools write
// seconds.) Otherwise cp.Time moves forward by nanoseconds, if need be, to a
// key no other capture holds: the index key is URL key and time, and two
// captures of a URL within a second are common in WARCs dated to the second.
func (im *importer) placeCapture(g *group, cp *index.Capture, prec time.Duration) (dup bool, err error) {
	same := func(o *index.Capture) bool {
		return (cp.RecordID != "" && o.RecordID == cp.RecordID) ||
			(o.URL == cp.URL && o.Type == cp.Type && o.Digest == cp.Digest && o.Status == cp.Status)
	}
	start, end := cp.Time, cp.Time.Add(prec)
	scanEnd := end.Add(maxSlotProbe)
	taken := map[int64]bool{}
	for _, o := range g.byKey[cp.URLKey] {
		if o.Time.Before(start) || !o.Time.Before(scanEnd) {
			continue
		}
		if o.Time.Before(end) && same(o) {
			return true, nil
		}
		taken[o.Time.UnixNano()] = true
	}
	// The index key is the URL key, a NUL and the time in nanoseconds
	// (see package index), so this is the range of times [start, scanEnd).
	lo, hi := slotKey(cp.URLKey, start), slotKey(cp.URLKey, scanEnd)
	err = index.New(im.db).Range(context.Background(), string(lo), string(hi), false, func(c index.Capture) (bool, error) {
		if c.Time.Before(end) && same(&c) {
			dup = true
			return false, nil
		}
		taken[c.Time.UnixNano()] = true
		return true, nil
	})
	if err != nil || dup {
		return dup, err
	}
	for k := range int64(maxSlotProbe) {
		if !taken[start.UnixNano()+k] {
			cp.Time = start.Add(time.Duration(k))
			return false, nil
		}
	}
	return false, fmt.Errorf("import: over %d captures of %s at %s", maxSlotProbe, cp.URL, cp.Time.Format(time.RFC3339))
}

// datePrecision is the unit of the last digit of a WARC-Date.
func datePrecision(s string) time.Duration {
	s = strings.TrimSpace(s)
	_, clock, ok := strings.Cut(s, "T")
	if !ok {
		switch len(s) {
		case 4:
			return 366 * 24 * time.Hour
		case 7:
			return 31 * 24 * time.Hour
		}
		return 24 * time.Hour
	}
	if i := strings.IndexAny(clock, "Z+-"); i >= 0 {
		clock = clock[:i]
	}
	if _, frac, ok := strings.Cut(clock, "."); ok {
		p := time.Second
		for i := 0; i < len(frac) && p > 1; i++ {
			p /= 10
		}
		return p
	}
	if strings.Count(clock, ":") >= 2 {
		return time.Second
	}
	return time.Minute
}

// slotKey identifies a capture's place in the index.
func slotKey(urlKey string, t time.Time) []byte {
	return binary.BigEndian.AppendUint64([]byte(urlKey+"\x00"), uint64(t.UnixNano()))
}

// commit makes a group durable in the committer's order: WARC records,
// fsync, then one synced pebble batch with their index entries, the
// segments' committed ends and the counters.
func (im *importer) commit(g *group) error {
	if im.broken != nil {
		return im.broken
	}
	defer g.reset()
	fail := func(err error) error {
		im.broken = fmt.Errorf("import: %w", err)
		return im.broken
	}
	if len(g.recs) == 0 {
		// Only copies of captures held: what revisits may name of them.
		if len(g.claims) == 0 {
			return nil
		}
		b := im.db.NewIndexedBatch()
		defer b.Close()
		if err := errors.Join(g.claim(b), b.Commit(pebble.Sync)); err != nil {
			return fail(err)
		}
		return nil
	}
	if im.w == nil {
		w, err := warc.NewWriter(im.warcDir, warc.WriterOptions{
			Prefix: "waggle",
			Info: []warc.Field{
				{Name: "software", Value: "waggle/0.1"},
				{Name: "format", Value: "WARC File Format 1.1"},
				{Name: "conformsTo", Value: "http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"},
				{Name: "description", Value: "records imported by waggle import; each keeps the WARC-Warcinfo-ID of its original file where it had one"},
			},
		})
		if err != nil {
			return fail(err)
		}
		im.w = w
	}
	recs := make([]*warc.Record, len(g.recs))
	for i, p := range g.recs {
		recs[i] = p.rec
	}
	locs, err := im.w.WriteGroup(recs)
	if err != nil {
		return fail(err)
	}
	if err := im.w.Sync(); err != nil {
		return fail(err)
	}
	b := im.db.NewIndexedBatch()
	defer b.Close()
	ends := map[string]int64{}
	st := im.state
	var captures int64
	for i, p := range g.recs {
		l := locs[i]
		ends[l.Segment] = max(ends[l.Segment], l.Offset+l.Length)
		if p.ridKey != nil {
			if err := b.Set(p.ridKey, nil, nil); err != nil {
				return fail(err)
			}
		}
		if p.capture == nil {
			continue
		}
		cp := *p.capture
		cp.Segment, cp.Offset, cp.Length = l.Segment, l.Offset, l.Length
		if cp.Type == warc.TypeRevisit {
			// Its original's SimHash, as a crawled or replicated revisit has,
			// if the archive holds the original: imported before, or earlier
			// in this batch (b is indexed: it reads its own PutDigest); if
			// not, adoptOrphans looks again.
			if d, ok := im.seenDigests[p.rec.Header.Get("WARC-Refers-To")]; ok && cp.Digest == "" {
				cp.Digest = d // named by record ID alone, met before in this run
			}
			var first index.Capture
			ok := false
			if cp.Digest != "" {
				if first, ok, err = index.ByDigest(b, cp.Digest); err != nil {
					return fail(err)
				}
			}
			if ok {
				cp.SimHash, cp.MIME = first.SimHash, notModifiedType(cp, first)
			} else if err := noteOrphan(b, cp, p.rec); err != nil {
				return fail(err)
			}
		}
		if err := claimOrphans(b, cp.RecordID, cp.Digest); err != nil {
			return fail(err)
		}
		im.seen(&cp)
		if err := index.Put(b, cp); err != nil {
			return fail(err)
		}
		if cp.Type != warc.TypeRevisit && cp.Digest != "" {
			_, seen, err := index.ByDigest(b, cp.Digest)
			if err != nil {
				return fail(err)
			}
			if !seen {
				if err := index.PutDigest(b, cp); err != nil {
					return fail(err)
				}
			}
		}
		captures++
		st.Bytes += int64(len(p.rec.Block))
	}
	if err := g.claim(b); err != nil {
		return fail(err)
	}
	st.Captures += captures
	if captures > 0 {
		// Imported URLs are revisited too: the next re-crawl schedules them.
		if err := b.Set([]byte(unscheduledKey), nil, nil); err != nil {
			return fail(err)
		}
	}
	if err := saveState(b, st, ends); err != nil {
		return fail(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fail(err)
	}
	im.state = st
	im.stats.Captures += captures
	im.stats.Written += int64(len(g.recs))
	return nil
}

// captureOf returns the index entry of a record that replays as a capture,
// without its location, or nil and why not when the record looks like one
// but cannot be indexed ("" for records that are no capture at all). A
// capture comes with a why too when its SHA-1 WARC-Payload-Digest is not
// its payload's: it is indexed by its payload's own, for the crawler takes
// a fetched payload with the digest an entry names for that entry's bytes
// and would otherwise store it as a revisit of other bytes.
func captureOf(rec *warc.Record) (*index.Capture, string) {
	typ := rec.Type()
	if typ != warc.TypeResponse && typ != warc.TypeRevisit && typ != warc.TypeResource {
		return nil, ""
	}
	uri := rec.TargetURI()
	if lower := strings.ToLower(uri); !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		scheme, _, _ := strings.Cut(lower, ":")
		switch scheme {
		case "dns", "metadata", "urn", "":
			// A crawler's own records (Heritrix's DNS lookups, metadata):
			// kept, with no page to replay, and too common to warn of.
			return nil, ""
		}
		return nil, fmt.Sprintf("a %.20s: URL, which replay does not serve (http and https only)", scheme)
	}
	if rec.Header.Get("WARC-Segment-Number") != "" {
		return nil, "a segmented record (WARC-Segment-Number) cannot be replayed"
	}
	key, err := urlkey.SURT(uri)
	if err != nil {
		return nil, "URL: " + err.Error()
	}
	date, err := rec.Date()
	if err != nil {
		return nil, err.Error()
	}
	if !index.OrderedTime(date) {
		return nil, "WARC-Date outside the years 1970 to 2262, which the index can hold in order"
	}
	cp := &index.Capture{URLKey: key, Time: date, URL: uri, Type: typ, RecordID: rec.ID()}
	digest := normalizeDigest(rec.Header.Get("WARC-Payload-Digest"))
	// readings are the payload, and for a response its bytes as sent
	// (chunk framing kept): what a claimed digest may be of.
	var readings [][]byte
	switch typ {
	case warc.TypeResource:
		cp.Status = 200
		cp.MIME = mediaType(http.Header{"Content-Type": {rec.Header.Get("Content-Type")}}, nil)
		readings = [][]byte{rec.Block}
	case warc.TypeResponse:
		status, h, ok := parseHTTPHead(rec.Block)
		if !ok {
			return nil, "the response record holds no HTTP response"
		}
		cp.Status, cp.MIME = status, mediaType(h, nil)
		cp.Redirect = redirectOf(uri, status, h)
		payload, _ := warc.HTTPBody(rec.Block, h)
		cp.SimHash = pageSimHash(status, h, payload)
		readings = [][]byte{payload, rec.Block[max(0, warc.HTTPHeaderEnd(rec.Block)):]}
	case warc.TypeRevisit:
		// A revisit's block is the response's HTTP head, or empty.
		if status, h, ok := parseHTTPHead(rec.Block); ok {
			cp.Status, cp.MIME = status, mediaType(h, nil)
			cp.Redirect = redirectOf(uri, status, h)
		}
	}
	switch {
	case readings == nil:
	case digest == "":
		digest = warc.Digest(readings[0])
	case !sha1Holds(digest, readings...):
		cp.Digest = warc.Digest(readings[0])
		return cp, fmt.Sprintf("its WARC-Payload-Digest %s is not its payload's (%s): indexed by its payload's", digest, cp.Digest)
	}
	cp.Digest = digest
	return cp, ""
}

// pageSimHash is the SimHash of the text of an archived HTML page, 0 for
// anything else: the payload of a response record, whose status and
// header are given. It reads the page as the crawler did when it fetched
// it (package extract), so that every node derives the same value.
func pageSimHash(status int, h http.Header, payload []byte) uint64 {
	if !hasSimHash(status, h) {
		return 0
	}
	body, err := fetch.DecodeContent(payload, h.Get("Content-Encoding"), fetch.DefaultMaxDecodedSize)
	if err != nil && len(body) == 0 {
		return 0
	}
	return extract.SimHash(body, h.Get("Content-Type"))
}

// parseHTTPHead parses the status line and header of a raw HTTP response,
// as every reader of archived responses does (warc.ReadHTTPHead).
func parseHTTPHead(block []byte) (int, http.Header, bool) {
	end := warc.HTTPHeaderEnd(block)
	if end < 0 {
		end = len(block)
	}
	hd := warc.ReadHTTPHead(block[:end])
	return hd.Status, hd.Header, hd.Status != 0
}

// redirectOf is the resolved Location of a 3xx response.
func redirectOf(uri string, status int, h http.Header) string {
	if status < 300 || status >= 400 {
		return ""
	}
	loc := h.Get("Location")
	if loc == "" {
		return ""
	}
	if u, err := urlkey.Canonical(uri, loc); err == nil {
		return u
	}
	return ""
}

// sha1Holds reports whether digest, normalized, is no SHA-1 digest (the
// crawler's are all SHA-1: no other can be taken for one of its payloads)
// or is that of one of the given readings of a payload: tools differ on
// whether a chunked body's framing is part of it.
func sha1Holds(digest string, readings ...[]byte) bool {
	if !strings.HasPrefix(digest, "sha1:") {
		return true
	}
	for _, b := range readings {
		if warc.DigestMatches(digest, b) {
			return true
		}
	}
	return false
}

// normalizeDigest writes a SHA-1 digest in the base-32 form the crawler
// uses, so that payloads compare equal whichever tool recorded them.
func normalizeDigest(d string) string {
	alg, v, ok := strings.Cut(strings.TrimSpace(d), ":")
	if !ok || !strings.EqualFold(alg, "sha1") {
		return strings.TrimSpace(d)
	}
	if len(v) == 40 {
		if b, err := hex.DecodeString(v); err == nil {
			return "sha1:" + base32.StdEncoding.EncodeToString(b)
		}
	}
	return "sha1:" + strings.ToUpper(v)
}
