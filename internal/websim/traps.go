package websim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// shopItems is how many distinct items the session-id shops have; the trap
// is the session id, not the catalogue.
const shopItems = 12

// maxCalendarYear bounds the calendar only to keep the numbers sane; a
// crawler following "next month" will never get there.
const maxCalendarYear = 999999

// serveTrap answers the crawler traps of h: an endless calendar, session
// ids that change on every response and an endlessly deep path. It reports
// whether path was one of them.
func (w *Web) serveTrap(rw http.ResponseWriter, r *http.Request, h *host, path, query string) bool {
	var body []byte
	switch {
	case h.feat&featCalendar != 0 && strings.HasPrefix(path, "/calendar/"):
		y, m, ok := parseMonth(path)
		if !ok {
			return false
		}
		body = w.renderCalendar(h, y, m)
	case h.feat&featJSession != 0 && strings.HasPrefix(path, "/shop/"):
		item := -1
		if rest := strings.TrimPrefix(path, "/shop/"); rest != "" {
			n, err := strconv.Atoi(strings.TrimPrefix(rest, "item-"))
			if err != nil || n < 0 || n >= shopItems || rest != "item-"+strconv.Itoa(n) {
				return false
			}
			item = n
		}
		sid := w.session(h)
		rw.Header().Set("Set-Cookie", "JSESSIONID="+sid+"; Path=/; HttpOnly")
		body = w.renderShop(h, item, func(p string) string {
			path, q, _ := strings.Cut(p, "?")
			if q != "" {
				q = "?" + q
			}
			return path + ";jsessionid=" + sid + q
		})
	case h.feat&featSID != 0 && path == "/store":
		item := -1
		if query != "" {
			n, err := strconv.Atoi(strings.TrimPrefix(query, "item="))
			if err != nil || n < 0 || n >= shopItems || query != "item="+strconv.Itoa(n) {
				return false
			}
			item = n
		}
		sid := w.session(h)
		flip := false
		body = w.renderShop(h, item, func(p string) string {
			// Real sites are not consistent about parameter order either.
			flip = !flip
			path, q, _ := strings.Cut(p, "?")
			switch {
			case q == "":
				return path + "?sid=" + sid
			case flip:
				return path + "?sid=" + sid + "&amp;" + q
			default:
				return path + "?" + q + "&amp;sid=" + sid
			}
		})
	case h.feat&featDeep != 0 && isDeep(path):
		depth := strings.Count(path, "/") - 1
		// The classic misconfiguration: a relative link to a directory
		// that resolves one level deeper on every page.
		body = w.renderSimple(h, fmt.Sprintf("Archive level %d", depth), 4, "",
			"<p><a href=\"a/\">Older entries</a> | <a href=\"../\">Newer entries</a></p>\n")
	default:
		return false
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		rw.Write(body)
	}
	return true
}

// parseMonth parses /calendar/YYYY/MM as the calendar writes it.
func parseMonth(path string) (year, month int, ok bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/calendar/"), "/")
	if len(parts) != 2 {
		return 0, 0, false
	}
	y, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || y < 1 || y > maxCalendarYear || m < 1 || m > 12 || path != monthPath(y, m) {
		return 0, 0, false
	}
	return y, m, true
}

func monthPath(y, m int) string { return fmt.Sprintf("/calendar/%04d/%02d", y, m) }

func (w *Web) renderCalendar(h *host, y, m int) []byte {
	rng := w.rng(tagText, uint64(h.idx), uint64(y*12+m)<<8)
	var b strings.Builder
	name := time.Month(m).String()
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Events in %s %d | %s</title>\n</head>\n<body>\n<h1>Events in %s %d</h1>\n<p>", name, y, h.dom.title, name, y)
	py, pm := y, m-1
	if pm == 0 {
		py, pm = y-1, 12
	}
	ny, nm := y, m+1
	if nm == 13 {
		ny, nm = y+1, 1
	}
	// Links relative to /calendar/YYYY/, as calendar widgets write them.
	if py >= 1 {
		fmt.Fprintf(&b, "<a href=\"..%s\">&larr; %s %d</a> | ", strings.TrimPrefix(monthPath(py, pm), "/calendar"), time.Month(pm), py)
	}
	if ny <= maxCalendarYear {
		fmt.Fprintf(&b, "<a href=\"..%s\">%s %d &rarr;</a>", strings.TrimPrefix(monthPath(ny, nm), "/calendar"), time.Month(nm), ny)
	}
	b.WriteString("</p>\n<ul>\n")
	for range rng.IntN(4) {
		fmt.Fprintf(&b, "<li>%d %s: %s</li>\n", 1+rng.IntN(28), name, titleCase(slugWords(rng, 3)))
	}
	b.WriteString("</ul>\n<p><a href=\"/\">Home</a></p>\n</body>\n</html>\n")
	return []byte(b.String())
}

// session returns a fresh session id for h. Ids come from a counter, so
// two Webs that receive the same requests hand out the same ids.
func (w *Web) session(h *host) string {
	n := h.sessions.Add(1)
	return fmt.Sprintf("%016X%016X", hash4(w.seed, tagSession, uint64(h.idx), n), hash4(n, uint64(h.idx), tagSession, w.seed))
}

// renderShop writes a shop page (item < 0: the index) whose every link
// goes through sess, which adds the session id.
func (w *Web) renderShop(h *host, item int, sess func(string) string) []byte {
	rng := w.rng(tagText, uint64(h.idx), uint64(item+1)<<16)
	shop, itemPath := "/shop/", func(i int) string { return fmt.Sprintf("/shop/item-%d", i) }
	if h.feat&featJSession == 0 {
		shop, itemPath = "/store", func(i int) string { return fmt.Sprintf("/store?item=%d", i) }
	}
	title := "Shop"
	if item >= 0 {
		title = titleCase(slugWords(rng, 2))
	}
	b := make([]byte, 0, 1024)
	b = append(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"...)
	b = append(b, title...)
	b = append(b, " | "...)
	b = append(b, h.dom.title...)
	b = append(b, "</title>\n</head>\n<body>\n<h1>"...)
	b = append(b, title...)
	b = append(b, "</h1>\n<p>"...)
	b = sentences(b, rng, 2)
	b = append(b, "</p>\n<ul>\n"...)
	for range 2 {
		i := rng.IntN(shopItems)
		b = listItem(b, sess(itemPath(i)), fmt.Sprintf("Item %d", i))
	}
	b = listItem(b, sess(shop), "All products")
	b = listItem(b, sess("/"), "Home")
	return append(b, "</ul>\n</body>\n</html>\n"...)
}

// isDeep reports whether path is /a/, /a/a/, /a/a/a/ and so on.
func isDeep(path string) bool {
	if len(path) < 3 || len(path)%2 != 1 {
		return false
	}
	for i := 0; i < len(path); i++ {
		want := byte('/')
		if i%2 == 1 {
			want = 'a'
		}
		if path[i] != want {
			return false
		}
	}
	return true
}
