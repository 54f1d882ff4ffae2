// Package robots decides whether a URL may be fetched under its host's
// robots.txt (RFC 9309), fetching each robots.txt once per host and caching
// it, in memory and optionally in pebble so a restart does not refetch.
package robots

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// FetchFunc fetches one URL without following a redirect: it returns the
// status and body, and for a redirect its Location resolved against the
// URL. The crawler supplies it, so robots.txt responses are archived like
// every other capture; the Cache follows redirects itself.
type FetchFunc func(ctx context.Context, url string) (status int, body []byte, location string, err error)

// maxRedirects is how many redirects in a row a robots.txt fetch follows
// (RFC 9309 §2.3.1.2: at least five); past them it is unreachable.
const maxRedirects = 5

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
	Err        error // why robots.txt is unreachable, if that is the reason: the fetch's error, or ErrServerError
}

// ErrServerError is the Decision.Err of a host whose robots.txt answered a
// server error (5xx, or a status below 200): everything is disallowed for
// now (RFC 9309 §2.3.1.4), but as with a host that cannot be reached, its
// URLs are to wait, not to be dropped as disallowed.
var ErrServerError = errors.New("robots.txt answered a server error")

// Cache holds robots.txt rules per host.
type Cache struct {
	fetch FetchFunc
	opts  Options
	mu    sync.Mutex
	hosts map[string]*entry
}

type entry struct {
	ready   chan struct{} // closed when data is set
	filled  bool          // set before ready closes, unless the fetch was abandoned
	group   *group        // the rules for our user agent, found once
	status  int
	err     error // why robots.txt is unreachable: the fetch's error, or ErrServerError
	expires time.Time
	// redirects is how many redirects led to the file, through other
	// origins' entries too: an origin redirected here adds its own.
	redirects int
	// waitsOn is the origin whose entry this one's fetch waits for, having
	// been redirected to its robots.txt (guarded by Cache.mu): two origins
	// redirecting to each other must not wait for each other.
	waitsOn string
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
	d := Decision{Allowed: g.allowed(path), CrawlDelay: g.crawlDelay}
	if !d.Allowed {
		d.Reason = "disallowed by robots.txt"
	}
	return d, nil
}

// ForgetUnreachable drops the robots.txt files that could not be had (the
// host unreachable, a server error), so that the next Check of their hosts
// fetches them again: for a crawler about to retry the URLs they held back,
// sooner than their hour is up.
func (c *Cache) ForgetUnreachable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for origin, e := range c.hosts {
		select {
		case <-e.ready:
			if e.filled && e.err != nil {
				delete(c.hosts, origin)
			}
		default: // being fetched now
		}
	}
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
				if !e.filled {
					return c.entry(ctx, origin) // it gave up (its context ended): fetch it here
				}
				return e, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	e = &entry{ready: make(chan struct{})}
	c.hosts[origin] = e
	c.mu.Unlock()
	if err := c.fill(ctx, origin, e, 0); err != nil {
		return nil, err
	}
	return e, nil
}

