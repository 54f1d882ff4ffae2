package archive

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

func sampleCaptures() []index.Capture {
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	return []index.Capture{
		{URLKey: "test,a)/", Time: t0, URL: "http://a.test/", Type: "response", Status: 200, MIME: "text/html",
			Digest: "sha1:AAAA", Segment: "waggle-20240501120000-00001.warc.gz", Offset: 0, Length: 812,
			RecordID: "<urn:uuid:1>"},
		{URLKey: "test,a)/", Time: t0.Add(time.Hour), URL: "http://a.test/", Type: "revisit", Status: 200,
			Digest: "sha1:AAAA", Segment: "waggle-20240501120000-00001.warc.gz", Offset: 812, Length: 400,
			RecordID: "<urn:uuid:2>"},
		{URLKey: "test,a)/b", Time: t0, URL: "http://a.test/b", Type: "response", Status: 301,
			Segment: "waggle-20240501120000-00002.warc.gz", Offset: 1 << 40, Length: 99, Redirect: "http://a.test/c"},
		{URLKey: "test,b)/", Time: time.Unix(0, 0).UTC(), URL: "http://b.test/", Type: "response"},
	}
}

func encodeStream(t testing.TB, caps []index.Capture, tail func(*captureEncoder) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	enc, err := newCaptureEncoder(bw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		if err := enc.capture(c); err != nil {
			t.Fatal(err)
		}
	}
	if tail == nil {
		tail = (*captureEncoder).end
	}
	if err := tail(enc); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeAll returns the captures of a stream and the error that ended it
// (io.EOF for a complete one).
func decodeAll(data []byte) ([]index.Capture, error) {
	dec, err := newCaptureDecoder(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var caps []index.Capture
	for {
		c, err := dec.next()
		if err != nil {
			return caps, err
		}
		caps = append(caps, c)
	}
}

func TestStreamRoundTrip(t *testing.T) {
	want := sampleCaptures()
	data := encodeStream(t, want, nil)
	got, err := decodeAll(data)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// Front coding: the second capture's key costs nothing but its shared length.
	if n := bytes.Count(data, []byte("test,a)/")); n != 1 {
		t.Errorf("key test,a)/ written %d times, want once", n)
	}

	got, err = decodeAll(encodeStream(t, want[:2], func(e *captureEncoder) error { return e.fail("disk on fire") }))
	var re remoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "disk on fire") || len(got) != 2 {
		t.Errorf("error frame: %d captures, %v", len(got), err)
	}
}

func TestStreamMalformed(t *testing.T) {
	full := encodeStream(t, sampleCaptures(), nil)
	endless := encodeStream(t, sampleCaptures(), func(*captureEncoder) error { return nil })
	for name, data := range map[string][]byte{
		"empty":               {},
		"bad magic":           []byte("WGC\x02"),
		"cut in a frame":      full[:len(full)-5],
		"no end frame":        endless,
		"data after the end":  append(append([]byte(nil), full...), 0),
		"wrong count":         append(append([]byte(nil), endless...), tagEnd, 1, 9),
		"unknown frame":       append(append([]byte(nil), endless...), 9, 0),
		"huge frame":          append(append([]byte(nil), streamMagic[:]...), tagCapture, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"shared past the key": append(append([]byte(nil), streamMagic[:]...), tagCapture, 2, 5, 0),
		"empty key":           append(append(append([]byte(nil), streamMagic[:]...), tagCapture, 13), make([]byte, 13)...),
	} {
		_, err := decodeAll(data)
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: %v; want an error", name, err)
		}
	}
	// A capture with a negative offset.
	bad := sampleCaptures()[:1]
	bad[0].Offset = -1
	if _, err := decodeAll(encodeStream(t, bad, nil)); !errors.Is(err, errStream) {
		t.Errorf("negative offset: %v", err)
	}
	// A capture too large to send is refused by the encoder, not sent.
	big := sampleCaptures()[:1]
	big[0].URL = strings.Repeat("x", maxFrame)
	enc, _ := newCaptureEncoder(bufio.NewWriter(io.Discard))
	if err := enc.capture(big[0]); !errors.Is(err, errOversize) {
		t.Errorf("oversize capture: %v", err)
	}
}

func FuzzDecodeCaptures(f *testing.F) {
	caps := sampleCaptures()
	f.Add(encodeStream(f, caps, nil))
	f.Add(encodeStream(f, nil, nil))
	f.Add(encodeStream(f, caps[:1], func(e *captureEncoder) error { return e.fail("x") }))
	f.Add(encodeStream(f, caps, func(*captureEncoder) error { return nil }))
	f.Add([]byte("WGC\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeAll(data)
		if !errors.Is(err, io.EOF) {
			return
		}
		// A stream that decodes whole encodes back to one that decodes
		// to the same captures.
		again, err := decodeAll(encodeStream(t, got, nil))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("re-encoded stream: %v", err)
		}
		if !reflect.DeepEqual(again, got) && !(len(again) == 0 && len(got) == 0) {
			t.Fatalf("re-encoded stream decodes differently:\n%+v\n%+v", again, got)
		}
	})
}

