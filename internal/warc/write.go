package warc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waggle-archive/waggle/internal/gzmember"
)

// WriterOptions configure a Writer; zero values mean the defaults listed.
type WriterOptions struct {
	Prefix         string           // file name prefix (default "waggle")
	MaxSegmentSize int64            // roll to a new segment past this size (default 1 GiB)
	Info           []Field          // warcinfo fields for each segment
	Now            func() time.Time // default time.Now
}

// Location is where a record's gzip member lies.
type Location struct {
	Segment string // file base name
	Offset  int64
	Length  int64
}

// Writer appends records to rolling segments, one gzip member per record.
// It is not safe for concurrent use.
type Writer struct {
	dir      string
	opts     WriterOptions
	f        *os.File
	name     string
	size     int64
	infoID   string
	infoSize int64               // size of the segment's warcinfo member
	rolled   bool                // a segment was created since the last Sync: the directory needs one too
	encoders []*gzmember.Encoder // one per encoding goroutine, kept: each has learnt Huffman codes from the records before
	arenas   [][]byte            // one per encoding goroutine: the members it made for the group being written
	buf      []byte              // the bytes of the last group written
}

// NewWriter starts a new segment in dir. It never appends to an existing
// file: after a crash the next run begins a fresh segment.
func NewWriter(dir string, opts WriterOptions) (*Writer, error) {
	if opts.Prefix == "" {
		opts.Prefix = "waggle"
	}
	if opts.MaxSegmentSize <= 0 {
		opts.MaxSegmentSize = 1 << 30
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Writer{dir: dir, opts: opts}
	if err := w.roll(); err != nil {
		return nil, err
	}
	return w, nil
}

// nextSeq returns one more than the highest sequence number of the prefix's segments in dir.
func (w *Writer) nextSeq() (int, error) {
	matches, err := filepath.Glob(filepath.Join(w.dir, w.opts.Prefix+"-*.warc.gz"))
	if err != nil {
		return 0, err
	}
	seq := 0
	for _, m := range matches {
		base := strings.TrimSuffix(filepath.Base(m), ".warc.gz")
		i := strings.LastIndexByte(base, '-')
		if n, err := strconv.Atoi(base[i+1:]); err == nil && n > seq {
			seq = n
		}
	}
	return seq + 1, nil
}

// Segments lists a directory's segment files in the order they were written.
func Segments(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil {
		return nil, err
	}
	seq := func(p string) int {
		base := strings.TrimSuffix(filepath.Base(p), ".warc.gz")
		n, _ := strconv.Atoi(base[strings.LastIndexByte(base, '-')+1:])
		return n
	}
	sort.Slice(matches, func(i, j int) bool { return seq(matches[i]) < seq(matches[j]) })
	return matches, nil
}

func (w *Writer) roll() error {
	if w.f != nil {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("warc: %w", err)
		}
		if err := w.f.Close(); err != nil {
			return fmt.Errorf("warc: %w", err)
		}
		w.f = nil
	}
	seq, err := w.nextSeq()
	if err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	name := fmt.Sprintf("%s-%s-%05d.warc.gz", w.opts.Prefix, w.opts.Now().UTC().Format("20060102150405"), seq)
	f, err := os.OpenFile(filepath.Join(w.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	w.f, w.name, w.size, w.rolled = f, name, 0, true
	info := NewWarcinfo(name, w.opts.Info)
	members, err := w.encodeAll([]*Record{info}, []bool{false})
	if err != nil {
		return err
	}
	if _, err := f.Write(members[0]); err != nil {
		return fmt.Errorf("warc: write %s: %w", name, err)
	}
	w.infoID, w.infoSize, w.size = info.ID(), int64(len(members[0])), int64(len(members[0]))
	return nil
}

// Segment is the name of the segment being written.
func (w *Writer) Segment() string { return w.name }

// Write appends rec as one gzip member, rolling to a new segment first if
// it would overflow this one. The record is not durable until Sync.
func (w *Writer) Write(rec *Record) (Location, error) {
	locs, err := w.WriteGroup([]*Record{rec})
	if err != nil {
		return Location{}, err
	}
	return locs[0], nil
}

// Sync makes everything written so far durable.
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("warc: sync %s: %w", w.name, err)
	}
	if w.rolled {
		d, err := os.Open(w.dir)
		if err != nil {
			return fmt.Errorf("warc: %w", err)
		}
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("warc: sync %s: %w", w.dir, err)
		}
		w.rolled = false
	}
	return nil
}

// Close syncs and closes the current segment.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

