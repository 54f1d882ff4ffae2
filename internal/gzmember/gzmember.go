// Package gzmember compresses many inputs into one gzip member each, as a
// WARC writer does: a member per record, most records a few hundred bytes
// to a few KiB.
//
// A general deflate encoder builds a Huffman code for every block from that
// block's own symbol counts. For a member of 500 bytes building the code
// costs more CPU than finding the matches (in a crawl, 13% of all CPU went
// to klauspost/compress's code construction). An Encoder instead keeps one
// code per kind of input (the caller says which inputs are alike: for WARC,
// the record type), learnt from the symbol counts of the members of that
// kind it compressed before and rebuilt every so often, and writes that
// code into each member's block header. Every member is still a complete RFC 1951/1952 stream that any
// gzip reader decodes on its own: only the encoder's choice of code is
// shared. Per member it takes the cheapest of the learnt code (when it has
// a code for every symbol the member needs), deflate's fixed code, and
// storing the bytes uncompressed.
//
// Inputs above SmallMax go to klauspost/compress, for which building a code
// per block is then a small part of the work and pays for itself.
package gzmember

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"slices"

	"github.com/klauspost/compress/gzip"
)

// SmallMax is the largest input an Encoder compresses itself: deflate's
// 32 KiB window, so that every earlier byte of a member can be referred to.
const SmallMax = 32 << 10

// largeLevel is klauspost's level for inputs above SmallMax: level 2
// compresses web content nearly as well as the default at about twice the
// speed.
const largeLevel = 2

const (
	hashBits = 14
	minMatch = 4
	maxMatch = 258

	numLit  = 286 // literal/length symbols: bytes, end of block, 29 lengths
	numDist = 30
	eob     = 256

	maxCodeBits    = 15 // deflate's limit for literal/length and distance codes
	maxCodegenBits = 7  // and for the code that encodes code lengths

	// A code is rebuilt once the members compressed since the last build
	// hold this many symbols; the first build comes sooner so that an
	// Encoder leaves the fixed code quickly.
	firstRebuild = 4 << 10
	rebuildEvery = 64 << 10

	// Kinds is how many kinds of input an Encoder learns a code for.
	Kinds = 8
)

// token is a literal byte (< 256), or a match: matchFlag | (length-3)<<15 |
// (distance-1).
type token uint32

const matchFlag = 1 << 31

// Encoder compresses inputs into gzip members. It is not safe for concurrent
// use; its learnt code makes it worth keeping one per goroutine.
type Encoder struct {
	table  [1 << hashBits]int32 // hash of 4 bytes → position + base
	base   int32                // added to the positions of the current input, so that entries of earlier inputs read as stale without clearing the table
	tokens []token

	all  counts // of the current input
	head counts // of its head, when its tail may be stored (see Append)

	kinds [Kinds]learner

	large *gzip.Writer
}

// counts are the symbol counts of an input, or of part of one.
type counts struct {
	lit   [numLit]uint32
	dist  [numDist]uint32
	extra int // extra bits (of lengths and distances)
}

// learner is what an Encoder learnt about one kind of input.
type learner struct {
	lit     [numLit]uint64 // counts since the last build
	dist    [numDist]uint64
	pending int // symbols counted since the last build
	built   bool
	code    code // once built
}

// Append compresses src, an input of the given kind (0 ≤ kind; taken
// modulo Kinds), into one gzip member appended to dst.
func (e *Encoder) Append(dst, src []byte, kind int) ([]byte, error) {
	if len(src) > SmallMax {
		return e.appendLarge(dst, src)
	}
	e.tokenize(src)
	l := &e.kinds[kind%Kinds]

	// Room for the worst case, a stored block, so that the member is
	// written without growing dst again.
	w := bitWriter{buf: append(slices.Grow(dst, len(src)+len(gzipHeader)+5+8), gzipHeader[:]...)}
	// Sizes in bits, each with its block's 3 header bits; a stored block's
	// also with its padding and lengths, at most.
	storedBits := 8 * (len(src) + 5)
	best, bestBits := l.bestCode(&e.all)

	// A long run of literals at the end (a response's gzip-encoded or
	// image payload, most often) may cost more coded than stored: then it
	// is stored, in a block after the coded head. Its bytes are neither
	// coded nor learnt from.
	k, tail := e.storableTail()
	var head *code
	if tail >= minStoredTail && k > 0 {
		e.head.count(e.tokens[:k])
		if c, bits := l.bestCode(&e.head); bits+8*(tail+5) < min(bestBits, storedBits) {
			head = c
		}
	}
	switch {
	case head != nil:
		w.codedBlock(e.tokens[:k], head, false)
		w.stored(src[len(src)-tail:])
		l.learn(&e.head, k)
	case storedBits < bestBits:
		w.stored(src)
	default:
		w.codedBlock(e.tokens, best, true)
		w.align()
		l.learn(&e.all, len(e.tokens))
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, crc32.ChecksumIEEE(src))
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(src)))
	return w.buf, nil
}

