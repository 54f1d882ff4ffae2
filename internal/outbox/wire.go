package outbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

// The wire format of a batch (POST /v1/urls) is a zstd frame whose content
// is
//
//	"WGU" 0x02 or 0x03                          magic and version
//	uvarint n                                   number of links
//	n × (uvarint shared, uvarint len, bytes,    front-coded URL,
//	     uvarint depth<<2 | seed<<1 | embed,    then its crawl context,
//	     [uvarint redirects, uvarint hops])     and in version 3 its hop counts
//
// A batch is sent as version 2 when none of its links has hop counts, so
// that nodes which read only version 2 still take most batches; one that
// needs version 3 waits in the queue for its receiver to be upgraded.
//
// The links are sorted by URL and their URLs are distinct; each URL is
// written as the length of the prefix it shares with the previous one and
// the rest of its bytes. Sorting puts a host's URLs together, so the host
// and the common path are written once, and zstd then finds what repeats
// across hosts (scheme, "www.", path words, query names) and in the tags,
// which are mostly alike within a batch. Decoded, a batch is at most
// MaxDecodedBytes and MaxBatchURLs, and no depth is over MaxDepth.
// Version 1, bare URLs, is refused: a receiver could apply neither the
// sender's depth limit to them nor its leave to fetch page requisites
// off-scope.
const (
	// ContentType is the media type of a batch.
	ContentType = "application/x-waggle-urls"
	// MaxURLBytes is the longest URL a batch may carry.
	MaxURLBytes = 4096
	// MaxBatchURLs is the most URLs a batch may carry.
	MaxBatchURLs = 100_000
	// MaxDepth is the greatest Link.Depth a batch may carry, far beyond
	// any depth limit a crawl would set.
	MaxDepth = 1 << 20
	// MaxHops is the greatest Link.Redirects and Link.OffScopeHops a batch
	// may carry, far beyond the frontier's limits.
	MaxHops = 255
	// MaxDecodedBytes limits a batch's decompressed size, and the
	// total length of its URLs.
	MaxDecodedBytes = 64 << 20
	// MaxBodyBytes limits a batch's compressed size.
	MaxBodyBytes = 16 << 20
)

var magic = []byte{'W', 'G', 'U', 2}

// versionHops is the version of a batch whose links carry hop counts.
const versionHops = 3

// hasHops reports whether l has hop counts to carry.
func hasHops(l Link) bool { return l.Redirects != 0 || l.OffScopeHops != 0 }

// errTooLarge marks a batch over one of the limits.
var errTooLarge = errors.New("outbox: batch over the size limits")

// validURL reports why u may not travel in a batch, or "".
func validURL(u string) string {
	switch {
	case u == "":
		return "empty URL"
	case len(u) > MaxURLBytes:
		return fmt.Sprintf("URL of %d bytes is longer than %d", len(u), MaxURLBytes)
	case !utf8.ValidString(u):
		return "URL is not valid UTF-8"
	}
	for _, r := range u {
		// C0, DEL and C1 controls (which include CR and LF) never belong
		// in a URL a crawler extracted and canonicalized.
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Sprintf("URL contains control character %U", r)
		}
	}
	return ""
}

// validLink reports why l may not travel in a batch, or "".
func validLink(l Link) string {
	if l.Depth < 0 || l.Depth > MaxDepth {
		return fmt.Sprintf("depth %d is outside 0..%d", l.Depth, MaxDepth)
	}
	if l.Seed && (l.Depth != 0 || l.Embed) {
		return "a seed must be at depth 0 and not a requisite"
	}
	if l.Redirects < 0 || l.Redirects > MaxHops || l.OffScopeHops < 0 || l.OffScopeHops > MaxHops {
		return fmt.Sprintf("hop counts %d, %d are outside 0..%d", l.Redirects, l.OffScopeHops, MaxHops)
	}
	return validURL(l.URL)
}

