package archive

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/peer"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// maxErrorBody bounds how much of a peer's error answer is read.
const maxErrorBody = 1 << 10

// A Node is a member of the network as a Network calls it.
type Node struct {
	ID   string // certified ID
	Addr string // peer address, host:port
}

// NetworkConfig configures a Network.
type NetworkConfig struct {
	Local  *Local
	Self   string // this node's certified ID
	Client *peer.Client
	// Owner returns the node that owns a site (urlkey.Site); id == Self
	// for this node. ok is false when no node does.
	Owner func(site string) (id, addr string, ok bool)
	// Members returns the live nodes, this node included.
	Members func() []Node
	// AnswerTimeout is how long a node may go without sending a byte of
	// its answer — before the headers, or while one is read — before it is
	// taken for unavailable (default DefaultAnswerTimeout).
	AnswerTimeout time.Duration
	// Damaged, if set, is called with a capture of this node's whose
	// record could not be read (not for want of the file: its bytes are
	// damaged) while another node's copy could: the caller may drop it, to
	// have repair copy it back.
	Damaged func(index.Capture)
	Logger  *slog.Logger // nil: log nothing
}

// DefaultAnswerTimeout is NetworkConfig.AnswerTimeout's default. A node
// that is up but stuck (a full disk, a lock held) answers pings, and would
// otherwise hold every query that asks it — a replay of its sites, a
// whole-network export — until the query's caller gave up, if ever.
const DefaultAnswerTimeout = 30 * time.Second

// Network is the archive of a whole network as one node sees it.
//
// The captures of one URL, and a range within one site, are asked first of
// the node that owns the site (this node's are read locally); when it has
// any, its answer stands, so the common case is one call. Captures can also
// sit on other nodes (made while the owner was away, on a previous owner,
// on replicas), so when the owner has none, or cannot be reached, every
// other live node is asked at once and their answers are merged in order.
// That answer is partial when some node fails: captures found elsewhere are
// given and the failures logged, but if none are found, a failure is
// reported rather than "not archived". A range that spans sites is gathered
// from every live node and merged in order, partial in the same way: with
// replicas, what a failed node holds is mostly on others too (Gather, for
// reading a range whole, also returns the failures, as a *PartialError). A
// node that sends nothing for AnswerTimeout is taken as failed.
//
// A capture that several nodes hold (the same key and time) is given once,
// from the first of them: this node, then the members in the order Members
// lists them. Captures read from another node carry its ID in Node, and
// their records, digests and revisit originals are read from that node.
// Whatever another node answers is checked before it is used: a node that
// cannot be reached, or answers out of order, out of range or with damaged
// bytes, is an error wrapping ErrUnavailable.
type Network struct {
	local   *Local
	self    string
	client  *peer.Client
	owner   func(site string) (id, addr string, ok bool)
	members func() []Node
	timeout time.Duration // NetworkConfig.AnswerTimeout
	damaged func(index.Capture)
	log     *slog.Logger
}

// NewNetwork returns the network archive cfg describes.
func NewNetwork(cfg NetworkConfig) *Network {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.AnswerTimeout
	if timeout <= 0 {
		timeout = DefaultAnswerTimeout
	}
	return &Network{local: cfg.Local, self: cfg.Self, client: cfg.Client, owner: cfg.Owner, members: cfg.Members, timeout: timeout,
		damaged: cfg.Damaged, log: log}
}

var _ Archive = (*Network)(nil)

func (n *Network) Captures(ctx context.Context, urlKey string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return n.captures(ctx, query{byKey: true, key: urlKey, reverse: reverse}, fn)
}

func (n *Network) CapturesBetween(ctx context.Context, urlKey string, from, to time.Time, reverse bool, fn func(index.Capture) (bool, error)) error {
	if !from.IsZero() && !to.IsZero() && from.After(to) {
		return nil
	}
	return n.captures(ctx, query{byKey: true, key: urlKey, from: from, to: to, reverse: reverse}, fn)
}

func (n *Network) captures(ctx context.Context, q query, fn func(index.Capture) (bool, error)) error {
	return n.lookup(ctx, urlkey.SiteOfKey(q.key), q, fn)
}

