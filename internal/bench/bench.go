// Package bench measures the crawler against two baselines on the same
// synthetic web: a plain fetch loop that does no processing (the machine's
// limit) and GNU wget writing a WARC. Each contender runs as its own child
// process, so the CPU time reported is its own: the synthetic web runs in a
// further child, and nothing else shares those processes.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/crawl"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
	"github.com/waggle-archive/waggle/internal/websim"
)

// Options configure a benchmark run.
type Options struct {
	Bin     string        // the waggle binary to run as child processes
	Dir     string        // scratch directory (data directories, URL lists, wget output)
	Web     websim.Config // the synthetic web
	Workers int           // concurrency of waggle and of the plain loop
	Wget    bool          // also run the wget comparison
	// ColdServer gives the measured crawl and the plain loop each a fresh
	// websim instead of warming one up with a first crawl.
	ColdServer bool
}

// Run is one measured child process.
type Run struct {
	Name    string
	Objects int64         // captures (waggle, wget) or responses (plain loop)
	Bytes   int64         // response bytes
	Wall    time.Duration // elapsed
	CPU     time.Duration // user + system CPU of the child
}

// PerSec is objects per second of wall time.
func (r Run) PerSec() float64 { return float64(r.Objects) / r.Wall.Seconds() }

// CPUPerObject is CPU time per object.
func (r Run) CPUPerObject() time.Duration {
	if r.Objects == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Objects)
}

func (r Run) String() string {
	return fmt.Sprintf("%-28s %7d objects %9.1f MiB %8.2fs wall %8.1f objects/s %8.2fs CPU %7.0fµs CPU/object",
		r.Name, r.Objects, float64(r.Bytes)/(1<<20), r.Wall.Seconds(), r.PerSec(), r.CPU.Seconds(),
		float64(r.CPUPerObject().Nanoseconds())/1e3)
}

