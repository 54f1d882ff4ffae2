package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AdminSocket is the name, in a node's data directory, of the Unix socket
// its owner drives it through (waggle submit, waggle status). Only the
// user running the node can connect: the socket is made with mode 0600,
// and on Linux every connection's user is checked as well.
const AdminSocket = "admin.sock"

// maxSubmit bounds the URLs of one submission.
const maxSubmit = 100_000

type adminServer struct {
	ln   net.Listener
	path string
}

// listenAdmin opens the admin socket of data. The caller holds the data
// directory's lock (its database is open), so a socket left by a node that
// died is stale and is replaced.
func listenAdmin(data string) (*adminServer, error) {
	path, err := filepath.Abs(filepath.Join(data, AdminSocket))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	// The socket is made under another name and renamed into place once
	// only its owner may use it, so that there is no moment when others can.
	tmp := path + ".new"
	if len(tmp) > 100 {
		return nil, fmt.Errorf("node: the admin socket path %s is too long for a Unix socket; use a shorter --data path", path)
	}
	os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("node: admin socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("node: admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("node: admin socket: %w", err)
	}
	return &adminServer{ln: ln, path: path}, nil
}

func (a *adminServer) close() { a.ln.Close() }

// remove takes the socket's name away: the last thing a node does, once
// its data directory is closed, which WaitStopped waits for.
func (a *adminServer) remove() { os.Remove(a.path) }

// WaitStopped waits until the node running on data has stopped and closed
// its data directory (its admin socket is gone), or ctx ends.
func WaitStopped(ctx context.Context, data string) error {
	path := filepath.Join(data, AdminSocket)
	for {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// submitRequest and submitAnswer are the admin socket's POST /submit.
type submitRequest struct {
	URLs []string `json:"urls"`
}

type submitAnswer struct {
	Queued int `json:"queued"`
}

func (a *adminServer) serve(ctx context.Context, n *Node) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /submit", func(w http.ResponseWriter, r *http.Request) {
		var req submitRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.URLs) == 0 || len(req.URLs) > maxSubmit {
			http.Error(w, fmt.Sprintf("submit 1 to %d URLs", maxSubmit), http.StatusBadRequest)
			return
		}
		if err := n.crawl.Submit(r.Context(), req.URLs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.pushSeeds(r.Context(), n.crawl.Seeds())
		writeJSON(w, submitAnswer{Queued: len(req.URLs)})
	})
	mux.HandleFunc("POST /leave", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Leave(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, struct {
			Left bool `json:"left"`
		}{true})
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.Status(r.Context()))
	})
	mux.HandleFunc("GET "+exportPath, n.serveExport)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       checkOwner,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(a.ln) }()
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
		return nil
	case err := <-errc:
		return err
	}
}

// adminClient calls the admin socket of the node running on data.
func adminClient(data string) (*http.Client, error) {
	path := filepath.Join(data, AdminSocket)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no node is running on %s (%w); start one with waggle node --data %s", data, err, data)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}, nil
}

// Submit adds seeds to the network through the node running on data.
func Submit(ctx context.Context, data string, urls []string) (int, error) {
	c, err := adminClient(data)
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(submitRequest{URLs: urls})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://node/submit", strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	var ans submitAnswer
	if err := adminCall(c, req, &ans); err != nil {
		return 0, err
	}
	return ans.Queued, nil
}

// Leave asks the node running on data to hand its part of the network over
// and stop (see Node.Leave); it returns once the node has.
func Leave(ctx context.Context, data string) error {
	c, err := adminClient(data)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://node/leave", nil)
	if err != nil {
		return err
	}
	var ans struct{ Left bool }
	return adminCall(c, req, &ans)
}

// QueryStatus asks the node running on data for its status.
func QueryStatus(ctx context.Context, data string) (Status, error) {
	c, err := adminClient(data)
	if err != nil {
		return Status{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://node/status", nil)
	if err != nil {
		return Status{}, err
	}
	var st Status
	return st, adminCall(c, req, &st)
}

func adminCall(c *http.Client, req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "permission denied") {
			return fmt.Errorf("the node's admin socket refuses you: only the user running the node may use it (%w)", err)
		}
		return fmt.Errorf("cannot reach the node: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the node refused: %s", strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, out)
}
