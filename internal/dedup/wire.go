package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The bodies of the protocol (POST /v1/dedup/lookup and
// /v1/dedup/register, and their answers) are
//
//	"WGD" 0x01 kind                    magic, version, kind of body
//	uvarint n                          number of entries (absent in kindAdded)
//	n × entry
//
// where kind and entry are
//
//	kindLookup 'q'   lookup request    uvarint len, digest
//	kindFound  'a'   lookup answer     ref: the Refs found, in request order
//	kindRefs   'r'   register request  ref
//	kindReplace 'x'  register request  ref; uvarint len, record ID replaced
//	kindAdded  'k'   register answer   uvarint added (instead of n and entries)
//
//	ref = uvarint len, digest; uvarint len, URL;
//	      varint Time in Unix nanoseconds; uvarint len, record ID
//
// A body is at most MaxBodyBytes and MaxEntries entries, and every digest,
// URL and record ID is checked as a Ref's are; anything else, including a
// byte after the last entry, is refused whole.
const (
	kindLookup  = 'q'
	kindFound   = 'a'
	kindRefs    = 'r'
	kindReplace = 'x'
	kindAdded   = 'k'
)

const (
	version     = 1
	headerSize  = 5
	contentType = "application/x-waggle-dedup"
)

// errTooLarge marks a body over the size limits.
var errTooLarge = errors.New("dedup: body over the size limits")

func appendHeader(b []byte, kind byte) []byte {
	return append(b, 'W', 'G', 'D', version, kind)
}

// checkHeader returns what follows the header of body, which must be of kind.
func checkHeader(body []byte, kind byte) ([]byte, error) {
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, len(body), MaxBodyBytes)
	}
	if len(body) < headerSize || string(body[:3]) != "WGD" {
		return nil, errors.New("dedup: not a dedup body (bad magic)")
	}
	if body[3] != version {
		return nil, fmt.Errorf("dedup: body of version %d, want %d", body[3], version)
	}
	if body[4] != kind {
		return nil, fmt.Errorf("dedup: body of kind %q, want %q", body[4], kind)
	}
	return body[headerSize:], nil
}

// encodeLookup encodes a lookup request for digests.
func encodeLookup(digests []string) []byte {
	n := headerSize + binary.MaxVarintLen64
	for _, d := range digests {
		n += binary.MaxVarintLen64 + len(d)
	}
	b := appendHeader(make([]byte, 0, n), kindLookup)
	b = binary.AppendUvarint(b, uint64(len(digests)))
	for _, d := range digests {
		b = appendString(b, d)
	}
	return b
}

// decodeLookup decodes a lookup request.
func decodeLookup(body []byte) ([]string, error) {
	r, n, err := openEntries(body, kindLookup, 2)
	if err != nil {
		return nil, err
	}
	digests := make([]string, 0, n)
	for range n {
		d, err := r.string("digest", MaxDigestBytes)
		if err != nil {
			return nil, err
		}
		if err := checkDigest(d); err != nil {
			return nil, err
		}
		digests = append(digests, d)
	}
	return digests, r.end()
}

// refSize is the most bytes r takes in a body.
func refSize(r Ref) int {
	return 4*binary.MaxVarintLen64 + len(r.Digest) + len(r.URL) + len(r.RecordID)
}

// emptySize is the size of a body of refs without entries.
const emptySize = headerSize + binary.MaxVarintLen64

// encodeRefs encodes refs as a body of kind (kindFound or kindRefs). The
// caller keeps the sum of their refSize under MaxBodyBytes-emptySize.
func encodeRefs(kind byte, refs []Ref) []byte {
	return encodeEntries(kind, len(refs),
		func(i int) int { return refSize(refs[i]) },
		func(b []byte, i int) []byte { return appendRef(b, refs[i]) })
}

// encodeEntries encodes n entries as a body of kind: size(i) bounds the
// bytes of entry i, which appendEntry appends.
func encodeEntries(kind byte, n int, size func(int) int, appendEntry func([]byte, int) []byte) []byte {
	capacity := emptySize
	for i := range n {
		capacity += size(i)
	}
	b := appendHeader(make([]byte, 0, capacity), kind)
	b = binary.AppendUvarint(b, uint64(n))
	for i := range n {
		b = appendEntry(b, i)
	}
	return b
}

func appendRef(b []byte, r Ref) []byte {
	return appendRefFields(appendString(b, r.Digest), r)
}

// appendRefFields appends what follows the digest in a ref: the URL, the
// time and the record ID (a registry entry is keyed by the digest).
func appendRefFields(b []byte, r Ref) []byte {
	b = appendString(b, r.URL)
	b = binary.AppendVarint(b, r.Time.UnixNano())
	return appendString(b, r.RecordID)
}

// decodeRefs decodes a body of kind (kindFound or kindRefs).
func decodeRefs(body []byte, kind byte) ([]Ref, error) {
	// The smallest ref: three 1-byte strings with their lengths, a 1-byte time.
	r, n, err := openEntries(body, kind, 7)
	if err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, n)
	for range n {
		ref, err := r.ref()
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, r.end()
}

