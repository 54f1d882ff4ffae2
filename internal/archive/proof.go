package archive

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// A payload proof shows that a node can produce a payload's bytes, not
// merely an index entry naming its digest. A node about to drop a payload
// it has just fetched, on another node's word that the payload is
// archived already, sends the capture's holder a fresh random nonce; only
// a node with the payload's bytes can answer SHA-256(nonce ‖ payload),
// which the asker, holding the payload too, computes and compares. A
// forged or stale index entry cannot answer it. It shows the bytes are at
// hand when asked, not that they are kept: a node could fetch them from
// the web anew to answer.
//
//	GET /v1/archive/proof?segment=&offset=&length=&id=&nonce=
//
// answers the proof for the payload of the response record id at that
// location, as ProofBytes bytes (application/octet-stream); 404 when no
// such intact response record is there. The record is read as a stream,
// whatever its size.
const proofPath = Path + "proof"

const (
	// NonceBytes is the length of a proof's nonce.
	NonceBytes = 16
	// ProofBytes is the length of a proof.
	ProofBytes = sha256.Size
)

// errNotHeld says that a location does not hold, intact, the response
// record a proof asked about.
var errNotHeld = errors.New("archive: the response record is not held intact")

// PayloadProof is what a node that holds payload answers to nonce.
func PayloadProof(nonce, payload []byte) [ProofBytes]byte {
	h := sha256.New()
	h.Write(nonce)
	h.Write(payload)
	return [ProofBytes]byte(h.Sum(nil))
}

// ProvePayload reports whether l holds c's record, a response record
// whose payload is payload. Its error is always nil: a local copy proves
// or does not.
func (l *Local) ProvePayload(ctx context.Context, c index.Capture, payload []byte) (bool, error) {
	nonce := newNonce()
	got, err := l.prove(ctx, c, nonce)
	return err == nil && got == PayloadProof(nonce, payload), nil
}

// prove answers nonce for the payload of c's record in l.
func (l *Local) prove(ctx context.Context, c index.Capture, nonce []byte) ([ProofBytes]byte, error) {
	b, err := warc.OpenBlock(l.dir, warc.Location{Segment: c.Segment, Offset: c.Offset, Length: c.Length})
	if err != nil {
		return [ProofBytes]byte{}, fmt.Errorf("%w: %v", errNotHeld, err)
	}
	defer b.Close()
	return proveBlock(ctx, b, c.RecordID, nonce)
}

// proveBlock answers nonce for the payload of the response record id,
// whose block b is: read as a stream, its digest checked to the end.
func proveBlock(ctx context.Context, b *warc.Block, id string, nonce []byte) ([ProofBytes]byte, error) {
	var proof [ProofBytes]byte
	if got, typ := b.Header.Get("WARC-Record-ID"), b.Header.Get("WARC-Type"); got != id || typ != warc.TypeResponse {
		return proof, fmt.Errorf("%w: the record there is %.100s, a %.30s record", errNotHeld, got, typ)
	}
	block := ctxReader{ctx, b}
	payload, err := warc.PayloadReader(block)
	if err != nil {
		return proof, fmt.Errorf("%w: %v", errNotHeld, err)
	}
	h := sha256.New()
	h.Write(nonce)
	if _, err := io.Copy(h, payload); err != nil {
		return proof, fmt.Errorf("%w: %v", errNotHeld, err)
	}
	// The payload may end before the block does (after the last chunk):
	// the block is read to its end, where its digest is checked.
	if _, err := io.Copy(io.Discard, block); err != nil {
		return proof, fmt.Errorf("%w: %v", errNotHeld, err)
	}
	if err := b.Finish(); err != nil {
		return proof, fmt.Errorf("%w: %v", errNotHeld, err)
	}
	return [ProofBytes]byte(h.Sum(nil)), nil
}