// fill fetches origin's robots.txt into e, which this caller made. level
// counts the fills this one is nested in, each for an origin redirected to
// the next one's robots.txt. The only error is ctx's: e is then dropped,
// and its waiters find it not filled.
func (c *Cache) fill(ctx context.Context, origin string, e *entry, level int) error {
	now := c.opts.Now()
	// A server error kept by an earlier version is fetched again instead:
	// it would now read as a plain disallow.
	if r, ok := c.load(origin, now); ok && r.status >= 200 && r.status < 500 {
		e.redirects = r.redirects
		e.set(r.status, r.body, r.expires, c.opts.MaxSize, c.opts.UserAgent)
		return nil
	}
	abandon := func() {
		c.mu.Lock()
		delete(c.hosts, origin)
		c.mu.Unlock()
		close(e.ready) // waiters re-check ctx or refetch
	}
	followed := false
	defer func() {
		// A fetch that panics, should anyone recover from it, must not leave
		// the waiters waiting.
		if !followed {
			abandon()
		}
	}()
	status, body, redirects, shared, target, err := c.follow(ctx, origin, e, level)
	followed = true
	if err != nil && ctx.Err() != nil {
		abandon()
		return ctx.Err()
	}
	if shared != nil {
		// Redirected to an origin whose robots.txt is known: the same rules,
		// kept for origin too, so that a restart does not fetch the redirect.
		if r, ok := c.load(target, now); ok {
			r.redirects = redirects
			c.save(origin, r)
		}
		e.group, e.status, e.err, e.expires = shared.group, shared.status, shared.err, shared.expires
		e.redirects, e.filled = redirects, true
		close(e.ready)
		return nil
	}
	ttl := c.opts.TTL
	if err == nil && (status >= 500 || status < 200) {
		err = fmt.Errorf("%w (status %d)", ErrServerError, status)
	}
	if err != nil {
		// Unreachable: disallow everything for a while, then try again
		// (RFC 9309 §2.3.1.4); kept in memory only (see ForgetUnreachable).
		status, ttl = 503, min(ttl, time.Hour)
	}
	expires := now.Add(ttl)
	e.err, e.redirects = err, redirects
	if err == nil {
		c.save(origin, stored{status: status, body: body, expires: expires, redirects: redirects})
	}
	e.set(status, body, expires, c.opts.MaxSize, c.opts.UserAgent)
	return nil
}

// follow fetches origin's robots.txt for e, following redirects. A redirect
// to another origin's /robots.txt is answered by that origin's entry —
// fetched once whichever origin asks first, as a host that redirects to its
// www. name (or to https) would otherwise have the file fetched, and
// archived, twice — and returned as shared, with the origin it is of. Past
// maxRedirects nested fills, redirects are followed without, so that a
// chain of redirects through many origins costs a bounded number of
// fetches.
func (c *Cache) follow(ctx context.Context, origin string, e *entry, level int) (status int, body []byte, redirects int, shared *entry, target string, err error) {
	u := origin + "/robots.txt"
	for hop := 0; ; hop++ {
		status, body, location, err := c.fetch(ctx, u)
		if err != nil || status < 300 || status >= 400 || location == "" {
			return status, body, hop, nil, "", err
		}
		if hop == maxRedirects {
			return 0, nil, hop, nil, "", tooManyRedirects(origin)
		}
		if target, ok := robotsOrigin(location); ok && target != origin && level < maxRedirects {
			if te, ok := c.share(ctx, origin, e, target, level); ok {
				n := hop + 1 + te.redirects
				if n > maxRedirects {
					return 0, nil, n, nil, "", tooManyRedirects(origin)
				}
				return 0, nil, n, te, target, nil
			}
			if err := ctx.Err(); err != nil {
				return 0, nil, hop, nil, "", err
			}
		}
		u = location
	}
}

func tooManyRedirects(origin string) error {
	return fmt.Errorf("robots: more than %d redirects from %s", maxRedirects, origin+"/robots.txt")
}

// IsFile reports whether u is an origin's robots.txt, which the Cache
// fetches (and re-fetches once expired) by itself.
func IsFile(u string) bool {
	_, ok := robotsOrigin(u)
	return ok
}

// robotsOrigin returns the origin whose robots.txt u is, if it is one.
func robotsOrigin(u string) (string, bool) {
	p, err := url.Parse(u)
	if err != nil || p.EscapedPath() != "/robots.txt" || p.RawQuery != "" || p.User != nil || p.Host == "" {
		return "", false
	}
	return p.Scheme + "://" + p.Host, true
}