// ref reads a Ref and checks it.
func (r *reader) ref() (Ref, error) {
	var ref Ref
	var err error
	if ref.Digest, err = r.string("digest", MaxDigestBytes); err != nil {
		return Ref{}, err
	}
	if err := r.refFields(&ref); err != nil {
		return Ref{}, err
	}
	if err := ref.check(); err != nil {
		return Ref{}, err
	}
	return ref, nil
}

// refFields reads what appendRefFields wrote into ref, unchecked.
func (r *reader) refFields(ref *Ref) error {
	var err error
	if ref.URL, err = r.string("URL", MaxURLBytes); err != nil {
		return err
	}
	ns, err := r.varint()
	if err != nil {
		return err
	}
	ref.Time = time.Unix(0, ns).UTC()
	ref.RecordID, err = r.string("record ID", MaxRecordIDBytes)
	return err
}

// registrationSize is the most bytes r takes in a body.
func registrationSize(r registration) int {
	return refSize(r.Ref) + binary.MaxVarintLen64 + len(r.replaces)
}

// encodeRegistrations encodes regs, which all replace an entry or none
// does, as a register request.
func encodeRegistrations(regs []registration) []byte {
	if len(regs) == 0 || regs[0].replaces == "" {
		return encodeEntries(kindRefs, len(regs),
			func(i int) int { return refSize(regs[i].Ref) },
			func(b []byte, i int) []byte { return appendRef(b, regs[i].Ref) })
	}
	return encodeEntries(kindReplace, len(regs),
		func(i int) int { return registrationSize(regs[i]) },
		func(b []byte, i int) []byte { return appendString(appendRef(b, regs[i].Ref), regs[i].replaces) })
}

// decodeRegistrations decodes a register request of either kind.
func decodeRegistrations(body []byte) ([]registration, error) {
	if len(body) < headerSize || body[4] != kindReplace {
		refs, err := decodeRefs(body, kindRefs)
		if err != nil {
			return nil, err
		}
		return plain(refs), nil
	}
	// The smallest: a ref (7 bytes) and a 1-byte record ID with its length.
	r, n, err := openEntries(body, kindReplace, 9)
	if err != nil {
		return nil, err
	}
	regs := make([]registration, 0, n)
	for range n {
		var reg registration
		if reg.Ref, err = r.ref(); err != nil {
			return nil, err
		}
		if reg.replaces, err = r.string("record ID replaced", MaxRecordIDBytes); err != nil {
			return nil, err
		}
		if err := checkToken("record ID replaced", reg.replaces, MaxRecordIDBytes); err != nil {
			return nil, err
		}
		regs = append(regs, reg)
	}
	return regs, r.end()
}

// encodeAdded encodes a register answer.
func encodeAdded(added int) []byte {
	return binary.AppendUvarint(appendHeader(nil, kindAdded), uint64(added))
}

// decodeAdded decodes a register answer.
func decodeAdded(body []byte) (int, error) {
	rest, err := checkHeader(body, kindAdded)
	if err != nil {
		return 0, err
	}
	r := reader{b: rest}
	added, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if added > MaxEntries {
		return 0, fmt.Errorf("dedup: answer says %d refs added, more than a request holds (%d)", added, MaxEntries)
	}
	return int(added), r.end()
}

// openEntries checks the header of body and reads its entry count, which
// is at most MaxEntries and at most what the rest of the body can hold at
// minSize bytes an entry (so that a forged count allocates nothing).
func openEntries(body []byte, kind byte, minSize int) (*reader, int, error) {
	rest, err := checkHeader(body, kind)
	if err != nil {
		return nil, 0, err
	}
	r := &reader{b: rest}
	n, err := r.uvarint()
	if err != nil {
		return nil, 0, err
	}
	if n > MaxEntries {
		return nil, 0, fmt.Errorf("%w: %d entries, the limit is %d", errTooLarge, n, MaxEntries)
	}
	if n > uint64(len(r.b)/minSize) {
		return nil, 0, fmt.Errorf("dedup: body of %d bytes cannot hold the %d entries it announces", len(body), n)
	}
	return r, int(n), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader reads the fields of a body.
type reader struct{ b []byte }

var errTruncated = errors.New("dedup: body is truncated")

func (r *reader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		if n == 0 {
			return 0, errTruncated
		}
		return 0, errors.New("dedup: malformed varint")
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *reader) varint() (int64, error) {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		if n == 0 {
			return 0, errTruncated
		}
		return 0, errors.New("dedup: malformed varint")
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *reader) string(what string, max int) (string, error) {
	n, err := r.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(max) {
		return "", fmt.Errorf("dedup: %s of %d bytes is longer than %d", what, n, max)
	}
	if n > uint64(len(r.b)) {
		return "", errTruncated
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s, nil
}

// end reports an error if anything is left unread.
func (r *reader) end() error {
	if len(r.b) != 0 {
		return fmt.Errorf("dedup: %d bytes after the last entry", len(r.b))
	}
	return nil
}