// Range answers as Captures does when every key in [lo, hi) belongs to one
// site: from its owner, or failing that from the other nodes. Otherwise it
// asks every live node, merging their streams by key and time, and passes
// over the nodes that fail as Captures does: their failures are logged,
// and are the answer only when no capture was found.
func (n *Network) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	if hi != "" && lo >= hi {
		return nil
	}
	q := query{lo: lo, hi: hi, reverse: reverse}
	if site, ok := oneSite(lo, hi); ok {
		return n.lookup(ctx, site, q, fn)
	}
	return n.elsewhere(ctx, q, "", nil, fn)
}

// Gather calls fn for each capture whose URL key k satisfies lo <= k < hi
// (hi empty: no upper bound), by key then time, from every live node, as
// Range does for a range that spans sites: within one site too it does not
// stop at the owner's answer. It is for reading a range whole (an export),
// not fast. A node that cannot be asked, or fails part way, is passed over:
// the range is read through from the others, which hold copies of most of
// what it does, and Gather then returns a *PartialError naming it.
func (n *Network) Gather(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	if hi != "" && lo >= hi {
		return nil
	}
	q := query{lo: lo, hi: hi, reverse: reverse}
	_, failed, err := n.mergeAvailable(ctx, q, n.others(n.self), true, fn)
	if err == nil && len(failed) > 0 {
		return &PartialError{Failed: failed}
	}
	return err
}

// A PartialError is a range read through without some nodes, which could
// not be asked (each of Failed is an ErrUnavailable): captures that only
// they hold are missing from what was read.
type PartialError struct{ Failed []error }

func (e *PartialError) Error() string {
	msgs := make([]string, len(e.Failed))
	for i, err := range e.Failed {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("archive: %d node(s) could not be asked, and captures only they hold are missing: %s", len(e.Failed), strings.Join(msgs, "; "))
}

func (e *PartialError) Unwrap() []error { return e.Failed }

// lookup answers q, whose keys are all of site, from the site's owner if it
// has any capture for q, and otherwise from every other live node.
func (n *Network) lookup(ctx context.Context, site string, q query, fn func(index.Capture) (bool, error)) error {
	owner, ownerErr := n.ownerOf(site)
	if ownerErr == nil {
		found := false
		var err error
		if owner.ID == n.self {
			err = n.scanLocal(ctx, q, func(c index.Capture) (bool, error) {
				found = true
				return fn(c)
			})
		} else {
			found, err = n.remote(ctx, owner, q, fn)
		}
		// Once fn has been called the owner's answer stands, even if it
		// fails later; before, only the owner being unavailable sends the
		// query elsewhere (not the caller's cancellation).
		if found || err != nil && !errors.Is(err, ErrUnavailable) {
			return err
		}
		ownerErr = err
	}
	return n.elsewhere(ctx, q, owner.ID, ownerErr, fn)
}

// elsewhere answers q from every live node but owner (whose answer, empty
// or ownerErr, was had already; "" for none), merging what they hold.
// Unavailable nodes are passed over when others have captures; when none
// has, the owner's failure, or else the others', is the answer, for the
// captures may be on a node that failed.
func (n *Network) elsewhere(ctx context.Context, q query, owner string, ownerErr error, fn func(index.Capture) (bool, error)) error {
	nodes := n.others(owner)
	local := owner != n.self
	if len(nodes) == 0 && !local {
		return ownerErr
	}
	found, failed, err := n.mergeAvailable(ctx, q, nodes, local, fn)
	if err != nil {
		return err
	}
	if !found {
		if ownerErr != nil {
			return ownerErr
		}
		return errors.Join(failed...)
	}
	if ownerErr != nil {
		failed = append(failed, ownerErr)
	}
	for _, err := range failed {
		n.log.Warn("archive: captures may be missing: a node holding some could not be asked", "err", err)
	}
	return nil
}

// others returns the live members but this node and the node except,
// each once, in the order Members lists them.
func (n *Network) others(except string) []Node {
	var nodes []Node
	seen := map[string]bool{n.self: true, except: true}
	for _, m := range n.members() {
		if !seen[m.ID] {
			seen[m.ID] = true
			nodes = append(nodes, m)
		}
	}
	return nodes
}

// scanLocal calls fn for each capture of this node's that answers q.
func (n *Network) scanLocal(ctx context.Context, q query, fn func(index.Capture) (bool, error)) error {
	switch {
	case !q.byKey:
		return n.local.Range(ctx, q.lo, q.hi, q.reverse, fn)
	case q.from.IsZero() && q.to.IsZero():
		return n.local.Captures(ctx, q.key, q.reverse, fn)
	}
	return n.local.CapturesBetween(ctx, q.key, q.from, q.to, q.reverse, fn)
}

// oneSite returns the site of every URL key k with lo <= k < hi, if they
// have one: the keys of site s are those starting with s+")/", the
// interval [s+")/", s+")0").
func oneSite(lo, hi string) (string, bool) {
	site, _, ok := strings.Cut(lo, ")/")
	if !ok || hi == "" || hi > site+")0" {
		return "", false
	}
	return site, true
}

func (n *Network) ByDigest(ctx context.Context, c index.Capture, digest string) (index.Capture, bool, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.ByDigest(ctx, c, digest)
	}
	node, err := n.member(c.Node)
	if err != nil {
		return index.Capture{}, false, err
	}
	s, err := n.open(ctx, node, digestPath+"?"+url.Values{"d": {digest}}.Encode())
	if err != nil {
		return index.Capture{}, false, err
	}
	defer s.close()
	first, err := s.dec.next()
	if errors.Is(err, io.EOF) {
		return index.Capture{}, false, nil
	}
	if err != nil {
		return index.Capture{}, false, n.failed(ctx, node.ID, err)
	}
	if _, err := s.dec.next(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("%w: more than one capture for a digest", errStream)
		}
		return index.Capture{}, false, n.failed(ctx, node.ID, err)
	}
	if first.Digest != digest {
		return index.Capture{}, false, n.failed(ctx, node.ID, fmt.Errorf("%w: asked for digest %.100q, got a capture of %.100q", errStream, digest, first.Digest))
	}
	first.Node = node.ID
	return first, true, nil
}

