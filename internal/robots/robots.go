// Package robots decides whether a URL may be fetched under its host's
// robots.txt (RFC 9309), fetching each robots.txt once per host and caching
// it, in memory and optionally in pebble so a restart does not refetch.
package robots

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/temoto/robotstxt"
)

// FetchFunc fetches a robots.txt URL, following redirects, and returns the
// final status and body and the URL they came from. The crawler supplies
// it, so robots.txt responses are archived like every other capture.
type FetchFunc func(ctx context.Context, robotsURL string) (status int, body []byte, finalURL string, err error)

// Options tune a Cache; zero values mean the defaults listed.
type Options struct {
	UserAgent string        // product token matched against User-agent lines
	TTL       time.Duration // cache lifetime (default 24h, RFC 9309 §2.4)
	MaxSize   int           // bytes parsed (default 500 KiB, RFC 9309 §2.5)
	Store     *pebble.DB    // optional persistent cache under "r/"
	Now       func() time.Time
}

// Decision is the answer for one URL.
type Decision struct {
	Allowed    bool
	CrawlDelay time.Duration
	Reason     string
	Err        error // the fetch error that made robots.txt unreachable, if that is the reason
}

// Cache holds robots.txt rules per host.
type Cache struct {
	fetch FetchFunc
	opts  Options
	mu    sync.Mutex
	hosts map[string]*entry
}

type entry struct {
	ready   chan struct{}    // closed when data is set
	group   *robotstxt.Group // the rules for our user agent, found once
	status  int
	err     error // fetch error behind an unreachable robots.txt
	expires time.Time
}

// New returns a Cache that fetches with fetch.
func New(fetch FetchFunc, opts Options) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = 24 * time.Hour
	}
	if opts.MaxSize <= 0 {
		opts.MaxSize = 500 << 10
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "*"
	}
	return &Cache{fetch: fetch, opts: opts, hosts: map[string]*entry{}}
}

// Check says whether rawURL may be fetched, and its host's Crawl-delay.
// Concurrent checks for one host share one fetch. The only error is ctx's.
func (c *Cache) Check(ctx context.Context, rawURL string) (Decision, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Decision{Reason: "unparsable URL"}, nil
	}
	origin := u.Scheme + "://" + u.Host
	e, err := c.entry(ctx, origin)
	if err != nil {
		return Decision{}, err
	}
	switch {
	case e.status >= 200 && e.status < 300:
	case e.status >= 400 && e.status < 500:
		return Decision{Allowed: true, Reason: fmt.Sprintf("robots.txt %d: no rules", e.status)}, nil
	default:
		return Decision{Reason: fmt.Sprintf("robots.txt unreachable (status %d): complete disallow", e.status), Err: e.err}, nil
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	g := e.group
	d := Decision{Allowed: g.Test(path), CrawlDelay: g.CrawlDelay}
	if !d.Allowed {
		d.Reason = "disallowed by robots.txt"
	}
	return d, nil
}

func (c *Cache) entry(ctx context.Context, origin string) (*entry, error) {
	now := c.opts.Now()
	c.mu.Lock()
	e := c.hosts[origin]
	if e != nil {
		select {
		case <-e.ready:
			if now.Before(e.expires) {
				c.mu.Unlock()
				return e, nil
			}
			e = nil // expired: fetch again
		default:
			c.mu.Unlock()
			select { // another caller is fetching it
			case <-e.ready:
				return e, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	e = &entry{ready: make(chan struct{})}
	c.hosts[origin] = e
	c.mu.Unlock()

	if status, body, expires, ok := c.load(origin, now); ok {
		e.set(status, body, expires, c.opts.MaxSize, c.opts.UserAgent)
		return e, nil
	}
	status, body, final, err := c.fetch(ctx, origin+"/robots.txt")
	if err != nil && ctx.Err() != nil {
		c.mu.Lock()
		delete(c.hosts, origin)
		c.mu.Unlock()
		close(e.ready) // waiters re-check ctx or refetch
		return nil, ctx.Err()
	}
	ttl := c.opts.TTL
	if err != nil || status >= 500 || status < 200 {
		// Unreachable: disallow everything for a while, then try again (RFC 9309 §2.3.1.4).
		status, ttl = 503, min(ttl, time.Hour)
	}
	expires := now.Add(ttl)
	e.err = err
	if err == nil {
		c.save(origin, status, body, expires)
		c.prime(final, origin, status, body, expires)
	}
	e.set(status, body, expires, c.opts.MaxSize, c.opts.UserAgent)
	return e, nil
}

// prime caches what a robots.txt fetch for origin found at final, a
// redirect target, as the robots.txt of final's own origin, when final is
// that origin's /robots.txt and the cache has no rules for it: a host that
// redirects to its www. name (or to https) would otherwise have the same
// file fetched, and archived, twice.
func (c *Cache) prime(final, origin string, status int, body []byte, expires time.Time) {
	u, err := url.Parse(final)
	if err != nil || u.EscapedPath() != "/robots.txt" || u.RawQuery != "" || u.User != nil {
		return
	}
	target := u.Scheme + "://" + u.Host
	if target == origin || u.Host == "" {
		return
	}
	c.mu.Lock()
	if e := c.hosts[target]; e != nil {
		c.mu.Unlock()
		return // fetched, or being fetched, on its own account
	}
	e := &entry{ready: make(chan struct{})}
	c.hosts[target] = e
	c.mu.Unlock()
	c.save(target, status, body, expires)
	e.set(status, body, expires, c.opts.MaxSize, c.opts.UserAgent)
}

func (e *entry) set(status int, body []byte, expires time.Time, maxSize int, userAgent string) {
	if len(body) > maxSize {
		body = body[:maxSize]
	}
	e.status, e.expires = status, expires
	if status >= 200 && status < 300 {
		data, err := robotstxt.FromBytes(body)
		if err != nil {
			// Unparsable lines are ignored (RFC 9309 §2.2); a file that is all garbage has no rules.
			data, _ = robotstxt.FromString("")
		}
		e.group = data.FindGroup(userAgent)
	}
	close(e.ready)
}

// The persistent form: r/<origin> → expires (unix s, 8 bytes) status (2 bytes) body.
func (c *Cache) load(origin string, now time.Time) (int, []byte, time.Time, bool) {
	if c.opts.Store == nil {
		return 0, nil, time.Time{}, false
	}
	v, closer, err := c.opts.Store.Get([]byte("r/" + origin))
	if err != nil {
		return 0, nil, time.Time{}, false
	}
	defer closer.Close()
	if len(v) < 10 {
		return 0, nil, time.Time{}, false
	}
	expires := time.Unix(int64(binary.BigEndian.Uint64(v)), 0)
	if !now.Before(expires) {
		return 0, nil, time.Time{}, false
	}
	return int(binary.BigEndian.Uint16(v[8:])), append([]byte(nil), v[10:]...), expires, true
}

func (c *Cache) save(origin string, status int, body []byte, expires time.Time) {
	if c.opts.Store == nil {
		return
	}
	if len(body) > c.opts.MaxSize {
		body = body[:c.opts.MaxSize]
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(expires.Unix()))
	v = binary.BigEndian.AppendUint16(v, uint16(status))
	v = append(v, body...)
	// A lost or failed cache write only costs a refetch: no fsync, no error.
	_ = c.opts.Store.Set([]byte("r/"+origin), v, pebble.NoSync)
}
