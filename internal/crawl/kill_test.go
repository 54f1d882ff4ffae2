package crawl

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/waggle-archive/waggle/internal/websim"
)

// buildWaggle builds the waggle binary for tests that drive it as a separate process.
func buildWaggle(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "waggle")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/waggle-archive/waggle/cmd/waggle").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestKill9Resume kills a crawling waggle process with SIGKILL several times,
// each time while it is committing, and resumes it with the same command.
// Every capture the process reported archived before it died must be in the
// final archive; the final archive must be complete, readable end to end,
// agree with its index, and hold no URL twice.
func TestKill9Resume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildWaggle(t)
	web, srv := startWeb(t, websim.Config{Seed: 21, Hosts: 16, Pages: 400})
	data := t.TempDir()
	args := []string{"crawl", "--data", data, "--proxy", srv.URL(), "--allow-private", "--delay", "0",
		"--scope", "any", "--max-host-pages", "300", "--workers", "16", "--timeout", "10s", "--max-crawl-delay", "1ms", "-v"}
	args = append(args, web.Seeds()...)

	var mu sync.Mutex
	reported := map[string]bool{}
	for round := 1; round <= 4; round++ {
		cmd := exec.Command(bin, args...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after this round has reported some captures of its own.
		target := 40 * round
		killed := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stderr)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			n := 0
			for sc.Scan() {
				if u, ok := archivedURL(sc.Text()); ok {
					mu.Lock()
					reported[u] = true
					mu.Unlock()
					if n++; n == target {
						cmd.Process.Kill()
					}
				}
			}
			close(killed)
		}()
		<-killed
		cmd.Wait()
		t.Logf("round %d: %d captures reported so far", round, len(reported))
	}

	out, err := exec.Command(bin, append(args, "--json")...).Output()
	if err != nil {
		t.Fatalf("final run: %v", err)
	}
	var summary struct{ Captures, New int64 }
	if err := json.Unmarshal(out, &summary); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	caps := archived(t, data)
	for u := range reported {
		if len(caps[u]) == 0 {
			t.Errorf("%s was reported archived before a kill -9 and is missing", u)
		}
	}
	for _, p := range web.Pages() {
		if len(caps[p]) != 1 {
			t.Errorf("page %s has %d captures after the crashes, want 1", p, len(caps[p]))
		}
	}
	total := 0
	for u, cs := range caps {
		total += len(cs)
		if len(cs) > 1 && !strings.HasSuffix(u, "/robots.txt") {
			t.Errorf("%s captured %d times: a URL already archived was fetched again", u, len(cs))
		}
	}
	if int64(total) < summary.Captures {
		t.Errorf("index holds %d captures, the crawler counted %d", total, summary.Captures)
	}
	verifyWARCs(t, data, caps)
}

// archivedURL picks the URL out of a debug log line `msg=archived url=...`.
func archivedURL(line string) (string, bool) {
	if !strings.Contains(line, "msg=archived ") {
		return "", false
	}
	i := strings.Index(line, " url=")
	if i < 0 {
		return "", false
	}
	u := line[i+len(" url="):]
	if j := strings.IndexByte(u, ' '); j >= 0 {
		u = u[:j]
	}
	return strings.Trim(u, `"`), true
}