const (
	// minStoredTail is the shortest tail that Append considers storing
	// apart from the head of an input.
	minStoredTail = 256
	// maxTrailingMatch bounds the matched bytes a tail may end with: a
	// WARC record ends with "\r\n\r\n", found earlier in its headers.
	maxTrailingMatch = 16
)

// bestCode returns the cheaper of the fixed code and l's learnt code for
// symbols c, and its size in bits with the block header.
func (l *learner) bestCode(c *counts) (*code, int) {
	fixedBits, _ := c.cost(&fixedCode) // the fixed code has every symbol
	best, bestBits := &fixedCode, 3+fixedBits+c.extra
	if l.built {
		if b, ok := c.cost(&l.code); ok && 3+l.code.headerBits+b+c.extra < bestBits {
			best, bestBits = &l.code, 3+l.code.headerBits+b+c.extra
		}
	}
	return best, bestBits
}

// storableTail finds the tail of the current input that could be stored: a
// run of literals at its end, or followed by at most maxTrailingMatch
// matched bytes. It returns the index of the tail's first token and the
// tail's length in bytes.
func (e *Encoder) storableTail() (k, n int) {
	k = len(e.tokens)
	for k > 0 && e.tokens[k-1]&matchFlag != 0 {
		n += int(e.tokens[k-1]>>15&0xff) + 3
		k--
	}
	if n > maxTrailingMatch {
		return len(e.tokens), 0
	}
	for k > 0 && e.tokens[k-1]&matchFlag == 0 {
		n++
		k--
	}
	return k, n
}

// count sets c to the symbols of ts, a block's tokens.
func (c *counts) count(ts []token) {
	*c = counts{}
	for _, t := range ts {
		if t&matchFlag == 0 {
			c.lit[t]++
			continue
		}
		c.match(int(t>>15&0xff)+3, int(t&0x7fff)+1)
	}
	c.lit[eob]++
}

func (c *counts) match(length, distance int) {
	lc := lengthCode[length-3]
	dc := distCode(uint32(distance - 1))
	c.lit[257+int(lc)]++
	c.dist[dc]++
	c.extra += int(lengthExtra[lc]) + int(distExtra[dc])
}

// codedBlock writes a block of ts in code c.
func (w *bitWriter) codedBlock(ts []token, c *code, final bool) {
	var bfinal uint64
	if final {
		bfinal = 1
	}
	if c == &fixedCode {
		w.bits(bfinal|1<<1, 3)
	} else {
		w.bits(bfinal|2<<1, 3)
		for _, h := range c.header {
			w.bits(uint64(h.v), uint(h.n))
		}
	}
	w.tokens(ts, c)
}

// stored writes b (at most 64 KiB) as the final, stored block.
func (w *bitWriter) stored(b []byte) {
	w.bits(1, 3)
	w.align()
	w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(len(b)))
	w.buf = binary.LittleEndian.AppendUint16(w.buf, ^uint16(len(b)))
	w.buf = append(w.buf, b...)
}

// gzipHeader is a member header with no name, time or flags, as
// klauspost/compress writes it by default.
var gzipHeader = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}

func (e *Encoder) appendLarge(dst, src []byte) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if e.large == nil {
		var err error
		if e.large, err = gzip.NewWriterLevel(buf, largeLevel); err != nil {
			return dst, err
		}
	} else {
		e.large.Reset(buf)
	}
	if _, err := e.large.Write(src); err != nil {
		return dst, err
	}
	if err := e.large.Close(); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

// tokenize finds matches greedily (one candidate per 4-byte hash, as
// snappy does), skipping ahead faster the longer it finds none so that
// incompressible inputs cost little, and counts the symbols.
func (e *Encoder) tokenize(src []byte) {
	e.tokens = e.tokens[:0]
	e.all = counts{}
	if e.base > 1<<30 {
		clear(e.table[:])
		e.base = 0
	}
	base := e.base + 1 // every stored value of earlier inputs is below base
	e.base = base + int32(len(src))

	n := len(src)
	pending := 0 // start of the literals not yet emitted
	i, skip := 0, 32
	for i+minMatch <= n {
		cur := binary.LittleEndian.Uint32(src[i:])
		h := hash4(cur)
		cand := int(e.table[h] - base)
		e.table[h] = int32(i) + base
		if cand < 0 || binary.LittleEndian.Uint32(src[cand:]) != cur {
			i += skip >> 5
			skip++
			continue
		}
		// The match may begin before i: a skip can land inside one.
		for i > pending && cand > 0 && src[i-1] == src[cand-1] {
			i, cand = i-1, cand-1
		}
		e.literals(src[pending:i])
		l := matchLen(src[cand:], src[i:min(n, i+maxMatch)])
		e.match(l, i-cand)
		// Let the bytes just matched be found again; in a long match only
		// its end, which what follows most likely continues.
		for j := max(i+1, i+l-16); j < i+l && j+minMatch <= n; j += 2 {
			e.table[hash4(binary.LittleEndian.Uint32(src[j:]))] = int32(j) + base
		}
		i += l
		pending, skip = i, 32
	}
	e.literals(src[pending:])
	e.all.lit[eob]++
}

