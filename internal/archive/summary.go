package archive

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// summaryPath answers the summary of the sites a node owns.
const summaryPath = Path + "summary"

// TopHosts is how many hosts a Summary lists.
const TopHosts = 30

// maxSummaryBytes bounds a node's summary answer.
const maxSummaryBytes = 1 << 20

// A Summary describes an archive for its home page.
type Summary struct {
	Captures int64     `json:"captures"`
	Hosts    int       `json:"hosts"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	// Top lists the hosts with the most captures, most first (ties by
	// host), at most TopHosts of them.
	Top []HostCount `json:"top"`
	// Missing counts the nodes of a network that did not answer: their
	// part of the archive is left out.
	Missing int `json:"missing,omitempty"`
}

// HostCount is a host (in SURT form, "com,example,www") and its captures.
type HostCount struct {
	Host     string `json:"host"`
	Captures int64  `json:"captures"`
}

// Summary scans the whole archive once. It holds a count per host, never
// the captures.
func (l *Local) Summary(ctx context.Context) (Summary, error) { return l.summary(ctx, nil) }

// summary is Summary of the sites owns accepts (all when nil).
func (l *Local) summary(ctx context.Context, owns func(site string) bool) (Summary, error) {
	var sum Summary
	hosts := map[string]int64{}
	site, kept := "", true // the last site seen, and whether owns kept it
	err := l.idx.Range(ctx, "", "", false, func(c index.Capture) (bool, error) {
		host, _, _ := strings.Cut(c.URLKey, ")")
		if owns != nil {
			// Keys are in order, so a site's captures come together.
			if s := urlkey.SiteOfKey(c.URLKey); s != site {
				site, kept = s, owns(s)
			}
			if !kept {
				return true, nil
			}
		}
		sum.Captures++
		if sum.First.IsZero() || c.Time.Before(sum.First) {
			sum.First = c.Time
		}
		if c.Time.After(sum.Last) {
			sum.Last = c.Time
		}
		hosts[host]++
		return true, nil
	})
	if err != nil {
		return Summary{}, err
	}
	sum.Hosts = len(hosts)
	for h, n := range hosts {
		sum.Top = append(sum.Top, HostCount{h, n})
	}
	sum.Top = topHosts(sum.Top)
	return sum, nil
}

func topHosts(hs []HostCount) []HostCount {
	slices.SortFunc(hs, func(a, b HostCount) int {
		if c := cmp.Compare(b.Captures, a.Captures); c != 0 {
			return c
		}
		return strings.Compare(a.Host, b.Host)
	})
	if len(hs) > TopHosts {
		hs = hs[:TopHosts]
	}
	return hs
}

// Summary gathers from every live node the summary of the sites it owns —
// each site counted once, on its owner, however many replicas hold it —
// and adds them up. Nodes that do not answer are counted in Missing; their
// sites are left out.
func (n *Network) Summary(ctx context.Context) (Summary, error) {
	nodes := n.others(n.self)
	parts := make([]Summary, 1+len(nodes))
	errs := make([]error, 1+len(nodes))
	var wg sync.WaitGroup
	wg.Go(func() { parts[0], errs[0] = n.local.summary(ctx, n.owns) })
	for i, m := range nodes {
		wg.Go(func() { parts[1+i], errs[1+i] = n.remoteSummary(ctx, m) })
	}
	wg.Wait()
	if errs[0] != nil {
		return Summary{}, errs[0]
	}
	var sum Summary
	for i, p := range parts {
		if errs[i] != nil {
			sum.Missing++
			continue
		}
		sum.Captures += p.Captures
		sum.Hosts += p.Hosts // a host is of one site, which one node owns
		if !p.First.IsZero() && (sum.First.IsZero() || p.First.Before(sum.First)) {
			sum.First = p.First
		}
		if p.Last.After(sum.Last) {
			sum.Last = p.Last
		}
		sum.Top = append(sum.Top, p.Top...)
	}
	sum.Top = topHosts(sum.Top)
	if ctx.Err() != nil {
		return Summary{}, ctx.Err()
	}
	return sum, nil
}

// owns reports whether this node owns site.
func (n *Network) owns(site string) bool {
	id, _, ok := n.owner(site)
	return ok && id == n.self
}

// summaryAnswerTimeout is how long a node may take to answer its summary.
const summaryAnswerTimeout = 10 * time.Minute

// remoteSummary asks node for the summary of the sites it owns.
func (n *Network) remoteSummary(ctx context.Context, node Node) (Summary, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, summaryPath, nil)
	if err != nil {
		return Summary{}, fmt.Errorf("archive: %w", err)
	}
	// A node scans its whole index before it answers: minutes, for
	// millions of captures.
	resp, err := n.ask(ctx, node, req, max(n.timeout, summaryAnswerTimeout))
	if err != nil {
		return Summary{}, n.failed(ctx, node.ID, err)
	}
	defer resp.Body.Close()
	if err := answerOK(resp, "application/json"); err != nil {
		return Summary{}, n.failed(ctx, node.ID, err)
	}
	var s Summary
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxSummaryBytes))
	if err := dec.Decode(&s); err != nil {
		return Summary{}, n.failed(ctx, node.ID, fmt.Errorf("summary: %w", err))
	}
	if s.Captures < 0 || s.Hosts < 0 || len(s.Top) > TopHosts {
		return Summary{}, n.failed(ctx, node.ID, errors.New("summary out of bounds"))
	}
	return s, nil
}

// serveSummary answers the summary of the sites owns accepts.
func serveSummary(l *Local, owns func(string) bool, w http.ResponseWriter, r *http.Request) {
	s, err := l.summary(r.Context(), owns)
	if err != nil {
		http.Error(w, "archive: summary: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s)
}
