package wacz

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// An Archive is what Export reads: archive.Local for one data directory,
// or archive.Network for a whole network, through one of its nodes.
type Archive interface {
	archive.Archive
	// CopyMember writes the gzip member holding c's record to w as it
	// reads it, checking that it reads back as c's record (block digest
	// included), and returns the record's header and the first head bytes
	// of its block. The block is never held whole: a member that inflates
	// to far more than its size costs no more memory than the member.
	CopyMember(ctx context.Context, c index.Capture, w io.Writer, head int) (warc.Header, []byte, error)
	// Companions returns the records written with c (its request and
	// metadata records) as gzip members.
	Companions(ctx context.Context, c index.Capture) ([][]byte, error)
	// Warcinfo returns the warcinfo record starting c's segment as a gzip
	// member, or nil when there is none.
	Warcinfo(ctx context.Context, c index.Capture) ([]byte, error)
}

// Source is the archive Export reads.
type Source struct {
	Archive Archive
	// TempDir holds the CDXJ and page lists while the WARC file is written
	// (they are small next to it), and the records too large to hold.
	// Default os.TempDir().
	TempDir string
	// MaxHeld is the size of the largest gzip member read into memory
	// until the WARC file's writer takes it; a larger one is copied into a
	// temporary file in TempDir as it is checked, and from there into the
	// WARC file. Default DefaultMaxHeld.
	MaxHeld int64
}

// DefaultMaxHeld is Source.MaxHeld's default: members up to 16 MiB (most
// pages, images and scripts) wait in memory.
const DefaultMaxHeld = 16 << 20

// Stats say what an export wrote.
type Stats struct {
	Captures  int // captures selected and written
	Originals int // captures outside the selection included because a selected revisit refers to their payload
	Missing   int // selected revisits whose payload is in no archived record (their replay will fail)
	// Unreadable counts the captures left out because their record could
	// not be read — damaged on disk, or on a node that could not be
	// reached; FirstError says why for the first of them.
	Unreadable int
	FirstError string
	// Unresolved counts the selected revisits written whose original (the
	// capture holding their payload) could not be looked up, a node not
	// answering: unless the selection has it, the WACZ lacks it, and they
	// do not replay from it. FirstUnresolved says why for the first.
	Unresolved      int
	FirstUnresolved string
	// Incomplete counts the captures written without their request and
	// metadata records, which could not be read (or are too large to
	// pass between nodes); FirstIncomplete says why for the first.
	Incomplete      int
	FirstIncomplete string
	// Unasked says which nodes could not be asked for their captures (an
	// archive.PartialError), when some could not: the export went on
	// with the others, and captures only those nodes hold are missing.
	Unasked   string
	Records   int   // WARC records written: captures, their request and metadata records, warcinfo records
	Pages     int   // lines of pages.jsonl
	WARCBytes int64 // size of the WARC file
}

// ErrNoCaptures reports a selection that matches nothing: there would be no
// WARC data to put in the WACZ.
var ErrNoCaptures = errors.New("wacz: no capture matches the selection")

// ErrUnreadable reports a selection whose captures all failed to be read.
var ErrUnreadable = errors.New("wacz: no capture could be read")

