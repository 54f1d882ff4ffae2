package websim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// rkind is what a resource is.
type rkind uint8

const (
	resPage      rkind = iota // ordinary or robots-disallowed HTML page
	resRobots                 // robots.txt
	resSitemap                // sitemap.xml
	resFavicon                // favicon.ico
	resCSS                    // style sheet n
	resJS                     // script n
	resFont                   // WOFF2 font
	resPNG                    // logo
	resGIF                    // icon n
	resJPEG                   // photo or background n
	resPDF                    // PDF document
	resJSON                   // JSON listing of pages
	resCSV                    // CSV table
	resText                   // plain text
	resWrongType              // HTML labelled text/plain
	resRefresh                // HTML page that moves on to target by meta refresh
	resRedirect               // redirect with code to target
	resError                  // 500
	resSlow                   // HTML page served after SlowDelay
)

// resource is one URL of a host. Its bytes are rendered on first request
// and cached; a page's cache is replaced when a version step changes it.
type resource struct {
	kind   rkind
	host   *host
	page   *page  // resPage
	n      int    // variant, for media and files
	code   int    // resRedirect
	target string // resRedirect, resRefresh: Location or refresh URL
	cache  atomic.Pointer[entry]
}

// entry is a rendered resource with its validators.
type entry struct {
	step  int // change step of the page it was rendered for
	body  []byte
	mod   time.Time
	ctype []string // header values, shared by every response
	etag  []string
	weak  []string // ETag of the gzip-encoded form
	text  bool     // worth compressing

	gzOnce sync.Once
	gz     []byte
}

// Header values that never change, shared to save allocations.
var (
	varyAccept   = []string{"Accept-Encoding"}
	gzipEncoding = []string{"gzip"}
	cacheControl = []string{"max-age=600"}
)

// gzipped returns the gzip encoding of e's body, made once. Compressors
// are pooled: each holds about a megabyte of state.
func (w *Web) gzipped(e *entry) []byte {
	e.gzOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := w.gzw.Get().(*gzip.Writer)
		if zw == nil {
			zw = gzip.NewWriter(&b)
		} else {
			zw.Reset(&b)
		}
		zw.Write(e.body) // writes to a bytes.Buffer cannot fail
		zw.Close()
		w.gzw.Put(zw)
		e.gz = b.Bytes()
	})
	return e.gz
}

// Dates of unchanged content and of version steps. Each step is a day, so
// Last-Modified of a changed page is always later than before.
var (
	assetDate   = time.Date(2022, 6, 1, 0, 0, 0, 0, time.UTC)
	versionDate = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// changedAt reports whether the page with identity id changes at version
// step s (s ≥ 1): about one page in a hundred per step.
func (w *Web) changedAt(id uint64, s int) bool {
	return hash4(w.seed, tagChange, id, uint64(s))%100 == 0
}

// lastChange returns the latest step ≤ v at which page id changed, 0 if none.
func (w *Web) lastChange(id uint64, v int) int {
	for s := v; s > 0; s-- {
		if w.changedAt(id, s) {
			return s
		}
	}
	return 0
}

// entry returns the rendered form of res at the current version.
func (w *Web) entry(res *resource) *entry {
	step := 0
	if res.kind == resPage {
		step = w.lastChange(res.page.id, int(w.version.Load()))
	}
	if e := res.cache.Load(); e != nil && e.step == step {
		return e
	}
	e := w.render(res, step)
	res.cache.Store(e)
	return e
}

func (w *Web) render(res *resource, step int) *entry {
	h := res.host
	rng := w.rng(tagMedia, uint64(h.idx), uint64(res.kind)<<32|uint64(res.n))
	e := &entry{step: step, mod: assetDate.Add(time.Duration(h.idx) * time.Hour)}
	ctype := "text/html; charset=utf-8"
	switch res.kind {
	case resPage:
		e.body = w.renderPage(res.page, step)
		e.mod = res.page.created
		if step > 0 {
			e.mod = versionDate.Add(time.Duration(step)*24*time.Hour + time.Duration(res.page.id%86400)*time.Second)
		}
	case resRobots:
		e.body, ctype = w.renderRobots(h), "text/plain; charset=utf-8"
	case resSitemap:
		e.body, ctype = renderSitemap(h), "application/xml"
	case resFavicon:
		e.body, ctype = encodeICO(rng), "image/x-icon"
	case resCSS:
		e.body, ctype = w.renderCSS(h, res.n), "text/css; charset=utf-8"
	case resJS:
		e.body, ctype = w.renderJS(h, res.n), "text/javascript; charset=utf-8"
	case resFont:
		e.body, ctype = encodeFont(rng), "font/woff2"
	case resPNG:
		e.body, ctype = encodePNG(rng, 120, 40), "image/png"
	case resGIF:
		e.body, ctype = encodeGIF(rng, 16, 16), "image/gif"
	case resJPEG:
		width, height := 64, 48
		if res.n >= 1000 {
			width, height = 96, 32 // background
		} else if res.n%2 == 1 {
			width, height = 128, 96 // @2x
		}
		e.body, ctype = encodeJPEG(rng, width, height), "image/jpeg"
	case resPDF:
		e.body, ctype = encodePDF(rng, h.dom.title+" annual report"), "application/pdf"
	case resJSON:
		e.body, ctype = encodeJSON(h, rng), "application/json"
	case resCSV:
		e.body, ctype = encodeCSV(rng), "text/csv; charset=utf-8"
	case resText:
		e.body, ctype = encodeText(rng), "text/plain; charset=utf-8"
	case resWrongType:
		// A misconfigured server: HTML with a plain-text label.
		e.body, ctype = w.renderSimple(h, "Printable version", 1, "", ""), "text/plain; charset=utf-8"
	case resRefresh:
		e.body = w.renderSimple(h, "This page has moved", 2, `<meta http-equiv="refresh" content="0; url=`+res.target+"\">\n",
			`<p>Now at <a href="`+res.target+`">`+res.target+"</a>.</p>\n")
	case resSlow:
		e.body = w.renderSimple(h, "Full report", 3, "", "")
	}
	e.ctype = []string{ctype}
	e.text = strings.HasPrefix(ctype, "text/") || strings.HasPrefix(ctype, "application/json") || strings.HasPrefix(ctype, "application/xml")
	f := fnv.New64a()
	f.Write(e.body)
	tag := fmt.Sprintf("\"%016x\"", f.Sum64())
	e.etag, e.weak = []string{tag}, []string{"W/" + tag}
	return e
}

// serveEntry sends e with validators, honouring conditional requests,
// ranges, HEAD and Accept-Encoding: gzip. Like nginx, it weakens the ETag
// of the compressed form, which is a different sequence of bytes.
func (w *Web) serveEntry(rw http.ResponseWriter, r *http.Request, e *entry) {
	hdr := rw.Header()
	hdr["Content-Type"] = e.ctype
	hdr["Cache-Control"] = cacheControl
	body, etag := e.body, e.etag
	if e.text {
		hdr["Vary"] = varyAccept
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			body, etag = w.gzipped(e), e.weak
			hdr["Content-Encoding"] = gzipEncoding
		}
	}
	hdr["Etag"] = etag
	http.ServeContent(rw, r, "", e.mod, bytes.NewReader(body))
}