// WriteGroup appends records as one gzip member each, compressing them in
// parallel, and writes them with one write call. A group never straddles two
// segments: if it would overflow the current one, the segment rolls first
// (unless it holds nothing but its warcinfo record).
func (w *Writer) WriteGroup(recs []*Record) ([]Location, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	own := make([]bool, len(recs)) // records whose WARC-Warcinfo-ID we set
	for i, r := range recs {
		own[i] = r.Header.Get("WARC-Warcinfo-ID") == ""
	}
	members, err := w.encodeAll(recs, own)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, m := range members {
		total += len(m)
	}
	if w.size > w.infoSize && w.size+int64(total) > w.opts.MaxSegmentSize {
		if err := w.roll(); err != nil {
			return nil, err
		}
		if members, err = w.encodeAll(recs, own); err != nil { // new segment, new warcinfo ID
			return nil, err
		}
	}
	return w.append(members, total)
}

// WriteMembers appends gzip members, each holding one record, exactly as
// given — copies of records another writer made, which must stay byte for
// byte what they were — with one write, after rolling to a new segment if
// they would overflow this one. The caller has checked the members.
func (w *Writer) WriteMembers(members [][]byte) ([]Location, error) {
	total := 0
	for _, m := range members {
		total += len(m)
	}
	if total == 0 {
		return nil, nil
	}
	if w.size > w.infoSize && w.size+int64(total) > w.opts.MaxSegmentSize {
		if err := w.roll(); err != nil {
			return nil, err
		}
	}
	return w.append(members, total)
}

// maxKeptBuffer bounds the group buffer a Writer keeps between groups: a
// group of large payloads is not held in memory after it is written.
const maxKeptBuffer = 8 << 20

// maxKeptArena bounds each encoding goroutine's arena kept between groups
// (a group of small records needs some hundreds of KiB over all of them).
const maxKeptArena = 1 << 20

// append writes members, total bytes, at the end of the segment.
func (w *Writer) append(members [][]byte, total int) ([]Location, error) {
	buf := slices.Grow(w.buf[:0], total) // reused: a group is written with one call
	locs := make([]Location, len(members))
	off := w.size
	for i, m := range members {
		locs[i] = Location{Segment: w.name, Offset: off, Length: int64(len(m))}
		off += int64(len(m))
		buf = append(buf, m...)
	}
	n, err := w.f.Write(buf)
	if cap(buf) <= maxKeptBuffer {
		w.buf = buf
	}
	w.size += int64(n)
	if err != nil {
		return nil, fmt.Errorf("warc: write %s: %w", w.name, err)
	}
	return locs, nil
}

// encodeAll compresses records into gzip members on all CPUs.
func (w *Writer) encodeAll(recs []*Record, own []bool) ([][]byte, error) {
	for i, r := range recs {
		if own[i] {
			r.Header.Set("WARC-Warcinfo-ID", w.infoID)
		}
	}
	members := make([][]byte, len(recs))
	errs := make([]error, len(recs))
	workers := min(runtime.GOMAXPROCS(0), len(recs))
	for len(w.encoders) < workers {
		w.encoders = append(w.encoders, new(gzmember.Encoder))
		w.arenas = append(w.arenas, nil)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for j, enc := range w.encoders[:workers] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Members go one after another into the goroutine's arena,
			// reused from group to group: a member is only copied into
			// the group's write.
			arena := w.arenas[j][:0]
			defer func() {
				if cap(arena) <= maxKeptArena {
					w.arenas[j] = arena
				}
			}()
			var raw []byte
			for {
				i := int(next.Add(1) - 1)
				if i >= len(recs) {
					return
				}
				raw = recs[i].appendTo(raw[:0])
				start := len(arena)
				arena, errs[i] = enc.Append(arena, raw, compressionKind(recs[i]))
				members[i] = arena[start:len(arena):len(arena)]
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("warc: %w", err)
	}
	return members, nil
}

// compressionKind groups records for the encoder, which learns one Huffman
// code per group: records of one type are alike (requests are much the same
// headers, metadata records lists of links), records of different types not.
func compressionKind(r *Record) int {
	switch r.Header.Get("WARC-Type") {
	case "response":
		return 0
	case "request":
		return 1
	case "metadata":
		return 2
	case "revisit":
		return 3
	case "resource":
		return 4
	default:
		return 5
	}
}

// ValidSegmentName reports whether name can be a segment's base name, as
// another node may ask for one: letters, digits, '.', '_', '+' and '-',
// not starting with '.', ending in ".warc.gz". No separator, no "..",
// nothing a file system reads specially.
func ValidSegmentName(name string) bool {
	const suffix = ".warc.gz"
	if len(name) <= len(suffix) || len(name) > 255 || name[0] == '.' || !strings.HasSuffix(name, suffix) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '+', c == '-':
		case c == '.':
			if i > 0 && name[i-1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