// Export writes a WACZ of the selected captures to w: archive/data.warc.gz,
// indexes/index.cdxj, pages/pages.jsonl, datapackage.json and
// datapackage-digest.json.
//
// Each selected response or revisit record is copied byte for byte, as the
// gzip member it is in its segment, once checked to read back (block digest
// included), followed by the request and metadata records the crawler wrote
// right after it (WARC-Concurrent-To the capture); each segment's warcinfo
// record is copied before its first record. A capture whose record cannot
// be read is left out and counted in Stats.Unreadable: one damaged record
// or unreachable node does not lose the rest; nor does a node that cannot
// be asked for its captures (Stats.Unasked). A revisit needs the record
// holding its payload to replay (archive.Original finds it, on any node):
// when that record is outside the selection it is copied too, and indexed.
// Records that other tools wrote before their response (wget's request
// records) are not included. The WARC file is stored in the ZIP
// uncompressed, as the specification requires; the index and JSON files
// are deflated.
//
// Records are read several captures ahead of the writer (at most
// prefetchBytes of them, or one larger record), records over
// Source.MaxHeld and the index and page lists wait in temporary files:
// memory grows only with the number of payload records added for
// revisits.
func Export(ctx context.Context, w io.Writer, src Source, sel Selection) (Stats, error) {
	m, err := sel.matcher()
	if err != nil {
		return Stats{}, err
	}
	e := &exporter{
		ctx:      ctx,
		src:      src,
		sel:      m,
		seenSegs: map[string]bool{},
		origSeen: map[string]bool{},
		chains:   archive.NewChains(),
	}
	defer e.cleanup()
	if e.cdx, err = e.tempFile("cdxj"); err != nil {
		return Stats{}, err
	}
	if e.pages, err = e.tempFile("pages"); err != nil {
		return Stats{}, err
	}
	e.cdxW = bufio.NewWriterSize(e.cdx, 64<<10)
	e.pagesW = bufio.NewWriterSize(e.pages, 64<<10)

	now := time.Now().UTC()
	zw := zip.NewWriter(w)
	ww, err := zw.CreateHeader(&zip.FileHeader{Name: pathWARC, Method: zip.Store, Modified: now})
	if err != nil {
		return Stats{}, fmt.Errorf("wacz: %w", err)
	}
	e.out = &hashWriter{w: ww, h: sha256.New()}

	var partial *archive.PartialError
	err = e.prefetch(func(yield func(index.Capture, bool) error) error {
		err := src.Archive.Range(ctx, m.lo, m.hi, false, func(c index.Capture) (bool, error) {
			if !m.contains(c) {
				return true, nil
			}
			return true, yield(c, true)
		})
		if errors.As(err, &partial) {
			return nil
		}
		return err
	}, e.selected)
	if err != nil {
		return e.stats, err
	}
	if partial != nil {
		e.stats.Unasked = partial.Error()
	}
	if e.stats.Captures == 0 && e.stats.Unreadable > 0 {
		return e.stats, fmt.Errorf("%w: none of the %d captures selected could be read; the first: %s", ErrUnreadable, e.stats.Unreadable, e.stats.FirstError)
	}
	if e.stats.Captures == 0 && partial != nil {
		return e.stats, fmt.Errorf("%w among those of the nodes that answered: %w", ErrNoCaptures, partial)
	}
	if e.stats.Captures == 0 {
		return e.stats, ErrNoCaptures
	}
	// Originals go after the selection; their index lines are merged in order.
	var extra [][]byte
	err = e.prefetch(func(yield func(index.Capture, bool) error) error {
		for _, o := range e.originals {
			if err := yield(o, false); err != nil {
				return err
			}
		}
		return nil
	}, func(f *fetched) error {
		oc, err := e.copyCapture(f)
		if err == nil && oc.Segment != "" {
			extra = append(extra, index.AppendCDXJ(nil, oc))
			e.stats.Originals++
		}
		return err
	})
	if err != nil {
		return e.stats, err
	}
	if err := ctx.Err(); err != nil {
		return e.stats, err // a record read may have been cut short by it and left out
	}
	e.stats.WARCBytes = e.out.n
	resources := []Resource{e.out.resource(pathWARC)}

	if err := e.cdxW.Flush(); err != nil {
		return e.stats, fmt.Errorf("wacz: %w", err)
	}
	if err := e.pagesW.Flush(); err != nil {
		return e.stats, fmt.Errorf("wacz: %w", err)
	}
	res, err := writeEntry(zw, pathIndex, now, func(w io.Writer) error {
		if _, err := e.cdx.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return mergeCDXJ(w, e.cdx, extra)
	})
	if err != nil {
		return e.stats, err
	}
	resources = append(resources, res)
	res, err = writeEntry(zw, pathPages, now, func(w io.Writer) error {
		if _, err := io.WriteString(w, `{"format":"json-pages-1.0","id":"pages","title":"All Pages"}`+"\n"); err != nil {
			return err
		}
		if _, err := e.pages.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err := io.Copy(w, e.pages)
		return err
	})
	if err != nil {
		return e.stats, err
	}
	resources = append(resources, res)

	pkg := Package{
		Profile:     "data-package",
		WACZVersion: Version,
		Title:       "waggle archive export",
		Description: "Exported from a waggle archive: " + sel.String() + ".",
		Created:     now.Format(time.RFC3339),
		Modified:    now.Format(time.RFC3339),
		Software:    "waggle",
		Resources:   resources,
	}
	pkgJSON, err := json.MarshalIndent(pkg, "", "  ")
	if err != nil {
		return e.stats, fmt.Errorf("wacz: %w", err)
	}
	pkgRes, err := writeEntry(zw, pathPackage, now, func(w io.Writer) error {
		_, err := w.Write(pkgJSON)
		return err
	})
	if err != nil {
		return e.stats, err
	}
	digestJSON, _ := json.MarshalIndent(packageDigest{Path: pathPackage, Hash: pkgRes.Hash}, "", "  ")
	if _, err := writeEntry(zw, pathPackageDigest, now, func(w io.Writer) error {
		_, err := w.Write(digestJSON)
		return err
	}); err != nil {
		return e.stats, err
	}
	if err := zw.Close(); err != nil {
		return e.stats, fmt.Errorf("wacz: %w", err)
	}
	return e.stats, nil
}

