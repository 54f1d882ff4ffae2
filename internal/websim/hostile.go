package websim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/encoding/japanese"
)

// hostileDomain is the host of the bad-input pages. Nothing in the ordinary
// web links to it, so normal crawls never meet it.
const hostileDomain = "hostile.test"

// hostilePaths are the pages of hostileDomain, named by their path.
var hostilePaths = [...]string{
	"deep", "giant-attr", "bad-utf8", "latin1", "shiftjis", "binary-as-html",
	"gzip-bomb", "br-bomb", "endless", "slowloris", "redirect-loop", "huge-headers",
	"bad-header-lines",
}

// robotsVariants name the hosts robots-<variant>.hostile.test, whose
// robots.txt is bad in the way the name says.
var robotsVariants = [...]string{"huge", "binary", "500", "slow"}

// Sizes of the hostile bodies.
const (
	deepNesting     = 100_000
	giantAttrSize   = 10 << 20
	hugeRobotsSize  = 5 << 20
	hugeHeaderCount = 12_000 // of 1 kB each: above Go's default 10 MB limit
	noiseSize       = 64 << 10
)

// HostileURLs returns the URLs of the bad-input pages by name: "deep" (100,000
// nested divs), "giant-attr" (a 10 MB attribute), "bad-utf8", "latin1",
// "shiftjis", "binary-as-html", "gzip-bomb" and "br-bomb" (10 GiB of zeros
// when decoded), "endless" (a body that never ends), "slowloris" (a header
// byte a second, forever), "redirect-loop", "huge-headers" (12 MB of them),
// "bad-header-lines" (a chunked page whose header holds lines that are not
// fields, as some servers send: browsers pass over them), and the home pages of the hosts with a bad robots.txt: "robots-huge"
// (5 MB), "robots-binary", "robots-500" and "robots-slow" (stalls
// SlowDelay).
func (w *Web) HostileURLs() map[string]string {
	m := make(map[string]string, len(hostilePaths)+len(robotsVariants))
	for _, p := range hostilePaths {
		m[p] = "http://" + hostileDomain + "/" + p
	}
	for _, v := range robotsVariants {
		m["robots-"+v] = "http://robots-" + v + "." + hostileDomain + "/"
	}
	return m
}

