package archive

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Path is the prefix of the paths Handler serves, under which a node
// mounts it on its peer server's mux.
const Path = "/v1/archive/"

const (
	rangePath  = Path + "range"
	digestPath = Path + "digest"
	recordPath = Path + "record"
	// companionsPath answers the records written with a capture's: its
	// request and metadata records, which follow it in its segment.
	companionsPath = Path + "companions"
	// warcinfoPath answers the warcinfo record a segment starts with.
	warcinfoPath = Path + "warcinfo"

	// MaxRecordBytes bounds the length of a record (its gzip member) one
	// node reads from another.
	MaxRecordBytes = 1 << 30

	// maxParam bounds a URL key, range bound or digest in a request.
	maxParam = 64 << 10
	// flushEvery is how long captures may wait in the stream's buffer
	// before they are sent: a node merging streams waits for the first
	// capture of each, and a sparse scan may take a while to fill a buffer.
	flushEvery = 50 * time.Millisecond
)

// Handler serves l, this node's own archive, to the other nodes of its
// network, behind a peer.Server (it refuses a request that did not come
// through one, 403):
//
//	GET /v1/archive/range?lo=&hi=&reverse=&limit=
//	GET /v1/archive/range?key=&from=&to=&reverse=&limit=
//	GET /v1/archive/digest?d=
//	GET /v1/archive/record?segment=&offset=&length=
//	GET /v1/archive/companions?segment=&offset=&length=&id=
//	GET /v1/archive/warcinfo?segment=
//	GET /v1/archive/proof?segment=&offset=&length=&id=&nonce=
//	GET /v1/archive/summary
//
// range streams the captures of a key range, or of one key within a time
// window (from and to are 14-digit timestamps, a 14-digit to naming its
// whole second, or RFC 3339 times; either may be absent), at most limit of
// them if limit is positive; digest streams the capture ByDigest finds, if
// any, in the same format; record answers the bytes of one gzip member of a
// WARC segment in l's directory; companions answers the members right after
// the record at segment, offset and length whose records are concurrent to
// it (WARC-Concurrent-To: id), as frames: uvarint length, then the bytes;
// warcinfo answers the warcinfo record segment starts with, as one such
// frame, or none when it starts with another record; proof answers a
// payload proof (see proofPath);
// summary answers, in JSON, the Summary of the sites owns accepts (all of
// l's when owns is nil): the part of the network's summary this node
// counts.
func Handler(l *Local, owns func(site string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := peer.Caller(r.Context()); !ok {
			http.Error(w, "archive: not a peer request", http.StatusForbidden)
			return
		}
		var serve func(*Local, http.ResponseWriter, *http.Request, url.Values)
		switch r.URL.Path {
		case rangePath:
			serve = serveRange
		case digestPath:
			serve = serveDigest
		case recordPath:
			serve = serveRecord
		case companionsPath:
			serve = serveCompanions
		case warcinfoPath:
			serve = serveWarcinfo
		case proofPath:
			serve = serveProof
		case summaryPath:
			serve = func(l *Local, w http.ResponseWriter, r *http.Request, _ url.Values) { serveSummary(l, owns, w, r) }
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "archive: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			http.Error(w, "archive: query: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		serve(l, w, r, q)
	})
}

// A query is what a range request asks for: the captures of one key (byKey)
// between from and to, or those of the keys in [lo, hi).
type query struct {
	byKey    bool
	key      string
	from, to time.Time
	lo, hi   string
	reverse  bool
}

// values encodes q as the parameters of a range request.
func (q query) values() url.Values {
	v := url.Values{}
	if q.byKey {
		v.Set("key", q.key)
		if !q.from.IsZero() {
			v.Set("from", q.from.UTC().Format(time.RFC3339Nano))
		}
		if !q.to.IsZero() {
			v.Set("to", q.to.UTC().Format(time.RFC3339Nano))
		}
	} else {
		v.Set("lo", q.lo)
		if q.hi != "" {
			v.Set("hi", q.hi)
		}
	}
	if q.reverse {
		v.Set("reverse", "1")
	}
	return v
}