// exporter is the state of one Export.
type exporter struct {
	ctx       context.Context
	src       Source
	sel       matcher
	out       *hashWriter
	cdx       *os.File
	cdxW      *bufio.Writer
	pages     *os.File
	pagesW    *bufio.Writer
	seenSegs  map[string]bool // node and segment of those whose warcinfo record is out
	originals []index.Capture
	origSeen  map[string]bool // key, time and record ID of originals already queued
	chains    *archive.Chains // where the selection's chained revisits resolved
	titles    titleCache
	stats     Stats
}

func (e *exporter) tempFile(kind string) (*os.File, error) {
	f, err := os.CreateTemp(e.src.TempDir, "waggle-wacz-*."+kind)
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	// Unlinked at once, so that an export killed leaves nothing behind; the
	// data stays readable through f. (Where an open file cannot be removed,
	// cleanup tries again.)
	os.Remove(f.Name())
	return f, nil
}

func (e *exporter) cleanup() {
	for _, f := range []*os.File{e.cdx, e.pages} {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
}

// selected writes one capture of the selection.
func (e *exporter) selected(f *fetched) error {
	out, err := e.copyCapture(f)
	if err != nil || out.Segment == "" {
		return err
	}
	e.stats.Captures++
	if _, err := e.cdxW.Write(index.AppendCDXJ(nil, out)); err != nil {
		return fmt.Errorf("wacz: %w", err)
	}
	switch {
	case errors.Is(f.originalErr, archive.ErrNoOriginal):
		e.stats.Missing++
	case f.originalErr != nil:
		if err := e.failure(f.originalErr); err != nil {
			return err
		}
		tally(&e.stats.Unresolved, &e.stats.FirstUnresolved, f.c, f.originalErr)
	case f.original.URLKey != "":
		// The revisits a chain passes through go too: a copy of the
		// revisit resolves only through them when they name no digest.
		goes := append(slices.Clip(f.via), f.original)
		if f.standing.URLKey != "" {
			goes = append(goes, f.standing)
		}
		for _, o := range goes {
			if e.sel.contains(o) {
				continue
			}
			// By what it is, not where: replicas hold it on several nodes.
			k := fmt.Sprintf("%s %d %s", o.URLKey, o.Time.UnixNano(), o.RecordID)
			if !e.origSeen[k] {
				e.origSeen[k] = true
				e.originals = append(e.originals, o)
			}
		}
	}
	if f.page {
		return e.page(f.c, f.title)
	}
	return nil
}

// unreadable counts a capture left out, unless its reading failed with the
// export (failure).
func (e *exporter) unreadable(c index.Capture, err error) error {
	if err := e.failure(err); err != nil {
		return err
	}
	tally(&e.stats.Unreadable, &e.stats.FirstError, c, err)
	return nil
}

// failure returns the export's error when err, met reading one capture, is
// rather the export's: it was cancelled, err is a bug (errInternal), or a
// temporary file could not be written (archive.ErrWrite: a full disk).
func (e *exporter) failure(err error) error {
	if ctxErr := e.ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, errInternal) {
		return err
	}
	if errors.Is(err, archive.ErrWrite) {
		return fmt.Errorf("wacz: a record's temporary copy: %w", err)
	}
	return nil
}

