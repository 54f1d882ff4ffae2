package crawl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/warc"
)

// Keys of the crawl's own records in the node's pebble database.
const (
	stateKey      = "k/state"
	segmentPrefix = "k/seg/" // + segment name → committed end offset (big-endian uint64)
)

// state is what survives a restart besides the frontier and the index.
type state struct {
	Captures int64 // captures committed in this data directory
	Bytes    int64 // raw response bytes of those captures
}

func loadState(db *pebble.DB) (state, error) {
	v, closer, err := db.Get([]byte(stateKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return state{}, nil
	}
	if err != nil {
		return state{}, fmt.Errorf("crawl: state: %w", err)
	}
	defer closer.Close()
	if len(v) != 16 {
		return state{}, fmt.Errorf("crawl: state record has %d bytes, want 16", len(v))
	}
	return state{
		Captures: int64(binary.BigEndian.Uint64(v)),
		Bytes:    int64(binary.BigEndian.Uint64(v[8:])),
	}, nil
}

// saveState stages the counters and the committed end of every segment the
// batch wrote to.
func saveState(b *pebble.Batch, st state, ends map[string]int64) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(st.Captures))
	v = binary.BigEndian.AppendUint64(v, uint64(st.Bytes))
	if err := b.Set([]byte(stateKey), v, nil); err != nil {
		return fmt.Errorf("crawl: state: %w", err)
	}
	for seg, end := range ends {
		if err := b.Set([]byte(segmentPrefix+seg), binary.BigEndian.AppendUint64(nil, uint64(end)), nil); err != nil {
			return fmt.Errorf("crawl: state: %w", err)
		}
	}
	return nil
}

// committedEnds returns each segment's committed end offset.
func committedEnds(db *pebble.DB) (map[string]int64, error) {
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(segmentPrefix),
		UpperBound: []byte(segmentPrefix[:len(segmentPrefix)-1] + "0"), // '/'+1
	})
	if err != nil {
		return nil, fmt.Errorf("crawl: %w", err)
	}
	defer it.Close()
	ends := map[string]int64{}
	for it.First(); it.Valid(); it.Next() {
		if len(it.Value()) != 8 {
			return nil, fmt.Errorf("crawl: segment record %q is corrupt", it.Key())
		}
		ends[string(it.Key()[len(segmentPrefix):])] = int64(binary.BigEndian.Uint64(it.Value()))
	}
	return ends, it.Error()
}

// reconcileSegments makes the WARC segments agree with the index after an
// unclean stop. Records written after the last commit were never reported
// archived and their URLs are still queued, so they are cut off: a segment is
// truncated to its committed end, and a segment with nothing committed (only
// its warcinfo record, or a torn write) is removed.
//
// A segment missing, or shorter than its committed end, means the disk lost
// acknowledged data. A single archive reports it and stops: nothing could
// restore the data. With dropLost (a node of a network, whose captures have
// copies on other nodes) the captures that were in the lost bytes leave the
// index instead, loudly, and anti-entropy copies them back from the
// replicas.
func reconcileSegments(db *pebble.DB, dir string, log *slog.Logger, dropLost bool) error {
	ends, err := committedEnds(db)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".warc.gz") {
			continue
		}
		present[name] = true
		path := filepath.Join(dir, name)
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("crawl: %w", err)
		}
		end, ok := ends[name]
		switch {
		case !ok:
			log.Info("removing segment with no committed records", "segment", name, "bytes", fi.Size())
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("crawl: %w", err)
			}
		case fi.Size() > end:
			log.Info("cutting uncommitted tail", "segment", name, "from", end, "bytes", fi.Size()-end)
			if err := truncateSync(path, end); err != nil {
				return err
			}
		case fi.Size() < end && dropLost:
			// The records the index places wholly before the file's end
			// are kept as they are: a damaged one among them is not the
			// end of the data.
			from, err := index.LastWhole(db, name, fi.Size())
			if err != nil {
				return fmt.Errorf("crawl: %s: %w", path, err)
			}
			res, err := warc.RepairFrom(path, from)
			if err != nil {
				return fmt.Errorf("crawl: %s: %w", path, err)
			}
			if err := dropLostCaptures(db, name, res.Size, end, log); err != nil {
				return err
			}
		case fi.Size() < end:
			return fmt.Errorf("crawl: segment %s is %d bytes but %d were committed: the disk lost data: check it, and restore the segment from a backup (waggle index verify lists the captures affected; a node of a network with replicas drops the lost captures instead, and copies them back from the others)", name, fi.Size(), end)
		}
	}
	for name, end := range ends {
		if present[name] {
			continue
		}
		if !dropLost {
			return fmt.Errorf("crawl: segment %s is missing from %s although the index refers to it", name, dir)
		}
		if err := dropLostCaptures(db, name, 0, end, log); err != nil {
			return err
		}
	}
	return nil
}

// dropLostCaptures removes from the index the captures of segment that lay
// past size, the bytes that remain of it, and records size as its end
// (forgets the segment when nothing remains).
func dropLostCaptures(db *pebble.DB, segment string, size, end int64, log *slog.Logger) error {
	b := db.NewBatch()
	defer b.Close()
	n, err := index.DropLocations(db, b, segment, size)
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	if err := dropLostMarks(db, b, segment, size); err != nil {
		return err
	}
	key := []byte(segmentPrefix + segment)
	if size == 0 {
		err = errors.Join(b.Delete(key, nil), b.Delete([]byte(deadPrefix+segment), nil))
	} else {
		err = b.Set(key, binary.BigEndian.AppendUint64(nil, uint64(size)), nil)
	}
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	log.Error("a WARC segment lost committed data: its captures leave the index until copies come back from other nodes",
		"segment", segment, "committed_bytes", end, "remaining_bytes", size, "captures_dropped", n)
	return nil
}

