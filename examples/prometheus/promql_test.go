package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// What a PromQL expression refers to, read by a small tokenizer rather
// than Prometheus's parser (whose module would bring Prometheus's
// dependency tree into this one). It knows enough PromQL to find every
// name an expression depends on, and refuses what it cannot check —
// functions that take label names as strings (label_replace, label_join,
// count_values, sort_by_label), selectors without a metric name, a Grafana
// variable outside a string or a range — instead of passing it unread.

// A selector is a metric name and its label matchers.
type selector struct {
	Metric   string
	Matchers []matcher
}

// A matcher is label op "value".
type matcher struct{ Label, Op, Value string }

// promRefs is what one expression names: its selectors, and the labels of
// its by, without, on, ignoring, group_left and group_right clauses.
type promRefs struct {
	Selectors []selector
	Grouping  []string
}

// parsePromQL returns what expr refers to.
func parsePromQL(expr string) (promRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promRefs{}, err
	}
	var refs promRefs
	depth := 0
	next := func(i int) token {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return token{}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tokVariable:
			return refs, fmt.Errorf("a Grafana variable %s outside a string or a range: cannot check what it names", t.text)
		case tokPunct:
			switch t.text {
			case "(":
				depth++
			case ")":
				if depth--; depth < 0 {
					return refs, fmt.Errorf("unbalanced )")
				}
			case "{":
				return refs, fmt.Errorf("a selector without a metric name: not checkable")
			case "}":
				return refs, fmt.Errorf("unbalanced }")
			}
		case tokIdent:
			word := strings.ToLower(t.text)
			switch {
			case groupingKeywords[word]:
				if n := next(i); n.text != "(" {
					if word == "group_left" || word == "group_right" {
						continue // no label list
					}
					return refs, fmt.Errorf("%s without a label list", t.text)
				}
				i += 2
				for ; i < len(toks) && toks[i].text != ")"; i++ {
					switch {
					case toks[i].kind == tokIdent:
						refs.Grouping = append(refs.Grouping, toks[i].text)
					case toks[i].text != ",":
						return refs, fmt.Errorf("%s (...): unexpected %q", t.text, toks[i].text)
					}
				}
				if i == len(toks) {
					return refs, fmt.Errorf("%s (...: unterminated", t.text)
				}
			case otherKeywords[word]:
			case aggregations[t.text] && (next(i).text == "(" || groupingKeywords[strings.ToLower(next(i).text)]):
			case next(i).text == "(":
				if !functions[t.text] {
					return refs, fmt.Errorf("function %s: unknown, or one whose label arguments this check cannot read", t.text)
				}
			default:
				sel := selector{Metric: t.text}
				if next(i).text == "{" {
					var err error
					sel.Matchers, i, err = parseMatchers(toks, i+2)
					if err != nil {
						return refs, fmt.Errorf("%s{...}: %w", t.text, err)
					}
				}
				refs.Selectors = append(refs.Selectors, sel)
			}
		}
	}
	if depth != 0 {
		return refs, fmt.Errorf("unbalanced (")
	}
	return refs, nil
}

// parseMatchers reads label op "value" pairs from toks[i:] up to the
// closing brace, and returns them with the brace's index.
func parseMatchers(toks []token, i int) ([]matcher, int, error) {
	var ms []matcher
	for ; i < len(toks); i++ {
		if toks[i].text == "}" {
			return ms, i, nil
		}
		if i+2 >= len(toks) || toks[i].kind != tokIdent || !matchOps[toks[i+1].text] || toks[i+2].kind != tokString {
			return nil, i, fmt.Errorf("want label op \"value\" at %q", toks[i].text)
		}
		ms = append(ms, matcher{Label: toks[i].text, Op: toks[i+1].text, Value: toks[i+2].text})
		i += 3
		if i < len(toks) && toks[i].text == "}" {
			return ms, i, nil
		}
		if i >= len(toks) || toks[i].text != "," {
			return nil, i, fmt.Errorf("want , or }")
		}
	}
	return nil, i, fmt.Errorf("unterminated {")
}