// tally counts one more capture that err befell, keeping the first's why.
func tally(count *int, first *string, c index.Capture, err error) {
	if *count == 0 {
		*first = fmt.Sprintf("%s at %s: %v", c.URL, c.Timestamp14(), err)
	}
	*count++
}

// copyCapture writes a capture's record and the records that belong to
// it, and returns the capture located in the new WARC file. A capture
// whose record could not be read is counted and left out: its returned
// location is empty.
func (e *exporter) copyCapture(f *fetched) (index.Capture, error) {
	if f.err != nil {
		return index.Capture{}, e.unreadable(f.c, f.err)
	}
	if err := e.warcinfo(f.c); err != nil {
		return index.Capture{}, err
	}
	if f.companionsErr != nil {
		tally(&e.stats.Incomplete, &e.stats.FirstIncomplete, f.c, f.companionsErr)
	}
	off := e.out.n
	if f.spool != nil {
		if _, err := io.Copy(e.out, io.NewSectionReader(f.spool, 0, f.c.Length)); err != nil {
			return index.Capture{}, fmt.Errorf("wacz: %w", err)
		}
	} else if _, err := e.out.Write(f.member); err != nil {
		return index.Capture{}, fmt.Errorf("wacz: %w", err)
	}
	e.stats.Records++
	for _, m := range f.companions {
		if _, err := e.out.Write(m); err != nil {
			return index.Capture{}, fmt.Errorf("wacz: %w", err)
		}
		e.stats.Records++
	}
	out := f.c
	out.Segment, out.Offset, out.Node = path.Base(pathWARC), off, ""
	return out, nil
}

// warcinfo copies the warcinfo record of c's segment the first time a
// record of that segment is copied, so WARC-Warcinfo-ID references resolve.
func (e *exporter) warcinfo(c index.Capture) error {
	k := c.Node + "/" + c.Segment
	if e.seenSegs[k] {
		return nil
	}
	info, err := e.src.Archive.Warcinfo(e.ctx, c)
	if err != nil {
		return e.ctx.Err() // without it the records still replay; the next record of the segment tries again
	}
	e.seenSegs[k] = true
	if info == nil {
		return nil
	}
	if _, err := e.out.Write(info); err != nil {
		return fmt.Errorf("wacz: %w", err)
	}
	e.stats.Records++
	return nil
}

// isPage reports whether a capture is a page for pages.jsonl: an HTML
// document served with status 200. For a revisit, that is what its
// original is (revisitsPage).
func isPage(c index.Capture) bool {
	return c.Status == 200 && isHTML(c.MIME) && (c.Type == warc.TypeResponse || c.Type == warc.TypeResource)
}