// tag packs a link's depth and flags into the number that the queue
// values and the wire format carry; l.Depth must be in 0..MaxDepth.
func tag(l Link) uint64 {
	t := uint64(l.Depth) << 2
	if l.Seed {
		t |= 2
	}
	if l.Embed {
		t |= 1
	}
	return t
}

// untag is the inverse of tag, into l. It refuses a depth over MaxDepth,
// and a seed that is not at depth 0 or is a requisite.
func untag(t uint64, l *Link) error {
	if t>>2 > MaxDepth {
		return fmt.Errorf("depth %d is over %d", t>>2, MaxDepth)
	}
	l.Depth, l.Seed, l.Embed = int(t>>2), t&2 != 0, t&1 != 0
	if l.Seed && (l.Depth != 0 || l.Embed) {
		return fmt.Errorf("a seed at depth %d (requisite: %v)", l.Depth, l.Embed)
	}
	return nil
}

// encodePayload front-codes links, which must be valid, into the
// uncompressed content of a batch. It sorts links by URL in place, keeps
// one link per URL, the shallowest, marked as an embed if any of its
// copies is, with the fewest hops of them, and returns the links it kept.
func encodePayload(dst []byte, links []Link) ([]byte, []Link) {
	slices.SortFunc(links, func(a, b Link) int { return strings.Compare(a.URL, b.URL) })
	kept := links[:0]
	for _, l := range links {
		if k := len(kept) - 1; k >= 0 && kept[k].URL == l.URL {
			kept[k].Depth = min(kept[k].Depth, l.Depth)
			kept[k].Embed = kept[k].Embed || l.Embed
			kept[k].Seed = kept[k].Seed || l.Seed
			kept[k].Redirects = min(kept[k].Redirects, l.Redirects)
			kept[k].OffScopeHops = min(kept[k].OffScopeHops, l.OffScopeHops)
			if kept[k].Seed {
				kept[k].Depth, kept[k].Embed = 0, false
				kept[k].Redirects, kept[k].OffScopeHops = 0, 0
			}
			continue
		}
		kept = append(kept, l)
	}
	clear(links[len(kept):])
	links = kept
	hops := slices.ContainsFunc(links, hasHops)
	dst = append(dst, magic...)
	if hops {
		dst[len(dst)-1] = versionHops
	}
	dst = binary.AppendUvarint(dst, uint64(len(links)))
	prev := ""
	for _, l := range links {
		u := l.URL
		n := 0
		for n < len(prev) && n < len(u) && prev[n] == u[n] {
			n++
		}
		dst = binary.AppendUvarint(dst, uint64(n))
		dst = binary.AppendUvarint(dst, uint64(len(u)-n))
		dst = append(dst, u[n:]...)
		dst = binary.AppendUvarint(dst, tag(l))
		if hops {
			dst = binary.AppendUvarint(dst, uint64(l.Redirects))
			dst = binary.AppendUvarint(dst, uint64(l.OffScopeHops))
		}
		prev = u
	}
	return dst, links
}

