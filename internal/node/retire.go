package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/membership"
)

// retiredPrefix keys the members that left for good with their part
// handed over (waggle node leave), as each said once its frontier and
// outbox were with their new owners: k/retired/<ID> → notice (JSON). Its
// departure is not one to rediscover a frontier after: a network scaled
// down by retiring nodes must not look cut off to the guard of
// rediscoverGone, nor make every node read its archive again. A drain
// that does not finish sends no notice, and its departure is acted on.
const retiredPrefix = "k/retired/"

// retiredFor is how long a notice waits for this node to see its member
// leave the ring, which it did before handing over: gossip may be late.
const retiredFor = 10 * time.Minute

// A notice is a member's word that it retired.
type notice struct {
	At     time.Time `json:"at"`
	Gossip string    `json:"gossip,omitempty"` // where it gossiped
}

// noteRetired records that member id retired, its part handed over: its
// departure, if recorded already, is forgotten, and so is its gossip
// address among those to join through at the next start.
func (n *Node) noteRetired(id, gossip string, now time.Time) error {
	v, err := json.Marshal(notice{At: now, Gossip: gossip})
	if err != nil {
		return err
	}
	n.departMu.Lock()
	defer n.departMu.Unlock()
	b := n.db.NewBatch()
	defer b.Close()
	_, closer, err := n.db.Get([]byte(departedPrefix + id))
	switch {
	case err == nil:
		// Seen leaving already, as a rule (it left before handing over):
		// the departure goes, and no mark is left to skip a later one.
		closer.Close()
		if err := b.Delete([]byte(departedPrefix+id), nil); err != nil {
			return err
		}
	case errors.Is(err, pebble.ErrNotFound):
		// Its departure is still to be seen here: the mark waits for it.
		if err := b.Set([]byte(retiredPrefix+id), v, nil); err != nil {
			return err
		}
	default:
		return err
	}
	if err := n.forgetPeer(b, gossip); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	n.log.Info("node: a member retired, its part handed over", "member", id)
	return nil
}

// retired reports whether member id said, within retiredFor before now,
// that it retired.
func (n *Node) retired(id string, now time.Time) (bool, error) {
	v, closer, err := n.db.Get([]byte(retiredPrefix + id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	var nt notice
	if json.Unmarshal(v, &nt) != nil {
		return false, nil
	}
	return !now.Before(nt.At) && now.Sub(nt.At) < retiredFor, nil
}

// announceRetired tells the members this node left that it retired, its
// part handed over, and waits for their answers. A member that does not
// hear it only makes a needless rediscovery pass.
func (n *Node) announceRetired(ctx context.Context, members []membership.Member) {
	body := struct {
		Gossip string `json:"gossip"`
	}{n.members.Self().GossipAddr}
	var wg sync.WaitGroup
	for _, m := range members {
		if m.ID == n.ID() {
			continue
		}
		wg.Go(func() {
			if err := n.call(ctx, m.PeerAddr, m.ID, http.MethodPost, retiredPath, body, nil); err != nil {
				n.log.Warn("node: telling a member this node retired", "member", m.Name, "err", err)
			}
		})
	}
	wg.Wait()
}
