package replicate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Entry is one capture to copy: its index entry and the locations of its
// records in this node's WARC segments, the capture's own response or
// revisit record first, then its request and metadata records.
type Entry struct {
	Capture index.Capture
	Records []warc.Location
}

// queueVersion is the first byte of a queue value with a SimHash:
//
//	0x02 capture simhash uvarint(records) records × (str segment, uvarint offset, uvarint length)
//	     uvarint(targets) targets × str peer ID
//
// with the capture as on the wire, its SimHash 8 bytes big-endian, and str
// a uvarint length and bytes. A capture without SimHash is queued in
// version 1, the same without it, which the versions before SimHashes
// travelled read too (a node rolled back to one still opens its queue,
// most of whose values are then of version 1). The targets are the peers
// that hold or are to get the capture: those with a copy queued, and those
// that acknowledged one. Retarget reads them so as not to send a copy
// again to a peer that has it.
const queueVersion = 2

const maxTargets = 64

// checkEntry reports why e cannot be replicated, or "".
func checkEntry(e *Entry) string {
	if why := checkCapture(&e.Capture); why != "" {
		return why
	}
	if len(e.Records) == 0 || len(e.Records) > MaxEntryRecords {
		return fmt.Sprintf("%d records, want 1 to %d", len(e.Records), MaxEntryRecords)
	}
	total := int64(0)
	for _, l := range e.Records {
		if why := checkLocation(l); why != "" {
			return why
		}
		total += l.Length
	}
	if wireSize(&e.Capture, len(e.Records), int(total))+len(magic)+10 > MaxLargeBodyBytes {
		return fmt.Sprintf("records of %d bytes in all do not fit a batch of %d", total, MaxLargeBodyBytes)
	}
	return ""
}

// checkLocation reports why l cannot be read as one record's gzip member, or "".
func checkLocation(l warc.Location) string {
	switch {
	case !warc.ValidSegmentName(l.Segment):
		return fmt.Sprintf("segment %.100q is not the base name of a .warc.gz file", l.Segment)
	case l.Offset < 0:
		return fmt.Sprintf("offset %d", l.Offset)
	case l.Length <= 0:
		// warc.Reader gives 0 for a record that shares its gzip member:
		// such a record cannot be copied byte for byte on its own.
		return fmt.Sprintf("record at %d in %s has no gzip member of its own", l.Offset, l.Segment)
	case l.Length > MaxMemberBytes:
		return fmt.Sprintf("member of %d bytes at %d in %s is over %d", l.Length, l.Offset, l.Segment, MaxMemberBytes)
	}
	return ""
}

func checkPeerID(id string) error {
	if id == "" || len(id) > 255 || strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("replicate: bad peer ID %.80q", id)
	}
	return nil
}

// peerSet returns ids sorted and without repeats, or an error for a bad ID.
func peerSet(ids []string) ([]string, error) {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	for _, id := range s {
		if err := checkPeerID(id); err != nil {
			return nil, err
		}
	}
	if len(s) > maxTargets {
		return nil, fmt.Errorf("replicate: %d replica peers, at most %d", len(s), maxTargets)
	}
	return s, nil
}

// captureID identifies a capture across the queues of all peers.
func captureID(c *index.Capture) string {
	return c.RecordID + "\x00" + c.URLKey + "\x00" + strconv.FormatInt(c.Time.UnixNano(), 10)
}

// appendValue appends the queue value of e, which must be valid, to be
// sent to one of targets.
func appendValue(dst []byte, e *Entry, targets []string) []byte {
	withSimHash := e.Capture.SimHash != 0
	if withSimHash {
		dst = append(dst, queueVersion)
	} else {
		dst = append(dst, 1)
	}
	dst = appendCapture(dst, &e.Capture, withSimHash)
	dst = binary.AppendUvarint(dst, uint64(len(e.Records)))
	for _, l := range e.Records {
		dst = binary.AppendUvarint(dst, uint64(len(l.Segment)))
		dst = append(dst, l.Segment...)
		dst = binary.AppendUvarint(dst, uint64(l.Offset))
		dst = binary.AppendUvarint(dst, uint64(l.Length))
	}
	dst = binary.AppendUvarint(dst, uint64(len(targets)))
	for _, t := range targets {
		dst = binary.AppendUvarint(dst, uint64(len(t)))
		dst = append(dst, t...)
	}
	return dst
}

// parseValue parses a queue value, checking it as Add does.
func parseValue(v []byte) (Entry, []string, error) {
	if len(v) == 0 || v[0] != 1 && v[0] != queueVersion {
		return Entry{}, nil, errors.New("unknown queue value version")
	}
	r := &reader{buf: v[1:]}
	c := r.capture(v[0] == queueVersion)
	var e Entry
	if c != nil {
		e.Capture = *c
	}
	n := r.uvarint("record count")
	if r.err == nil && (n == 0 || n > MaxEntryRecords) {
		r.fail("%d records", n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		seg := r.str("segment", 255)
		off := r.uvarint("offset")
		length := r.uvarint("length")
		if off > 1<<62 || length > 1<<62 {
			r.fail("location out of range")
		}
		e.Records = append(e.Records, warc.Location{Segment: seg, Offset: int64(off), Length: int64(length)})
	}
	t := r.uvarint("target count")
	if r.err == nil && t > maxTargets {
		r.fail("%d targets", t)
	}
	var targets []string
	for i := uint64(0); i < t && r.err == nil; i++ {
		targets = append(targets, r.str("target", 255))
	}
	if r.err != nil {
		return Entry{}, nil, r.err
	}
	if len(r.buf) > 0 {
		return Entry{}, nil, errors.New("bytes after the value")
	}
	if why := checkEntry(&e); why != "" {
		return Entry{}, nil, errors.New(why)
	}
	e.Capture.Segment, e.Capture.Offset, e.Capture.Length = e.Records[0].Segment, e.Records[0].Offset, e.Records[0].Length
	return e, targets, nil
}

func queueKey(id string, seq uint64) []byte {
	k := make([]byte, 0, len(queuePrefix)+len(id)+1+8)
	k = append(k, queuePrefix...)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func parseKey(k []byte) (id string, seq uint64, ok bool) {
	rest, ok := bytes.CutPrefix(k, []byte(queuePrefix))
	if !ok || len(rest) < 10 || rest[len(rest)-9] != 0 {
		return "", 0, false
	}
	return string(rest[:len(rest)-9]), binary.BigEndian.Uint64(rest[len(rest)-8:]), true
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}