// decodePayload parses the uncompressed content of a batch as it is
// decompressed, so that garbage is refused at its first bad byte. It checks
// every limit and every link, and fails on anything else, so that a batch
// is taken whole or not at all.
func decodePayload(r *bufio.Reader) ([]Link, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil || !bytes.Equal(head[:3], magic[:3]) {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		return nil, errors.New("outbox: not a URL batch")
	}
	if head[3] != magic[3] && head[3] != versionHops {
		return nil, fmt.Errorf("outbox: URL batch version %d is not supported (want %d or %d, which carry each URL's depth and embed flag)", head[3], magic[3], versionHops)
	}
	hops := head[3] == versionHops
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("outbox: URL batch: bad count: %w", err)
	}
	if n > MaxBatchURLs {
		return nil, fmt.Errorf("%w: %d URLs, at most %d", errTooLarge, n, MaxBatchURLs)
	}
	links := make([]Link, 0, min(n, 1024))
	text := 0 // front coding compresses too: its output needs a limit of its own
	var buf [MaxURLBytes]byte
	prev := buf[:0]
	for i := range n {
		shared, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: bad prefix length: %w", i, err)
		}
		rest, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: bad length: %w", i, err)
		}
		switch {
		case shared > uint64(len(prev)):
			return nil, fmt.Errorf("outbox: URL batch: URL %d shares %d bytes with a URL of %d", i, shared, len(prev))
		case rest == 0:
			// Distinct and sorted: each URL adds at least one byte.
			return nil, fmt.Errorf("outbox: URL batch: URL %d repeats the previous one or is empty", i)
		case shared+rest > MaxURLBytes:
			return nil, fmt.Errorf("outbox: URL batch: URL %d is longer than %d bytes", i, MaxURLBytes)
		}
		cur := buf[:shared+rest]
		if _, err := io.ReadFull(r, cur[shared:]); err != nil {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: %w", i, err)
		}
		if text += len(cur); text > MaxDecodedBytes {
			return nil, fmt.Errorf("%w: more than %d bytes of URLs", errTooLarge, MaxDecodedBytes)
		}
		t, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: bad depth: %w", i, err)
		}
		l := Link{URL: string(cur)}
		if err := untag(t, &l); err != nil {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: %w", i, err)
		}
		if hops {
			redirects, err := binary.ReadUvarint(r)
			if err != nil {
				return nil, fmt.Errorf("outbox: URL batch: URL %d: bad redirect count: %w", i, err)
			}
			offScope, err := binary.ReadUvarint(r)
			if err != nil {
				return nil, fmt.Errorf("outbox: URL batch: URL %d: bad off-scope hop count: %w", i, err)
			}
			if redirects > MaxHops || offScope > MaxHops {
				return nil, fmt.Errorf("outbox: URL batch: URL %d: hop counts %d, %d over %d", i, redirects, offScope, MaxHops)
			}
			l.Redirects, l.OffScopeHops = int(redirects), int(offScope)
		}
		if len(links) > 0 && links[len(links)-1].URL >= l.URL {
			return nil, fmt.Errorf("outbox: URL batch: URL %d is out of order", i)
		}
		if why := validURL(l.URL); why != "" {
			return nil, fmt.Errorf("outbox: URL batch: URL %d: %s", i, why)
		}
		links = append(links, l)
		prev = cur
	}
	// Reading to the end also checks the frame's checksum.
	switch _, err := r.ReadByte(); {
	case err == nil:
		return nil, errors.New("outbox: URL batch: data after the last URL")
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	return links, nil
}

// newDecoder returns a zstd decoder for one batch at a time, with a window
// no larger than a batch could need.
func newDecoder() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(MaxDecodedBytes),
		zstd.WithDecoderMaxWindow(8<<20),
	)
}

// decodeBatch decompresses and parses a batch body with dec, stopping
// after MaxDecodedBytes, the defence against compression bombs.
func decodeBatch(dec *zstd.Decoder, body []byte) ([]Link, error) {
	if err := dec.Reset(bytes.NewReader(body)); err != nil {
		return nil, fmt.Errorf("outbox: URL batch: %w", err)
	}
	links, err := decodePayload(bufio.NewReaderSize(&limitReader{r: dec, n: MaxDecodedBytes}, 32<<10))
	switch {
	case err == nil:
		return links, nil
	case errors.Is(err, errTooLarge):
		return nil, err
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
		return nil, fmt.Errorf("%w: %v", errTooLarge, err)
	case strings.HasPrefix(err.Error(), "outbox:"):
		return nil, err
	}
	return nil, fmt.Errorf("outbox: URL batch: %w", err)
}

// limitReader fails with errTooLarge past n bytes.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("%w: more than %d bytes decompressed", errTooLarge, MaxDecodedBytes)
	}
	p = p[:min(int64(len(p)), l.n)]
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
