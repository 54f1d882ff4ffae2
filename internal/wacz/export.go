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
	"path/filepath"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Source is the archive Export reads.
type Source struct {
	DB      *pebble.DB // the node's database, holding the capture index
	WARCDir string     // the directory of the WARC segments the index points into
	// TempDir holds the CDXJ and page lists while the WARC file is written
	// (they are small next to it). Default os.TempDir().
	TempDir string
}

// Stats say what an export wrote.
type Stats struct {
	Captures  int   // captures selected
	Originals int   // captures outside the selection included because a selected revisit refers to their payload
	Missing   int   // selected revisits whose payload is in no archived record (their replay will fail)
	Records   int   // WARC records written: captures, their request and metadata records, warcinfo records
	Pages     int   // lines of pages.jsonl
	WARCBytes int64 // size of the WARC file
}

// ErrNoCaptures reports a selection that matches nothing: there would be no
// WARC data to put in the WACZ.
var ErrNoCaptures = errors.New("wacz: no capture matches the selection")

// maxConcurrent bounds how many members after a capture are looked at for
// its request and metadata records (the crawler writes one of each).
const maxConcurrent = 4

// maxOpenSegments bounds the segment files kept open during an export.
const maxOpenSegments = 32

// Export writes a WACZ of the selected captures to w: archive/data.warc.gz,
// indexes/index.cdxj, pages/pages.jsonl, datapackage.json and
// datapackage-digest.json.
//
// Each selected response or revisit record is copied byte for byte, as the
// gzip member it is in its segment, followed by the request and metadata
// records the crawler wrote right after it (WARC-Concurrent-To the capture);
// each segment's warcinfo record is copied before its first record. A revisit
// needs the record holding its payload to replay: when that record is
// outside the selection it is copied too, and indexed. Records that other
// tools wrote before their response (wget's request records) are not
// included. The WARC file is stored in the ZIP uncompressed, as the
// specification requires; the index and JSON files are deflated.
//
// Records are streamed, and the index and page lists wait in temporary
// files: memory grows only with the number of payload records added for
// revisits.
func Export(ctx context.Context, w io.Writer, src Source, sel Selection) (Stats, error) {
	m, err := sel.matcher()
	if err != nil {
		return Stats{}, err
	}
	e := &exporter{
		src:      src,
		sel:      m,
		idx:      index.New(src.DB),
		open:     map[string]*os.File{},
		seenSegs: map[string]bool{},
		origSeen: map[string]bool{},
		buf:      make([]byte, 256<<10),
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

	err = e.idx.Range(ctx, m.lo, m.hi, false, func(c index.Capture) (bool, error) {
		if !m.contains(c) {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return true, e.selected(c)
	})
	if err != nil {
		return e.stats, err
	}
	if e.stats.Captures == 0 {
		return e.stats, ErrNoCaptures
	}
	// Originals go after the selection; their index lines are merged in order.
	var extra [][]byte
	for _, o := range e.originals {
		if err := ctx.Err(); err != nil {
			return e.stats, err
		}
		oc, err := e.copyCapture(o)
		if err != nil {
			return e.stats, err
		}
		extra = append(extra, index.AppendCDXJ(nil, oc))
		e.stats.Originals++
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
		_, err := io.CopyBuffer(w, e.pages, e.buf)
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
	src       Source
	sel       matcher
	idx       *index.Index
	out       *hashWriter
	cdx       *os.File
	cdxW      *bufio.Writer
	pages     *os.File
	pagesW    *bufio.Writer
	open      map[string]*os.File // segment files, at most maxOpenSegments
	seenSegs  map[string]bool     // segments whose warcinfo record is out
	originals []index.Capture
	origSeen  map[string]bool // segment and offset of originals already queued
	mr        memberReader
	buf       []byte // for copying
	block     []byte // for reading the start of a page's record
	stats     Stats
}

func (e *exporter) tempFile(kind string) (*os.File, error) {
	f, err := os.CreateTemp(e.src.TempDir, "waggle-wacz-*."+kind)
	if err != nil {
		return nil, fmt.Errorf("wacz: %w", err)
	}
	// Unlinked at the end (cleanup); the data stays readable through f.
	return f, nil
}

func (e *exporter) cleanup() {
	for _, f := range []*os.File{e.cdx, e.pages} {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
	for _, f := range e.open {
		f.Close()
	}
}

// selected exports one capture of the selection.
func (e *exporter) selected(c index.Capture) error {
	out, err := e.copyCapture(c)
	if err != nil {
		return err
	}
	e.stats.Captures++
	if _, err := e.cdxW.Write(index.AppendCDXJ(nil, out)); err != nil {
		return fmt.Errorf("wacz: %w", err)
	}
	if c.Type == warc.TypeRevisit {
		if err := e.needOriginal(c); err != nil {
			return err
		}
	}
	if isPage(c) {
		if err := e.page(c); err != nil {
			return err
		}
	}
	return nil
}

// needOriginal queues the record holding a revisit's payload when the
// selection does not include it.
func (e *exporter) needOriginal(c index.Capture) error {
	if c.Digest == "" {
		return nil // a revisit without payload digest (server-not-modified): nothing to resolve
	}
	o, ok, err := index.ByDigest(e.src.DB, c.Digest)
	if err != nil {
		return err
	}
	if !ok {
		e.stats.Missing++
		return nil
	}
	if e.sel.contains(o) {
		return nil
	}
	k := fmt.Sprintf("%s:%d", o.Segment, o.Offset)
	if !e.origSeen[k] {
		e.origSeen[k] = true
		e.originals = append(e.originals, o)
	}
	return nil
}

// copyCapture copies a capture's record and the records that belong to it,
// and returns the capture located in the new WARC file.
func (e *exporter) copyCapture(c index.Capture) (index.Capture, error) {
	f, err := e.segment(c.Segment)
	if err != nil {
		return c, err
	}
	var magic [2]byte
	if _, err := f.ReadAt(magic[:], c.Offset); err != nil || magic != [2]byte{0x1f, 0x8b} || c.Length <= 0 {
		return c, fmt.Errorf("wacz: the index places %s at %s offset %d, where no gzip member starts: index and WARC disagree", c.URL, c.Segment, c.Offset)
	}
	off := e.out.n
	if err := e.copyRaw(f, c.Segment, c.Offset, c.Length); err != nil {
		return c, err
	}
	e.stats.Records++
	// The crawler writes a capture's request and metadata records right after it.
	pos := c.Offset + c.Length
	for range maxConcurrent {
		if c.RecordID == "" {
			break
		}
		n, typ := e.concurrent(f, pos, c.RecordID)
		if n == 0 {
			break
		}
		if err := e.copyRaw(f, c.Segment, pos, n); err != nil {
			return c, err
		}
		e.stats.Records++
		pos += n
		if typ == warc.TypeMetadata {
			break // the last record of a capture, as the crawler and Heritrix write them
		}
	}
	out := c
	out.Segment, out.Offset = path.Base(pathWARC), off
	return out, nil
}

// concurrent returns the length and type of the member at pos if it holds
// a request or metadata record concurrent to the record id, else 0. The end
// of the file, or damage there, is a 0 too.
func (e *exporter) concurrent(f *os.File, pos int64, id string) (int64, string) {
	if err := e.mr.open(f, pos, 1<<62); err != nil {
		return 0, ""
	}
	p, err := e.mr.peek()
	if err != nil {
		return 0, ""
	}
	typ := p.Get("WARC-Type")
	if typ != warc.TypeRequest && typ != warc.TypeMetadata || !hasField(p, "WARC-Concurrent-To", id) {
		return 0, ""
	}
	n, err := e.mr.finish()
	if err != nil {
		return 0, ""
	}
	return n, typ
}

// copyRaw copies n bytes at off of a segment to the WARC file.
func (e *exporter) copyRaw(f *os.File, seg string, off, n int64) error {
	m, err := io.CopyBuffer(e.out, io.NewSectionReader(f, off, n), e.buf)
	if err != nil {
		return fmt.Errorf("wacz: copy from %s: %w", seg, err)
	}
	if m != n {
		return fmt.Errorf("wacz: %s ends at %d, inside the record the index places at %d (%d bytes): index and WARC disagree", seg, off+m, off, n)
	}
	return nil
}

// segment returns an open segment file; the first time a segment is used,
// its warcinfo record is copied, so WARC-Warcinfo-ID references resolve.
func (e *exporter) segment(name string) (*os.File, error) {
	name = filepath.Base(name)
	f, ok := e.open[name]
	if !ok {
		if len(e.open) >= maxOpenSegments {
			for n, g := range e.open { // segments are visited in no useful order: drop any
				g.Close()
				delete(e.open, n)
				break
			}
		}
		var err error
		if f, err = os.Open(filepath.Join(e.src.WARCDir, name)); err != nil {
			return nil, fmt.Errorf("wacz: %w", err)
		}
		e.open[name] = f
	}
	if !e.seenSegs[name] {
		e.seenSegs[name] = true
		if err := e.mr.open(f, 0, 1<<62); err == nil {
			if p, err := e.mr.peek(); err == nil && p.Get("WARC-Type") == warc.TypeWarcinfo {
				if n, err := e.mr.finish(); err == nil {
					if err := e.copyRaw(f, name, 0, n); err != nil {
						return nil, err
					}
					e.stats.Records++
				}
			}
		}
	}
	return f, nil
}

// isPage reports whether a capture is a page for pages.jsonl: an HTML
// document served with status 200.
func isPage(c index.Capture) bool {
	return c.Status == 200 && (c.MIME == "text/html" || c.MIME == "application/xhtml+xml") &&
		(c.Type == warc.TypeResponse || c.Type == warc.TypeRevisit || c.Type == warc.TypeResource)
}

// pageLine is one line of pages.jsonl.
type pageLine struct {
	ID    string `json:"id"`
	URL   string `json:"url"`
	TS    string `json:"ts"`
	Title string `json:"title,omitempty"`
}

func (e *exporter) page(c index.Capture) error {
	p := pageLine{URL: c.URL, TS: c.Time.UTC().Format(time.RFC3339)}
	sum := sha256.Sum256([]byte(c.URL + " " + c.Time.UTC().Format(time.RFC3339Nano)))
	p.ID = hex.EncodeToString(sum[:8])
	if c.Type == warc.TypeResponse {
		p.Title = e.title(c)
	}
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

// title returns the title of an HTML response, reading no more of the
// record than it needs to find it.
func (e *exporter) title(c index.Capture) string {
	f, err := e.segment(c.Segment)
	if err != nil || e.mr.open(f, c.Offset, c.Length) != nil {
		return ""
	}
	if _, err := e.mr.peek(); err != nil {
		return ""
	}
	block, err := e.mr.readBlock(e.block[:0], titleScan)
	if err != nil {
		return ""
	}
	title := pageTitle(block)
	if title == "" && len(block) == titleScan {
		if block, err = e.mr.readBlock(block, maxTitleScan-titleScan); err == nil {
			title = pageTitle(block)
		}
	}
	e.block = block
	return title
}

// mergeCDXJ writes the sorted CDXJ lines of r merged with the lines of
// extra, ordered by SURT key and timestamp.
func mergeCDXJ(w io.Writer, r io.Reader, extra [][]byte) error {
	sort.SliceStable(extra, func(i, j int) bool { return bytes.Compare(sortKey(extra[i]), sortKey(extra[j])) < 0 })
	bw := bufio.NewWriterSize(w, 64<<10)
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadBytes('\n')
	for {
		if len(line) == 0 && err != nil {
			break
		}
		for len(extra) > 0 && bytes.Compare(sortKey(extra[0]), sortKey(line)) < 0 {
			bw.Write(extra[0])
			extra = extra[1:]
		}
		bw.Write(line)
		if err != nil {
			break
		}
		line, err = br.ReadBytes('\n')
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, l := range extra {
		bw.Write(l)
	}
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
