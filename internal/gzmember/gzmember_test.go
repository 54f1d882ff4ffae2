package gzmember

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// record makes a WARC-like record: headers, an HTTP message and an HTML body
// of about size bytes, different for every i.
func record(r *rand.Rand, i, size int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:%08x-%04x-4%03x-8%03x-%012x>\r\n", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), r.IntN(1<<12), r.Uint64()&(1<<48-1))
	fmt.Fprintf(&b, "WARC-Date: 2026-11-23T04:%02d:%02d.%06dZ\r\nWARC-Target-URI: http://www.site%d.test/page/%d.html\r\n", i%60, r.IntN(60), r.IntN(1e6), i%50, i)
	fmt.Fprintf(&b, "Content-Type: application/http;msgtype=response\r\nWARC-Payload-Digest: sha1:%032X\r\n\r\n", r.Uint64())
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: max-age=600\r\n\r\n<html><head><title>Page</title></head><body>\n")
	words := []string{"archive", "the", "web", "of", "page", "link", "capture", "history", "library", "a", "record", "time"}
	for b.Len() < size {
		fmt.Fprintf(&b, "<p><a href=\"/page/%d.html\">%s %s</a> %s.</p>\n", r.IntN(1000), words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))])
	}
	b.WriteString("</body></html>\r\n\r\n")
	return []byte(b.String())
}

// decodeOne reads exactly one gzip member from m with the standard library
// and checks that nothing follows it.
func decodeOne(t testing.TB, m []byte) []byte {
	t.Helper()
	br := bytes.NewReader(m)
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatalf("gzip header: %v", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if br.Len() != 0 {
		t.Fatalf("%d bytes after the member", br.Len())
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 20000)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	inputs := [][]byte{
		nil,
		{'a'},
		[]byte("aaaa"),
		[]byte("abcabcabcabcabcabcabcabc"),
		bytes.Repeat([]byte{0}, SmallMax),        // longest matches, at the size limit
		bytes.Repeat([]byte("xy"), SmallMax/2+1), // just above: the large path
		random,
		random[:SmallMax/2],
	}
	var e Encoder
	// Members before and after the code is learnt.
	for i := range 300 {
		inputs = append(inputs, record(r, i, 200+r.IntN(6000)))
	}
	inputs = append(inputs, random, nil, []byte{'z'}, bytes.Repeat(random[:100], 300))
	var dst []byte
	for i, in := range inputs {
		var err error
		dst, err = e.Append(dst[:0], in, 0)
		if err != nil {
			t.Fatal(err)
		}
		if out := decodeOne(t, dst); !bytes.Equal(out, in) {
			t.Fatalf("input %d (%d bytes): decoded %d bytes, not the input", i, len(in), len(out))
		}
	}
	if !e.kinds[0].built {
		t.Fatal("no code learnt after 300 records")
	}
}

// blockType is the BTYPE of a member's first (and only) block.
func blockType(m []byte) byte { return m[10] >> 1 & 3 }

func TestBlockChoice(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var e Encoder
	tiny, _ := e.Append(nil, []byte("GET / HTTP/1.1\r\n\r\n"), 0)
	if bt := blockType(tiny); bt != 1 {
		t.Errorf("a tiny input went into block type %d, want the fixed code (1)", bt)
	}
	random := make([]byte, 4000)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	m, _ := e.Append(nil, random, 0)
	if bt := blockType(m); bt != 0 {
		t.Errorf("random bytes went into block type %d, want stored (0)", bt)
	}
	if len(m) > len(random)+10+5+8 {
		t.Errorf("random bytes: member of %d bytes for %d", len(m), len(random))
	}
	var last []byte
	for i := range 100 {
		last, _ = e.Append(nil, record(r, i, 3000), 0)
	}
	if bt := blockType(last); bt != 2 {
		t.Errorf("a record after 100 others went into block type %d, want the learnt code (2)", bt)
	}
	// A byte the records never had has no code in the learnt code: the
	// member needs another.
	odd := append(record(r, 101, 3000), 0xfe, 0xfe, 0xfe)
	m, _ = e.Append(nil, odd, 0)
	if bt := blockType(m); bt == 2 {
		t.Errorf("a record with a byte the code lacks went into the learnt code")
	}
	if out := decodeOne(t, m); !bytes.Equal(out, odd) {
		t.Errorf("a record with a byte the code lacks: decoded %d bytes, not the input", len(out))
	}
}

// TestCompressionRatio compares the members' total size with klauspost's
// level 2, which the WARC writer used before, on WARC-like records: the
// learnt code must not give much of it away.
// A record whose payload does not compress (here random bytes, as a
// gzip-encoded body or an image is) keeps its headers compressed: the
// payload goes in a stored block of its own.
func TestStoredTail(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var e Encoder
	var members, heads, payloads int
	for i := range 200 {
		head := record(r, i, 0)
		payload := make([]byte, 300+r.IntN(4000))
		for j := range payload {
			payload[j] = byte(r.Uint32())
		}
		src := append(append(head, payload...), "\r\n\r\n"...) // as a WARC record ends
		m, err := e.Append(nil, src, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeOne(t, m); !bytes.Equal(got, src) {
			t.Fatalf("record %d: round trip differs", i)
		}
		if i >= 20 { // once the code is learnt
			members, heads, payloads = members+len(m), heads+len(head), payloads+len(payload)
		}
	}
	// Coding the payload too, or storing the whole record, would cost the
	// payload and most of the head; this is the payload and a compressed
	// head. (A head with a byte the learnt code lacks takes the fixed code,
	// which compresses it less.)
	if members > payloads+heads*4/5 {
		t.Errorf("%d bytes for %d of heads and %d of payloads", members, heads, payloads)
	}
}

func TestCompressionRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var e Encoder
	var ours, theirs int
	var buf bytes.Buffer
	kw, _ := kgzip.NewWriterLevel(&buf, 2)
	for i := range 2000 {
		in := record(r, i, 300+r.IntN(8000))
		m, err := e.Append(nil, in, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours += len(m)
		buf.Reset()
		kw.Reset(&buf)
		kw.Write(in)
		kw.Close()
		theirs += buf.Len()
	}
	t.Logf("2000 records: %d bytes here, %d with klauspost level 2 (%.3f)", ours, theirs, float64(ours)/float64(theirs))
	if float64(ours) > 1.10*float64(theirs) {
		t.Errorf("members take %d bytes, more than 10%% above klauspost's %d", ours, theirs)
	}
}

func TestLimitedLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	fib := make([]uint64, 40) // Fibonacci counts make the deepest Huffman trees
	fib[0], fib[1] = 1, 1
	for i := 2; i < len(fib); i++ {
		fib[i] = fib[i-1] + fib[i-2]
	}
	cases := [][]uint64{fib, {0, 0, 5, 0}, {1, 1}, make([]uint64, 19)}
	for range 200 {
		f := make([]uint64, 2+r.IntN(300))
		for i := range f {
			if r.IntN(4) > 0 {
				f[i] = r.Uint64N(1 << (r.IntN(40) + 1))
			}
		}
		cases = append(cases, f)
	}
	for _, maxBits := range []int{7, 15} {
		for ci, freq := range cases {
			if len(freq) > 1<<maxBits {
				continue
			}
			lengths := make([]uint8, len(freq))
			limitedLengths(freq, maxBits, lengths)
			used, kraft := 0, 0.0
			for s, l := range lengths {
				if int(l) > maxBits {
					t.Fatalf("case %d: length %d above %d", ci, l, maxBits)
				}
				if freq[s] > 0 && l == 0 {
					t.Fatalf("case %d: symbol %d of count %d has no code", ci, s, freq[s])
				}
				if l > 0 {
					used++
					kraft += 1 / float64(uint64(1)<<l)
				}
			}
			if used > 0 && kraft != 1 {
				t.Fatalf("case %d (max %d bits): Kraft sum %v, not a complete code", ci, maxBits, kraft)
			}
		}
	}
}

func FuzzAppend(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("hello hello hello"), uint8(3))
	f.Add(record(r, 1, 500), uint8(12))
	f.Fuzz(func(t *testing.T, in []byte, warm uint8) {
		var e Encoder
		// An encoder that has learnt a code from a few records first.
		wr := rand.New(rand.NewPCG(uint64(warm), 1))
		for i := range int(warm % 16) {
			e.Append(nil, record(wr, i, 1000), 0)
		}
		for range 2 { // and the same input again, with the table of the first
			m, err := e.Append(nil, in, 0)
			if err != nil {
				t.Fatal(err)
			}
			if out := decodeOne(t, m); !bytes.Equal(out, in) {
				t.Fatalf("decoded %d bytes, not the %d of the input", len(out), len(in))
			}
		}
	})
}

