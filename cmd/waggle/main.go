// Command waggle is a peer-to-peer web archive node. See the README and
// docs/cli.md; each subcommand lives in its own file here and does only flag
// parsing and printing — the work is in internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"crawl", "crawl sites into a WARC archive", runCrawl},
		{"index", "export the capture index, or check every record against it (waggle index export|verify)", runIndex},
		{"export", "export captures as a WACZ file (waggle export wacz)", runExport},
		{"import", "add the records of WARC and WACZ files to the archive", runImport},
		{"serve", "serve an archive's replay: Wayback UI, Memento, CDX API", runServe},
		{"websim", "serve the synthetic test web (also an HTTP proxy)", runWebsim},
		{"demo", "crawl part of the synthetic web offline, then serve its replay", runDemo},
		{"bench", "measure crawling and replay (waggle bench crawl|replay)", runBench},
		{"node", "run a long-lived node: crawl its share, serve replay, join a network", runNode},
		{"submit", "add seeds through the node running on a data directory", runSubmit},
		{"status", "show a running node and its network (--json: as /api/status)", runStatus},
		{"network", "create a network's admission key and admit nodes (waggle network init|admit)", runNetwork},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second signal stops at once: the archive is safe at any moment.
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				if err != errUsage { // a bare errUsage was explained where it arose
					fmt.Fprintln(stderr, "waggle:", err)
				}
				return 2
			case errors.Is(err, context.Canceled):
				fmt.Fprintln(stderr, "waggle: interrupted; run the same command again to resume")
				return 130
			}
			fmt.Fprintln(stderr, "waggle:", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "waggle: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// errUsage marks an error already explained to the user with a usage message.
var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: waggle <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'waggle <command> -h' for a command's flags.")
}

// newFlagSet returns a FlagSet that reports errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: waggle %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// A flagRange is a flag's value checked against what it may be.
type flagRange struct {
	bad  bool   // the value is out of range
	flag string // the flag's name
	want string // what it may be
	val  any    // the value given
}

// checkFlags returns a usage error naming the first flag out of range.
func checkFlags(ranges ...flagRange) error {
	for _, r := range ranges {
		if r.bad {
			return fmt.Errorf("%w: --%s %v: want %s", errUsage, r.flag, r.val, r.want)
		}
	}
	return nil
}

// parseFlags parses args, allowing flags after positional arguments
// (waggle crawl URL --max-pages 10), as users type them.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage // the flag package has printed the problem and the usage
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
