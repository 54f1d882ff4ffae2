package replay

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/html/charset"

	"github.com/waggle-archive/waggle/internal/archive"
	"github.com/waggle-archive/waggle/internal/fetch"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/rewrite"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// maxRewriteSize bounds the decoded size of a page, stylesheet or script
// that is rewritten; a larger one is served as archived, unrewritten.
const maxRewriteSize = 32 << 20

// passHeaders are the archived response headers replayed as they are. Every
// other header is replayed renamed to X-Archive-Orig-<name>: cookies, CSP,
// HSTS, Link preloads and Refresh would otherwise act on the content origin
// or reach out to the live web.
var passHeaders = map[string]bool{
	"Content-Type":        true,
	"Content-Language":    true,
	"Content-Disposition": true,
	"Last-Modified":       true,
}

// hopHeaders describe the archived transfer, not the payload: dropped.
var hopHeaders = map[string]bool{
	"Connection":        true,
	"Keep-Alive":        true,
	"Transfer-Encoding": true,
	"Content-Length":    true,
	"Content-Encoding":  true,
}

// content serves archived bytes on the content origin:
// /web/<ts><mod>/<url>.
func (s *Server) content(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(requestTarget(r, "/web/"))
	if errors.Is(err, errBadTimestamp) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil || t.ts == "" || t.ts == "*" {
		http.Error(w, "not an archived URL: use /web/<timestamp><modifier>/<url>", http.StatusNotFound)
		return
	}
	when, err := index.ParseTimestamp(t.ts, false)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	u, err := urlkey.Canonical("", fixURL(t.url))
	if err != nil {
		http.Error(w, "not an archivable URL: "+err.Error(), http.StatusBadRequest)
		return
	}
	key, err := urlkey.SURT(u)
	if err != nil {
		http.Error(w, "not an archivable URL: "+err.Error(), http.StatusBadRequest)
		return
	}
	caps, err := s.capturesOf(r.Context(), key, u)
	if err != nil {
		s.contentError(w, r, err)
		return
	}
	page := isPageMod(t.mod)
	if len(caps) == 0 {
		if page {
			s.notFound(w, r, u, key, s.uiOrigin(r))
			return
		}
		http.Error(w, "not in the archive: "+u, http.StatusNotFound)
		return
	}
	var i int
	if page || t.mod == "id_" {
		// A page is the capture closest to the time asked for, at its own
		// timestamp, so that the address says which capture is shown.
		i = closest(caps, when)
		if ts := caps[i].Timestamp14(); ts != t.ts || !sameURL(fixURL(t.url), caps[i].URL) {
			redirect(w, "/web/"+ts+t.mod+"/"+caps[i].URL, http.StatusFound)
			return
		}
	} else {
		i = atOrBefore(caps, when)
	}
	c := caps[i]
	resp, err := s.payloads.get(r.Context(), c, func(ctx context.Context) (*response, error) { return s.load(ctx, c) })
	if err != nil {
		s.contentError(w, r, err)
		return
	}
	ui := s.uiOrigin(r)
	h := w.Header()
	setMementoHeaders(h, ui, caps, i)
	h.Set("Content-Security-Policy", contentPolicy(ui))
	h.Set("X-Content-Type-Options", "nosniff") // the archived type, not a guess, decides what a response is
	h.Set("X-Archive-Src", c.Segment+":"+strconv.FormatInt(c.Offset, 10))
	if t.mod == "id_" {
		s.serveIdentity(w, r, resp)
		return
	}
	copyHeaders(h, resp.header)
	if loc := resp.header.Get("Location"); loc != "" && resp.status >= 300 && resp.status < 400 {
		if abs, err := urlkey.Canonical(c.URL, loc); err == nil {
			h.Set("Location", "/web/"+t.ts+t.mod+"/"+abs)
		}
		w.WriteHeader(resp.status)
		return
	}
	body := resp.payload
	kind := rewriteKind(t.mod, mediaType(resp.header, c.MIME))
	if resp.body != nil {
		kind = "" // too big to rewrite: replay the archived bytes
	}
	if kind != "" {
		decoded, err := fetch.DecodeContent(body, resp.header.Get("Content-Encoding"), maxRewriteSize)
		if err != nil && errors.Is(err, fetch.ErrDecodedTooLarge) {
			kind = "" // too big to rewrite: replay the archived bytes
		} else {
			body = decoded // a damaged coding gives what could be decoded
		}
	}
	// Links keep the time asked for, the page's: what they lead to is
	// looked up relative to it.
	mapper := func(abs, mod string) string { return "/web/" + t.ts + mod + "/" + abs }
	switch kind {
	case "html":
		ct := resp.header.Get("Content-Type")
		if u8, ok := fromUTF16(body, ct); ok {
			// The rewriter reads bytes as ASCII-compatible, and its
			// injected script is UTF-8: the page is served as UTF-8.
			body, ct = u8, withCharset(ct, "utf-8")
			h.Set("Content-Type", ct)
		}
		var out bytes.Buffer
		out.Grow(len(body) + len(body)/8 + 512)
		head := injection(c, ui, t.mod, caps, i)
		if err := rewrite.HTML(&out, body, c.URL, mapper, rewrite.HTMLOptions{Head: head, ContentType: ct}); err != nil {
			s.log.Warn("rewriting page", "url", c.URL, "err", err)
		}
		body = out.Bytes()
	case "css":
		body = rewrite.CSS(body, c.URL, mapper)
	case "js":
		body = rewrite.JS(body)
	default:
		if ce := resp.header.Get("Content-Encoding"); ce != "" {
			h.Set("Content-Encoding", ce) // the browser decodes it
		}
	}
	if kind != "" {
		// Rewritten output names its neighbours and depends on the archive's
		// state: a browser must not reuse it after new captures arrive.
		h.Set("Cache-Control", "no-cache")
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/octet-stream") // never let Go sniff archived bytes into HTML
	}
	if kind == "" {
		serveArchived(w, r, resp)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.status)
	w.Write(body)
}