// dropLostMarks stages the removal of the copied marks of records that
// lay in segment at or past offset from, so that copies of them are taken
// again.
func dropLostMarks(db *pebble.DB, b *pebble.Batch, segment string, from int64) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(copiedPrefix), UpperBound: prefixEnd([]byte(copiedPrefix))})
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		seg, off, ok := markLocation(it.Value())
		if ok && seg == segment && off >= from {
			if err := b.Delete(it.Key(), nil); err != nil {
				return fmt.Errorf("crawl: %w", err)
			}
		}
	}
	return it.Error()
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("crawl: truncate %s: %w", path, err)
	}
	// The committed part is not read back: it was synced before its
	// commit, and cutting it at a damaged record would lose every record
	// after that one. Damage is for reads to find (archive.Network reads
	// another node's copy, and the node drops its own for repair).
	if err := f.Sync(); err != nil {
		return fmt.Errorf("crawl: %w", err)
	}
	return nil
}

// Stats are a crawl's counters.
type Stats struct {
	Captures int64 // captures in the data directory
	New      int64 // captures made by this run
	Bytes    int64 // raw response bytes archived by this run
	Errors   int64 // fetches that failed
	// Deferred is the URLs whose fetch failed (of Errors) for a reason
	// that may pass — the host or the network was down — waiting to be
	// queued again: by this run after a pause (Config.Retries), else by the
	// next run, or, in a node, within the hour. Retried counts the deferred
	// URLs queued again so far, an earlier run's included. RetryAt is when
	// a run that has nothing else to do queues its deferred URLs again
	// (zero when none waits).
	Deferred, Retried int64
	RetryAt           time.Time
	Robots            int64 // URLs not fetched because robots.txt disallows them
	// Forbidden counts URLs not fetched because their hosts have loopback
	// or private addresses (Config.AllowPrivate off).
	Forbidden int64
	// Truncated counts the captures this run archived cut short
	// (WARC-Truncated): over MaxBodySize, past the timeout, or the server
	// closing the connection early.
	Truncated int64
	// Recovered counts URLs not fetched because another node had archived
	// them (Config.Recover).
	Recovered int64
	// Rediscovered counts links and seeds queued again by Rediscover.
	Rediscovered int64
	// Revisit records written by this run, by why the payload was not
	// stored again: the server answered 304 Not Modified (NotModified),
	// the URL's payload had not changed (Unchanged), or another URL's
	// identical payload was archived already (Duplicates).
	NotModified, Unchanged, Duplicates int64
	// Stored counts the WARC bytes this run wrote for its captures.
	Stored int64
	// RevisitsQueued counts URLs this run queued again because they were
	// due for a visit.
	RevisitsQueued int64
	// NextDue is when the next URL not queued falls due for a visit
	// (zero: none is scheduled). Only the Stats Run returns have it: it
	// is read from the database, which Stats may outlive.
	NextDue time.Time
	Queued  int           // URLs waiting in the frontier
	Hosts   int           // hosts known to the frontier
	Elapsed time.Duration // since Run started
	PerSec  float64
}

// counters are the live, concurrently updated form of Stats.
type counters struct {
	start           atomic.Int64 // Unix ns when Run started; 0 before (Stats reads it from other goroutines)
	base            state        // as loaded at Open
	captures, bytes atomic.Int64
	errors, robots  atomic.Int64
	forbidden       atomic.Int64
	truncated       atomic.Int64
	recovered       atomic.Int64
	rediscovered    atomic.Int64
	notModified     atomic.Int64
	unchanged       atomic.Int64
	duplicates      atomic.Int64
	stored          atomic.Int64
	revisitsQueued  atomic.Int64
}

func (c *counters) restore(st state) { c.base = st }

// state is what to persist after this run's commits so far.
func (c *counters) state() state {
	return state{Captures: c.base.Captures + c.captures.Load(), Bytes: c.base.Bytes + c.bytes.Load()}
}

func (c *counters) snapshot() Stats {
	s := Stats{
		New:          c.captures.Load(),
		Bytes:        c.bytes.Load(),
		Errors:       c.errors.Load(),
		Robots:       c.robots.Load(),
		Forbidden:    c.forbidden.Load(),
		Truncated:    c.truncated.Load(),
		Recovered:    c.recovered.Load(),
		Rediscovered: c.rediscovered.Load(),

		NotModified:    c.notModified.Load(),
		Unchanged:      c.unchanged.Load(),
		Duplicates:     c.duplicates.Load(),
		Stored:         c.stored.Load(),
		RevisitsQueued: c.revisitsQueued.Load(),
	}
	s.Captures = c.base.Captures + s.New
	if start := c.start.Load(); start != 0 {
		s.Elapsed = time.Since(time.Unix(0, start))
		if secs := s.Elapsed.Seconds(); secs > 0 {
			s.PerSec = float64(s.New) / secs
		}
	}
	return s
}