// A companions answer from a peer is checked record by record: garbage
// gives an error, never a panic, and what is accepted is whole records
// concurrent to the capture asked about.
func FuzzDecodeCompanions(f *testing.F) {
	const id = "<urn:uuid:00000000-0000-0000-0000-000000000001>"
	req := warc.NewRequest("http://example.com/", time.Unix(1700000000, 0), []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"))
	req.Header.Set("WARC-Concurrent-To", id)
	dir := f.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{Prefix: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	loc, err := w.Write(req)
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(dir, loc.Segment))
	if err != nil {
		f.Fatal(err)
	}
	member := seg[loc.Offset : loc.Offset+loc.Length]
	good := binary.AppendUvarint(nil, uint64(len(member)))
	good = append(good, member...)
	if ms, err := decodeCompanions(good, id); err != nil || len(ms) != 1 {
		f.Fatalf("a good answer: %d members, %v", len(ms), err)
	}
	if _, err := decodeCompanions(good, "<urn:uuid:another>"); err == nil {
		f.Fatal("a record concurrent to another capture was accepted")
	}
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte{0})
	f.Add(append(append([]byte{}, good...), good...))
	f.Fuzz(func(t *testing.T, body []byte) {
		members, err := decodeCompanions(body, id)
		if err != nil {
			return
		}
		for _, m := range members {
			rec, err := parseMember(m, index.Capture{Length: int64(len(m))})
			if err != nil || rec.Header.Get("WARC-Concurrent-To") != id {
				t.Fatalf("accepted a member that does not check: %v", err)
			}
		}
	})
}

// A warcinfo answer from a peer holds one warcinfo record or none; any other
// record, or more than one, is refused.
func TestDecodeWarcinfo(t *testing.T) {
	dir := t.TempDir()
	w, err := warc.NewWriter(dir, warc.WriterOptions{Prefix: "info"})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := w.Write(warc.NewRequest("http://example.com/", time.Unix(1700000000, 0), []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(dir, loc.Segment))
	if err != nil {
		t.Fatal(err)
	}
	at, err := (&Local{}).warcinfoIn(bytes.NewReader(seg), int64(len(seg)), loc.Segment)
	if err != nil || at.Length == 0 || at.Length != loc.Offset {
		t.Fatalf("warcinfo of a segment whose first record is at %d: %+v, %v", loc.Offset, at, err)
	}
	frame := func(members ...[]byte) []byte {
		var b []byte
		for _, m := range members {
			b = binary.AppendUvarint(b, uint64(len(m)))
			b = append(b, m...)
		}
		return b
	}
	info, request := seg[:at.Length], seg[loc.Offset:loc.Offset+loc.Length]
	if got, err := decodeWarcinfo(frame(info)); err != nil || !bytes.Equal(got, info) {
		t.Errorf("a warcinfo answer: %d bytes, %v", len(got), err)
	}
	if got, err := decodeWarcinfo(nil); err != nil || got != nil {
		t.Errorf("an empty answer: %d bytes, %v", len(got), err)
	}
	for name, body := range map[string][]byte{
		"a request record": frame(request),
		"two records":      frame(info, info),
		"a cut record":     frame(info[:len(info)-4]),
	} {
		if _, err := decodeWarcinfo(body); err == nil {
			t.Errorf("%s was accepted as a warcinfo answer", name)
		}
	}
	// The segment with its warcinfo record cut away starts with the request.
	if at, err := (&Local{}).warcinfoIn(bytes.NewReader(seg[loc.Offset:]), loc.Length, loc.Segment); err != nil || at.Length != 0 {
		t.Errorf("warcinfo of a segment starting with a request: %+v, %v", at, err)
	}
}