// fromUTF16 returns a page in UTF-16 (by its byte order mark or its
// Content-Type) as UTF-8, and false for any other page.
func fromUTF16(page []byte, contentType string) ([]byte, bool) {
	enc, name, _ := charset.DetermineEncoding(page, contentType)
	if !strings.HasPrefix(name, "utf-16") {
		return nil, false
	}
	u8, err := enc.NewDecoder().Bytes(page)
	if err != nil {
		return nil, false
	}
	return u8, true
}

// withCharset returns a Content-Type with its charset parameter set.
func withCharset(contentType, cs string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "text/html; charset=" + cs
	}
	params["charset"] = cs
	return mime.FormatMediaType(mt, params)
}

// serveArchived writes archived bytes, not rewritten, with the archived
// status. A 200 answers range requests as the live server could have:
// video and audio players seek with them, PDF viewers load by them. (A
// rewritten body is not served in ranges: it depends on the archive's
// state, so two requests could see different bytes. Nor is a body with a
// content coding: a slice of a gzip stream decodes for no client.)
func serveArchived(w http.ResponseWriter, r *http.Request, resp *response) {
	if resp.body != nil {
		serveStored(w, r, resp.status, resp.body)
		return
	}
	status, body := resp.status, resp.payload
	if status != http.StatusOK || w.Header().Get("Content-Encoding") != "" {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		w.Write(body)
		return
	}
	// No modification time: a conditional request or an If-Range by date
	// gets the whole body, as ServeContent does without one.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// serveIdentity replays the archived payload byte for byte (id_), with the
// archived headers that describe it.
func (s *Server) serveIdentity(w http.ResponseWriter, r *http.Request, resp *response) {
	h := w.Header()
	copyHeaders(h, resp.header)
	if ce := resp.header.Get("Content-Encoding"); ce != "" {
		h.Set("Content-Encoding", ce)
	}
	if loc := resp.header.Get("Location"); loc != "" {
		h.Set("X-Archive-Orig-Location", loc)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/octet-stream")
	}
	serveArchived(w, r, resp)
}

// copyHeaders replays archived headers under the rules of passHeaders.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case hopHeaders[ck]:
		case passHeaders[ck]:
			dst[ck] = slices.Clone(vs) // src may be shared (payloadCache)
		default:
			dst["X-Archive-Orig-"+ck] = slices.Clone(vs)
		}
	}
}