var (
	matchOps         = map[string]bool{"=": true, "!=": true, "=~": true, "!~": true}
	groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	otherKeywords    = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}
	aggregations     = set("sum min max avg group stddev stdvar count bottomk topk quantile limitk limit_ratio")
	// The functions whose arguments are all expressions or numbers.
	functions = set(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
		clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg
		delta deriv double_exponential_smoothing end exp floor histogram_avg histogram_count histogram_fraction
		histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate
		last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi predict_linear
		present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_desc sqrt start
		stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector year`)
)

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

type tokKind int

const (
	tokPunct tokKind = iota + 1
	tokIdent
	tokString // text is the unquoted value
	tokNumber // numbers and durations
	tokVariable
)

type token struct {
	kind tokKind
	text string
}

// lexPromQL splits expr into tokens. Range and subquery brackets ([5m],
// [$__rate_interval], [1h:5m]) are dropped whole: they name nothing.
func lexPromQL(expr string) ([]token, error) {
	var toks []token
	s := expr
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			s = s[1:]
		case c == '#': // a comment, to the end of the line
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i:]
			} else {
				s = ""
			}
		case c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			n := 1
			for n < len(s) && (s[n] == '_' || s[n] == ':' || 'a' <= s[n] && s[n] <= 'z' || 'A' <= s[n] && s[n] <= 'Z' || '0' <= s[n] && s[n] <= '9') {
				n++
			}
			toks = append(toks, token{tokIdent, s[:n]})
			s = s[n:]
		case '0' <= c && c <= '9' || c == '.' && len(s) > 1 && '0' <= s[1] && s[1] <= '9':
			// A number (1, 0.95, 1e-3, 0x1f) or a duration (5m, 1h30m).
			n := 1
			for n < len(s) && (s[n] == '.' || s[n] == '_' || '0' <= s[n] && s[n] <= '9' || 'a' <= s[n] && s[n] <= 'z' || 'A' <= s[n] && s[n] <= 'Z' ||
				(s[n] == '+' || s[n] == '-') && (s[n-1] == 'e' || s[n-1] == 'E') && !strings.HasPrefix(s, "0x")) {
				n++
			}
			toks = append(toks, token{tokNumber, s[:n]})
			s = s[n:]
		case c == '"' || c == '\'' || c == '`':
			v, n, err := lexString(s)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokString, v})
			s = s[n:]
		case c == '$':
			n := 1
			if strings.HasPrefix(s, "${") {
				n = strings.IndexByte(s, '}') + 1
				if n == 0 {
					return nil, fmt.Errorf("unterminated ${")
				}
			} else {
				for n < len(s) && (s[n] == '_' || 'a' <= s[n] && s[n] <= 'z' || 'A' <= s[n] && s[n] <= 'Z' || '0' <= s[n] && s[n] <= '9') {
					n++
				}
			}
			toks = append(toks, token{tokVariable, s[:n]})
			s = s[n:]
		case strings.HasPrefix(s, "[["):
			n := strings.Index(s, "]]")
			if n < 0 {
				return nil, fmt.Errorf("unterminated [[")
			}
			toks = append(toks, token{tokVariable, s[:n+2]})
			s = s[n+2:]
		case c == '[':
			n := strings.IndexByte(s, ']')
			if n < 0 {
				return nil, fmt.Errorf("unterminated [")
			}
			s = s[n+1:]
		default:
			n := 1
			for _, op := range []string{"=~", "!~", "!=", "==", "<=", ">="} {
				if strings.HasPrefix(s, op) {
					n = 2
				}
			}
			if n == 1 && !strings.ContainsRune("(){},=<>+-*/%^@", rune(c)) {
				return nil, fmt.Errorf("unexpected %q", s[:1])
			}
			toks = append(toks, token{tokPunct, s[:n]})
			s = s[n:]
		}
	}
	return toks, nil
}

// lexString reads the string literal at the start of s and returns its
// value and length. Double- and single-quoted strings take backslash
// escapes; backquoted ones none.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == q:
			return b.String(), i + 1, nil
		case s[i] == '\\' && q != '`' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(s[i]) // \\ \" \' and regex escapes kept as their character
			}
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}

func TestParsePromQL(t *testing.T) {
	type sel = selector
	type m = matcher
	for _, tc := range []struct {
		expr string
		want promRefs
		err  string
	}{
		{expr: `up`, want: promRefs{Selectors: []sel{{Metric: "up"}}}},
		{
			expr: `histogram_quantile(0.95, sum by (le, latchkey_lock_name) (rate(latchkey_lock_wait_duration_seconds_bucket{job=~"$job", latchkey_lock_kind="permit"}[$__rate_interval])))`,
			want: promRefs{
				Selectors: []sel{{Metric: "latchkey_lock_wait_duration_seconds_bucket", Matchers: []m{{"job", "=~", "$job"}, {"latchkey_lock_kind", "=", "permit"}}}},
				Grouping:  []string{"le", "latchkey_lock_name"},
			},
		},
		{
			expr: "sum(rate(a_total{x=\"1\",}[5m] offset 1h)) without (y) / on(z) group_left(w) b{q!~'a\\'b'} > bool 1e-3",
			want: promRefs{
				Selectors: []sel{{Metric: "a_total", Matchers: []m{{"x", "=", "1"}}}, {Metric: "b", Matchers: []m{{"q", "!~", "a'b"}}}},
				Grouping:  []string{"y", "z", "w"},
			},
		},
		{expr: "1 - sum(x[1h:5m]) # a comment\n", want: promRefs{Selectors: []sel{{Metric: "x"}}}},
		{expr: `label_replace(up, "a", "$1", "b", "(.*)")`, err: "function label_replace"},
		{expr: `rat(up[5m])`, err: "function rat"},
		{expr: `{__name__="up"}`, err: "without a metric name"},
		{expr: `sum(up) by (le`, err: "unterminated"},
		{expr: `rate(up[5m]`, err: "unbalanced"},
		{expr: `up{job=$job}`, err: "want label op"},
		{expr: `$metric`, err: "Grafana variable"},
	} {
		got, err := parsePromQL(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !slices.EqualFunc(got.Selectors, tc.want.Selectors, func(a, b selector) bool {
			return a.Metric == b.Metric && slices.Equal(a.Matchers, b.Matchers)
		}) || !slices.Equal(got.Grouping, tc.want.Grouping) {
			t.Errorf("%s:\n got  %+v\n want %+v", tc.expr, got, tc.want)
		}
	}
}