// ProvePayload reports whether a node holding c's record proves, over a
// fresh nonce, that it is a response record whose payload is payload:
// the node c came from, or failing that, any other live node that holds a
// copy (a damaged or missing copy is not a faulty holder). A node that
// answers anything but the proof has not proved it. The error wraps
// ErrUnavailable when no holder could be asked at all.
func (n *Network) ProvePayload(ctx context.Context, c index.Capture, payload []byte) (bool, error) {
	proven, err := n.provePayloadOn(ctx, c, payload)
	if proven || ctx.Err() != nil {
		return proven, ctx.Err()
	}
	asked := err == nil
	n.eachCopy(ctx, c, func(cp index.Capture) bool {
		ok, err := n.provePayloadOn(ctx, cp, payload)
		asked = asked || err == nil
		proven = ok
		return ok
	})
	if proven || asked {
		return proven, nil
	}
	return false, err
}

// provePayloadOn asks the node c came from to prove it holds payload in
// c's record. The error wraps ErrUnavailable when the node could not be
// asked; an answer that is not the proof is false, nil.
func (n *Network) provePayloadOn(ctx context.Context, c index.Capture, payload []byte) (bool, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.ProvePayload(ctx, c, payload)
	}
	nonce := newNonce()
	want := PayloadProof(nonce, payload)
	node, err := n.member(c.Node)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proofPath+"?"+url.Values{
		"segment": {c.Segment},
		"offset":  {strconv.FormatInt(c.Offset, 10)},
		"length":  {strconv.FormatInt(c.Length, 10)},
		"id":      {c.RecordID},
		"nonce":   {hex.EncodeToString(nonce)},
	}.Encode(), nil)
	if err != nil {
		return false, fmt.Errorf("archive: %w", err)
	}
	resp, err := n.ask(ctx, node, req, 0)
	if err != nil {
		return false, n.failed(ctx, node.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, nil
	}
	got, err := io.ReadAll(io.LimitReader(resp.Body, ProofBytes+1))
	if err != nil {
		return false, n.failed(ctx, node.ID, err)
	}
	return len(got) == ProofBytes && [ProofBytes]byte(got) == want, nil
}

// newNonce returns a fresh random nonce.
func newNonce() []byte {
	nonce := make([]byte, NonceBytes)
	rand.Read(nonce)
	return nonce
}

func serveProof(l *Local, w http.ResponseWriter, r *http.Request, v url.Values) {
	id, nonce, err := proofParams(v)
	var seg string
	var off, length int64
	if err == nil {
		seg, off, length, err = parseLocation(v)
	}
	if err != nil {
		http.Error(w, "archive: proof: "+err.Error(), http.StatusBadRequest)
		return
	}
	f, _, ok := openSegment(l, w, "proof", seg, off, length)
	if !ok {
		return
	}
	b, err := warc.ReadBlock(io.NopCloser(io.NewSectionReader(f, off, length)), warc.Location{Segment: seg, Offset: off, Length: length})
	var proof [ProofBytes]byte
	if err == nil {
		proof, err = proveBlock(r.Context(), b, id, nonce)
		b.Close()
	}
	f.Close()
	if err != nil {
		http.Error(w, fmt.Sprintf("archive: proof: %s at %d: %v", seg, off, err), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(ProofBytes))
	w.Write(proof[:])
}

// proofParams takes a proof request's id and nonce out of v, leaving its
// location.
func proofParams(v url.Values) (id string, nonce []byte, err error) {
	id, ids := v.Get("id"), len(v["id"])
	n, nonces := v.Get("nonce"), len(v["nonce"])
	v.Del("id")
	v.Del("nonce")
	if ids != 1 || id == "" || len(id) > 1024 {
		return "", nil, errors.New("id: want the capture's record ID")
	}
	nonce, err = hex.DecodeString(n)
	if nonces != 1 || err != nil || len(nonce) != NonceBytes {
		return "", nil, fmt.Errorf("nonce: want %d bytes in hexadecimal", NonceBytes)
	}
	return id, nonce, nil
}