func hash4(u uint32) uint32 { return (u * 0x1e35a7bd) >> (32 - hashBits) }

// matchLen is the length of the common prefix of a and b (b no longer than a
// matters: the caller bounds it).
func matchLen(a, b []byte) int {
	n := 0
	for len(b)-n >= 8 && len(a)-n >= 8 {
		if x := binary.LittleEndian.Uint64(a[n:]) ^ binary.LittleEndian.Uint64(b[n:]); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		n += 8
	}
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func (e *Encoder) literals(b []byte) {
	for _, c := range b {
		e.tokens = append(e.tokens, token(c))
		e.all.lit[c]++
	}
}

func (e *Encoder) match(length, distance int) {
	e.tokens = append(e.tokens, matchFlag|token(length-3)<<15|token(distance-1))
	e.all.match(length, distance)
}

// cost is the bits of symbols c in code k, extra bits and header aside, or
// ok false if k has no code for one of them.
func (c *counts) cost(k *code) (n int, ok bool) {
	for s, f := range c.lit {
		if f > 0 && k.litLen[s] == 0 {
			return 0, false
		}
		n += int(f) * int(k.litLen[s])
	}
	for d, f := range c.dist {
		if f > 0 && k.distLen[d] == 0 {
			return 0, false
		}
		n += int(f) * int(k.distLen[d])
	}
	return n, true
}

// learn adds the symbols c of a coded block (n tokens) to those l's next
// code is built from, and builds it when enough have come in. Stored bytes
// are not counted: they say nothing about what compresses.
func (l *learner) learn(c *counts, n int) {
	for s, f := range c.lit {
		l.lit[s] += uint64(f)
	}
	for d, f := range c.dist {
		l.dist[d] += uint64(f)
	}
	l.pending += n
	if l.pending < rebuildEvery && (l.built || l.pending < firstRebuild) {
		return
	}
	l.code.build(l.lit[:], l.dist[:])
	l.built = true
	// Halve the counts: the code follows what is being archived now.
	for s := range l.lit {
		l.lit[s] >>= 1
	}
	for d := range l.dist {
		l.dist[d] >>= 1
	}
	l.pending = 0
}

// Deflate's length and distance symbols (RFC 1951 §3.2.5).
var (
	lengthBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [numDist]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [numDist]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	// lengthCode maps length-3 to its symbol's index in lengthBase.
	lengthCode = func() (t [256]uint8) {
		for c := range lengthBase {
			end := 256
			if c+1 < len(lengthBase) {
				end = int(lengthBase[c+1]) - 3
			}
			for l := int(lengthBase[c]) - 3; l < end; l++ {
				t[l] = uint8(c)
			}
		}
		return t
	}()
)

// distCode is the symbol of distance d+1.
func distCode(d uint32) uint8 {
	if d < 4 {
		return uint8(d)
	}
	top := bits.Len32(d) - 1
	return uint8(2*top + int(d>>(top-1)&1))
}

// bitWriter writes deflate's LSB-first bit stream. Values passed to bits
// have no bits above n, and n is at most 32.
type bitWriter struct {
	buf []byte
	acc uint64
	n   uint
}

func (w *bitWriter) bits(v uint64, n uint) {
	w.acc |= v << w.n
	w.n += n
	if w.n >= 32 {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(w.acc))
		w.acc >>= 32
		w.n -= 32
	}
}

// align writes out the bits held, zero-padded to a byte boundary.
func (w *bitWriter) align() {
	for w.n > 0 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		w.n -= min(8, w.n)
	}
	w.acc = 0
}

// tokens writes ts and the end of the block in code c. The accumulator is
// kept in locals: the loop is the encoder's hottest.
func (w *bitWriter) tokens(ts []token, c *code) {
	acc, n, buf := w.acc, w.n, w.buf
	put := func(v uint64, nb uint) {
		acc |= v << n
		n += nb
		if n >= 32 {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(acc))
			acc >>= 32
			n -= 32
		}
	}
	for _, t := range ts {
		if t&matchFlag == 0 {
			put(uint64(c.litCode[t]), uint(c.litLen[t]))
			continue
		}
		l := uint32(t>>15) & 0xff
		d := uint32(t) & 0x7fff
		lc := lengthCode[l]
		s := 257 + int(lc)
		put(uint64(c.litCode[s])|uint64(l+3-uint32(lengthBase[lc]))<<c.litLen[s], uint(c.litLen[s])+uint(lengthExtra[lc]))
		dc := distCode(d)
		put(uint64(c.distCode[dc])|uint64(d+1-distBase[dc])<<c.distLen[dc], uint(c.distLen[dc])+uint(distExtra[dc]))
	}
	put(uint64(c.litCode[eob]), uint(c.litLen[eob]))
	w.acc, w.n, w.buf = acc, n, buf
}
