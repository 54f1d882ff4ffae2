package rewrite

import (
	"bytes"
	"encoding/json"
	"strings"
)

// importMap rewrites the addresses of an import map (HTML §8.1.5.3) so that
// modules load from the archive: values in "imports" and in each scope, and
// the scope prefixes, as "js_" (a Mapper that appends the URL to a prefix,
// as Wayback-style ones do, keeps "pkg/" prefixes working). Specifier keys
// stay: they match what the scripts import. The "integrity" map is dropped
// along with integrity attributes. An import map that is not a JSON object
// is left alone, as browsers ignore it.
func (r *htmlRewriter) importMap(raw []byte) []byte {
	doc, ok := decodeJSONObject(raw)
	if !ok {
		return raw
	}
	changed := false
	if _, ok := doc["integrity"]; ok {
		delete(doc, "integrity")
		changed = true
	}
	if imports, ok := doc["imports"].(map[string]any); ok {
		changed = r.moduleAddresses(imports) || changed
	}
	if scopes, ok := doc["scopes"].(map[string]any); ok {
		mapped := make(map[string]any, len(scopes))
		for prefix, v := range scopes {
			if m, ok := v.(map[string]any); ok {
				changed = r.moduleAddresses(m) || changed
			}
			if u, ok := mapRef(r.base, prefix, modJS, r.m); ok {
				prefix = u
				changed = true
			}
			mapped[prefix] = v
		}
		doc["scopes"] = mapped
	}
	return encodeJSONIf(raw, doc, changed)
}

// moduleAddresses maps the URL-like values of a specifier map.
func (r *htmlRewriter) moduleAddresses(m map[string]any) bool {
	changed := false
	for k, v := range m {
		s, ok := v.(string)
		if !ok || !urlLike(s) {
			continue
		}
		if u, ok := mapRef(r.base, s, modJS, r.m); ok {
			m[k] = u
			changed = true
		}
	}
	return changed
}

// urlLike reports an address that is a URL rather than a bare specifier:
// absolute, or starting with "/", "./" or "../".
func urlLike(s string) bool {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") {
		return true
	}
	_, has := scheme(s)
	return has
}

// speculationRules maps the "urls" lists of speculation rules, which would
// otherwise prefetch or prerender live pages, as pages ("mp_"). Document
// rules ("where") match the page's links, which are archive URLs already.
func (r *htmlRewriter) speculationRules(raw []byte) []byte {
	doc, ok := decodeJSONObject(raw)
	if !ok {
		return raw
	}
	changed := false
	for _, v := range doc {
		rules, ok := v.([]any)
		if !ok {
			continue
		}
		for _, rule := range rules {
			obj, ok := rule.(map[string]any)
			if !ok {
				continue
			}
			urls, ok := obj["urls"].([]any)
			if !ok {
				continue
			}
			for i, u := range urls {
				if s, ok := u.(string); ok {
					if m, ok := mapRef(r.base, s, modPage, r.m); ok {
						urls[i] = m
						changed = true
					}
				}
			}
		}
	}
	return encodeJSONIf(raw, doc, changed)
}

func decodeJSONObject(raw []byte) (map[string]any, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil || doc == nil || d.More() {
		return nil, false
	}
	return doc, true
}

// encodeJSONIf re-encodes doc if it changed. encoding/json escapes <, > and
// &, so the result cannot end the script element early.
func encodeJSONIf(raw []byte, doc map[string]any, changed bool) []byte {
	if !changed {
		return raw
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}
