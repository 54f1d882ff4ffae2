package gzmember

import (
	"cmp"
	"math/bits"
	"slices"
)

// code is a deflate code for literals/lengths and distances, and for a
// learnt code the dynamic block header that transmits it.
type code struct {
	litLen   [numLit]uint8
	litCode  [numLit]uint16 // bit-reversed, ready for the LSB-first stream
	distLen  [numDist]uint8
	distCode [numDist]uint16

	header     []headerChunk // after the block's first 3 bits: HLIT, HDIST, HCLEN and the code lengths
	headerBits int
}

// headerChunk is up to 32 bits of a block header.
type headerChunk struct {
	v uint32
	n uint8
}

// fixedCode is deflate's fixed code (RFC 1951 §3.2.6), which needs no
// header: the cheapest for the smallest members.
var fixedCode = func() (c code) {
	// The fixed code has 288 literal/length codes, two of them unused; they
	// count in the canonical assignment.
	var lens [288]uint8
	var codes [288]uint16
	for s := range lens {
		switch {
		case s < 144:
			lens[s] = 8
		case s < 256:
			lens[s] = 9
		case s < 280:
			lens[s] = 7
		default:
			lens[s] = 8
		}
	}
	assignCodes(lens[:], codes[:])
	copy(c.litLen[:], lens[:])
	copy(c.litCode[:], codes[:])
	for d := range numDist {
		c.distLen[d] = 5
	}
	assignCodes(c.distLen[:], c.distCode[:])
	return c
}()

// build makes c the code for these symbol counts and encodes its header.
// Symbols never seen get no code, which keeps the header short (a member's
// header is a good part of a small member); an input that has one of them
// is written in another code.
func (c *code) build(litFreq, distFreq []uint64) {
	limitedLengths(litFreq, maxCodeBits, c.litLen[:])
	limitedLengths(distFreq, maxCodeBits, c.distLen[:])
	assignCodes(c.litLen[:], c.litCode[:])
	assignCodes(c.distLen[:], c.distCode[:])
	c.encodeHeader()
}

// codegenOrder is the order in which the code-length code's lengths are sent.
var codegenOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// encodeHeader writes c's lengths as a dynamic block header (RFC 1951
// §3.2.7): run-length coded, in a Huffman code of their own.
func (c *code) encodeHeader() {
	nlit := numLit
	for nlit > 257 && c.litLen[nlit-1] == 0 {
		nlit--
	}
	ndist := numDist
	for ndist > 1 && c.distLen[ndist-1] == 0 {
		ndist--
	}
	lens := slices.Concat(c.litLen[:nlit], c.distLen[:ndist])

	type sym struct{ s, extra, extraBits uint8 }
	var seq []sym
	var freq [19]uint64
	for i := 0; i < len(lens); {
		v, run := lens[i], 1
		for i+run < len(lens) && lens[i+run] == v {
			run++
		}
		i += run
		if v == 0 {
			for run >= 11 {
				r := min(run, 138)
				seq = append(seq, sym{18, uint8(r - 11), 7})
				run -= r
			}
			if run >= 3 {
				seq = append(seq, sym{17, uint8(run - 3), 3})
				run = 0
			}
		} else {
			seq = append(seq, sym{v, 0, 0})
			run--
			for run >= 3 {
				r := min(run, 6)
				seq = append(seq, sym{16, uint8(r - 3), 2})
				run -= r
			}
		}
		for ; run > 0; run-- {
			seq = append(seq, sym{v, 0, 0})
		}
	}
	for _, x := range seq {
		freq[x.s]++
	}
	var cgLen [19]uint8
	var cgCode [19]uint16
	limitedLengths(freq[:], maxCodegenBits, cgLen[:])
	assignCodes(cgLen[:], cgCode[:])
	nclen := len(codegenOrder)
	for nclen > 4 && cgLen[codegenOrder[nclen-1]] == 0 {
		nclen--
	}

	var h headerPacker
	h.put(uint32(nlit-257), 5)
	h.put(uint32(ndist-1), 5)
	h.put(uint32(nclen-4), 4)
	for _, s := range codegenOrder[:nclen] {
		h.put(uint32(cgLen[s]), 3)
	}
	for _, x := range seq {
		h.put(uint32(cgCode[x.s])|uint32(x.extra)<<cgLen[x.s], uint(cgLen[x.s])+uint(x.extraBits))
	}
	c.header, c.headerBits = h.finish(c.header[:0])
}

