package websim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Tags keep the random streams of different purposes independent, so that
// for example a page's text can change without its links changing.
const (
	tagWeb uint64 = iota + 1
	tagHost
	tagPage
	tagLayout
	tagText
	tagChange
	tagMedia
	tagSession
	tagHostile
)

// splitmix is the SplitMix64 finaliser: a cheap, well-mixed 64-bit hash step.
func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

func hash4(a, b, c, d uint64) uint64 {
	return splitmix(splitmix(splitmix(splitmix(a)^b)^c) ^ d)
}

// rng returns a generator for one purpose (tag) of one object (a, b).
func (w *Web) rng(tag, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(hash4(w.seed, tag, a, b), hash4(tag, a, b, ^w.seed)))
}

type hostKind uint8

const (
	hostMain   hostKind = iota // the main content host of a domain
	hostBlog                   // a second content host of the domain
	hostAssets                 // images, style sheets, scripts and fonts of the domain
	hostAlias                  // redirects everything to the domain's main host
)

// feature is a set of optional behaviours of a content host.
type feature uint32

const (
	featDisallowPrivate feature = 1 << iota // robots.txt disallows /private/, which exists and is linked
	featCrawlDelay                          // robots.txt asks for Crawl-delay: 1
	featNoRobots                            // no robots.txt (404)
	featSitemap                             // robots.txt names /sitemap.xml
	featRedirects                           // redirect chains to real pages
	featLoop                                // the web's one redirect loop
	featDead                                // links that answer 404
	featErrors                              // a link that answers 500
	featDownloads                           // PDF, JSON, CSV and plain text files
	featWrongType                           // an HTML page labelled text/plain
	featMetaRefresh                         // a page that moves on by meta refresh
	featCalendar                            // infinite calendar trap
	featJSession                            // session ids in the path (;jsessionid=)
	featSID                                 // session ids in the query (?sid=)
	featDeep                                // infinitely deep relative path /a/a/a/...
	featSlow                                // a URL that stalls SlowDelay
)

// features decides what a content host of rank r (0 is the biggest) does.
// Fixed moduli rather than coin flips guarantee that even a small web has
// each common behaviour.
func features(r, nContent int) feature {
	var f feature
	if r%4 == 1 {
		f |= featDisallowPrivate
	}
	if r%6 == 4 {
		f |= featCrawlDelay
	}
	if r%3 == 0 {
		f |= featSitemap | featRedirects
	}
	if r%9 == 7 {
		f = f&^(featDisallowPrivate|featCrawlDelay|featSitemap) | featNoRobots
	}
	if r == min(2, nContent-1) {
		f |= featLoop
	}
	if r%2 == 0 {
		f |= featDead
	}
	if r%7 == 3 {
		f |= featErrors
	}
	if r%4 == 2 {
		f |= featDownloads
	}
	if r%11 == 5 {
		f |= featWrongType
	}
	if r%5 == 3 {
		f |= featMetaRefresh
	}
	if r%25 == 2 {
		f |= featCalendar
	}
	if r%25 == 5 {
		f |= featJSession
	}
	if r%25 == 15 {
		f |= featSID
	}
	if r%50 == 3 {
		f |= featDeep
	}
	if r >= nContent/2 && r%10 == 9 {
		f |= featSlow
	}
	return f
}

type domain struct {
	name   string // registrable domain, "amber-river.test"
	title  string // "Amber River"
	main   *host
	blog   *host
	assets *host // nil: each content host serves its own under /static
	alias  *host
	photos []string // names of the photos in /img/, without extension
	year   int      // copyright year in footers
}

type host struct {
	idx  int
	name string
	kind hostKind
	dom  *domain
	rank int // among content hosts, 0 is the biggest; -1 for others
	feat feature

	pages   []*page              // ordinary pages; pages[0] is the home page
	private []*page              // pages under /private/
	res     map[string]*resource // what the host serves, by path and query

	// Paths linked on purpose that do not answer 200, for tests.
	dead, failing, slow, loop []string

	sessions atomic.Uint64 // session ids handed out by the session trap
}

// assetBase returns the URL prefix of the page requisites of h's domain.
func (h *host) assetBase() (host, prefix string) {
	if a := h.dom.assets; a != nil {
		return a.name, ""
	}
	return h.name, "/static"
}