// share returns target's entry once filled, filling it if no one has, for
// origin's fetch (entry e) redirected to target's robots.txt; ok is false
// when its fetch was abandoned or waiting for it could wait for e itself
// (origins redirecting to each other): the caller then fetches the
// redirect itself.
func (c *Cache) share(ctx context.Context, origin string, e *entry, target string, level int) (te *entry, ok bool) {
	now := c.opts.Now()
	c.mu.Lock()
	te = c.hosts[target]
	ready := false
	if te != nil {
		select {
		case <-te.ready:
			ready = true
		default:
		}
	}
	switch {
	case te == nil || ready && !now.Before(te.expires):
		te = &entry{ready: make(chan struct{})}
		c.hosts[target] = te
		e.waitsOn = target
		c.mu.Unlock()
		err := c.fill(ctx, target, te, level+1)
		c.clearWait(e)
		return te, err == nil
	case ready:
		c.mu.Unlock()
		return te, te.filled
	}
	// Waiting for target must not come round to waiting for e. No cycle can
	// form (this check stops each), so the walk ends; it is bounded anyway.
	for t, steps := target, 0; t != ""; steps++ {
		if t == origin || steps == maxRedirects*len(c.hosts) {
			c.mu.Unlock()
			return nil, false
		}
		next := c.hosts[t]
		if next == nil {
			break
		}
		t = next.waitsOn
	}
	e.waitsOn = target
	c.mu.Unlock()
	defer c.clearWait(e)
	select {
	case <-te.ready:
		return te, te.filled
	case <-ctx.Done():
		return nil, false
	}
}

func (c *Cache) clearWait(e *entry) {
	c.mu.Lock()
	e.waitsOn = ""
	c.mu.Unlock()
}

// readable returns the part of a robots.txt body that is read: at most
// maxSize bytes (RFC 9309 §2.5), and of those only whole lines, since a
// rule cut short ("Allow: /" of "Allow: /public.html") would say
// something the file does not. The persistent cache keeps that part, so
// that a file read back from it is read the same.
func readable(body []byte, maxSize int) []byte {
	if len(body) <= maxSize {
		return body
	}
	body = body[:maxSize]
	if i := bytes.LastIndexAny(body, "\r\n"); i >= 0 {
		return body[:i+1]
	}
	return body[:0]
}

func (e *entry) set(status int, body []byte, expires time.Time, maxSize int, userAgent string) {
	body = readable(body, maxSize)
	e.status, e.expires, e.filled = status, expires, true
	if status >= 200 && status < 300 {
		// Unparsable lines are ignored (RFC 9309 §2.2); a file that is all garbage has no rules.
		e.group = parseGroup(body, userAgent)
	}
	close(e.ready)
}

// stored is an origin's robots.txt as the persistent cache keeps it.
type stored struct {
	status    int
	body      []byte
	expires   time.Time
	redirects int // how many led to the file (entry.redirects)
}

// The persistent form: r/<origin> → expires (unix s, 8 bytes), status and
// redirects (2 bytes: the redirects above the 10 bits a status takes;
// records written before redirects were counted read as 0), body.
func (c *Cache) load(origin string, now time.Time) (stored, bool) {
	if c.opts.Store == nil {
		return stored{}, false
	}
	v, closer, err := c.opts.Store.Get([]byte("r/" + origin))
	if err != nil {
		return stored{}, false
	}
	defer closer.Close()
	if len(v) < 10 {
		return stored{}, false
	}
	r := stored{expires: time.Unix(int64(binary.BigEndian.Uint64(v)), 0)}
	if !now.Before(r.expires) {
		return stored{}, false
	}
	sr := binary.BigEndian.Uint16(v[8:])
	r.status, r.redirects = int(sr&statusBits), int(sr>>10)
	r.body = append([]byte(nil), v[10:]...)
	return r, true
}

// statusBits are the bits of a stored status field that hold the status.
const statusBits = 1<<10 - 1

func (c *Cache) save(origin string, r stored) {
	if c.opts.Store == nil {
		return
	}
	body := readable(r.body, c.opts.MaxSize)
	v := binary.BigEndian.AppendUint64(nil, uint64(r.expires.Unix()))
	v = binary.BigEndian.AppendUint16(v, uint16(r.status&statusBits|min(r.redirects, maxRedirects+1)<<10))
	v = append(v, body...)
	// A lost or failed cache write only costs a refetch: no fsync, no error.
	_ = c.opts.Store.Set([]byte("r/"+origin), v, pebble.NoSync)
}