// BenchmarkAppend compresses WARC-like records of a given size, here and
// with klauspost level 2, the WARC writer's compressor before.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{400, 2000, 8000} {
		r := rand.New(rand.NewPCG(11, 12))
		recs := make([][]byte, 64)
		total := 0
		for i := range recs {
			recs[i] = record(r, i, size)
			total += len(recs[i])
		}
		b.Run(fmt.Sprintf("gzmember/%d", size), func(b *testing.B) {
			var e Encoder
			var dst []byte
			out := 0
			b.SetBytes(int64(total))
			for b.Loop() {
				out = 0
				for _, rec := range recs {
					dst, _ = e.Append(dst[:0], rec, 0)
					out += len(dst)
				}
			}
			b.ReportMetric(float64(out)/float64(total), "ratio")
		})
		b.Run(fmt.Sprintf("klauspost2/%d", size), func(b *testing.B) {
			var buf bytes.Buffer
			kw, _ := kgzip.NewWriterLevel(&buf, 2)
			out := 0
			b.SetBytes(int64(total))
			for b.Loop() {
				out = 0
				for _, rec := range recs {
					buf.Reset()
					kw.Reset(&buf)
					kw.Write(rec)
					kw.Close()
					out += buf.Len()
				}
			}
			b.ReportMetric(float64(out)/float64(total), "ratio")
		})
	}
}

// TestFixedCode checks the first code of each range of deflate's fixed
// literal/length code against RFC 1951 §3.2.6.
func TestFixedCode(t *testing.T) {
	for _, c := range []struct {
		sym  int
		code uint16 // as the RFC writes it, most significant bit first
		len  uint8
	}{{0, 0b00110000, 8}, {143, 0b10111111, 8}, {144, 0b110010000, 9}, {255, 0b111111111, 9}, {256, 0, 7}, {279, 0b0010111, 7}, {280, 0b11000000, 8}, {285, 0b11000101, 8}} {
		got := bits.Reverse16(fixedCode.litCode[c.sym]) >> (16 - c.len)
		if fixedCode.litLen[c.sym] != c.len || got != c.code {
			t.Errorf("symbol %d: code %0*b (%d bits), want %0*b", c.sym, c.len, got, fixedCode.litLen[c.sym], c.len, c.code)
		}
	}
}