type page struct {
	host     *host
	id       uint64 // identity for random streams and versioning
	path     string // path and optional query
	dir      string // directory of the page, ends in '/'
	title    string
	base     string // <base href>, "" for none
	created  time.Time
	children []*page
	related  []*page // other pages of the same host
	external []xlink
	extra    []special // in-host links to special resources
	iframe   bool
}

// url returns the absolute URL of p.
func (p *page) url() string { return "http://" + p.host.name + p.path }

// xlink is a link to a page on another host.
type xlink struct {
	to   *page
	via  string // host name to use in the link (an alias redirects to to.host)
	utm  bool   // add tracking parameters, which the target ignores
	text string // anchor text; "" for the target's title
}

// special is a link to a resource that is not an ordinary page.
type special struct {
	path, text string
}

// build generates the hosts, pages and links of the web.
func (w *Web) build() {
	rng := w.rng(tagWeb, 0, 0)
	w.byHost = make(map[string]*host)
	var content []*host
	var doms []*domain
	used := map[string]bool{}
	add := func(d *domain, name string, kind hostKind) *host {
		if len(w.hosts) >= w.cfg.Hosts {
			return nil
		}
		h := &host{idx: len(w.hosts), name: name, kind: kind, dom: d, rank: -1, res: map[string]*resource{}}
		w.hosts = append(w.hosts, h)
		w.byHost[name] = h
		if kind == hostMain || kind == hostBlog {
			h.rank = len(content)
			content = append(content, h)
		}
		return h
	}
	for len(w.hosts) < w.cfg.Hosts {
		name := adjectives[rng.IntN(len(adjectives))] + "-" + nouns[rng.IntN(len(nouns))]
		for i := 2; used[name]; i++ {
			name = strings.TrimRight(name, "0123456789") + strconv.Itoa(i)
		}
		used[name] = true
		d := &domain{name: name + ".test", title: titleCase(strings.ReplaceAll(name, "-", " ")), year: 2015 + rng.IntN(11)}
		doms = append(doms, d)
		bare := rng.IntN(5) == 0 // the site answers on the bare domain, www redirects
		mainName, aliasName := "www."+d.name, d.name
		if bare {
			mainName, aliasName = aliasName, mainName
		}
		d.main = add(d, mainName, hostMain)
		// The biggest domain always has an asset host and a blog, so that
		// even a small web has page requisites and pages on sibling hosts.
		first := len(doms) == 1
		if first || rng.IntN(5) < 2 {
			d.assets = add(d, [...]string{"img", "cdn", "static", "media"}[rng.IntN(4)]+"."+d.name, hostAssets)
		}
		if first || rng.IntN(7) == 0 {
			d.blog = add(d, "blog."+d.name, hostBlog)
		}
		if rng.IntN(4) == 0 {
			d.alias = add(d, aliasName, hostAlias)
		}
		n := 6 + rng.IntN(15)
		for i := range n {
			d.photos = append(d.photos, fmt.Sprintf("%s-%s-%d", words[rng.IntN(len(words))], nouns[rng.IntN(len(nouns))], i))
		}
	}

	counts := zipfCounts(len(content), w.cfg.Pages-countKind(w.hosts, hostAssets))
	cum := make([]float64, len(content)) // cumulative Zipf weights, for picking link targets
	total := 0.0
	for r := range content {
		total += 1 / float64(r+1)
		cum[r] = total
	}
	for _, h := range content {
		h.feat = features(h.rank, len(content))
		w.buildPages(h, counts[h.rank])
	}
	for _, d := range doms {
		if d.assets != nil {
			w.buildAssets(d.assets)
			home := w.newPage(d.assets, 0, "/", "/", "Static files | "+d.title)
			d.assets.pages = []*page{home}
			d.main.pages[0].external = append(d.main.pages[0].external, xlink{to: home, via: d.assets.name, text: "Media files"})
		}
		if d.blog != nil {
			d.main.pages[0].external = append(d.main.pages[0].external, xlink{to: d.blog.pages[0], via: d.blog.name, text: "Our blog"})
		}
	}
	for _, h := range content {
		if h.dom.assets == nil {
			w.buildAssets(h)
		}
	}

	// Links between hosts. Every host is linked from a bigger one, so all
	// are reachable from the seeds; the rest are skewed to big hosts, as on
	// the real web.
	pick := func(rng *rand.Rand, below int) *host {
		return content[min(sort.SearchFloat64s(cum[:below], rng.Float64()*cum[below-1]), below-1)]
	}
	link := func(rng *rand.Rand, from *page, to *page) {
		x := xlink{to: to, via: to.host.name, utm: rng.IntN(8) == 0}
		if a := to.host.dom.alias; a != nil && to.host.kind == hostMain && rng.IntN(3) == 0 {
			x.via = a.name
		}
		from.external = append(from.external, x)
	}
	for _, h := range content[1:] {
		rng := w.rng(tagHost, uint64(h.idx), 1)
		src := pick(rng, h.rank)
		link(rng, src.pages[rng.IntN(len(src.pages))], h.pages[0])
	}
	if len(content) > 1 {
		for _, h := range content {
			rng := w.rng(tagHost, uint64(h.idx), 2)
			for _, p := range h.pages {
				if rng.IntN(10) >= 3 {
					continue
				}
				for range 1 + rng.IntN(3) {
					t := pick(rng, len(content))
					if t == h {
						continue
					}
					to := t.pages[0]
					if rng.IntN(5) < 2 {
						to = t.pages[rng.IntN(len(t.pages))]
					}
					link(rng, p, to)
				}
			}
		}
	}

	for _, h := range w.hosts {
		for _, p := range h.pages {
			w.pages = append(w.pages, p.url())
		}
	}
	for _, h := range content[:min(5, len(content))] {
		w.seeds = append(w.seeds, h.pages[0].url())
	}
}

