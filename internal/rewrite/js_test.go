package rewrite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestJS(t *testing.T) {
	const W = "WB_wombat_location"
	tests := []struct{ name, in, want string }{
		// Rewritten.
		{"bare read", `var u = location.href;`, `var u = ` + W + `.href;`},
		{"bare assignment", `location = "/x";`, W + ` = "/x";`},
		{"window", `window.location.href = u`, `window.` + W + `.href = u`},
		{"document", `document.location.replace(u)`, `document.` + W + `.replace(u)`},
		{"self top parent", `self.location; top.location; parent.location`, `self.` + W + `; top.` + W + `; parent.` + W},
		{"optional chaining", `window?.location?.href`, `window?.` + W + `?.href`},
		{"across lines and comments", "window\n  ./* c */location", "window\n  ./* c */" + W},
		{"frame busting", `if(top.location!=self.location)top.location=self.location`, `if(top.` + W + `!=self.` + W + `)top.` + W + `=self.` + W},
		{"typeof", `typeof location`, `typeof ` + W},
		{"call argument", `f(location, a)`, `f(` + W + `, a)`},
		{"ternary branch", `x = a ? location : b`, `x = a ? ` + W + ` : b`},
		{"ternary else", `x = a ? b : location`, `x = a ? b : ` + W},
		{"case", `switch (x) { case location: }`, `switch (x) { case ` + W + `: }`},
		{"declaration renamed with uses", `function f(location) { var l = location.href }`, `function f(` + W + `) { var l = ` + W + `.href }`},
		{"object value", `({href: location.href, loc: location})`, `({href: ` + W + `.href, loc: ` + W + `})`},
		{"shorthand", `send({location})`, `send({location: ` + W + `})`},
		{"shorthand in list", `const {a, location} = props; use(location)`, `const {a, location: ` + W + `} = props; use(` + W + `)`},
		{"spread", `x = {...location}`, `x = {...` + W + `}`},
		{"in template substitution", "`at ${location.href} now`", "`at ${" + W + ".href} now`"},
		{"nested template", "`a${`b${location}`}c`", "`a${`b${" + W + "}`}c`"},
		{"after regex", `/x/.test(s) && location.reload()`, `/x/.test(s) && ` + W + `.reload()`},
		{"after division", `a = b / c; location.hash = "x"`, `a = b / c; ` + W + `.hash = "x"`},
		{"block statement", `if (x) { location.href = y }`, `if (x) { ` + W + `.href = y }`},
		{"arrow body", `() => location`, `() => ` + W},
		{"non-ASCII neighbours", "é=1;location", "é=1;" + W},
		{"nbsp is whitespace", "a=\u00a0location", "a=\u00a0" + W},
		// Left alone.
		{"other object", `a.location; this.location; e.target.location`, `a.location; this.location; e.target.location`},
		{"property of window property", `a.window.location; x.top.location`, `a.window.location; x.top.location`},
		{"object key", `x = {location: 1}`, `x = {location: 1}`},
		{"object key after comma", `x = {a: 1, location: 2}`, `x = {a: 1, location: 2}`},
		{"label", `location: for (;;) {}`, `location: for (;;) {}`},
		{"double-quoted string", `s = "location"`, `s = "location"`},
		{"single-quoted string", `s = 'window.location'`, `s = 'window.location'`},
		{"template text", "s = `location ${x} location`", "s = `location ${x} location`"},
		{"line comment", "// location\nx", "// location\nx"},
		{"block comment", `/* location */ x`, `/* location */ x`},
		{"regex", `r = /location/g`, `r = /location/g`},
		{"regex with class", `r = /[/]location/`, `r = /[/]location/`},
		{"regex after return", `return /location/.test(s)`, `return /location/.test(s)`},
		{"longer identifiers", `locations; mylocation; $location; location_; location2; _location`, `locations; mylocation; $location; location_; location2; _location`},
		{"private field", `class A { #location; m() { return this.#location } }`, `class A { #location; m() { return this.#location } }`},
		{"method", `x = { location() { return 1 } }`, `x = { location() { return 1 } }`},
		{"class method", `class A { location(a) {} static location() {} }`, `class A { location(a) {} static location() {} }`},
		{"getter", `x = { get location() { return 1 } }`, `x = { get location() { return 1 } }`},
		{"import export", `import { location } from "m"; export { location as l }`, `import { location } from "m"; export { location as l }`},
		{"escaped string quote", `s = "a\"location"`, `s = "a\"location"`},
		{"hashbang", "#!/usr/bin/env node location\nx", "#!/usr/bin/env node location\nx"},
		{"no location at all", `var a = 1;`, `var a = 1;`},
		{"already rewritten", `window.WB_wombat_location.href`, `window.WB_wombat_location.href`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(JS([]byte(tc.in))); got != tc.want {
				t.Errorf("JS(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestJSUnchangedIsSame(t *testing.T) {
	in := []byte(`var a = "location";`)
	if out := JS(in); &out[0] != &in[0] {
		t.Error("JS copied a script with nothing to rewrite")
	}
}

// TestClientJS runs ClientJS and rewritten code in Node with a stand-in
// window: reading the location gives the original URL, and setting it
// navigates within the archive.
func TestClientJS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	if n := strings.Count(ClientJS, "\n"); n > 150 {
		t.Errorf("ClientJS has %d lines, want at most 150", n)
	}
	page := string(JS([]byte(`
var out = [];
out.push(location.href, window.location.host, document.location.pathname, self.location.search,
  location.hash, location.origin, location.protocol, location.port, String(location));
out.push(top.location === self.location);
location.href = "other.html?a=1";
window.location = "//cdn.ex.com/x";
document.location.assign("https://elsewhere.org/");
location.replace("/replaced");
location.hash = "#sec";
location.pathname = "/p2";
location.href = "javascript:void(0)";
location.href = "/web/20200102030405mp_/http://ex.com/already";
out.push(nav.join(" | "), real.hash);
console.log(JSON.stringify(out));
`)))
	script := `
var nav = [];
var real = {href: "http://archive.test/web/20200102030405mp_/http://ex.com/dir/page.html?q=1",
  origin: "http://archive.test", hash: "",
  assign: function (u) { nav.push("assign " + u); }, replace: function (u) { nav.push("replace " + u); },
  reload: function () { nav.push("reload"); }};
var window = globalThis;
window.self = window; window.top = window; window.parent = window;
window.location = real;
var document = {};
window.document = document;
window.__wb = {url: "http://ex.com:8080/dir/page.html?q=1", ts: "20200102030405", prefix: "/web/"};
` + ClientJS + page
	dir := t.TempDir()
	path := filepath.Join(dir, "t.js")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, path).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	want := `["http://ex.com:8080/dir/page.html?q=1","ex.com:8080","/dir/page.html","?q=1","","http://ex.com:8080","http:","8080","http://ex.com:8080/dir/page.html?q=1",true,` +
		`"assign /web/20200102030405mp_/http://ex.com:8080/dir/other.html?a=1 | assign /web/20200102030405mp_/http://cdn.ex.com/x | ` +
		`assign /web/20200102030405mp_/https://elsewhere.org/ | replace /web/20200102030405mp_/http://ex.com:8080/replaced | ` +
		`assign /web/20200102030405mp_/http://ex.com:8080/p2?q=1#sec | assign javascript:void(0) | assign /web/20200102030405mp_/http://ex.com/already","#sec"]`
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("node output\n got %s\nwant %s", got, want)
	}
}