// acceptsGzip reports whether an Accept-Encoding value allows gzip.
func acceptsGzip(s string) bool {
	for s != "" {
		var part string
		part, s, _ = strings.Cut(s, ",")
		name, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return !strings.HasPrefix(q, "q=0") || strings.Trim(q[3:], ".0") != ""
	}
	return false
}

// serveHost answers a GET or HEAD request for ordinary host h.
func (w *Web) serveHost(rw http.ResponseWriter, r *http.Request, h *host) {
	if h.kind == hostAlias {
		redirect(rw, r, http.StatusMovedPermanently, "http://"+h.dom.main.name+r.URL.RequestURI())
		return
	}
	path := stripSession(r.URL.EscapedPath())
	if path == "" {
		path = "/"
	}
	query := filterQuery(r.URL.RawQuery)
	key := path
	if query != "" {
		key = path + "?" + query
	}
	res := h.res[key]
	if res == nil {
		if !w.serveTrap(rw, r, h, path, query) {
			notFound(rw, r)
		}
		return
	}
	switch res.kind {
	case resRedirect:
		redirect(rw, r, res.code, res.target)
	case resError:
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(rw, "<!DOCTYPE html>\n<html><head><title>500 Internal Server Error</title></head>\n<body><h1>Internal Server Error</h1><p>The counter is broken.</p></body></html>\n")
	case resSlow:
		t := time.NewTimer(w.cfg.SlowDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		w.serveEntry(rw, r, w.entry(res))
	default:
		w.serveEntry(rw, r, w.entry(res))
	}
}

// stripSession removes a ;jsessionid= path parameter, as servlet containers
// do before routing.
func stripSession(path string) string {
	i := strings.Index(path, ";jsessionid=")
	if i < 0 {
		return path
	}
	end := strings.IndexByte(path[i:], '/')
	if end < 0 {
		return path[:i]
	}
	return path[:i] + path[i+end:]
}

// filterQuery drops the parameters that real sites ignore when routing:
// session ids and tracking parameters. The order of the rest is kept.
func filterQuery(q string) string {
	if q == "" || (!strings.Contains(q, "sid=") && !strings.Contains(q, "utm_")) {
		return q
	}
	var kept []string
	for _, p := range strings.Split(q, "&") {
		name, _, _ := strings.Cut(p, "=")
		if p == "" || name == "sid" || strings.HasPrefix(name, "utm_") {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

func redirect(rw http.ResponseWriter, r *http.Request, code int, loc string) {
	rw.Header().Set("Location", loc)
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.WriteHeader(code)
	if r.Method != http.MethodHead {
		fmt.Fprintf(rw, "<!DOCTYPE html>\n<html><head><title>Moved</title></head><body><p>Moved to <a href=\"%s\">%s</a>.</p></body></html>\n", loc, loc)
	}
}

func notFound(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.WriteHeader(http.StatusNotFound)
	if r.Method != http.MethodHead {
		fmt.Fprint(rw, "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1><p>The page you asked for is not here. <a href=\"/\">Home</a></p></body></html>\n")
	}
}