func countKind(hosts []*host, k hostKind) int {
	n := 0
	for _, h := range hosts {
		if h.kind == k {
			n++
		}
	}
	return n
}

// zipfCounts splits total pages over n hosts in proportion to 1/rank, each
// host getting at least one.
func zipfCounts(n, total int) []int {
	counts := make([]int, n)
	if n == 0 {
		return counts
	}
	spare := max(total-n, 0)
	h := 0.0
	for r := range n {
		h += 1 / float64(r+1)
	}
	given := 0
	for r := range n {
		c := int(float64(spare) / (float64(r+1) * h))
		counts[r] = 1 + c
		given += c
	}
	for r := 0; given < spare; r = (r + 1) % n {
		counts[r]++
		given++
	}
	return counts
}

func (w *Web) newPage(h *host, i int, path, dir, title string) *page {
	p := &page{host: h, path: path, dir: dir, title: title}
	p.id = hash4(uint64(h.idx), uint64(i), 0, 0)
	rng := w.rng(tagPage, p.id, 0)
	// Original publication dates spread over 2023 and 2024; changes made by
	// version steps are dated from 2026 on, so they are always later.
	p.created = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(2*365*86400)) * time.Second)
	h.res[path] = &resource{kind: resPage, host: h, page: p}
	return p
}

// buildPages generates the n ordinary pages of content host h as a tree
// under its home page, plus the extras its features call for.
func (w *Web) buildPages(h *host, n int) {
	rng := w.rng(tagHost, uint64(h.idx), 0)
	site := h.dom.title
	if h.kind == hostBlog {
		site = "The " + site + " Blog"
	}
	home := w.newPage(h, 0, "/", "/", site)
	h.pages = []*page{home}
	used := map[string]bool{"": true}
	secs := rng.Perm(len(sectionNames))[:min(1+n/15, 7, n-1)]
	for i := 1; i < n; i++ {
		var path, dir string
		var parent *page
		if i <= len(secs) {
			parent = home
			path = "/" + sectionNames[secs[i-1]] + "/"
			dir = path
		} else {
			parent = h.pages[1+rng.IntN(i-1)]
			depth := strings.Count(parent.dir, "/") - 1
			slug := slugOf(rng, 2+rng.IntN(3))
			style := rng.IntN(100)
			for {
				switch {
				case depth < 3 && style < 30:
					path = parent.dir + slug + "/"
					dir = path
				case style < 60:
					path = parent.dir + slug + ".html"
				case style < 72 || depth > 1:
					path = parent.dir + slug
				case depth == 1 && style < 85:
					path = fmt.Sprintf("%s%d/%02d/%s.html", parent.dir, 2015+rng.IntN(11), 1+rng.IntN(12), slug)
				default:
					path = fmt.Sprintf("%sitem?id=%d", parent.dir, 100+i)
				}
				if !used[strings.TrimSuffix(path, "/")] {
					break
				}
				slug += "-" + strconv.Itoa(i)
			}
			if dir == "" {
				dir = parent.dir
			}
		}
		used[strings.TrimSuffix(path, "/")] = true
		p := w.newPage(h, i, path, dir, titleCase(slugWords(rng, 2+rng.IntN(5))))
		parent.children = append(parent.children, p)
		h.pages = append(h.pages, p)
	}
	for _, p := range h.pages {
		lrng := w.rng(tagLayout, p.id, 1)
		if n > 1 {
			for range 2 + lrng.IntN(5) {
				if q := h.pages[lrng.IntN(n)]; q != p {
					p.related = append(p.related, q)
				}
			}
			p.iframe = len(p.related) > 0 && lrng.IntN(25) == 0
		}
		if lrng.IntN(12) == 0 {
			p.base = "http://" + h.name + [...]string{"/", p.dir, h.pages[lrng.IntN(n)].dir}[lrng.IntN(3)]
		}
	}
	w.buildExtras(h, rng, used)
}

