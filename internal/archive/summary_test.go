package archive

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/waggle-archive/waggle/internal/urlkey"
)

// The network's summary counts each site once, on its owner: not the
// replica node 2 holds of a node 0 capture, nor the capture node 1 kept of
// a site it no longer owns; and a node that does not answer is counted
// missing, its sites left out.
func TestSummary(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	var want Summary
	for i, hosts := range sites {
		for _, c := range cl.held(t, i, "", "") {
			if j := cl.owners[urlkey.SiteOfKey(c.URLKey)]; j != i {
				continue // held by a node that does not own its site
			}
			want.Captures++
			if want.First.IsZero() || c.Time.Before(want.First) {
				want.First = c.Time
			}
			if c.Time.After(want.Last) {
				want.Last = c.Time
			}
		}
		for _, h := range hosts {
			want.Top = append(want.Top, HostCount{Host: "test," + h[:len(h)-len(".test")], Captures: 4})
		}
		want.Hosts += len(hosts)
	}
	slices.SortFunc(want.Top, func(a, b HostCount) int { return strings.Compare(a.Host, b.Host) })
	before := cl.nodes[1].calls.Load() + cl.nodes[2].calls.Load()
	got, err := cl.net.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One small request per other node; no capture crosses the network.
	if calls := cl.nodes[1].calls.Load() + cl.nodes[2].calls.Load() - before; calls != 2 {
		t.Errorf("Summary made %d peer requests, want 2", calls)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || got.Captures != 24 {
		t.Errorf("Summary:\n got %+v\nwant %+v", got, want)
	}

	// One node's own archive: everything it holds, whoever owns it.
	local, err := cl.nodes[1].local.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cl.held(t, 1, "", "")); local.Captures != int64(n) || local.Hosts != 3 || local.Missing != 0 {
		t.Errorf("node 1's local Summary = %+v, want %d captures of 3 hosts", local, n)
	}

	cl.nodes[2].stop()
	got, err = cl.net.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Missing != 1 || got.Captures != 16 || got.Hosts != 4 {
		t.Errorf("Summary with node 2 stopped = %+v, want 16 captures of 4 hosts, 1 node missing", got)
	}
}