// Record reads c's record from the node c came from, checking that it is
// one whole gzip member of c.Length bytes, that its block digest matches,
// and that it is the record c names. When that copy cannot be read —
// damaged on disk, or its node away — the record is read from another
// node that holds it, if one does; the first failure is the answer when
// none does.
func (n *Network) Record(ctx context.Context, c index.Capture) (*warc.Record, error) {
	rec, err := n.recordOn(ctx, c)
	if err == nil || ctx.Err() != nil || c.RecordID == "" {
		return rec, err
	}
	if rec, ok := n.recordElsewhere(ctx, c, err); ok {
		return rec, nil
	}
	return nil, err
}

// recordOn reads c's record from the node c came from.
func (n *Network) recordOn(ctx context.Context, c index.Capture) (*warc.Record, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.Record(ctx, c)
	}
	_, rec, err := n.fetch(ctx, c)
	return rec, err
}

// eachCopy calls fn with each capture of the record c names held by a live
// node other than c's (this one first: a copy replication or repair made,
// at its own location) until fn returns true. It reports whether every
// live node could be asked.
func (n *Network) eachCopy(ctx context.Context, c index.Capture, fn func(cp index.Capture) bool) (allAsked bool) {
	allAsked = true
	tried := c.Node
	if tried == "" {
		tried = n.self
	}
	ids := []string{n.self}
	for _, m := range n.others(tried) {
		ids = append(ids, m.ID)
	}
	for _, id := range ids {
		if id == tried {
			continue
		}
		var cp index.Capture
		err := n.CapturesOn(ctx, id, c.URLKey, func(o index.Capture) (bool, error) {
			if o.RecordID != c.RecordID {
				return true, nil
			}
			cp = o
			return false, nil
		})
		if err != nil {
			allAsked = false
		}
		if err != nil || cp.RecordID == "" {
			continue
		}
		cp.Node = id
		if fn(cp) {
			return allAsked
		}
	}
	return allAsked
}

// GoodCopyElsewhere reports whether a live node other than this one holds
// the record of c, one of this node's captures, intact: a copy is read
// whole and checked, as Record checks it. unknown is true when it found
// none but some node could not be asked.
func (n *Network) GoodCopyElsewhere(ctx context.Context, c index.Capture) (good, unknown bool) {
	c.Node = n.self
	allAsked := n.eachCopy(ctx, c, func(cp index.Capture) bool {
		if cp.Node == n.self {
			return false // this node's own copy is the one in question
		}
		_, err := n.recordOn(ctx, cp)
		good = err == nil
		return good
	})
	return good, !good && !allAsked
}

