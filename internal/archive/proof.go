package archive

import (
	"context"
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

// A payload proof shows that a node holds a payload's bytes, not merely an
// index entry naming its digest. A node about to drop a payload it has
// just fetched, on another node's word that the payload is archived
// already, sends the holder a fresh random nonce; only a node with the
// payload's bytes can answer SHA-256(nonce ‖ payload), which the asker,
// holding the payload too, computes and compares. An index entry forged
// or gone stale cannot answer it, so a faulty peer cannot make others drop
// a payload that no node holds.
//
//	GET /v1/archive/proof?segment=&offset=&length=&id=&nonce=
//
// answers the proof for the payload of the response record id at that
// location, as ProofBytes bytes (application/octet-stream); 404 when no
// such response record is there.
const proofPath = Path + "proof"

const (
	// NonceBytes is the length of a proof's nonce.
	NonceBytes = 16
	// ProofBytes is the length of a proof.
	ProofBytes = sha256.Size
	// MaxProofRecord bounds the record (its gzip member) a node reads
	// whole to answer a proof; a larger one is refused, which costs the
	// asker a stored copy of the payload, not data. A crawler's default
	// body limit (50 MiB) stays under it.
	MaxProofRecord = 64 << 20
)

// ErrNotHeld says that a node does not hold the response record a proof
// asked about.
var ErrNotHeld = errors.New("archive: the record is not held")

// PayloadProof is what a node that holds payload answers to nonce.
func PayloadProof(nonce, payload []byte) [ProofBytes]byte {
	h := sha256.New()
	h.Write(nonce)
	h.Write(payload)
	return [ProofBytes]byte(h.Sum(nil))
}

// Prove answers nonce for the payload of c's record, which must be a
// response record in l.
func (l *Local) Prove(ctx context.Context, c index.Capture, nonce []byte) ([ProofBytes]byte, error) {
	if c.Length > MaxProofRecord {
		return [ProofBytes]byte{}, fmt.Errorf("archive: proof: record of %d bytes is over the %d-byte limit", c.Length, MaxProofRecord)
	}
	rec, err := l.Record(ctx, c)
	if err != nil {
		// Gone or damaged: as a peer answers, this copy holds nothing.
		return [ProofBytes]byte{}, fmt.Errorf("%w: %v", ErrNotHeld, err)
	}
	return proofOf(rec, c.RecordID, nonce)
}

// proofOf answers nonce for rec's payload, if rec is the response record
// id.
func proofOf(rec *warc.Record, id string, nonce []byte) ([ProofBytes]byte, error) {
	if rec.ID() != id || rec.Type() != warc.TypeResponse {
		return [ProofBytes]byte{}, fmt.Errorf("%w: %.100s is not the response record %.100s", ErrNotHeld, rec.ID(), id)
	}
	payload, _ := warc.HTTPPayload(rec.Block)
	return PayloadProof(nonce, payload), nil
}

// Prove asks the node c came from (this one, when c is local) to answer
// nonce for the payload of c's record. An error wraps ErrNotHeld when the
// node says it has no such response record there, ErrUnavailable when it
// could not be asked.
func (n *Network) Prove(ctx context.Context, c index.Capture, nonce []byte) ([ProofBytes]byte, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.Prove(ctx, c, nonce)
	}
	var proof [ProofBytes]byte
	node, err := n.member(c.Node)
	if err != nil {
		return proof, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proofPath+"?"+url.Values{
		"segment": {c.Segment},
		"offset":  {strconv.FormatInt(c.Offset, 10)},
		"length":  {strconv.FormatInt(c.Length, 10)},
		"id":      {c.RecordID},
		"nonce":   {hex.EncodeToString(nonce)},
	}.Encode(), nil)
	if err != nil {
		return proof, fmt.Errorf("archive: %w", err)
	}
	resp, err := n.ask(ctx, node, req, 0)
	if err != nil {
		return proof, n.failed(ctx, node.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return proof, fmt.Errorf("%w: %.16s: %.200q", ErrNotHeld, node.ID, msg)
	}
	if err := answerOK(resp, "application/octet-stream"); err != nil {
		return proof, n.failed(ctx, node.ID, err)
	}
	got, err := io.ReadAll(io.LimitReader(resp.Body, ProofBytes+1))
	if err != nil {
		return proof, n.failed(ctx, node.ID, err)
	}
	if len(got) != ProofBytes {
		return proof, n.failed(ctx, node.ID, fmt.Errorf("proof of %d bytes, want %d", len(got), ProofBytes))
	}
	return [ProofBytes]byte(got), nil
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
	if length > MaxProofRecord {
		http.Error(w, fmt.Sprintf("archive: proof: record of %d bytes is over the %d-byte limit", length, MaxProofRecord), http.StatusRequestEntityTooLarge)
		return
	}
	f, _, ok := openSegment(l, w, "proof", seg, off, length)
	if !ok {
		return
	}
	defer f.Close()
	rd, err := warc.NewReader(io.NewSectionReader(f, off, length))
	var rec *warc.Record
	if err == nil {
		rec, _, err = rd.Next()
	}
	if err == nil {
		err = warc.VerifyBlock(rec)
	}
	if err != nil {
		// Damaged bytes, or a location that holds no record: the asker
		// stores its payload either way.
		http.Error(w, fmt.Sprintf("archive: proof: %s at %d: %v", seg, off, err), http.StatusNotFound)
		return
	}
	proof, err := proofOf(rec, id, nonce)
	if err != nil {
		http.Error(w, "archive: proof: "+err.Error(), http.StatusNotFound)
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
