package rewrite

// ClientJS is the client-side half of JS: a dependency-free ES5 script that,
// run in a replayed page after the caller has set
//
//	window.__wb = {url: "<original URL>", ts: "<14-digit timestamp>", prefix: "/web/"}
//
// defines WB_wombat_location on window (which is self) and document: an
// object whose href, protocol, host, hostname, port, pathname, search, hash
// and origin give the original URL's parts (the hash is the live one, so
// in-page anchors work), and whose href, protocol, host, hostname, port,
// pathname and search setters, assign(), replace() and an assignment to
// WB_wombat_location itself navigate to prefix + ts + "mp_/" + the resolved
// absolute URL; a change of hash alone only changes the hash; reload()
// reloads. When the parent or top window is not a replayed page (a replay
// banner framing this one), the same object is defined there too, so that
// top.location reads and frame-busting code see this page, as pywb does.
const ClientJS = `(function () {
  var g = typeof self !== "undefined" ? self : this;
  var cfg = g.__wb;
  if (!cfg || !cfg.url || g.__wbLocation) { return; }
  var prefix = cfg.prefix || "/web/", ts = String(cfg.ts || ""), loc = g.location;
  function parse(u, base) {
    try { return new URL(String(u), base || cfg.url); } catch (e) { return null; }
  }
  function original() {
    var o = parse(cfg.url);
    if (o) { o.hash = loc.hash; }
    return o;
  }
  function noHash(h) { var i = h.indexOf("#"); return i < 0 ? h : h.slice(0, i); }
  function archived(p) {
    return prefix + ts + "mp_/" + p.href;
  }
  function go(u, replace) {
    var s = String(u), p = parse(s), o = original();
    if (s.indexOf(prefix) === 0 || s.indexOf(loc.origin + prefix) === 0 ||
        !p || (p.protocol !== "http:" && p.protocol !== "https:")) {
      // Already an archive URL, or javascript:, data: … : as it is.
      if (replace) { loc.replace(s); } else { loc.assign(s); }
      return;
    }
    if (o && noHash(p.href) === noHash(o.href) && p.hash) {
      loc.hash = p.hash;
      return;
    }
    if (replace) { loc.replace(archived(p)); } else { loc.assign(archived(p)); }
  }
  var W = {};
  function getter(name) {
    return function () {
      if (name === "hash") { return loc.hash; }
      var o = original();
      return o ? o[name] : "";
    };
  }
  function setter(name) {
    return function (v) {
      if (name === "href") { go(v); return; }
      var o = original();
      if (!o) { return; }
      o[name] = v;
      go(o.href);
    };
  }
  var parts = ["href", "protocol", "host", "hostname", "port", "pathname", "search", "hash", "origin"];
  for (var i = 0; i < parts.length; i++) {
    var d = {enumerable: true, configurable: true, get: getter(parts[i])};
    if (parts[i] !== "origin") { d.set = setter(parts[i]); }
    Object.defineProperty(W, parts[i], d);
  }
  W.assign = function (u) { go(u); };
  W.replace = function (u) { go(u, true); };
  W.reload = function () { loc.reload(); };
  W.toString = function () { return W.href; };
  W.valueOf = function () { return W; };
  function define(obj) {
    try {
      Object.defineProperty(obj, "WB_wombat_location", {
        configurable: true,
        get: function () { return W; },
        set: function (v) { go(v); }
      });
    } catch (e) {}
  }
  g.__wbLocation = W;
  define(g);
  if (typeof document !== "undefined") { define(document); }
  var up = [];
  try { up.push(g.parent, g.top); } catch (e) {}
  for (var j = 0; j < up.length; j++) {
    try {
      if (up[j] && up[j] !== g && !up[j].__wb) { define(up[j]); }
    } catch (e) {}
  }
})();
`