// recordElsewhere reads the record c names from a node other than c's.
func (n *Network) recordElsewhere(ctx context.Context, c index.Capture, failure error) (*warc.Record, bool) {
	tried := c.Node
	if tried == "" {
		tried = n.self
	}
	var rec *warc.Record
	var from string
	n.eachCopy(ctx, c, func(cp index.Capture) bool {
		r, err := n.recordOn(ctx, cp)
		if err != nil {
			return false
		}
		rec, from = r, cp.Node
		return true
	})
	if rec == nil {
		return nil, false
	}
	n.log.Warn("archive: a capture's copy could not be read; read another node's", "url", c.URL, "node", tried, "from", from, "err", failure)
	if _, missing := errors.AsType[*fs.PathError](failure); tried == n.self && !missing && n.damaged != nil {
		local := c
		local.Node = ""
		n.damaged(local)
	}
	return rec, true
}

// OpenBlock opens the block of c's record to be read as a stream, from
// this node's segments (Local.OpenBlock) or from the node c came from,
// whose answer is read as it arrives; reading the block to its end
// checks its digest (warc.Block). Closing the block ends the request.
func (n *Network) OpenBlock(ctx context.Context, c index.Capture) (*warc.Block, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.OpenBlock(ctx, c)
	}
	body, node, err := n.askMember(ctx, c)
	if err != nil {
		return nil, err
	}
	b, err := memberBlock(io.LimitReader(body, c.Length), body, c)
	if err != nil {
		return nil, n.answerFailed(ctx, node, err)
	}
	return b, nil
}

// Member returns the gzip member holding a capture's record, byte for byte
// as the node holding it wrote it, checked as Record checks it — what a
// node copies to repair or complete its own archive — and the record it
// holds.
func (n *Network) Member(ctx context.Context, c index.Capture) ([]byte, *warc.Record, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.Member(ctx, c)
	}
	return n.fetch(ctx, c)
}

// fetch reads a capture's record from the node holding it and checks it:
// one gzip member of exactly the capture's length, holding one record whose
// block digest verifies and whose ID is the capture's.
func (n *Network) fetch(ctx context.Context, c index.Capture) ([]byte, *warc.Record, error) {
	resp, node, err := n.askRecord(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.Length+1))
	if err != nil {
		return nil, nil, n.failed(ctx, node.ID, err)
	}
	rec, err := parseMember(raw, c)
	if err != nil {
		return nil, nil, n.answerFailed(ctx, node, err)
	}
	return raw, rec, nil
}

// askRecord asks the node c came from for the gzip member of c's record
// and returns its answer, whose body is to be checked as it is read.
func (n *Network) askRecord(ctx context.Context, c index.Capture) (*http.Response, Node, error) {
	if c.Length <= 0 || c.Length > MaxRecordBytes || c.Offset < 0 {
		return nil, Node{}, fmt.Errorf("archive: record of %.200q at %s: location %d+%d out of bounds", c.URLKey, c.Timestamp14(), c.Offset, c.Length)
	}
	node, err := n.member(c.Node)
	if err != nil {
		return nil, node, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, recordPath+"?"+url.Values{
		"segment": {c.Segment},
		"offset":  {strconv.FormatInt(c.Offset, 10)},
		"length":  {strconv.FormatInt(c.Length, 10)},
	}.Encode(), nil)
	if err != nil {
		return nil, node, fmt.Errorf("archive: %w", err)
	}
	resp, err := n.ask(ctx, node, req, 0)
	if err != nil {
		return nil, node, n.failed(ctx, node.ID, err)
	}
	if err := answerOK(resp, "application/octet-stream"); err != nil {
		resp.Body.Close()
		return nil, node, n.failed(ctx, node.ID, err)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != c.Length {
		resp.Body.Close()
		return nil, node, n.failed(ctx, node.ID, fmt.Errorf("record answer of %d bytes, want %d", resp.ContentLength, c.Length))
	}
	return resp, node, nil
}

// Companions returns the records written with capture c on the node c
// came from — its request and metadata records, as gzip members byte for
// byte — each checked to be one whole record, concurrent to c's, whose
// block digest verifies. A capture stored with none (or whose records were
// written before it, as some tools do) has none.
func (n *Network) Companions(ctx context.Context, c index.Capture) ([][]byte, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.Companions(ctx, c)
	}
	body, err := n.framed(ctx, c.Node, companionsPath, url.Values{
		"segment": {c.Segment},
		"offset":  {strconv.FormatInt(c.Offset, 10)},
		"length":  {strconv.FormatInt(c.Length, 10)},
		"id":      {c.RecordID},
	})
	if err != nil {
		return nil, err
	}
	members, err := decodeCompanions(body, c.RecordID)
	if err != nil {
		return nil, fmt.Errorf("archive: companions of %s from %.16s: %w", c.RecordID, c.Node, err)
	}
	return members, nil
}