// serveHostile answers for hostileDomain and its robots-* subdomains.
func (w *Web) serveHostile(rw http.ResponseWriter, r *http.Request, name string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		http.Error(rw, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if name == hostileDomain {
		w.serveHostilePath(rw, r)
		return
	}
	variant, ok := strings.CutPrefix(strings.TrimSuffix(name, "."+hostileDomain), "robots-")
	for _, v := range robotsVariants {
		if ok && v == variant {
			w.serveRobotsVariant(rw, r, variant)
			return
		}
	}
	http.Error(rw, fmt.Sprintf("websim: unknown host %q", name), http.StatusBadGateway)
}

func (w *Web) serveHostilePath(rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	hdr := rw.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	head := r.Method == http.MethodHead
	switch r.URL.Path {
	case "/":
		var b strings.Builder
		b.WriteString("<!DOCTYPE html>\n<html><head><title>Hostile pages</title></head><body>\n<h1>Hostile pages</h1>\n<ul>\n")
		for _, p := range hostilePaths {
			fmt.Fprintf(&b, "<li><a href=\"/%s\">%s</a></li>\n", p, p)
		}
		b.WriteString("</ul>\n</body></html>\n")
		writeBody(rw, r, []byte(b.String()))
	case "/robots.txt":
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		writeBody(rw, r, []byte("User-agent: *\nDisallow:\n"))
	case "/deep":
		open, shut := bytes.Repeat([]byte("<div>"), 1000), bytes.Repeat([]byte("</div>"), 1000)
		pre := []byte("<!DOCTYPE html>\n<html><head><title>Deep</title></head><body>\n")
		mid := []byte("<p>The bottom.</p>")
		post := []byte("\n<p><a href=\"/\">Home</a></p>\n</body></html>\n")
		hdr.Set("Content-Length", strconv.Itoa(len(pre)+deepNesting*11+len(mid)+len(post)))
		if !head {
			streamParts(ctx, rw, part{pre, 1}, part{open, deepNesting / 1000}, part{mid, 1}, part{shut, deepNesting / 1000}, part{post, 1})
		}
	case "/giant-attr":
		pre := []byte("<!DOCTYPE html>\n<html><head><title>Giant attribute</title></head><body>\n<p>Before the giant attribute.</p>\n<div data-payload=\"")
		fill := bytes.Repeat([]byte("x"), 64<<10)
		post := []byte("\">After the giant attribute.</div>\n<p><a href=\"/\">Home</a></p>\n</body></html>\n")
		hdr.Set("Content-Length", strconv.Itoa(len(pre)+giantAttrSize+len(post)))
		if !head {
			streamParts(ctx, rw, part{pre, 1}, part{fill, giantAttrSize / len(fill)}, part{post, 1})
		}
	case "/bad-utf8":
		writeBody(rw, r, []byte("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Bad UTF-8 \xff\xfe</title></head><body>\n"+
			"<p>Invalid bytes \xff\xfe, a lone continuation byte \x80, an overlong slash \xc0\xaf, a surrogate \xed\xa0\x80, "+
			"a truncated sequence \xe2\x82 and an out-of-range one \xf5\x80\x80\x80.</p>\n"+
			"<p><a href=\"/bad-utf8-\xff\">A link with a bad byte</a> | <a href=\"/\">Home</a></p>\n</body></html>\n"))
	case "/latin1":
		hdr.Set("Content-Type", "text/html; charset=ISO-8859-1")
		writeBody(rw, r, latin1("<!DOCTYPE html>\n<html><head><title>Latin-1: café</title></head><body>\n<h1>Crème brûlée</h1>\n<p>"+
			latin1Text+"</p>\n<p><a href=\"/\">Home</a></p>\n</body></html>\n"))
	case "/shiftjis":
		hdr.Set("Content-Type", "text/html")
		sjis, err := japanese.ShiftJIS.NewEncoder().String(japaneseText)
		if err != nil {
			http.Error(rw, "websim: shiftjis: "+err.Error(), http.StatusInternalServerError)
			return
		}
		writeBody(rw, r, []byte("<!DOCTYPE html>\n<html><head><meta charset=\"Shift_JIS\"><title>"+sjis[:12]+"</title></head><body>\n<p>"+
			sjis+"</p>\n<p><a href=\"/\">Home</a></p>\n</body></html>\n"))
	case "/binary-as-html":
		writeBody(rw, r, w.noise(1, noiseSize))
	case "/gzip-bomb", "/br-bomb":
		bs, err := w.loadBombs()
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		b, enc := &bs.gzip, "gzip"
		if r.URL.Path == "/br-bomb" {
			b, enc = &bs.brotli, "br"
		}
		hdr.Set("Content-Encoding", enc)
		hdr.Set("Content-Length", strconv.FormatInt(b.size(), 10))
		if !head {
			b.writeTo(ctx, rw)
		}
	case "/endless":
		if !head {
			line := sentence([]byte("<p>"), w.rng(tagHostile, 2, 0))
			line = append(line, "</p>\n"...)
			streamParts(ctx, rw, part{[]byte("<!DOCTYPE html>\n<html><head><title>Endless</title></head><body>\n"), 1},
				part{bytes.Repeat(line, max(1, 4096/len(line))), -1})
		}
	case "/slowloris":
		w.slowloris(rw, r)
	case "/redirect-loop":
		redirect(rw, r, http.StatusFound, "/redirect-loop/again")
	case "/redirect-loop/again":
		redirect(rw, r, http.StatusFound, "/redirect-loop")
	case "/bad-header-lines":
		w.badHeaderLines(rw)
	case "/huge-headers":
		filler := strings.Repeat("h", 1000)
		for i := range hugeHeaderCount {
			hdr["X-Filler-"+strconv.Itoa(i)] = []string{filler}
		}
		writeBody(rw, r, []byte("<!DOCTYPE html>\n<html><body><p>Huge headers.</p></body></html>\n"))
	default:
		notFound(rw, r)
	}
}

// serveRobotsVariant answers for robots-<variant>.hostile.test: a home page
// linking to two pages, and a bad robots.txt.
func (w *Web) serveRobotsVariant(rw http.ResponseWriter, r *http.Request, variant string) {
	hdr := rw.Header()
	switch r.URL.Path {
	case "/":
		hdr.Set("Content-Type", "text/html; charset=utf-8")
		writeBody(rw, r, []byte("<!DOCTYPE html>\n<html><head><title>Robots "+variant+"</title></head><body>\n"+
			"<p><a href=\"/page1\">Page one</a> | <a href=\"/page2\">Page two</a></p>\n</body></html>\n"))
	case "/page1", "/page2":
		hdr.Set("Content-Type", "text/html; charset=utf-8")
		writeBody(rw, r, []byte("<!DOCTYPE html>\n<html><head><title>"+r.URL.Path[1:]+"</title></head><body>\n<p><a href=\"/\">Home</a></p>\n</body></html>\n"))
	case "/robots.txt":
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		switch variant {
		case "huge":
			// Many rules, and at the very end one that matters: a parser
			// that gives up early never sees it.
			pre := []byte("User-agent: *\n")
			line := []byte("Disallow: /nothing-here/\n")
			post := []byte("Disallow: /page2\n")
			n := hugeRobotsSize / len(line)
			hdr.Set("Content-Length", strconv.Itoa(len(pre)+n*len(line)+len(post)))
			if r.Method != http.MethodHead {
				streamParts(r.Context(), rw, part{pre, 1}, part{bytes.Repeat(line, 1000), n / 1000}, part{bytes.Repeat(line, n%1000), 1}, part{post, 1})
			}
		case "binary":
			writeBody(rw, r, w.noise(3, noiseSize))
		case "500":
			http.Error(rw, "500 internal server error", http.StatusInternalServerError)
		case "slow":
			t := time.NewTimer(w.cfg.SlowDelay)
			defer t.Stop()
			select {
			case <-t.C:
				writeBody(rw, r, []byte("User-agent: *\nDisallow: /page2\n"))
			case <-r.Context().Done():
			}
		}
	default:
		notFound(rw, r)
	}
}

// badHeaderLines answers with header lines that are not fields around the
// ones that are: no colon, a control byte in a value.
func (w *Web) badHeaderLines(rw http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		http.Error(rw, "websim: bad-header-lines needs an HTTP/1.x connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	page := "<!DOCTYPE html>\n<html><head><title>Bad header lines</title></head><body>\n<p><a href=\"/\">Home</a></p>\n</body></html>\n"
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nX-Powered-By PHP/5.2\r\nContent-Type: text/html; charset=utf-8\r\n"+
		"X-Debug: a\x01b\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(page), page)
	buf.Flush()
}

// slowloris sends a status line and then one header byte a second, never
// finishing the headers, until the client hangs up or the server closes.
func (w *Web) slowloris(rw http.ResponseWriter, r *http.Request) {
	conn, buf, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		http.Error(rw, "websim: slowloris needs an HTTP/1.x connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// The client hanging up shows as the end of what it sends.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		io.Copy(io.Discard, buf)
	}()
	defer func() {
		conn.Close()
		<-gone
	}()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Slowloris: "); err != nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-gone:
			return
		case <-t.C:
			if _, err := conn.Write([]byte{'z'}); err != nil {
				return
			}
		}
	}
}

// noise returns n deterministic random bytes.
func (w *Web) noise(seed uint64, n int) []byte {
	rng := w.rng(tagHostile, seed, 0)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// latin1 encodes s, whose runes are all below 256, as ISO-8859-1.
func latin1(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return b
}

// writeBody sends a complete body with its length, or only the length for
// HEAD.
func writeBody(rw http.ResponseWriter, r *http.Request, body []byte) {
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		rw.Write(body)
	}
}

// part is a piece of a streamed body: data written n times (n < 0: forever).
type part struct {
	data []byte
	n    int
}

// streamParts writes parts in order until done, a write fails or ctx ends.
func streamParts(ctx context.Context, w io.Writer, parts ...part) {
	for _, p := range parts {
		for i := 0; p.n < 0 || i < p.n; i++ {
			if ctx.Err() != nil {
				return
			}
			if _, err := w.Write(p.data); err != nil {
				return
			}
		}
	}
}
