package replay

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/cdx"
	"github.com/waggle-archive/waggle/internal/index"
)

// setMementoHeaders marks a response as memento caps[i] (RFC 7089 §2.1).
func setMementoHeaders(h http.Header, ui string, caps []index.Capture, i int) {
	h.Set("Memento-Datetime", httpDate(caps[i].Time))
	h.Set("Link", linkHeader(ui, caps, i, true))
}

// linkHeader lists the original resource, TimeGate, TimeMap and the first,
// last, previous and next mementos around caps[i]; with self, caps[i] itself
// as "memento". Every target is escaped by cdx.LinkURL: an archived URL
// may hold what a URI-Reference may not.
func linkHeader(ui string, caps []index.Capture, i int, self bool) string {
	orig := cdx.LinkURL(caps[i].URL)
	links := []string{
		fmt.Sprintf(`<%s>; rel="original"`, orig),
		fmt.Sprintf(`<%s/web/%s>; rel="timegate"`, ui, orig),
		fmt.Sprintf(`<%s/web/timemap/link/%s>; rel="timemap"; type="application/link-format"`, ui, orig),
	}
	rels := map[int][]string{}
	order := []int{}
	addRel := func(j int, rel string) {
		if j < 0 || j >= len(caps) {
			return
		}
		if rels[j] == nil {
			order = append(order, j)
		}
		rels[j] = append(rels[j], rel)
	}
	// One entry per memento URI: captures in one second share it.
	i = secondStart(caps, i)
	addRel(0, "first")
	addRel(step(caps, i, -1), "prev")
	if self {
		addRel(i, "")
	}
	addRel(step(caps, i, +1), "next")
	addRel(secondStart(caps, len(caps)-1), "last")
	for _, j := range order {
		words := slices.DeleteFunc(rels[j], func(w string) bool { return w == "" })
		rel := strings.Join(append(words, "memento"), " ")
		links = append(links, fmt.Sprintf(`<%s>; rel="%s"; datetime="%s"`, mementoURL(ui, caps[j]), rel, httpDate(caps[j].Time)))
	}
	return strings.Join(links, ", ")
}

// secondStart returns the index of the first capture in caps[i]'s second:
// the one caps[i]'s memento URI, whose timestamp has 14 digits, replays
// (closest picks the earlier on a tie).
func secondStart(caps []index.Capture, i int) int {
	for i > 0 && caps[i-1].Timestamp14() == caps[i].Timestamp14() {
		i--
	}
	return i
}

// step returns the index of the first capture of the second before (d=-1)
// or after (d=+1) caps[i]'s, or -1 when there is none.
func step(caps []index.Capture, i, d int) int {
	j := i + d
	for j >= 0 && j < len(caps) && caps[j].Timestamp14() == caps[i].Timestamp14() {
		j += d
	}
	if j < 0 || j >= len(caps) {
		return -1
	}
	return secondStart(caps, j)
}

// mementoURL is where c is replayed, escaped as a link target (and as a
// Location header wants it: a URI-Reference too).
func mementoURL(ui string, c index.Capture) string {
	return ui + "/web/" + c.Timestamp14() + "/" + cdx.LinkURL(c.URL)
}

// timemap serves /web/timemap/link/<url> (application/link-format, RFC 7089
// §5) and /web/timemap/json/<url> (pywb's: the CDX JSON lines of the URL).
// Link targets are escaped as in linkHeader.
func (s *Server) timemap(w http.ResponseWriter, r *http.Request, format, raw string) {
	switch format {
	case "link":
		res, ok := s.resolve(w, r, raw)
		if !ok {
			return
		}
		ui := s.uiOrigin(r)
		first, last := res.caps[0], res.caps[len(res.caps)-1]
		w.Header().Set("Content-Type", "application/link-format")
		b := bufio.NewWriterSize(w, 32<<10)
		orig := cdx.LinkURL(res.url)
		fmt.Fprintf(b, "<%s>; rel=\"original\",\n", orig)
		fmt.Fprintf(b, "<%s/web/timemap/link/%s>; rel=\"self\"; type=\"application/link-format\"; from=\"%s\"; until=\"%s\",\n", ui, orig, httpDate(first.Time), httpDate(last.Time))
		fmt.Fprintf(b, "<%s/web/%s>; rel=\"timegate\"", ui, orig)
		// One entry per memento URI, as in linkHeader.
		lastSecond := secondStart(res.caps, len(res.caps)-1)
		for i := 0; i >= 0; i = step(res.caps, i, +1) {
			rel := "memento"
			if i == lastSecond {
				rel = "last " + rel
			}
			if i == 0 {
				rel = "first " + rel
			}
			c := res.caps[i]
			fmt.Fprintf(b, ",\n<%s>; rel=\"%s\"; datetime=\"%s\"", mementoURL(ui, c), rel, httpDate(c.Time))
		}
		b.WriteString("\n")
		b.Flush()
	case "json":
		q, err := cdx.ParseQuery(map[string][]string{"url": {fixURL(raw)}, "output": {"json"}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/x-ndjson")
		if err := q.Write(r.Context(), s.arc, w); err != nil && !isCanceled(err) {
			s.log.Warn("timemap", "url", raw, "err", err)
		}
	default:
		http.Error(w, "unknown TimeMap format "+format+": use /web/timemap/link/<url> or /web/timemap/json/<url>", http.StatusNotFound)
	}
}

// httpDate formats t as Memento-Datetime and Link datetimes want (RFC 1123, GMT).
func httpDate(t time.Time) string { return t.UTC().Format(time.RFC1123[:len(time.RFC1123)-3] + "GMT") }