// Warcinfo returns the warcinfo record starting the segment capture c is
// in, on the node c came from, as its gzip member — checked to be one whole
// warcinfo record whose block digest verifies — or nil when the segment
// starts with another record.
func (n *Network) Warcinfo(ctx context.Context, c index.Capture) ([]byte, error) {
	if c.Node == "" || c.Node == n.self {
		return n.local.Warcinfo(ctx, c)
	}
	body, err := n.framed(ctx, c.Node, warcinfoPath, url.Values{"segment": {c.Segment}})
	if err != nil {
		return nil, err
	}
	member, err := decodeWarcinfo(body)
	if err != nil {
		return nil, fmt.Errorf("archive: warcinfo of %s from %.16s: %w", c.Segment, c.Node, err)
	}
	return member, nil
}

// framed asks the node with this ID for gzip members (companions or a
// warcinfo record) and returns the answer's body, which is small.
func (n *Network) framed(ctx context.Context, id, path string, params url.Values) ([]byte, error) {
	node, err := n.member(id)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path+"?"+params.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	resp, err := n.ask(ctx, node, req, 0)
	if err != nil {
		return nil, n.failed(ctx, node.ID, err)
	}
	defer resp.Body.Close()
	if err := answerOK(resp, companionsContentType); err != nil {
		return nil, fmt.Errorf("archive: %s from %.16s: %w", path, node.ID, err)
	}
	const most = maxCompanions * (maxCompanionBlock + 64<<10)
	body, err := io.ReadAll(io.LimitReader(resp.Body, most+1))
	if err != nil {
		return nil, n.failed(ctx, node.ID, err)
	}
	return body, nil
}

// decodeCompanions reads a companions answer and checks each member.
func decodeCompanions(body []byte, id string) ([][]byte, error) {
	return decodeFrames(body, func(rec *warc.Record) error {
		if !warc.IsCompanion(&rec.Header, id) {
			return fmt.Errorf("record %.100s is not a request or metadata record concurrent to %s", rec.ID(), id)
		}
		return nil
	})
}

// decodeFrames reads an answer of framed gzip members, each checked to be
// one whole record whose block digest verifies and that check accepts.
func decodeFrames(body []byte, check func(*warc.Record) error) ([][]byte, error) {
	var members [][]byte
	for len(body) > 0 {
		if len(members) == maxCompanions {
			return nil, fmt.Errorf("more than %d records", maxCompanions)
		}
		l, k := binary.Uvarint(body)
		if k <= 0 || l == 0 || l > uint64(len(body)-k) {
			return nil, errors.New("malformed answer")
		}
		raw := body[k : k+int(l)]
		body = body[k+int(l):]
		rec, err := parseMember(raw, index.Capture{Length: int64(len(raw))})
		if err != nil {
			return nil, err
		}
		if err := check(rec); err != nil {
			return nil, err
		}
		members = append(members, raw)
	}
	return members, nil
}