// parseQuery reads a range request's parameters.
func parseQuery(v url.Values) (q query, limit int64, err error) {
	for name, vals := range v {
		switch name {
		case "key", "from", "to", "lo", "hi", "reverse", "limit":
		default:
			return q, 0, fmt.Errorf("unknown parameter %.100q", name)
		}
		if len(vals) > 1 {
			return q, 0, fmt.Errorf("parameter %s given %d times", name, len(vals))
		}
		if len(vals[0]) > maxParam {
			return q, 0, fmt.Errorf("parameter %s longer than %d bytes", name, maxParam)
		}
	}
	q.byKey = v.Has("key")
	if q.byKey {
		if v.Has("lo") || v.Has("hi") {
			return q, 0, errors.New("key with lo or hi: ask for one key or a range")
		}
		if q.key = v.Get("key"); q.key == "" {
			return q, 0, errors.New("empty key")
		}
		if q.from, err = parseTime(v.Get("from"), false); err != nil {
			return q, 0, fmt.Errorf("from: %w", err)
		}
		if q.to, err = parseTime(v.Get("to"), true); err != nil {
			return q, 0, fmt.Errorf("to: %w", err)
		}
	} else {
		if v.Has("from") || v.Has("to") {
			return q, 0, errors.New("from and to apply to one key")
		}
		q.lo, q.hi = v.Get("lo"), v.Get("hi")
	}
	switch s := v.Get("reverse"); s {
	case "", "0", "false":
	case "1", "true":
		q.reverse = true
	default:
		return q, 0, fmt.Errorf("reverse %.20q: want 0, 1, true or false", s)
	}
	if s := v.Get("limit"); s != "" {
		limit, err = strconv.ParseInt(s, 10, 64)
		if err != nil || limit < 0 {
			return q, 0, fmt.Errorf("limit %.20q: want a count", s)
		}
	}
	return q, limit, nil
}

// parseTime reads a from or to bound: empty (open), a Wayback timestamp
// of 1 to 14 digits (a to bound names the last instant its digits cover),
// or an RFC 3339 time, to the nanosecond.
func parseTime(s string, last bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		t, err := index.ParseTimestamp(s, last)
		if err != nil {
			return time.Time{}, err
		}
		if last {
			t = t.Add(time.Second - 1)
		}
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%.40q is neither a 14-digit timestamp nor an RFC 3339 time", s)
	}
	return t, nil
}

func serveRange(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	q, limit, err := parseQuery(v)
	if err != nil {
		http.Error(w, "archive: range: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	scan := func(fn func(index.Capture) (bool, error)) error {
		switch {
		case !q.byKey:
			return l.Range(ctx, q.lo, q.hi, q.reverse, fn)
		case q.from.IsZero() && q.to.IsZero():
			return l.Captures(ctx, q.key, q.reverse, fn)
		default:
			return l.CapturesBetween(ctx, q.key, q.from, q.to, q.reverse, fn)
		}
	}
	stream(ctx, w, limit, scan)
}

func serveDigest(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	d := v.Get("d")
	if d == "" || len(d) > maxParam || len(v) != 1 || len(v["d"]) != 1 {
		http.Error(w, "archive: digest: want one parameter d, a payload digest", http.StatusBadRequest)
		return
	}
	stream(r.Context(), w, 0, func(fn func(index.Capture) (bool, error)) error {
		c, ok, err := l.ByDigest(r.Context(), index.Capture{}, d)
		if err != nil || !ok {
			return err
		}
		_, err = fn(c)
		return err
	})
}

// stream answers the captures scan gives, at most limit if limit > 0, as a
// capture stream, sending them as they come.
func stream(ctx context.Context, w http.ResponseWriter, limit int64, scan func(func(index.Capture) (bool, error)) error) {
	w.Header().Set("Content-Type", streamContentType)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 32<<10)
	enc, err := newCaptureEncoder(bw)
	if err == nil {
		// The headers and magic go at once: the caller learns that its
		// request was accepted while the scan seeks its first capture.
		err = flush(bw, rc)
	}
	if err != nil {
		return // the caller has gone
	}
	var n int64
	last := time.Now()
	gone := false // writing to the caller failed: it has gone
	err = scan(func(c index.Capture) (bool, error) {
		if err := enc.capture(c); err != nil {
			gone = !errors.Is(err, errOversize)
			return false, err
		}
		n++
		if n == 1 || time.Since(last) >= flushEvery {
			if err := flush(bw, rc); err != nil {
				gone = true
				return false, err
			}
			last = time.Now()
		}
		return limit <= 0 || n < limit, nil
	})
	if gone || ctx.Err() != nil {
		return // nobody reads the rest
	}
	if err != nil {
		err = enc.fail(err.Error())
	} else {
		err = enc.end()
	}
	if err == nil {
		flush(bw, rc)
	}
}

func flush(bw *bufio.Writer, rc *http.ResponseController) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	return rc.Flush()
}

