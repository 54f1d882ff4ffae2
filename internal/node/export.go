package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/connerr"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/wacz"
)

// exportPath is the admin socket's WACZ export: GET with the selection's
// host, prefix, from and to (RFC 3339) as parameters. The answer streams
// the WACZ; its trailers carry the export's Stats (exportStatsTrailer, as
// JSON) and, when the export failed part way, why (exportErrorTrailer): a
// status can no longer say so once the file has started.
const (
	exportPath         = "/export/wacz"
	exportStatsTrailer = "Waggle-Export-Stats"
	exportErrorTrailer = "Waggle-Export-Error"
)

// serveExport writes a WACZ of the selected captures of the node's
// archive: the whole network's when the node is in one, reading each
// record from whichever node holds it.
func (n *Node) serveExport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel := wacz.Selection{Host: q.Get("host"), Prefix: q.Get("prefix")}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"from", &sel.From}, {"to", &sel.To}} {
		if v := q.Get(b.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				http.Error(w, fmt.Sprintf("%s: want an RFC 3339 time: %v", b.name, err), http.StatusBadRequest)
				return
			}
			*b.t = t
		}
	}
	if err := sel.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Trailer", exportStatsTrailer+", "+exportErrorTrailer)
	out := &startedWriter{w: w}
	s, err := wacz.Export(r.Context(), out, wacz.Source{Archive: n.exported, TempDir: n.cfg.Crawl.Data}, sel)
	if err != nil && !out.started {
		w.Header().Del("Trailer")
		status := http.StatusInternalServerError
		if errors.Is(err, wacz.ErrNoCaptures) {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	if err != nil {
		n.log.Warn("node: export failed part way", "selection", sel.String(), "err", err)
		w.Header().Set(exportErrorTrailer, strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\n", " "), "?"))
	}
	js, _ := json.Marshal(s)
	w.Header().Set(exportStatsTrailer, string(js))
}

// exportedNetwork is the network's archive as an export reads it: a range,
// even within one site, is gathered from every node, not answered by the
// site's owner alone, so that captures still held elsewhere (made while the
// owner was away, on a previous owner) are exported too.
type exportedNetwork struct{ *archive.Network }

func (a exportedNetwork) Range(ctx context.Context, lo, hi string, reverse bool, fn func(index.Capture) (bool, error)) error {
	return a.Gather(ctx, lo, hi, reverse, fn)
}

// startedWriter notes whether anything was written: until then an error can
// still be answered with a status.
type startedWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *startedWriter) Write(p []byte) (int, error) {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/wacz+zip")
		s.w.WriteHeader(http.StatusOK)
	}
	return s.w.Write(p)
}

// Export writes to w a WACZ of the selected captures of the archive of the
// node running on data — the whole network's when the node is in one —
// and returns what the node says it wrote. It fails with an error wrapping
// ErrNotRunning when no node runs on data.
func Export(ctx context.Context, data string, sel wacz.Selection, w io.Writer) (wacz.Stats, error) {
	c, err := adminClient(data)
	if err != nil {
		return wacz.Stats{}, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	v := url.Values{}
	for name, val := range map[string]string{"host": sel.Host, "prefix": sel.Prefix} {
		if val != "" {
			v.Set(name, val)
		}
	}
	for name, t := range map[string]time.Time{"from": sel.From, "to": sel.To} {
		if !t.IsZero() {
			v.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://node"+exportPath+"?"+v.Encode(), nil)
	if err != nil {
		return wacz.Stats{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		if isNoListener(err) {
			return wacz.Stats{}, fmt.Errorf("%w: the admin socket of %s answers nothing (%w)", ErrNotRunning, data, err)
		}
		return wacz.Stats{}, fmt.Errorf("cannot reach the node: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		msg := strings.TrimSpace(string(b))
		switch {
		case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(msg, wacz.ErrNoCaptures.Error()):
			// With what follows it: which nodes could not be asked, if any.
			return wacz.Stats{}, fmt.Errorf("%w%s", wacz.ErrNoCaptures, strings.TrimPrefix(msg, wacz.ErrNoCaptures.Error()))
		case resp.StatusCode == http.StatusNotFound:
			return wacz.Stats{}, fmt.Errorf("the node running on %s does not export (%s); is it an older waggle? Stop it to export its data directory", data, msg)
		}
		return wacz.Stats{}, fmt.Errorf("the node refused: %s", msg)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return wacz.Stats{}, fmt.Errorf("export through the node: %w", err)
	}
	if msg := resp.Trailer.Get(exportErrorTrailer); msg != "" {
		return wacz.Stats{}, fmt.Errorf("the node's export failed part way: %s", msg)
	}
	var s wacz.Stats
	if err := json.Unmarshal([]byte(resp.Trailer.Get(exportStatsTrailer)), &s); err != nil {
		return wacz.Stats{}, fmt.Errorf("the node's export ended without saying what it wrote (%v): the WACZ may be cut short", err)
	}
	return s, nil
}

// ErrNotRunning reports that no node runs on a data directory: its admin
// socket is missing, or left behind by a node that stopped.
var ErrNotRunning = errors.New("no node is running")

// isNoListener reports a connection to a Unix socket nobody listens on.
func isNoListener(err error) bool {
	return connerr.Refused(err) || errors.Is(err, os.ErrNotExist)
}