// buildExtras adds what h's features call for: robots-disallowed pages,
// redirects, errors, downloads, traps and so on, each linked from an
// ordinary page.
func (w *Web) buildExtras(h *host, rng *rand.Rand, used map[string]bool) {
	pages := h.pages
	somePage := func() *page { return pages[rng.IntN(len(pages))] }
	// Traps hang off leaves, pages discovered last, so that a crawler that
	// caps URLs per host has found the host's real pages before the trap
	// can eat its budget.
	var leaves []*page
	for _, p := range pages[1:] {
		if len(p.children) == 0 {
			leaves = append(leaves, p)
		}
	}
	leaf := func() *page {
		if len(leaves) == 0 {
			return pages[0]
		}
		return leaves[rng.IntN(len(leaves))]
	}
	fresh := func(prefix, suffix string) string {
		for {
			p := prefix + slugOf(rng, 2) + suffix
			if !used[p] && h.res[p] == nil {
				used[p] = true
				return p
			}
		}
	}
	linkTo := func(from *page, path, text string) {
		from.extra = append(from.extra, special{path: path, text: text})
	}
	robots := &resource{kind: resRobots, host: h}
	if h.feat&featNoRobots == 0 {
		h.res["/robots.txt"] = robots
	}
	h.res["/favicon.ico"] = &resource{kind: resFavicon, host: h}
	if h.feat&featSitemap != 0 {
		h.res["/sitemap.xml"] = &resource{kind: resSitemap, host: h}
	}
	if h.feat&featDisallowPrivate != 0 {
		idx := w.newPage(h, 1<<20, "/private/", "/private/", "Staff area")
		h.private = []*page{idx}
		for i := range 2 + rng.IntN(3) {
			p := w.newPage(h, 1<<20+1+i, fresh("/private/", ".html"), "/private/", titleCase(slugWords(rng, 3)))
			p.related = []*page{idx, pages[0]}
			idx.children = append(idx.children, p)
			h.private = append(h.private, p)
		}
		idx.related = []*page{pages[0]}
		linkTo(pages[0], "/private/", "Staff area")
		linkTo(somePage(), h.private[len(h.private)-1].path, "Internal notes")
	}
	if h.feat&featRedirects != 0 {
		for c := range 1 + rng.IntN(3) {
			target := somePage().path
			for hop := 1 + rng.IntN(3); hop > 0; hop-- {
				var from string
				switch rng.IntN(3) {
				case 0:
					from = fresh("/old/", ".html")
				case 1:
					from = fresh("/go/", "")
				default:
					from = fmt.Sprintf("/index.php?p=%d", 1000*c+hop)
				}
				loc := target
				if rng.IntN(2) == 0 {
					loc = "http://" + h.name + target
				}
				code := [...]int{301, 302, 307, 308}[(h.rank+c+hop)%4]
				h.res[from] = &resource{kind: resRedirect, code: code, target: loc}
				target = from
			}
			linkTo(somePage(), target, "Older version")
		}
	}
	if h.feat&featLoop != 0 {
		h.res["/login?next=/account"] = &resource{kind: resRedirect, code: 302, target: "/account"}
		h.res["/account"] = &resource{kind: resRedirect, code: 302, target: "/login?next=/account"}
		h.loop = []string{"/account"}
		linkTo(pages[0], "/account", "Your account")
	}
	if h.feat&featDead != 0 {
		for range 1 + rng.IntN(2) {
			p := somePage()
			dead := fresh(p.dir, "-old.html")
			h.dead = append(h.dead, dead)
			linkTo(p, dead, "Earlier edition")
		}
	}
	if h.feat&featErrors != 0 {
		h.res["/cgi-bin/counter.cgi"] = &resource{kind: resError}
		h.failing = append(h.failing, "/cgi-bin/counter.cgi")
		linkTo(somePage(), "/cgi-bin/counter.cgi", "Visitor counter")
	}
	if h.feat&featDownloads != 0 {
		kinds := []struct {
			kind           rkind
			prefix, suffix string
			text           string
		}{
			{resPDF, "/files/", ".pdf", "Annual report (PDF)"},
			{resJSON, "/api/", ".json", "Data (JSON)"},
			{resCSV, "/data/", ".csv", "Spreadsheet (CSV)"},
			{resText, "/notes/", ".txt", "Plain text notes"},
		}
		for _, i := range rng.Perm(len(kinds))[:2+rng.IntN(3)] {
			k := kinds[i]
			path := fresh(k.prefix, k.suffix)
			h.res[path] = &resource{kind: k.kind, host: h, n: int(hash4(uint64(h.idx), uint64(i), 0, 0) >> 1)}
			linkTo(somePage(), path, k.text)
		}
	}
	if h.feat&featWrongType != 0 {
		path := fresh("/print/", "")
		h.res[path] = &resource{kind: resWrongType, host: h, n: h.idx}
		linkTo(somePage(), path, "Printable version")
	}
	if h.feat&featMetaRefresh != 0 {
		path := fresh("/moved/", ".html")
		target := somePage().path
		if rng.IntN(2) == 0 {
			target = "http://" + h.name + target
		}
		h.res[path] = &resource{kind: resRefresh, host: h, target: target}
		linkTo(somePage(), path, "This page has moved")
	}
	if h.feat&featSlow != 0 {
		path := fresh("/reports/", ".html")
		h.res[path] = &resource{kind: resSlow, host: h}
		h.slow = append(h.slow, path)
		linkTo(somePage(), path, "Full report")
	}
	if h.feat&featCalendar != 0 {
		linkTo(leaf(), "/calendar/2026/11", "Events calendar")
	}
	if h.feat&featJSession != 0 {
		linkTo(leaf(), "/shop/", "Shop")
	}
	if h.feat&featSID != 0 {
		linkTo(leaf(), "/store", "Store")
	}
	if h.feat&featDeep != 0 {
		linkTo(leaf(), "/a/", "Archive")
	}
}

