package recrawl

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/waggle-archive/waggle/internal/schedule"
	"github.com/waggle-archive/waggle/internal/urlkey"
)

// A Rule gives the schedule of the URLs under a prefix.
type Rule struct {
	Prefix string // a URL prefix; "" for every URL
	key    string // its SURT form, which http/https and www. share
	Policy schedule.Policy
	spec   string // as ParseRule was given it
}

// ParseRule parses "[URL-PREFIX=]INTERVAL[,MIN,MAX]", as the --revisit
// flag takes it: the default interval of the URLs under the prefix and the
// bounds the adaptive schedule keeps to. Without bounds they are a 24th of
// the interval (at least a second) and 30 times it.
func ParseRule(s string) (Rule, error) {
	r := Rule{spec: s}
	spec := s
	if i := strings.LastIndexByte(s, '='); i >= 0 {
		r.Prefix, spec = strings.TrimSpace(s[:i]), s[i+1:]
		if r.Prefix == "" {
			return Rule{}, fmt.Errorf("recrawl: rule %q: no URL prefix before '=' (give INTERVAL alone for every URL)", s)
		}
		if i := strings.Index(r.Prefix, "://"); i <= 0 || strings.ContainsAny(r.Prefix[:i], "/?#=&") {
			// Prefixes match as SURT keys, whatever the scheme.
			r.Prefix = "http://" + r.Prefix
		}
		key, err := urlkey.SURT(r.Prefix)
		if err != nil {
			return Rule{}, fmt.Errorf("recrawl: rule %q: prefix: %w", s, err)
		}
		r.key = strings.TrimSuffix(key, "/")
		if strings.HasSuffix(r.Prefix, "/") && !strings.HasSuffix(r.key, ")") {
			r.key += "/"
		}
	}
	parts := strings.Split(spec, ",")
	if len(parts) != 1 && len(parts) != 3 {
		return Rule{}, fmt.Errorf("recrawl: rule %q: want INTERVAL or INTERVAL,MIN,MAX", s)
	}
	var ds [3]time.Duration
	for i, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return Rule{}, fmt.Errorf("recrawl: rule %q: %w", s, err)
		}
		ds[i] = d
	}
	r.Policy = schedule.Policy{Default: ds[0], Min: ds[1], Max: ds[2]}
	if len(parts) == 1 {
		r.Policy.Min = max(ds[0]/24, time.Second).Truncate(time.Second)
		// Capped so that a huge interval fails Validate as too long
		// rather than wrapping around to a negative maximum.
		r.Policy.Max = 30 * min(ds[0], time.Duration(math.MaxInt64/30).Truncate(time.Second))
	}
	if err := r.Policy.Validate(); err != nil {
		if len(parts) == 1 && (schedule.Policy{Default: ds[0], Min: r.Policy.Min, Max: ds[0]}).Validate() == nil {
			return Rule{}, fmt.Errorf("recrawl: rule %q: INTERVAL alone sets MAX to 30 times it, more than 100 years: give INTERVAL,MIN,MAX", s)
		}
		return Rule{}, fmt.Errorf("recrawl: rule %q: %w", s, err)
	}
	return r, nil
}

// Rules choose a URL's schedule: the rule with the longest prefix that
// the URL falls under, else the default. The zero Rules give every URL
// schedule.DefaultPolicy.
type Rules struct {
	def   schedule.Policy
	rules []Rule
	specs []string // of the rules given, in order
	// unspecified: a default or a rule not made by ParseRule, which
	// specs cannot give.
	unspecified bool
}

// NewRules returns rules with def for URLs no rule covers; a rule without
// prefix replaces def.
func NewRules(def schedule.Policy, rules ...Rule) Rules {
	rs := Rules{def: def, unspecified: def != schedule.DefaultPolicy()}
	for _, r := range rules {
		rs.specs = append(rs.specs, r.spec)
		rs.unspecified = rs.unspecified || r.spec == ""
		if r.Prefix == "" {
			rs.def = r.Policy
			continue
		}
		rs.rules = append(rs.rules, r)
	}
	return rs
}

// Specs returns the rules rs was made of as ParseRule was given them, in
// order (none for the zero Rules): what a data directory keeps to crawl
// with again. ok is false when rs holds a default or rule that ParseRule
// did not make, which no spec gives.
func (rs Rules) Specs() (specs []string, ok bool) { return slices.Clone(rs.specs), !rs.unspecified }

// Check returns an error for rules being given (--revisit) that would not
// do what they say: a prefix with a wildcard, which SURT keys take for a
// letter of a host name (a host's rule covers it with and without www.,
// not its other subdomains), or two rules for the same URLs (two
// defaults, or prefixes with one key), whose meaning cannot be told.
// NewRules and ParseRules take such rules as they always have (the last
// default, the first rule of a key), so that a data directory that kept
// them still opens.
func Check(rules []Rule) error {
	byKey := map[string]string{}
	for _, r := range rules {
		if strings.Contains(r.Prefix, "*") {
			return fmt.Errorf("recrawl: rule %q: a prefix holds no wildcards (a host's rule covers it with and without www., not its other subdomains)", r.spec)
		}
		if other, ok := byKey[r.key]; ok {
			return fmt.Errorf("recrawl: rules %q and %q cover the same URLs: give one", other, r.spec)
		}
		byKey[r.key] = r.spec
	}
	return nil
}

// ParseRules parses the rules specs give, in order, over the default
// schedule, as NewRules combines them.
func ParseRules(specs []string) (Rules, error) {
	rules := make([]Rule, 0, len(specs))
	for _, s := range specs {
		r, err := ParseRule(s)
		if err != nil {
			return Rules{}, err
		}
		rules = append(rules, r)
	}
	return NewRules(schedule.DefaultPolicy(), rules...), nil
}

// String describes rs fully and canonically: two Rules with the same
// String schedule every URL alike. A crawler keeps it to tell whether the
// rules changed since its URLs were scheduled.
func (rs Rules) String() string {
	var b strings.Builder
	policy := func(p schedule.Policy) {
		fmt.Fprintf(&b, "%d,%d,%d,%g", p.Default/time.Second, p.Min/time.Second, p.Max/time.Second, p.Miss)
	}
	def := rs.def
	if def == (schedule.Policy{}) {
		def = schedule.DefaultPolicy()
	}
	policy(def)
	// By key: the order rules are given in does not change which applies
	// (the longest prefix does), and for one key the first given wins.
	rules := slices.Clone(rs.rules)
	slices.SortStableFunc(rules, func(a, b Rule) int { return strings.Compare(a.key, b.key) })
	for i, r := range rules {
		if i > 0 && rules[i-1].key == r.key {
			continue
		}
		fmt.Fprintf(&b, "\n%q=", r.key)
		policy(r.Policy)
	}
	return b.String()
}

// For returns the schedule of url.
func (rs Rules) For(url string) schedule.Policy {
	def := rs.def
	if def == (schedule.Policy{}) {
		def = schedule.DefaultPolicy()
	}
	if len(rs.rules) == 0 {
		return def
	}
	key, err := urlkey.SURT(url)
	if err != nil {
		return def
	}
	best, n := def, -1
	for _, r := range rs.rules {
		// SURT strips a path's trailing slash, so a directory's own URL
		// (key "…/a") falls under its rule ("…/a/") only with it put back.
		if len(r.key) > n && (strings.HasPrefix(key, r.key) || key+"/" == r.key) {
			best, n = r.Policy, len(r.key)
		}
	}
	return best
}