func serveRecord(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	seg, off, length, err := parseLocation(v)
	if err != nil {
		http.Error(w, "archive: record: "+err.Error(), http.StatusBadRequest)
		return
	}
	f, _, ok := openSegment(l, w, "record", seg, off, length)
	if !ok {
		return
	}
	defer f.Close()
	sr := io.NewSectionReader(f, off, length)
	var magic [2]byte
	if _, err := sr.ReadAt(magic[:], 0); err != nil || magic != [2]byte{0x1f, 0x8b} {
		http.Error(w, fmt.Sprintf("archive: record: no gzip member at %d in %s", off, seg), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(length, 10))
	io.Copy(w, sr) // an error here is the caller gone or the disk failing mid-copy; the caller sees a short body
}

// openSegment opens segment seg of l for a read of length bytes at off,
// or answers why it cannot.
func openSegment(l *Local, w http.ResponseWriter, what, seg string, off, length int64) (*os.File, int64, bool) {
	// The root keeps the read inside the WARC directory whatever the
	// name, symbolic links included; the name check of parseLocation is
	// the first wall, this the second.
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		http.Error(w, "archive: "+what+": the WARC directory cannot be opened", http.StatusInternalServerError)
		return nil, 0, false
	}
	defer root.Close()
	f, err := root.Open(seg)
	if err != nil {
		// Missing, or a link out of the directory.
		http.Error(w, "archive: "+what+": no segment "+seg+" can be read", http.StatusNotFound)
		return nil, 0, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		http.Error(w, "archive: "+what+": no segment "+seg, http.StatusNotFound)
		return nil, 0, false
	}
	if off > fi.Size() || length > fi.Size()-off {
		f.Close()
		http.Error(w, fmt.Sprintf("archive: %s: %d bytes at %d run past the end of %s (%d bytes)", what, length, off, seg, fi.Size()),
			http.StatusBadRequest)
		return nil, 0, false
	}
	return f, fi.Size(), true
}

// Bounds on a companions answer: a capture's request and metadata
// records are small, and there are two of them.
const (
	maxCompanions     = 4
	maxCompanionBlock = 4 << 20
)

func serveCompanions(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	id := v.Get("id")
	ids := len(v["id"])
	v.Del("id")
	seg, off, length, err := parseLocation(v)
	if err == nil && (ids != 1 || id == "" || len(id) > 1024) {
		err = errors.New("id: want the capture's record ID")
	}
	if err != nil {
		http.Error(w, "archive: companions: "+err.Error(), http.StatusBadRequest)
		return
	}
	f, size, ok := openSegment(l, w, "companions", seg, off, length)
	if !ok {
		return
	}
	defer f.Close()
	locs, err := l.companionsIn(f, size, warc.Location{Segment: seg, Offset: off, Length: length}, id)
	if err != nil {
		http.Error(w, "archive: companions: "+err.Error(), http.StatusInternalServerError)
		return
	}
	writeFrames(w, "companions", f, locs)
}

func serveWarcinfo(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	seg := v.Get("segment")
	if len(v) != 1 || len(v["segment"]) != 1 || !warc.ValidSegmentName(seg) {
		http.Error(w, "archive: warcinfo: want one parameter, segment, the base name of a .warc.gz file", http.StatusBadRequest)
		return
	}
	f, size, ok := openSegment(l, w, "warcinfo", seg, 0, 0)
	if !ok {
		return
	}
	defer f.Close()
	loc, err := l.warcinfoIn(f, size, seg)
	if err != nil {
		http.Error(w, "archive: warcinfo: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var locs []warc.Location
	if loc.Length > 0 {
		locs = append(locs, loc)
	}
	writeFrames(w, "warcinfo", f, locs)
}

// writeFrames answers the members at locs of f as frames: uvarint length,
// then the bytes.
func writeFrames(w http.ResponseWriter, what string, f io.ReaderAt, locs []warc.Location) {
	members, err := readMembers(f, locs)
	if err != nil {
		http.Error(w, "archive: "+what+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	var body []byte
	for _, b := range members {
		body = binary.AppendUvarint(body, uint64(len(b)))
		body = append(body, b...)
	}
	w.Header().Set("Content-Type", companionsContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// companionsContentType is the media type of a companions answer.
const companionsContentType = "application/x-waggle-members"

// parseLocation reads and checks a record request's parameters.
func parseLocation(v url.Values) (seg string, off, length int64, err error) {
	for name, vals := range v {
		switch name {
		case "segment", "offset", "length":
		default:
			return "", 0, 0, fmt.Errorf("unknown parameter %.100q", name)
		}
		if len(vals) != 1 {
			return "", 0, 0, fmt.Errorf("parameter %s given %d times", name, len(vals))
		}
	}
	seg = v.Get("segment")
	if !warc.ValidSegmentName(seg) {
		return "", 0, 0, fmt.Errorf("segment %.100q is not the base name of a .warc.gz file", seg)
	}
	off, err = strconv.ParseInt(v.Get("offset"), 10, 64)
	if err != nil || off < 0 {
		return "", 0, 0, fmt.Errorf("offset %.30q: want a non-negative integer", v.Get("offset"))
	}
	length, err = strconv.ParseInt(v.Get("length"), 10, 64)
	if err != nil || length <= 0 || length > MaxRecordBytes {
		return "", 0, 0, fmt.Errorf("length %.30q: want 1 to %d", v.Get("length"), MaxRecordBytes)
	}
	return seg, off, length, nil
}
