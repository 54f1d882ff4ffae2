package replay

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/index"
	"github.com/waggle-archive/waggle/internal/simhash"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/ui.css static/top.js
var staticFiles embed.FS

var staticFS, _ = fs.Sub(staticFiles, "static")

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"date":    func(t time.Time) string { return t.UTC().Format("2 Jan 2006 15:04:05 UTC") },
	"day":     func(t time.Time) string { return t.UTC().Format("2 Jan 2006") },
	"ts":      index.Timestamp,
	"comma":   comma,
	"shortid": func(d string) string { return truncate(strings.TrimPrefix(d, "sha1:"), 10) },
}).ParseFS(templateFS, "templates/*.html"))

// render writes the named page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("page template", "page", name, "err", err)
		http.Error(w, "page template: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func (s *Server) errorPage(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	s.render(w, r, status, "error", errorData{Title: title, Message: msg})
}

type errorData struct{ Title, Message string }

type frameData struct {
	URL, TS, Src, Content string
	Date                  time.Time
	Prev, Next            string
	Count, Position       int
}

type urlRow struct {
	Key, URL, MIME string
	Count          int
	First, Last    time.Time
}

type listData struct {
	Prefix string
	Rows   []urlRow
	Next   string
}

type notFoundData struct {
	UI, URL, Host string
	Near          []urlRow
}

// calendarData is a URL's captures laid out by year, month and day.
type calendarData struct {
	URL    string
	Total  int
	First  time.Time
	Last   time.Time
	Years  []yearCount
	Year   int
	Months []month
	List   []index.Capture // the shown year's captures, newest first

	// Near folds near-duplicates: the list is Groups instead of List.
	Near   bool
	Groups []nearGroup // newest first
	Folded int         // captures folded into Groups

	// Unlisted counts the shown year's oldest captures left off a list
	// longer than maxListed rows (folded into them too, with Near); the
	// newest of them is at UnlistedUntil. The page links to them in CDX.
	Unlisted      int
	UnlistedUntil time.Time
}

// nearGroup is a capture and the near-duplicates that followed it.
type nearGroup struct {
	index.Capture
	Count  int             // captures folded into it
	Until  time.Time       // the last of them
	Folded []index.Capture // those listed, in time order: the first ones, within the page's budget
}

// Unlisted is the number of captures folded into g but not in g.Folded.
func (g nearGroup) Unlisted() int { return g.Count - len(g.Folded) }

// maxListed bounds the captures a list page shows (its rows, and with Near
// the folded captures listed under them); the CDX API has the rest.
const maxListed = 1000

// foldNear folds caps (one URL's, in time order) into groups: a capture
// whose SimHash is simhash.Near that of the last capture shown joins that
// capture's group, as collapse=simhash does in the CDX API. A capture
// without SimHash (not an HTML page) always starts a group of its own.
func foldNear(caps []index.Capture) []nearGroup {
	var groups []nearGroup
	for _, c := range caps {
		if n := len(groups); n > 0 {
			g := &groups[n-1]
			if c.SimHash != 0 && g.SimHash != 0 && simhash.Near(g.SimHash, c.SimHash) {
				g.Count++
				g.Until = c.Time
				if len(g.Folded) < maxListed {
					g.Folded = append(g.Folded, c)
				}
				continue
			}
		}
		groups = append(groups, nearGroup{Capture: c})
	}
	return groups
}

type yearCount struct{ Year, Count int }

type month struct {
	Name  string
	Weeks [][]dayCell // weeks starting on Monday; Day 0 pads
}

type dayCell struct {
	Day   int
	Count int
	TS    string // first capture of the day
}

