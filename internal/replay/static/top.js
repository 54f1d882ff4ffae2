// waggle banner: follows navigation inside the replay frame. The framed page
// (on the content origin) reports each capture it shows; only messages from
// that origin are believed.
(function () {
  var content = document.body.getAttribute("data-content");
  var frame = document.getElementById("wb-frame");
  function fmt(ts) {
    return ts.slice(6, 8).replace(/^0/, "") + " " +
      ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][+ts.slice(4, 6) - 1] + " " +
      ts.slice(0, 4) + " " + ts.slice(8, 10) + ":" + ts.slice(10, 12) + ":" + ts.slice(12, 14) + " UTC";
  }
  function link(id, ts, url) {
    var a = document.getElementById(id);
    if (ts) { a.href = "/web/" + ts + "/" + url; a.className = ""; } else { a.removeAttribute("href"); a.className = "off"; }
  }
  window.addEventListener("message", function (ev) {
    if (ev.origin !== content || ev.source !== frame.contentWindow) { return; }
    var m = ev.data;
    // The framed page's own scripts could post too: accept only well-formed
    // reports, and never more than text and archive links.
    if (!m || m.waggle !== "load" || typeof m.url !== "string" || !/^https?:\/\//.test(m.url) || !/^\d{14}$/.test(m.ts)) { return; }
    if (m.prev && !/^\d{14}$/.test(m.prev)) { m.prev = ""; }
    if (m.next && !/^\d{14}$/.test(m.next)) { m.next = ""; }
    document.getElementById("wb-date").textContent = fmt(m.ts);
    document.getElementById("wb-url").textContent = m.url;
    document.getElementById("wb-all").href = "/web/*/" + m.url;
    document.getElementById("wb-count").textContent = m.count + (m.count === 1 ? " capture" : " captures");
    link("wb-prev", m.prev, m.url);
    link("wb-next", m.next, m.url);
    document.title = (m.title ? m.title + " · " : "") + fmt(m.ts) + " · waggle";
    var path = "/web/" + m.ts + "/" + m.url;
    if (location.pathname + location.search !== path) { history.replaceState(null, "", path); }
  });
})();