// contentPolicy keeps a replayed page to its own origin: everything it
// loads comes from the archive, nothing from the live web, and only the
// interface may frame it.
func contentPolicy(ui string) string {
	return "default-src 'self' 'unsafe-inline' 'unsafe-eval' data: blob:; form-action 'self'; base-uri 'self'; frame-ancestors 'self' " + ui
}

func isPageMod(mod string) bool { return mod == "" || mod == "mp_" || mod == "if_" || mod == "fr_" }

// rewriteKind decides how a response is rewritten: by the modifier the page
// used to ask for it and by its media type.
func rewriteKind(mod, mediaType string) string {
	switch {
	case mod == "im_" || mod == "oe_":
		return ""
	case mod == "cs_" || mediaType == "text/css":
		return "css"
	case mod == "js_":
		// Only scripts a page loads: a worker or a script opened on its own
		// (mp_) runs without the injected helpers the rewritten code needs.
		return "js"
	case isPageMod(mod) && (mediaType == "text/html" || mediaType == "application/xhtml+xml"):
		return "html"
	}
	return ""
}

func mediaType(h http.Header, fallback string) string {
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil {
		return strings.ToLower(mt)
	}
	return strings.ToLower(fallback)
}

//go:embed static/inject.js
var injectJS string

func serveInjectJS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Write([]byte(rewrite.ClientJS))
	w.Write([]byte("\n"))
	w.Write([]byte(injectJS))
}

// wbConfig is what the injected script knows of the page it runs in.
type wbConfig struct {
	URL    string `json:"url"`
	TS     string `json:"ts"`
	Prefix string `json:"prefix"`
	Top    string `json:"top"`   // the interface's origin
	Frame  bool   `json:"frame"` // shown in the banner frame: report navigation to it
	Prev   string `json:"prev,omitempty"`
	Next   string `json:"next,omitempty"`
	Count  int    `json:"count"`
}

// injection is what goes at the top of a replayed page's <head>.
func injection(c index.Capture, ui, mod string, caps []index.Capture, i int) []byte {
	cfg, _ := json.Marshal(wbConfig{ // cannot fail; escapes <, > and & for a script element
		URL: c.URL, TS: c.Timestamp14(), Prefix: "/web/", Top: ui,
		Frame: mod == "" || mod == "mp_",
		Prev:  neighbour(caps, i, -1), Next: neighbour(caps, i, +1), Count: len(caps),
	})
	var b bytes.Buffer
	b.WriteString("<script>window.__wb=")
	b.Write(cfg)
	b.WriteString(";</script><script src=\"/_waggle/inject.js\"></script>")
	return b.Bytes()
}

func (s *Server) contentError(w http.ResponseWriter, r *http.Request, err error) {
	if clientGone(r, err) {
		return
	}
	if unreachable(err) {
		s.log.Warn("archive node unreachable", "path", r.URL.Path, "err", err)
		http.Error(w, "a node holding this capture, or the earlier capture whose content it repeats, could not be reached: "+err.Error(), http.StatusBadGateway)
		return
	}
	if errors.Is(err, archive.ErrRevisitLoop) {
		// Before ErrNoOriginal, which it is too: waiting does not help. A
		// 500, as for damage: the capture is listed, but what its records
		// say does not lead to its content.
		s.log.Warn("revisits in a loop", "path", r.URL.Path, "err", err)
		http.Error(w, "This capture cannot be replayed: it repeats content archived by an earlier capture, "+
			"but the revisits it names lead to no capture holding that content, and never will. ("+err.Error()+")", http.StatusInternalServerError)
		return
	}
	if errors.Is(err, archive.ErrNoOriginal) {
		s.log.Warn("revisit without its original", "path", r.URL.Path, "err", err)
		http.Error(w, "This capture repeats content archived by an earlier capture, which is not in the archive as this node sees it: "+
			"on a network, the only node holding it may be away, and the capture replays again once it is back; "+
			"in an archive of one node it is missing for good (imported without it, or lost). ("+err.Error()+")", http.StatusServiceUnavailable)
		return
	}
	if errors.Is(err, errCorrupt) {
		s.log.Warn("damaged capture", "path", r.URL.Path, "err", err)
		http.Error(w, "This capture cannot be replayed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	s.log.Error("replay", "path", r.URL.Path, "err", err)
	http.Error(w, "replay failed: "+err.Error(), http.StatusInternalServerError)
}
