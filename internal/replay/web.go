package replay

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/cdx"
	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// web serves the interface's /web/ paths: TimeMaps, capture lists,
// TimeGates and the banner frame around a replayed page.
func (s *Server) web(w http.ResponseWriter, r *http.Request) {
	rest := requestTarget(r, "/web/")
	if tm, ok := strings.CutPrefix(rest, "timemap/"); ok {
		if format, u, ok := strings.Cut(tm, "/"); ok {
			s.timemap(w, r, format, u)
			return
		}
	}
	t, err := parseTarget(rest)
	if errors.Is(err, errBadTimestamp) {
		s.errorPage(w, r, http.StatusBadRequest, "Which moment?", err.Error()+".")
		return
	}
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Which page?", "Give a URL after /web/, as in /web/*/example.com/ or /web/2024/http://example.com/.")
		return
	}
	if t.mod != "" {
		// Archived bytes are served only from the content origin, where
		// their scripts cannot act on the interface.
		redirect(w, s.contentOrigin(r)+"/web/"+t.ts+t.mod+"/"+t.url, http.StatusFound)
		return
	}
	switch t.ts {
	case "*":
		// A prefix ends in '*', before the list's own query (?after=…).
		if prefix, _, ok := strings.Cut(t.url, "*"); ok && (strings.HasSuffix(t.url, "*") || strings.Contains(t.url, "*?")) {
			s.urlList(w, r, prefix)
			return
		}
		s.calendar(w, r, t)
	case "":
		s.timegate(w, r, t.url)
	default:
		s.frame(w, r, t)
	}
}

// resolved is a URL a request named, with its captures.
type resolved struct {
	url  string // canonical
	key  string // SURT
	caps []index.Capture
}

// resolve canonicalizes raw and reads its captures. On failure it has
// written the error page and returns false.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, raw string) (resolved, bool) {
	u, err := urlkey.Canonical("", fixURL(raw))
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Not a web address", fmt.Sprintf("%q is not an http or https URL that can be archived (%v).", truncate(raw, 200), err))
		return resolved{}, false
	}
	key, err := urlkey.SURT(u)
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Not a web address", err.Error())
		return resolved{}, false
	}
	caps, err := s.capturesOf(r.Context(), key, u)
	if err != nil {
		s.serverError(w, r, err)
		return resolved{}, false
	}
	if len(caps) == 0 {
		s.notFound(w, r, u, key, "")
		return resolved{}, false
	}
	return resolved{url: u, key: key, caps: caps}, true
}

// frame serves /web/<ts>/<url>: the banner and, in an iframe on the
// content origin, the page. A timestamp that is not exactly a capture's
// redirects to the closest capture's.
func (s *Server) frame(w http.ResponseWriter, r *http.Request, t target) {
	when, err := index.ParseTimestamp(t.ts, false)
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Bad timestamp", err.Error())
		return
	}
	res, ok := s.resolve(w, r, t.url)
	if !ok {
		return
	}
	i := closest(res.caps, when)
	c := res.caps[i]
	if ts := c.Timestamp14(); ts != t.ts || !sameURL(fixURL(t.url), c.URL) {
		redirect(w, mementoURL("", c), http.StatusFound)
		return
	}
	ui := s.uiOrigin(r)
	setMementoHeaders(w.Header(), ui, res.caps, i)
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-src "+s.contentOrigin(r)+"; img-src 'self' data:")
	s.render(w, r, http.StatusOK, "frame", frameData{
		URL:      c.URL,
		TS:       c.Timestamp14(),
		Date:     c.Time,
		Src:      s.contentOrigin(r) + "/web/" + c.Timestamp14() + "mp_/" + c.URL,
		Content:  s.contentOrigin(r),
		Prev:     neighbour(res.caps, i, -1),
		Next:     neighbour(res.caps, i, +1),
		Count:    len(res.caps),
		Position: i + 1,
	})
}

// neighbour returns the timestamp of the second before (d=-1) or after
// (d=+1) caps[i]'s that has a capture, or "": captures in one second share
// a URL, so the next is in a different one.
func neighbour(caps []index.Capture, i, d int) string {
	if j := step(caps, i, d); j >= 0 {
		return caps[j].Timestamp14()
	}
	return ""
}

// timegate serves /web/<url> (RFC 7089 TimeGate): it redirects to the
// memento closest to Accept-Datetime, or to the latest without one.
func (s *Server) timegate(w http.ResponseWriter, r *http.Request, raw string) {
	w.Header().Set("Vary", "accept-datetime")
	want := time.Now()
	if ad := r.Header.Get("Accept-Datetime"); ad != "" {
		t, err := http.ParseTime(ad)
		if err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "Accept-Datetime %q is not an HTTP date (RFC 1123, e.g. \"Thu, 01 Apr 2010 00:00:00 GMT\")\n", truncate(ad, 100))
			return
		}
		want = t
	}
	res, ok := s.resolve(w, r, raw)
	if !ok {
		return
	}
	i := closest(res.caps, want)
	ui := s.uiOrigin(r)
	h := w.Header()
	h.Set("Link", linkHeader(ui, res.caps, i, false))
	redirect(w, mementoURL(ui, res.caps[i]), http.StatusFound) // as its Link header names it
}

// calendar serves /web/*/<url>: the captures of one URL by year, month
// and day, and as a list; /web/*near_/<url> folds near-duplicates in the
// list.
func (s *Server) calendar(w http.ResponseWriter, r *http.Request, t target) {
	res, ok := s.resolve(w, r, t.url)
	if !ok {
		return
	}
	year := res.caps[len(res.caps)-1].Time.Year()
	if len(t.within) >= 4 {
		year, _ = strconv.Atoi(t.within[:4])
	}
	s.render(w, r, http.StatusOK, "calendar", newCalendar(res.url, res.caps, year, t.near))
}

// urlList serves /web/*/<prefix>*: the archived URLs under a prefix.
func (s *Server) urlList(w http.ResponseWriter, r *http.Request, prefix string) {
	_, ranges, err := cdx.Ranges(fixURL(prefix), "prefix")
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Not a web address", err.Error())
		return
	}
	after := r.URL.Query().Get("after")
	const pageSize = 500
	var rows []urlRow
	more := false
	for _, rg := range ranges {
		lo := rg[0]
		if after != "" && after >= lo {
			lo = after + "\x01"
		}
		err := s.arc.Range(r.Context(), lo, rg[1], false, func(c index.Capture) (bool, error) {
			if n := len(rows); n > 0 && rows[n-1].Key == c.URLKey {
				rows[n-1].Count++
				rows[n-1].Last = c.Time
				return true, nil
			}
			if len(rows) == pageSize {
				more = true
				return false, nil
			}
			rows = append(rows, urlRow{Key: c.URLKey, URL: c.URL, Count: 1, First: c.Time, Last: c.Time, MIME: c.MIME})
			return true, nil
		})
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		if more {
			break
		}
	}
	data := listData{Prefix: prefix, Rows: rows}
	if more {
		data.Next = "?after=" + url.QueryEscape(rows[len(rows)-1].Key)
	}
	s.render(w, r, http.StatusOK, "list", data)
}

