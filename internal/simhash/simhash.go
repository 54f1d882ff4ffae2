// Package simhash computes 64-bit SimHash fingerprints of the visible text of
// HTML pages, so that near-duplicate captures (the same page with a new
// timestamp, advert or visitor counter) can be recognised: Manku, Jain and
// Das Sarma, "Detecting near-duplicates for web crawling" (WWW 2007), found
// that pages whose fingerprints differ in at most 3 of 64 bits are near
// duplicates.
//
// The features are lower-cased 3-word shingles of the text, every
// occurrence weighted equally. Single words would be more tolerant of edits,
// but the most frequent words of a language ("the", "of") then outvote the
// rest and pull all pages in that language together: on Zipf-distributed
// test text 1.3% of unrelated pairs came out near, against none with
// 3-word shingles. Longer shingles make every changed word disturb more
// features, and so fewer edited pages stay near.
//
// SimHash sees changes relative to the length of the text: about
// 64·acos(s)/π bits differ for texts of cosine similarity s. Three changed
// words leave most pages of a few thousand words near, but only a minority
// of pages of 250 words. Changed numbers of the same width (timestamps,
// counters) change nothing, as every digit is read as 0.
package simhash

import (
	"encoding/binary"
	"math/bits"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Shingle is the number of consecutive words that make one feature.
const Shingle = 3

// Threshold is the largest Distance at which two fingerprints are Near.
const Threshold = 3

// Of returns the SimHash of text: for each bit, the majority vote of that bit
// over the 64-bit xxhash of every shingle of Shingle consecutive words, each
// occurrence weighted equally. Words are maximal runs of letters, marks and
// digits, lower-cased, with every digit read as 0 so that timestamps,
// counters and other changing numbers of the same width do not count as
// changes; in scripts written without spaces between words (Han,
// Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) every character is a word.
// A text of fewer than Shingle words is a single feature. Of returns 0 for a
// text without words.
func Of(text string) uint64 {
	var s state
	s.words(text)
	return s.sum()
}

// OfHTML returns the SimHash of the visible text of an HTML page: it is
// Of(Text(page)).
func OfHTML(page []byte) uint64 {
	var v Visible
	v.read(page)
	return v.Sum()
}

// Distance returns the number of bits in which a and b differ.
func Distance(a, b uint64) int { return bits.OnesCount64(a ^ b) }

// Near reports whether a and b are fingerprints of near-duplicate texts:
// whether they differ in at most Threshold bits.
func Near(a, b uint64) bool { return Distance(a, b) <= Threshold }

// state accumulates the shingles of a text.
type state struct {
	word   []byte            // the word being read, lower-cased UTF-8
	last   [Shingle]uint64   // hashes of the last Shingle words, oldest first
	nwords int               // words seen
	n      int               // features added
	ones   [64]int           // per bit, how many features had it set
	lanes  [8]uint64         // counts not yet in ones: lane j holds in byte k the count of bit 8k+j
	buf    [8 * Shingle]byte // a shingle's word hashes, for hashing
}

// words splits text into words and adds their shingles.
func (s *state) words(text string) {
	for i := 0; i < len(text); {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[i:])
		}
		i += size
		s.rune(r)
	}
	s.endWord()
}

// rune reads the next character of the text.
func (s *state) rune(r rune) {
	switch {
	case r < utf8.RuneSelf && 'a' <= r && r <= 'z':
		s.word = append(s.word, byte(r))
	case r < utf8.RuneSelf && '0' <= r && r <= '9':
		s.word = append(s.word, '0')
	case r < utf8.RuneSelf && 'A' <= r && r <= 'Z':
		s.word = append(s.word, byte(r+'a'-'A'))
	case r < utf8.RuneSelf:
		s.endWord()
	case unicode.Is(unicode.Cf, r):
		// Not shown, and not a break: a soft hyphen, a zero-width joiner
		// or space, a direction mark. The word goes on.
	case unspaced(r):
		s.endWord()
		s.word = utf8.AppendRune(s.word, r)
		s.endWord()
	case unicode.IsDigit(r):
		s.word = append(s.word, '0')
	case unicode.IsLetter(r) || unicode.IsMark(r):
		s.word = utf8.AppendRune(s.word, unicode.ToLower(r))
	default:
		s.endWord()
	}
}

// unspaced reports whether r belongs to a script written without spaces
// between words, whose characters therefore count as words on their own.
func unspaced(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana,
		unicode.Thai, unicode.Lao, unicode.Khmer, unicode.Myanmar)
}

// endWord ends the word being read, if any, and adds the shingle it ends.
func (s *state) endWord() {
	if len(s.word) == 0 {
		return
	}
	copy(s.last[:], s.last[1:])
	s.last[Shingle-1] = xxhash.Sum64(s.word)
	s.word = s.word[:0]
	s.nwords++
	if s.nwords >= Shingle {
		s.add(s.last[:])
	}
}

// add adds the feature made of the word hashes hs.
func (s *state) add(hs []uint64) {
	b := s.buf[:0]
	for _, h := range hs {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	h := xxhash.Sum64(b)
	// Count the set bits eight features' bits at a time: lane j holds in
	// byte k the count for bit 8k+j, and is flushed before a byte overflows.
	for j := range s.lanes {
		s.lanes[j] += h >> j & 0x0101010101010101
	}
	s.n++
	if s.n%255 == 0 {
		s.flush()
	}
}

// flush moves the counts from lanes to ones.
func (s *state) flush() {
	for j, l := range s.lanes {
		for k := 0; k < 8; k++ {
			s.ones[8*k+j] += int(l >> (8 * k) & 0xff)
		}
	}
	s.lanes = [8]uint64{}
}

// sum returns the fingerprint of the features added.
func (s *state) sum() uint64 {
	if s.nwords > 0 && s.nwords < Shingle {
		s.add(s.last[Shingle-s.nwords:])
	}
	s.flush()
	var f uint64
	for i, c := range s.ones {
		if 2*c > s.n {
			f |= 1 << i
		}
	}
	return f
}