// decodeWarcinfo reads a warcinfo answer: no frame, or one holding a
// warcinfo record.
func decodeWarcinfo(body []byte) ([]byte, error) {
	members, err := decodeFrames(body, func(rec *warc.Record) error {
		if rec.Type() != warc.TypeWarcinfo {
			return fmt.Errorf("record %.100s is a %.30s record, not a warcinfo record", rec.ID(), rec.Type())
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(members) > 1:
		return nil, errors.New("more than one record")
	case len(members) == 0:
		return nil, nil
	}
	return members[0], nil
}

// parseMember checks that raw is the gzip member of capture c — exactly
// c.Length bytes holding one record whose block digest verifies and whose
// ID is c's — and returns its record.
func parseMember(raw []byte, c index.Capture) (*warc.Record, error) {
	switch {
	case int64(len(raw)) != c.Length:
		return nil, fmt.Errorf("record of %d bytes, want %d", len(raw), c.Length)
	case len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b:
		return nil, errors.New("record is not a gzip member")
	}
	rd, err := warc.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	rec, loc, err := rd.Next()
	if err != nil {
		return nil, err
	}
	if loc.Length != c.Length {
		return nil, fmt.Errorf("not one record in one gzip member of %d bytes", c.Length)
	}
	where := fmt.Sprintf("%s at offset %d", c.Segment, c.Offset)
	if err := warc.VerifyBlock(rec); err != nil {
		return nil, fmt.Errorf("%w: %s", err, where)
	}
	if c.RecordID != "" && rec.ID() != c.RecordID {
		return nil, fmt.Errorf("%s holds record %.100s, not %s", where, rec.ID(), c.RecordID)
	}
	return rec, nil
}

// CapturesOn calls fn for each capture of urlKey that the node with this
// ID holds, in time order: a question for one node, such as a previous
// owner of the key's site asked whether it archived a URL already.
func (n *Network) CapturesOn(ctx context.Context, id, urlKey string, fn func(index.Capture) (bool, error)) error {
	if id == "" || id == n.self {
		return n.local.Captures(ctx, urlKey, false, fn)
	}
	node, err := n.member(id)
	if err != nil {
		return err
	}
	if _, err := n.remote(ctx, node, query{byKey: true, key: urlKey}, fn); err != nil {
		if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		return n.failed(ctx, id, err)
	}
	return nil
}

// ownerOf returns the node that owns site.
func (n *Network) ownerOf(site string) (Node, error) {
	id, addr, ok := n.owner(site)
	if !ok || id == "" {
		return Node{}, fmt.Errorf("%w: no node owns %.200q", ErrUnavailable, site)
	}
	return Node{ID: id, Addr: addr}, nil
}

// member returns the live member with this ID.
func (n *Network) member(id string) (Node, error) {
	for _, m := range n.members() {
		if m.ID == id {
			return m, nil
		}
	}
	return Node{}, fmt.Errorf("%w: %s: not a live member", ErrUnavailable, id)
}

// failed is the error of a call to node that failed with err: the
// caller's own cancellation as it is, anything else ErrUnavailable.
func (n *Network) failed(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, errStream) {
		n.log.Warn("archive: a node answered a malformed capture stream", "node", id, "err", err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, id, err)
}

// answerOK checks a peer's answer's status and media type, and on failure
// describes it with the start of its body.
func answerOK(resp *http.Response, contentType string) error {
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return fmt.Errorf("%s: %.200q", resp.Status, strings.TrimSpace(string(msg)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != contentType {
		return fmt.Errorf("answer of type %.100q, want %s", ct, contentType)
	}
	return nil
}

// ask sends req to node and returns the answer, under a watchdog: the
// request fails once silence (n.timeout if 0) passes without the node
// sending anything, before the headers or while a read of the body waits.
// Closing the body cancels the request (an HTTP/2 stream reset), so that
// the node stops.
func (n *Network) ask(ctx context.Context, node Node, req *http.Request, silence time.Duration) (*http.Response, error) {
	if silence <= 0 {
		silence = n.timeout
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{cancel: cancel, d: silence}
	w.timer = time.AfterFunc(silence, w.fire)
	resp, err := n.client.Do(ctx, node.Addr, node.ID, req.WithContext(ctx))
	w.timer.Stop()
	if err != nil {
		cancel()
		return nil, w.explain(err)
	}
	resp.Body = &watchedBody{body: resp.Body, w: w}
	return resp, nil
}

// A watchdog cancels a request to a node that stays silent too long.
type watchdog struct {
	timer  *time.Timer
	d      time.Duration
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (w *watchdog) fire() {
	w.fired.Store(true)
	w.cancel()
}

// explain says why a request failed: the node's silence, if the watchdog
// cancelled it.
func (w *watchdog) explain(err error) error {
	if w.fired.Load() {
		return fmt.Errorf("no answer for %s: %w", w.d, err)
	}
	return err
}

// watchedBody is an answer's body whose reads the watchdog times: only
// the time spent waiting in Read counts, not the caller's pauses between
// reads.
type watchedBody struct {
	body io.ReadCloser
	w    *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.timer.Reset(b.w.d)
	n, err := b.body.Read(p)
	b.w.timer.Stop()
	if err != nil && err != io.EOF {
		err = b.w.explain(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.w.timer.Stop()
	b.w.cancel()
	return b.body.Close()
}

// remoteStream is a capture stream being read from a node.
type remoteStream struct {
	body io.ReadCloser
	dec  *captureDecoder
}

// open sends a GET of path (with its query) to node and reads the capture
// stream's magic.
func (n *Network) open(ctx context.Context, node Node, path string) (*remoteStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	resp, err := n.ask(ctx, node, req, 0)
	if err != nil {
		return nil, n.failed(ctx, node.ID, err)
	}
	if err := answerOK(resp, streamContentType); err != nil {
		resp.Body.Close()
		return nil, n.failed(ctx, node.ID, err)
	}
	dec, err := newCaptureDecoder(resp.Body)
	if err != nil {
		resp.Body.Close()
		return nil, n.failed(ctx, node.ID, err)
	}
	return &remoteStream{body: resp.Body, dec: dec}, nil
}

// close ends the stream; closing the body resets it, so the node stops
// scanning.
func (s *remoteStream) close() { s.body.Close() }

// remote calls fn for each capture node answers to q, and reports
// whether it did at all.
func (n *Network) remote(ctx context.Context, node Node, q query, fn func(index.Capture) (bool, error)) (found bool, err error) {
	src, err := n.openSource(ctx, node, q)
	if err != nil {
		return false, err
	}
	defer src.close()
	for {
		c, err := src.next()
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return found, err
		}
		found = true
		if more, err := fn(c); err != nil || !more {
			return found, err
		}
	}
}

// A source is one ordered stream of captures in a merge.
type source struct {
	next  func() (index.Capture, error) // io.EOF at the end
	close func()
}

// openSource opens q on node as a source that checks what the node sends:
// each capture must answer q and come after the previous one.
func (n *Network) openSource(ctx context.Context, node Node, q query) (source, error) {
	s, err := n.open(ctx, node, rangePath+"?"+q.values().Encode())
	if err != nil {
		return source{}, err
	}
	var prev index.Capture
	first := true
	next := func() (index.Capture, error) {
		c, err := s.dec.next()
		if errors.Is(err, io.EOF) {
			return c, err
		}
		if err == nil {
			switch {
			case !q.admits(c):
				err = fmt.Errorf("%w: capture of %.200q at %s does not answer the query", errStream, c.URLKey, c.Timestamp14())
			case !first && !q.inOrder(prev, c):
				err = fmt.Errorf("%w: capture of %.200q at %s out of order", errStream, c.URLKey, c.Timestamp14())
			}
		}
		if err != nil {
			return index.Capture{}, n.failed(ctx, node.ID, err)
		}
		prev, first = c, false
		c.Node = node.ID
		return c, nil
	}
	return source{next: next, close: s.close}, nil
}

// localSource is q's answer from the local archive as a source.
func (n *Network) localSource(ctx context.Context, q query) source {
	next, stop := iter.Pull2(func(yield func(index.Capture, error) bool) {
		err := n.scanLocal(ctx, q, func(c index.Capture) (bool, error) {
			return yield(c, nil), nil
		})
		if err != nil {
			yield(index.Capture{}, err)
		}
	})
	return source{
		next: func() (index.Capture, error) {
			c, err, ok := next()
			if !ok {
				return index.Capture{}, io.EOF
			}
			return c, err
		},
		close: stop,
	}
}

// mergeAvailable answers q from nodes (and with local, this node's
// archive), opening all their streams at once and merging them, holding
// one capture per node. It passes over the nodes that are unavailable,
// when the query is opened or part way, returning their errors in failed.
// found reports whether fn was called.
func (n *Network) mergeAvailable(ctx context.Context, q query, nodes []Node, local bool, fn func(index.Capture) (bool, error)) (found bool, failed []error, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcs, errs := n.openAll(ctx, q, nodes, local)
	defer closeAll(srcs)
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrUnavailable) {
			return false, nil, err // the caller's cancellation
		}
		if err != nil {
			failed = append(failed, err)
		}
	}
	found, more, err := n.mergeSources(q, srcs, true, fn)
	return found, append(failed, more...), err
}

// openAll opens q on nodes at once; with local, this node's archive is the
// first source. A node that could not be opened has a zero source and its
// error at its place in errs.
func (n *Network) openAll(ctx context.Context, q query, nodes []Node, local bool) ([]source, []error) {
	base := 0
	if local {
		base = 1
	}
	srcs := make([]source, base+len(nodes))
	if local {
		srcs[0] = n.localSource(ctx, q)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, m := range nodes {
		wg.Go(func() { srcs[base+i], errs[i] = n.openSource(ctx, m, q) })
	}
	wg.Wait()
	return srcs, errs
}

func closeAll(srcs []source) {
	for _, s := range srcs {
		if s.close != nil {
			s.close()
		}
	}
}

// mergeSources calls fn for the captures of srcs (zero ones skipped) in
// q's order, each key and time once, from the first source holding it. If
// partial, a source failing with ErrUnavailable is dropped, its error
// returned in failed, and the merge goes on without it; any other error
// ends the merge. found reports whether fn was called.
func (n *Network) mergeSources(q query, srcs []source, partial bool, fn func(index.Capture) (bool, error)) (found bool, failed []error, err error) {
	// pull reads source i's next capture; ok is false at its end, or when
	// it failed and was dropped.
	pull := func(i int) (c index.Capture, ok bool, err error) {
		c, err = srcs[i].next()
		switch {
		case err == nil:
			return c, true, nil
		case errors.Is(err, io.EOF):
			return c, false, nil
		case partial && errors.Is(err, ErrUnavailable):
			failed = append(failed, err)
			srcs[i].close()
			srcs[i].close = nil
			return c, false, nil
		}
		return c, false, err
	}
	h := &mergeHeap{reverse: q.reverse}
	for i, s := range srcs {
		if s.next == nil {
			continue
		}
		c, ok, err := pull(i)
		if err != nil {
			return false, failed, err
		}
		if ok {
			h.items = append(h.items, mergeItem{c: c, src: i})
		}
	}
	heap.Init(h)
	var last index.Capture
	for h.Len() > 0 {
		top := &h.items[0]
		c := top.c
		if !found || compareCaptures(last, c) != 0 {
			last, found = c, true
			if more, err := fn(c); err != nil || !more {
				return found, failed, err
			}
		}
		next, ok, err := pull(top.src)
		switch {
		case err != nil:
			return found, failed, err
		case !ok:
			heap.Pop(h)
		default:
			top.c = next
			heap.Fix(h, 0)
		}
	}
	return found, failed, nil
}

// compareCaptures orders captures as the index does: by URL key, then by
// time as the index's keys hold it (Unix nanoseconds, unsigned).
func compareCaptures(a, b index.Capture) int {
	if c := strings.Compare(a.URLKey, b.URLKey); c != 0 {
		return c
	}
	ta, tb := uint64(a.Time.UnixNano()), uint64(b.Time.UnixNano())
	switch {
	case ta < tb:
		return -1
	case ta > tb:
		return 1
	}
	return 0
}

// admits reports whether c answers q.
func (q query) admits(c index.Capture) bool {
	if q.byKey {
		return c.URLKey == q.key &&
			(q.from.IsZero() || !c.Time.Before(q.from)) &&
			(q.to.IsZero() || !c.Time.After(q.to))
	}
	return c.URLKey >= q.lo && (q.hi == "" || c.URLKey < q.hi)
}

// inOrder reports whether c may follow prev in an answer to q: strictly
// after it, as one index holds one capture per key and time.
func (q query) inOrder(prev, c index.Capture) bool {
	if q.reverse {
		return compareCaptures(prev, c) > 0
	}
	return compareCaptures(prev, c) < 0
}

type mergeItem struct {
	c   index.Capture
	src int
}

// mergeHeap orders the head captures of the sources; among equal ones,
// the first source's comes first.
type mergeHeap struct {
	items   []mergeItem
	reverse bool
}

func (h *mergeHeap) Len() int { return len(h.items) }

func (h *mergeHeap) Less(i, j int) bool {
	c := compareCaptures(h.items[i].c, h.items[j].c)
	if h.reverse {
		c = -c
	}
	if c != 0 {
		return c < 0
	}
	return h.items[i].src < h.items[j].src
}

func (h *mergeHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }

func (h *mergeHeap) Push(x any) { h.items = append(h.items, x.(mergeItem)) }

func (h *mergeHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