// buildAssets registers the page requisites of h's domain on h: style
// sheets, scripts, a font and images. Paths are under /static unless h is
// the domain's dedicated asset host.
func (w *Web) buildAssets(h *host) {
	_, prefix := h.assetBase()
	if h.kind == hostAssets {
		prefix = ""
		h.res["/robots.txt"] = &resource{kind: resRobots, host: h}
		h.res["/favicon.ico"] = &resource{kind: resFavicon, host: h}
	}
	add := func(path string, kind rkind, n int) {
		h.res[prefix+path] = &resource{kind: kind, host: h, n: n}
	}
	add("/css/site.css", resCSS, 0)
	add("/css/theme.css", resCSS, 1)
	add("/js/app.js", resJS, 0)
	add("/js/vendor.min.js", resJS, 1)
	add("/fonts/body.woff2", resFont, 0)
	add("/img/logo.png", resPNG, 0)
	for i := range iconCount {
		add(fmt.Sprintf("/img/icon-%d.gif", i), resGIF, i)
	}
	for i := range backgroundCount {
		add(fmt.Sprintf("/img/bg-%d.jpg", i), resJPEG, 1000+i)
	}
	for i, name := range h.dom.photos {
		add("/img/"+name+".jpg", resJPEG, 2*i)
		add("/img/"+name+"@2x.jpg", resJPEG, 2*i+1)
	}
}

const (
	iconCount       = 4
	backgroundCount = 2
)

func slugWords(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

func slugOf(rng *rand.Rand, n int) string {
	return strings.ReplaceAll(slugWords(rng, n), " ", "-")
}

func titleCase(s string) string {
	f := strings.Fields(s)
	for i, w := range f {
		if i == 0 || len(w) > 3 {
			f[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(f, " ")
}
