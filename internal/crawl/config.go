package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/recrawl"
	"github.com/waggle-archive/waggle/internal/urlkey"
	"github.com/waggle-archive/waggle/internal/warc"
)

// DefaultUserAgent names waggle and where an operator of a crawled site can
// find out what it is, as RFC 9309 and common courtesy expect.
const DefaultUserAgent = "Mozilla/5.0 (compatible; waggle/0.1; +https://github.com/waggle-archive/waggle)"

// robotsToken is the product token waggle looks for in robots.txt groups.
const robotsToken = "waggle"

// Config says what to crawl and how. The zero value of each field means its
// default, listed with the field.
type Config struct {
	Data  string   // data directory (pebble DB in Data/db, WARC segments in Data/warc); required
	Seeds []string // absolute http(s) URLs

	Scope              Scope         // "": as the data directory was last crawled with (ScopeHost at first)
	MaxPages           int           // stop after this many captures in Data (0: no limit)
	MaxDepth           int           // link hops from a seed (0: no limit)
	MaxPagesPerHost    int           // trap limit: URLs queued per host (default 100,000; <0: no limit)
	PerHostConnections int           // requests in flight per host (default 1)
	Delay              time.Duration // between requests to one host (default 1s; set NoDelay for 0)
	NoDelay            bool          // Delay 0 was asked for explicitly
	MaxCrawlDelay      time.Duration // cap on robots.txt Crawl-delay (default 30s)
	Workers            int           // concurrent fetches over all hosts (default 64)
	Proxy              string        // HTTP forward proxy URL
	UserAgent          string        // default DefaultUserAgent
	AllowPrivate       bool          // permit loopback and private-network targets
	IgnoreRobots       bool          // do not fetch or obey robots.txt
	NoRequisites       bool          // do not fetch off-scope page requisites
	MaxBodySize        int64         // response body bytes archived per capture (default 50 MiB)
	SegmentSize        int64         // WARC segment roll size (default 1 GiB)
	Timeout            time.Duration // whole-request timeout (default 2m)
	// Retries is how many times a run, once its frontier is empty, queues
	// again the URLs whose fetch failed for a reason that may pass (the
	// host or the network was down), waiting RetryWait before the first
	// time and twice as long before each next, up to an hour; what still
	// fails waits for the next run. 0: none in the run. A Continuous crawl
	// retries hourly instead.
	Retries   int
	RetryWait time.Duration // default 30s

	Logger *slog.Logger // default: discard

	// For a node of a network (package node); all optional.

	// DB is an open database for Data/db to use instead of opening one;
	// the crawler does not close it.
	DB *pebble.DB
	// Router, when set, hands every URL whose host another node owns to
	// that node instead of the frontier.
	Router Router
	// Replicator, when set, is told of every capture this node makes, in
	// the batch that indexes it.
	Replicator Replicator
	// Recover, when set, is asked before a URL is fetched whether another
	// node archived it already (UbiCrawler's page recovery: a node that
	// has just taken over a host asks its previous holders); a URL it
	// answers true for is not fetched. Only a capture made after since
	// counts: for a revisit, the last visit this node knows of (a holder
	// that has the URL from before is no reason to skip a revisit); zero
	// for a URL new to the frontier.
	Recover func(ctx context.Context, url string, since time.Time) bool
	// DropLost, for a node whose captures have copies elsewhere, takes
	// captures whose bytes the disk lost out of the index at Open (they are
	// copied back) instead of refusing to open.
	DropLost bool
	// Schedules give each URL's re-crawl schedule (package recrawl); the
	// zero value is daily, adapting within an hour and 30 days. Every
	// visit records the URL's next due time, whether or not this run
	// revisits anything.
	Schedules recrawl.Rules
	// Recrawl makes Run queue the archive's URLs that are due for a visit
	// (all of them with RecrawlAll), and, with Continuous, keep queueing
	// URLs as they fall due. A revisit is a conditional GET; an unchanged
	// page becomes a revisit record, and only the new links of a changed
	// page are followed.
	Recrawl    bool
	RecrawlAll bool
	// Dedup, when set, widens the content-seen test to the network.
	Dedup Dedup
	// Continuous keeps Run going when the frontier is empty, waiting for
	// URLs from Submit and Accept, until its context ends.
	Continuous bool
}