// headerPacker gathers a header's bits into 32-bit chunks, so that writing
// it into each member takes a few dozen writes rather than hundreds.
type headerPacker struct {
	chunks []headerChunk
	acc    uint64
	n      uint
	total  int
}

func (h *headerPacker) put(v uint32, n uint) {
	h.acc |= uint64(v) << h.n
	h.n += n
	h.total += int(n)
	if h.n >= 32 {
		h.chunks = append(h.chunks, headerChunk{uint32(h.acc), 32})
		h.acc >>= 32
		h.n -= 32
	}
}

func (h *headerPacker) finish(dst []headerChunk) ([]headerChunk, int) {
	if h.n > 0 {
		h.chunks = append(h.chunks, headerChunk{uint32(h.acc), uint8(h.n)})
	}
	return append(dst, h.chunks...), h.total
}

// limitedLengths sets lengths to a complete Huffman code for freq (symbols
// of count 0 get no code) whose codes are at most maxBits long.
func limitedLengths(freq []uint64, maxBits int, lengths []uint8) {
	clear(lengths)
	syms := make([]int, 0, len(freq))
	for s, f := range freq {
		if f > 0 {
			syms = append(syms, s)
		}
	}
	switch len(syms) {
	case 0:
		return
	case 1:
		// A complete code needs two codes: give a second symbol one.
		other := 0
		if syms[0] == 0 {
			other = 1
		}
		lengths[syms[0]], lengths[other] = 1, 1
		return
	}
	slices.SortStableFunc(syms, func(a, b int) int { return cmp.Compare(freq[a], freq[b]) })

	// Huffman's construction with two queues: the leaves, lightest first,
	// and the inner nodes, which are made in order of weight.
	m := len(syms)
	weight := make([]uint64, 2*m-1)
	parent := make([]int, 2*m-1)
	for i, s := range syms {
		weight[i] = freq[s]
	}
	leaf, inner := 0, m
	pick := func(next int) int {
		if leaf < m && (inner == next || weight[leaf] <= weight[inner]) {
			leaf++
			return leaf - 1
		}
		inner++
		return inner - 1
	}
	for next := m; next < 2*m-1; next++ {
		a := pick(next)
		b := pick(next)
		weight[next] = weight[a] + weight[b]
		parent[a], parent[b] = next, next
	}
	// Depths, from the root (the last node) down: a parent comes after its
	// children.
	depth := make([]int, 2*m-1)
	count := make([]int, m+1)
	maxLen := 0
	for i := 2*m - 3; i >= 0; i-- {
		depth[i] = depth[parent[i]] + 1
		if i < m {
			count[depth[i]]++
			maxLen = max(maxLen, depth[i])
		}
	}
	// Shorten codes above maxBits, keeping the code complete (the
	// adjustment of JPEG, ITU T.81 Annex K.3): two codes at the longest
	// length become one a level up, and a shorter code splits in two.
	for l := maxLen; l > maxBits; l-- {
		for count[l] > 0 {
			j := l - 2
			for count[j] == 0 {
				j--
			}
			count[l] -= 2
			count[l-1]++
			count[j+1] += 2
			count[j]--
		}
	}
	// The lightest symbols get the longest codes.
	k := 0
	for l := min(maxLen, maxBits); l >= 1; l-- {
		for range count[l] {
			lengths[syms[k]] = uint8(l)
			k++
		}
	}
}

// assignCodes gives the canonical codes of lengths (RFC 1951 §3.2.2),
// bit-reversed for the LSB-first stream.
func assignCodes(lengths []uint8, codes []uint16) {
	var count [maxCodeBits + 1]int
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	var next [maxCodeBits + 1]int
	c := 0
	for l := 1; l <= maxCodeBits; l++ {
		c = (c + count[l-1]) << 1
		next[l] = c
	}
	for s, l := range lengths {
		if l == 0 {
			codes[s] = 0
			continue
		}
		codes[s] = bits.Reverse16(uint16(next[l])) >> (16 - l)
		next[l]++
	}
}