func newCalendar(u string, caps []index.Capture, year int, near bool) calendarData {
	d := calendarData{URL: u, Total: len(caps), First: caps[0].Time, Last: caps[len(caps)-1].Time, Year: year, Near: near}
	perYear := map[int]int{}
	perDay := map[string]*dayCell{}
	for _, c := range caps {
		t := c.Time.UTC()
		perYear[t.Year()]++
		if t.Year() != year {
			continue
		}
		d.List = append(d.List, c)
		k := t.Format("0102")
		if cell := perDay[k]; cell != nil {
			cell.Count++
		} else {
			perDay[k] = &dayCell{Day: t.Day(), Count: 1, TS: c.Timestamp14()}
		}
	}
	for y, n := range perYear {
		d.Years = append(d.Years, yearCount{y, n})
	}
	sort.Slice(d.Years, func(i, j int) bool { return d.Years[i].Year < d.Years[j].Year })
	if near {
		d.Groups = foldNear(d.List)
		d.List = nil
		slices.Reverse(d.Groups)
		if len(d.Groups) > maxListed {
			d.UnlistedUntil = d.Groups[maxListed].Time
			if g := d.Groups[maxListed]; g.Count > 0 {
				d.UnlistedUntil = g.Until
			}
			for _, g := range d.Groups[maxListed:] {
				d.Unlisted += 1 + g.Count
			}
			d.Groups = d.Groups[:maxListed]
		}
		budget := maxListed - len(d.Groups)
		for i := range d.Groups {
			g := &d.Groups[i]
			d.Folded += g.Count
			g.Folded = g.Folded[:min(len(g.Folded), budget)]
			budget -= len(g.Folded)
		}
	}
	slices.Reverse(d.List)
	if len(d.List) > maxListed {
		d.Unlisted, d.UnlistedUntil = len(d.List)-maxListed, d.List[maxListed].Time
		d.List = d.List[:maxListed]
	}
	for m := time.January; m <= time.December; m++ {
		first := time.Date(year, m, 1, 0, 0, 0, 0, time.UTC)
		mo := month{Name: m.String()}
		week := make([]dayCell, (int(first.Weekday())+6)%7) // Monday first
		for day := first; day.Month() == m; day = day.AddDate(0, 0, 1) {
			cell := dayCell{Day: day.Day()}
			if c := perDay[day.Format("0102")]; c != nil {
				cell = *c
			}
			week = append(week, cell)
			if len(week) == 7 {
				mo.Weeks = append(mo.Weeks, week)
				week = nil
			}
		}
		if len(week) > 0 {
			mo.Weeks = append(mo.Weeks, week)
		}
		d.Months = append(d.Months, mo)
	}
	return d
}

// summary is the home page's picture of the archive.
type summary struct {
	Captures int
	Hosts    int
	First    time.Time
	Last     time.Time
	Top      []hostCount
	Missing  int // nodes of the network that did not answer
	At       time.Time
}

type hostCount struct {
	Host  string
	Count int
}

// summaryTTL: the summary is a full scan of the index, so it is kept for a
// while rather than made for every visit to the home page.
const summaryTTL = 30 * time.Second

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	sum, err := s.getSummary(r.Context())
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "home", sum)
}

// getSummary returns the archive's summary, computing it when it is
// missing or stale. While one request recomputes a stale summary, the others
// are answered with the stale one rather than wait for the scan.
func (s *Server) getSummary(ctx context.Context) (*summary, error) {
	s.summaryMu.Lock()
	cur := s.summary
	if cur != nil && (time.Since(cur.At) < summaryTTL || s.summarizing) {
		s.summaryMu.Unlock()
		return cur, nil
	}
	s.summarizing = true
	s.summaryMu.Unlock()
	sum, err := s.summarize(ctx)
	s.summaryMu.Lock()
	defer s.summaryMu.Unlock()
	s.summarizing = false
	if err != nil {
		if s.summary != nil {
			return s.summary, nil // an old summary beats an error page
		}
		return nil, err
	}
	s.summary = sum
	return sum, nil
}

// summarize asks the archive for its summary (a scan of every node's
// index) and puts it in the home page's terms.
func (s *Server) summarize(ctx context.Context) (*summary, error) {
	at := time.Now()
	as, err := s.arc.Summary(ctx)
	if err != nil {
		return nil, err
	}
	sum := &summary{Captures: int(as.Captures), Hosts: as.Hosts, First: as.First, Last: as.Last, Missing: as.Missing, At: at}
	for _, h := range as.Top {
		sum.Top = append(sum.Top, hostCount{surtHost(h.Host), int(h.Captures)})
	}
	return sum, nil
}

func surtHost(k string) string {
	port := ""
	if i := strings.IndexByte(k, ':'); i >= 0 {
		k, port = k[:i], k[i:]
	}
	parts := strings.Split(k, ",")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".") + port
}

func comma(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
