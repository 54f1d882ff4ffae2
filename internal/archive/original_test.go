package archive

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// chainArchive holds one URL's response and the revisits after it, each a
// server-not-modified revisit naming the one before and no digest.
type chainArchive struct {
	Archive // the methods Chains does not use
	caps    map[int64]index.Capture
	recs    map[int64]*warc.Record
}

const chainURL = "http://steady.example/"

func newChainArchive(t *testing.T, revisits int) (*chainArchive, func(int) index.Capture) {
	t.Helper()
	at := func(i int) time.Time {
		return time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
	}
	a := &chainArchive{caps: map[int64]index.Capture{}, recs: map[int64]*warc.Record{}}
	resp, err := warc.NewResponse(chainURL, at(0), []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	if err != nil {
		t.Fatal(err)
	}
	add := func(i int, typ string, rec *warc.Record) {
		a.caps[at(i).Unix()] = index.Capture{URLKey: "example,steady)/", Time: at(i), URL: chainURL, Type: typ, RecordID: rec.ID(), Status: 200}
		a.recs[at(i).Unix()] = rec
	}
	add(0, warc.TypeResponse, resp)
	prev := resp
	for i := 1; i <= revisits; i++ {
		rec := warc.NewRevisit(chainURL, at(i), warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "",
			warc.RefersTo{ID: prev.ID(), URI: chainURL, Date: at(i - 1)})
		add(i, warc.TypeRevisit, rec)
		prev = rec
	}
	return a, func(i int) index.Capture { return a.caps[at(i).Unix()] }
}

func (a *chainArchive) CapturesBetween(_ context.Context, key string, from, to time.Time, _ bool, fn func(index.Capture) (bool, error)) error {
	for s := from.Unix(); s <= to.Unix(); s++ {
		if c, ok := a.caps[s]; ok && c.URLKey == key {
			if more, err := fn(c); !more || err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *chainArchive) ByDigest(context.Context, index.Capture, string) (index.Capture, bool, error) {
	return index.Capture{}, false, nil
}

func (a *chainArchive) Record(_ context.Context, c index.Capture) (*warc.Record, error) {
	if r, ok := a.recs[c.Time.Unix()]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("no record at %s", c.Time)
}

// Whatever order its revisits are resolved in, a chain resolves as it
// would walked afresh: within MaxRevisitChain revisits of the original,
// and not beyond.
func TestChainsBoundDoesNotDependOnOrder(t *testing.T) {
	a, rev := newChainArchive(t, MaxRevisitChain+2)
	ctx := context.Background()
	cs := NewChains()
	resolve := func(i int) error {
		c := rev(i)
		rec, err := a.Record(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := cs.Resolve(ctx, a, c, rec.Header)
		if err == nil && o.Type != warc.TypeResponse {
			t.Fatalf("revisit %d resolved to %+v", i, o)
		}
		return err
	}
	// The revisit MaxRevisitChain+1 after the original names MaxRevisitChain
	// revisits before it: it resolves. The next names one more: it does not.
	for _, i := range []int{MaxRevisitChain, MaxRevisitChain + 2, MaxRevisitChain + 1, 1} {
		err := resolve(i)
		if fails := i > MaxRevisitChain+1; (err != nil) != fails || fails && !errors.Is(err, ErrRevisitLoop) {
			t.Errorf("revisit %d: %v; want failure %v, as a chain that never ends", i, err, fails)
		}
	}
}

// Revisits that name each other, with no payload digest (server-not-
// modified revisits as some tools write them), are a loop that no node
// coming back can break: ErrRevisitLoop, not only ErrNoOriginal as a
// missing capture is. A revisit that the digest lookup gives back again
// is the first capture of its payload here: the payload may be on a node
// that is away, which is no loop.
func TestRevisitLoopIsToldFromAMissingOriginal(t *testing.T) {
	at := func(i int) time.Time { return time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, i, 0) }
	a := &chainArchive{caps: map[int64]index.Capture{}, recs: map[int64]*warc.Record{}}
	for i, names := range []int{2, 1} { // revisit 1 names 2, and 2 names 1
		rec := warc.NewRevisit(chainURL, at(i+1), warc.ProfileServerNotModified, []byte("HTTP/1.1 304 Not Modified\r\n\r\n"), "",
			warc.RefersTo{URI: chainURL, Date: at(names)})
		a.caps[at(i+1).Unix()] = index.Capture{URLKey: "example,steady)/", Time: at(i + 1), URL: chainURL, Type: warc.TypeRevisit, RecordID: rec.ID(), Status: 304}
		a.recs[at(i+1).Unix()] = rec
	}
	for i := 1; i <= 2; i++ {
		c := a.caps[at(i).Unix()]
		_, _, err := Original(context.Background(), a, c, a.recs[at(i).Unix()].Header)
		if !errors.Is(err, ErrRevisitLoop) || !errors.Is(err, ErrNoOriginal) {
			t.Errorf("revisit %d of a loop: %v; want ErrRevisitLoop, an ErrNoOriginal", i, err)
		}
	}

	self := index.Capture{URLKey: "example,mine)/", URL: "http://mine.example/", Time: at(0), Type: warc.TypeRevisit, Digest: "sha1:AAAA"}
	rv := warc.NewRevisit(self.URL, self.Time, warc.ProfileIdenticalPayload, nil, self.Digest, warc.RefersTo{})
	_, _, err := Original(context.Background(), &awayArchive{own: self}, self, rv.Header)
	if !errors.Is(err, ErrNoOriginal) || errors.Is(err, ErrRevisitLoop) {
		t.Errorf("a revisit that is the first capture of its digest: %v; want ErrNoOriginal, no loop", err)
	}
}

// awayArchive cannot reach the holder of any URL it is asked about, and
// holds one capture of its own, found by digest.
type awayArchive struct {
	Archive
	own index.Capture
}

func (a *awayArchive) CapturesBetween(context.Context, string, time.Time, time.Time, bool, func(index.Capture) (bool, error)) error {
	return fmt.Errorf("%w: the holder of other.example is away", ErrUnavailable)
}

func (a *awayArchive) ByDigest(_ context.Context, _ index.Capture, digest string) (index.Capture, bool, error) {
	return a.own, a.own.Digest == digest, nil
}

// A revisit naming a capture on a node that is away replays the payload
// its own node holds under the same digest; without one, the node's
// absence is the answer.
func TestOriginalOnTheRevisitsNodeWhenTheOneNamedIsAway(t *testing.T) {
	const digest = "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rv := warc.NewRevisit("http://mine.example/lib.js", at.Add(time.Hour), warc.ProfileIdenticalPayload,
		[]byte("HTTP/1.1 200 OK\r\n\r\n"), digest,
		warc.RefersTo{ID: "<urn:uuid:00000000-0000-0000-0000-000000000001>", URI: "http://other.example/lib.js", Date: at})
	c := index.Capture{URLKey: "example,mine)/lib.js", URL: "http://mine.example/lib.js", Time: at.Add(time.Hour), Type: warc.TypeRevisit, Digest: digest}
	a := &awayArchive{own: index.Capture{URLKey: "example,mine)/copy.js", URL: "http://mine.example/copy.js", Time: at.Add(2 * time.Hour), Type: warc.TypeResponse, Digest: digest}}
	o, _, err := Original(context.Background(), a, c, rv.Header)
	if err != nil || o != a.own {
		t.Fatalf("Original = %v, %v; want the capture of the same payload on the revisit's node, %v", o.URL, err, a.own.URL)
	}
	a.own.Type = warc.TypeRevisit // the revisit's node holds only a pointer
	if _, _, err := Original(context.Background(), a, c, rv.Header); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Original with no payload on the revisit's node: %v, want ErrUnavailable", err)
	}
}