// notFound answers for a URL with no captures, offering the archived URLs
// nearest to it. Its links go to ui, the interface's origin ("" when the
// page is served there).
func (s *Server) notFound(w http.ResponseWriter, r *http.Request, u, key, ui string) {
	var near []urlRow
	add := func(c index.Capture) (bool, error) {
		for _, n := range near {
			if n.Key == c.URLKey {
				return true, nil
			}
		}
		near = append(near, urlRow{Key: c.URLKey, URL: c.URL})
		return len(near)%5 != 0, nil
	}
	host := key
	if i := strings.IndexByte(key, ')'); i >= 0 {
		host = key[:i+1]
	}
	// Up to five URLs after it and five before it on the same host.
	err := s.arc.Range(r.Context(), key, host+"\xff", false, add)
	if err == nil {
		err = s.arc.Range(r.Context(), host, key, true, add)
	}
	if err != nil && !isCanceled(err) {
		s.log.Warn("nearest URLs", "url", u, "err", err)
	}
	s.render(w, r, http.StatusNotFound, "notfound", notFoundData{UI: ui, URL: u, Near: near, Host: urlkey.Host(u)})
}

func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	if clientGone(r, err) {
		return
	}
	if unreachable(err) {
		s.log.Warn("archive node unreachable", "path", r.URL.Path, "err", err)
		s.errorPage(w, r, http.StatusBadGateway, "A node could not be reached", "The node holding these captures could not be reached: "+err.Error()+". Try again later.")
		return
	}
	if errors.Is(err, errCorrupt) {
		s.log.Warn("damaged capture", "path", r.URL.Path, "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "This capture cannot be read", "The archive's copy of this capture is damaged on disk: "+err.Error())
		return
	}
	s.log.Error("replay", "path", r.URL.Path, "err", err)
	s.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", err.Error())
}

// search answers the home page's form.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("url"))
	if q == "" {
		redirect(w, "/", http.StatusFound)
		return
	}
	redirect(w, "/web/*/"+q, http.StatusFound)
}

// sameURL reports whether the URL a request named is the capture's URL as
// the address bar should show it. Escaping is ignored: a browser may escape
// what it is sent, and redirecting on that would never end.
func sameURL(asked, canonical string) bool {
	a, err1 := url.PathUnescape(asked)
	c, err2 := url.PathUnescape(canonical)
	if err1 != nil || err2 != nil {
		return asked == canonical
	}
	return a == c
}