// revisitsPage reports whether a revisit whose payload is in original
// replays as a page: one answered 200 with an HTML document, its own
// status and type (the bytes may first have been archived as a 404, or
// under another URL); a 304, when what it says still stands (standing,
// else original: archive.Standing) is one; a revisit with no HTTP head at
// all, which replays as its original, when that is a page. Such a 304 need
// not name a media type (other tools' do not), nor can a revisit without a
// head.
func revisitsPage(c, original, standing index.Capture) bool {
	if c.Type != warc.TypeRevisit || c.MIME != "" && !isHTML(c.MIME) {
		return false
	}
	switch {
	case c.Status == 200:
		return c.MIME != "" && isHTML(original.MIME)
	case c.Status == 304 && standing.URLKey != "":
		return standing.Status == 200 && isHTML(standing.MIME) && isHTML(original.MIME)
	case c.Status == 304 || c.Status == 0:
		return isPage(original)
	}
	return false
}

func isHTML(mime string) bool { return mime == "text/html" || mime == "application/xhtml+xml" }

// pageLine is one line of pages.jsonl.
type pageLine struct {
	ID    string `json:"id"`
	URL   string `json:"url"`
	TS    string `json:"ts"`
	Title string `json:"title,omitempty"`
}

func (e *exporter) page(c index.Capture, title string) error {
	p := pageLine{URL: c.URL, TS: c.Time.UTC().Format(time.RFC3339)}
	sum := sha256.Sum256([]byte(c.URL + " " + c.Time.UTC().Format(time.RFC3339Nano)))
	p.ID = hex.EncodeToString(sum[:8])
	p.Title = title
	js, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("wacz: %w", err)
	}
	if _, err := e.pagesW.Write(append(js, '\n')); err != nil {
		return fmt.Errorf("wacz: %w", err)
	}
	e.stats.Pages++
	return nil
}

// mergeCDXJ writes the CDXJ lines of r, which come in SURT key and time
// order, merged with the lines of extra, in byte order (as `LC_ALL=C sort`
// has it): the lines of one key and second, which the 14-digit timestamp
// does not tell apart, are gathered from both and sorted by their bytes.
func mergeCDXJ(w io.Writer, r io.Reader, extra [][]byte) error {
	slices.SortStableFunc(extra, func(a, b []byte) int { return bytes.Compare(sortKey(a), sortKey(b)) })
	bw := bufio.NewWriterSize(w, 64<<10)
	var run [][]byte // lines of one key and second
	flush := func() {
		slices.SortFunc(run, bytes.Compare)
		for _, l := range run {
			bw.Write(l)
		}
		run = run[:0]
	}
	add := func(line []byte) {
		if len(run) > 0 && !bytes.Equal(sortKey(run[0]), sortKey(line)) {
			flush()
		}
		run = append(run, line)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			for len(extra) > 0 && bytes.Compare(sortKey(extra[0]), sortKey(line)) <= 0 {
				add(extra[0])
				extra = extra[1:]
			}
			add(line)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	for _, l := range extra {
		add(l)
	}
	flush()
	return bw.Flush()
}

// sortKey is the "<urlkey> <timestamp>" part of a CDXJ line.
func sortKey(line []byte) []byte {
	i := bytes.IndexByte(line, ' ')
	if i < 0 {
		return line
	}
	j := bytes.IndexByte(line[i+1:], ' ')
	if j < 0 {
		return line
	}
	return line[:i+1+j]
}

// writeEntry writes a deflated ZIP entry and returns its manifest entry.
func writeEntry(zw *zip.Writer, name string, mod time.Time, fill func(io.Writer) error) (Resource, error) {
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mod})
	if err != nil {
		return Resource{}, fmt.Errorf("wacz: %s: %w", name, err)
	}
	hw := &hashWriter{w: w, h: sha256.New()}
	if err := fill(hw); err != nil {
		return Resource{}, fmt.Errorf("wacz: %s: %w", name, err)
	}
	return hw.resource(name), nil
}

// hashWriter counts and hashes what it passes on.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

func (hw *hashWriter) resource(name string) Resource {
	return Resource{Name: path.Base(name), Path: name, Hash: sha256Value(hw.h), Bytes: hw.n}
}