// Scope decides which discovered links are followed.
type Scope string

// The scopes: the seeds' hosts, the seeds' registrable domains, URLs under a
// seed's directory, or anything reachable.
const (
	ScopeHost   Scope = "host"
	ScopeDomain Scope = "domain"
	ScopePrefix Scope = "prefix"
	ScopeAny    Scope = "any"
)

// widens reports whether s holds URLs that t does not, for the same
// seeds: prefix ⊂ host ⊂ domain ⊂ any.
func (s Scope) widens(t Scope) bool {
	rank := map[Scope]int{ScopePrefix: 0, ScopeHost: 1, ScopeDomain: 2, ScopeAny: 3}
	return rank[s] > rank[t]
}

// ParseScope validates a --scope value; "" (none given) stays "".
func ParseScope(s string) (Scope, error) {
	switch sc := Scope(s); sc {
	case ScopeHost, ScopeDomain, ScopePrefix, ScopeAny, "":
		return sc, nil
	}
	return "", fmt.Errorf("unknown scope %q (want host, domain, prefix or any)", s)
}

func (c *Config) setDefaults() error {
	if c.Data == "" {
		return errors.New("crawl: no data directory")
	}
	if c.MaxPagesPerHost == 0 {
		c.MaxPagesPerHost = 100_000
	} else if c.MaxPagesPerHost < 0 {
		c.MaxPagesPerHost = 0
	}
	if c.PerHostConnections <= 0 {
		c.PerHostConnections = 1
	}
	if c.Delay == 0 && !c.NoDelay {
		c.Delay = time.Second
	}
	if c.MaxCrawlDelay == 0 {
		c.MaxCrawlDelay = 30 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = 50 << 20
	}
	// A record's block is the body with the HTTP header: past
	// warc.MaxBlock, nothing could read it back.
	if limit := int64(warc.MaxBlock - fetch.DefaultMaxHeaderBytes); c.MaxBodySize > limit {
		return fmt.Errorf("crawl: a body size of %d bytes is over the %d a record can hold", c.MaxBodySize, limit)
	}
	if c.SegmentSize <= 0 {
		c.SegmentSize = 1 << 30
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.RetryWait <= 0 {
		c.RetryWait = 30 * time.Second
	}
	if c.Continuous {
		c.Retries = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// scope is a compiled Scope: the set of hosts, domains or prefixes that the
// seeds allow.
type scope struct {
	kind     Scope
	allowed  map[string]bool // hosts or domains
	prefixes []string
}

func newScope(kind Scope, seeds []string) *scope {
	s := &scope{kind: kind, allowed: map[string]bool{}}
	for _, u := range seeds {
		h := urlkey.Host(u)
		switch kind {
		case ScopeHost:
			s.allowed[h] = true
			// www.example.com and example.com are one site to every user.
			s.allowed[strings.TrimPrefix(h, "www.")] = true
			s.allowed["www."+strings.TrimPrefix(h, "www.")] = true
		case ScopeDomain:
			s.allowed[urlkey.Domain(hostname(h))] = true
		case ScopePrefix:
			s.prefixes = append(s.prefixes, u[:strings.LastIndexByte(u, '/')+1])
		}
	}
	return s
}

// contains reports whether u (canonical) is inside the scope.
func (s *scope) contains(u string) bool {
	switch s.kind {
	case ScopeAny:
		return true
	case ScopeHost:
		return s.allowed[urlkey.Host(u)]
	case ScopeDomain:
		return s.allowed[urlkey.Domain(hostname(urlkey.Host(u)))]
	case ScopePrefix:
		for _, p := range s.prefixes {
			if strings.HasPrefix(u, p) {
				return true
			}
		}
	}
	return false
}

// hostname strips a port from host.
func hostname(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		return host[:i]
	}
	return host
}