// Crawl runs the comparisons and writes a report to out.
func Crawl(ctx context.Context, opts Options, out io.Writer) ([]Run, error) {
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	web := websim.New(opts.Web)
	proxy, stop, err := startWebsim(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() { stop() }() // the websim running at the end
	fmt.Fprintf(out, "websim: %d hosts, %d pages, at %s\n", len(web.Hosts()), len(web.Pages()), proxy)

	var runs []Run
	data := filepath.Join(opts.Dir, "waggle-all")
	// websim's traps are endless: cap URLs per host, as an operator would.
	all := []string{"--scope", "any", "--max-host-pages", "2000"}
	// websim renders and compresses a page the first time it is asked
	// for, on the same CPUs: the first run over the URLs would pay about
	// 45µs per page that the runs after it do not. A warm-up crawl makes
	// the server's work the same for the crawl and the plain loop.
	// (Or, with ColdServer, each of the two meets a fresh one.)
	if !opts.ColdServer {
		warm, err := runWaggle(ctx, opts, "warm-up crawl (not compared)", data, proxy, all, web.Seeds())
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(out, warm)
	}
	w, err := runWaggle(ctx, opts, "waggle crawl (scope any)", data, proxy, all, web.Seeds())
	if err != nil {
		return nil, err
	}
	runs = append(runs, w)
	fmt.Fprintln(out, w)

	urls, err := capturedURLs(data)
	if err != nil {
		return nil, err
	}
	list := filepath.Join(opts.Dir, "urls.txt")
	if err := os.WriteFile(list, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	if opts.ColdServer {
		stop()
		if proxy, stop, err = startWebsim(ctx, opts); err != nil {
			stop = func() {}
			return nil, err
		}
	}
	p, err := runChild(ctx, "plain fetch loop (same URLs)", opts.Bin, "bench", "fetchloop",
		"--proxy", proxy, "--workers", strconv.Itoa(opts.Workers), "--urls", list)
	if err != nil {
		return nil, err
	}
	runs = append(runs, p)
	fmt.Fprintln(out, p)
	fmt.Fprintf(out, "waggle/plain pages/s: %.0f%%   CPU per object: waggle %.0fµs, plain %.0fµs\n",
		100*w.PerSec()/p.PerSec(), us(w.CPUPerObject()), us(p.CPUPerObject()))

	if opts.Wget {
		seed := web.Seeds()[0]
		domain := urlkey.Domain(urlkey.Host(seed))
		wr, err := runWget(ctx, opts, proxy, domain, seed)
		if err != nil {
			return nil, err
		}
		ww, err := runWaggle(ctx, opts, "waggle crawl (domain, depth 5)", filepath.Join(opts.Dir, "waggle-domain"), proxy,
			[]string{"--scope", "domain", "--max-depth", strconv.Itoa(wgetDepth)}, []string{seed})
		if err != nil {
			return nil, err
		}
		runs = append(runs, wr, ww)
		fmt.Fprintln(out, wr)
		fmt.Fprintln(out, ww)
		fmt.Fprintf(out, "CPU per archived object, same site %s: waggle %.0fµs, wget %.0fµs (waggle/wget %.2f)\n",
			domain, us(ww.CPUPerObject()), us(wr.CPUPerObject()),
			float64(ww.CPUPerObject())/float64(wr.CPUPerObject()))
	}
	return runs, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// startWebsim runs `waggle websim` as a child on a free loopback port and
// returns its proxy URL.
func startWebsim(ctx context.Context, opts Options) (string, func(), error) {
	cmd := exec.CommandContext(ctx, opts.Bin, "websim", "--addr", "127.0.0.1:0",
		"--seed", strconv.FormatInt(opts.Web.Seed, 10), "--hosts", strconv.Itoa(opts.Web.Hosts),
		"--pages", strconv.Itoa(opts.Web.Pages))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("bench: start websim: %w", err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	i := strings.Index(line, "http://")
	if err != nil || i < 0 {
		stop()
		return "", nil, fmt.Errorf("bench: websim said %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSpace(line[i:]), stop, nil
}

func runWaggle(ctx context.Context, opts Options, name, data, proxy string, extra, seeds []string) (Run, error) {
	if err := os.RemoveAll(data); err != nil {
		return Run{}, err
	}
	// websim asks some hosts for Crawl-delay: 1; honouring it would measure
	// the wait, not the crawler (wget ignores Crawl-delay).
	args := []string{"crawl", "--data", data, "--proxy", proxy, "--allow-private", "--delay", "0", "--max-crawl-delay", "1ms",
		"--workers", strconv.Itoa(opts.Workers), "--json"}
	args = append(append(args, extra...), seeds...)
	r, err := runChild(ctx, name, opts.Bin, args...)
	return r, err
}

// runChild runs a command that prints a JSON summary with "new" (or
// "requests") and "bytes", and measures its wall and CPU time.
func runChild(ctx context.Context, name, bin string, args ...string) (Run, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return Run{}, fmt.Errorf("bench: %s: %w", name, err)
	}
	var s struct {
		New, Requests, Bytes int64
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return Run{}, fmt.Errorf("bench: %s printed %q: %w", name, out, err)
	}
	return Run{Name: name, Objects: s.New + s.Requests, Bytes: s.Bytes, Wall: wall,
		CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
}

// wgetDepth bounds the wget comparison: wget has no trap limits, and
// websim's traps are endless; both crawlers get the same depth.
const wgetDepth = 5

// runWget crawls one registrable domain with wget, as a user archiving a
// site with it would, through the same proxy.
func runWget(ctx context.Context, opts Options, proxy, domain, seed string) (Run, error) {
	dir := filepath.Join(opts.Dir, "wget")
	if err := os.RemoveAll(dir); err != nil {
		return Run{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Run{}, err
	}
	cmd := exec.CommandContext(ctx, "wget", "--recursive", "--level="+strconv.Itoa(wgetDepth), "--page-requisites",
		"--span-hosts", "--domains="+domain, "--warc-file="+filepath.Join(dir, "wget"), "--no-verbose",
		"--directory-prefix="+filepath.Join(dir, "files"), "-e", "robots=on", "-e", "use_proxy=on",
		"-e", "http_proxy="+proxy, seed)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	// wget exits 8 when some response was an error (404s are part of the web).
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 8) {
		return Run{}, fmt.Errorf("bench: wget: %w\n%s", err, tail(out))
	}
	n, bytes, err := countResponses(filepath.Join(dir, "wget.warc.gz"))
	if err != nil {
		return Run{}, err
	}
	return Run{Name: "wget --warc-file (depth 5)", Objects: n, Bytes: bytes, Wall: wall,
		CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// countResponses counts response and revisit records in a WARC file.
func countResponses(path string) (n, bytes int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r, err := warc.NewReader(f)
	if err != nil {
		return 0, 0, err
	}
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, bytes, nil
		}
		if err != nil {
			return n, bytes, fmt.Errorf("bench: %s: %w", path, err)
		}
		if t := rec.Type(); t == warc.TypeResponse || t == warc.TypeRevisit {
			n++
			bytes += int64(len(rec.Block))
		}
	}
}

// capturedURLs lists the URLs a crawl captured, for the plain loop.
func capturedURLs(data string) ([]string, error) {
	db, err := crawl.OpenDB(data)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var urls []string
	err = index.New(db).Range(context.Background(), "", "", false, func(c index.Capture) (bool, error) {
		urls = append(urls, c.URL)
		return true, nil
	})
	return urls, err
}
