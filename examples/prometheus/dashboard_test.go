package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/examples/internal/demo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dashboardPath is the Grafana dashboard, from this directory.
var dashboardPath = filepath.Join("..", "..", "dashboards", "latchkey.json")

// TestDashboard checks dashboards/latchkey.json against what the
// OpenTelemetry Prometheus exporter really emits: the workload of this
// example runs in process, its /metrics is scraped, and every metric, label
// and literal label value that a panel's or a variable's query names must be
// in that scrape (on that metric; a grouping label on every metric of its
// expression), and every latchkey metric of the scrape must be on a panel.
// A rename in package otel, a different naming by a new exporter version,
// or a typo in the dashboard fails here, not silently in Grafana.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	series := scrapeWorkload(t)

	t.Run("as shipped", func(t *testing.T) {
		n, problems := checkDashboard(raw, series)
		for _, p := range problems {
			t.Error(p)
		}
		if n < 20 {
			t.Errorf("only %d queries checked", n)
		}
	})

	// The check itself: each plausible mistake must be reported.
	t.Run("mistakes are caught", func(t *testing.T) {
		for _, tc := range []struct {
			what, old, new string
			all            bool   // replace every occurrence, not the first
			want           string // in one of the problems reported
		}{
			{what: "a counter without _total", old: "latchkey_lock_losses_total{", new: "latchkey_lock_losses{",
				want: "metric latchkey_lock_losses is not in the exporter's output"},
			{what: "a histogram without its unit suffix", old: "latchkey_lock_wait_duration_seconds_bucket{", new: "latchkey_lock_wait_duration_bucket{",
				want: "metric latchkey_lock_wait_duration_bucket is not"},
			{what: "an annotation unit taken for a suffix", old: "latchkey_lock_held_count{", new: "latchkey_lock_held_count_lock{",
				want: "metric latchkey_lock_held_count_lock is not"},
			{what: "a dotted attribute key", old: "latchkey_stock_strategy, latchkey_outcome", new: "latchkey.stock.strategy, latchkey_outcome",
				want: `panel "Deductions per strategy" query A: unexpected "."`},
			{what: "a grouping label the metric lacks", old: "by (latchkey_cron_job, latchkey_cron_skip_reason)", new: "by (latchkey_cron_job, latchkey_cron_skip)",
				want: "uses label latchkey_cron_skip, which latchkey_cron_runs_total does not have"},
			{what: "a matcher label the metric lacks", old: `latchkey_operation_name=\"acquire\"`, new: `latchkey_operation=\"acquire\"`,
				want: "has no label latchkey_operation "},
			{what: "a label value never emitted", old: `latchkey_outcome=\"contended\"`, new: `latchkey_outcome=\"busy\"`,
				want: `{latchkey_outcome="busy"}: the workload emitted no such value`},
			{what: "a variable's label", old: `{job=~\"$job\"}, latchkey_cron_job)`, new: `{job=~\"$job\"}, cron_job)`, all: true,
				want: "variable cron_job: uses label cron_job, which latchkey_cron_runs_total does not have"},
			{what: "a variable shown as one query, run as another", old: `{job=~\"$job\"}, latchkey_cron_job)`, new: `{job=~\"$job\"}, cron_job)`,
				want: "variable cron_job: definition"},
			{what: "a hard-coded datasource", old: `"uid": "${datasource}"`, new: `"uid": "P1809F7CD0C75ACF3"`,
				want: `datasource map[type:prometheus uid:P1809F7CD0C75ACF3]`},
			{what: "an unknown function", old: "rate(latchkey_daily_claims_total", new: "irate_(latchkey_daily_claims_total",
				want: "function irate_: unknown"},
		} {
			if !strings.Contains(string(raw), tc.old) {
				t.Errorf("%s: the dashboard no longer contains %s; update this case", tc.what, tc.old)
				continue
			}
			n := 1
			if tc.all {
				n = -1
			}
			bad := strings.Replace(string(raw), tc.old, tc.new, n)
			_, problems := checkDashboard([]byte(bad), series)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s (%s → %s): no problem saying %q, got %q", tc.what, tc.old, tc.new, tc.want, problems)
				continue
			}
			t.Logf("%s: %d problems, e.g. %s", tc.what, len(problems), problems[slices.IndexFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) })])
		}
		// A panel dropped: its metric is then on no panel.
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		d["panels"] = slices.DeleteFunc(d["panels"].([]any), func(p any) bool {
			return p.(map[string]any)["title"] == "Deductions per strategy"
		})
		dropped, _ := json.Marshal(d)
		if _, problems := checkDashboard(dropped, series); !slices.ContainsFunc(problems, func(p string) bool {
			return strings.Contains(p, "latchkey_stock_deductions_total")
		}) {
			t.Errorf("a metric on no panel: not reported: %q", problems)
		}
	})
}

var (
	scrapeOnce   sync.Once
	scraped      []sample
	scrapeFailed error
)

// scrapeWorkload runs one round of the workload with the Prometheus
// exporter and returns the samples of one GET of its /metrics.
func scrapeWorkload(t *testing.T) []sample {
	t.Helper()
	scrapeOnce.Do(func() { scraped, scrapeFailed = runAndScrape() })
	if scrapeFailed != nil {
		t.Fatal(scrapeFailed)
	}
	return scraped
}

func runAndScrape() ([]sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tel, err := newTelemetry("examples/prometheus-test")
	if err != nil {
		return nil, err
	}
	defer tel.Shutdown()
	rdb, _, closeRedis, err := demo.Redis()
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	w, err := newWorkload(rdb, tel.Inst, fmt.Sprintf("test:prom:%d", time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if err := w.Round(ctx); err != nil {
		return nil, err
	}
	srv := httptest.NewServer(tel.Handler)
	defer srv.Close()
	body, err := scrape(ctx, srv.URL)
	if err != nil {
		return nil, err
	}
	return parseExposition(body)
}

// targetLabels are added by Prometheus to every series it scrapes, from
// its scrape configuration: they are not in the exporter's output.
var targetLabels = map[string]bool{"job": true, "instance": true}

// checkDashboard checks a Grafana dashboard's queries against scraped
// samples and returns how many queries it read and the problems found.
func checkDashboard(raw []byte, series []sample) (queries int, problems []string) {
	// metric → label → values seen.
	index := map[string]map[string]map[string]bool{}
	for _, s := range series {
		labels := index[s.Name]
		if labels == nil {
			labels = map[string]map[string]bool{}
			index[s.Name] = labels
		}
		for k, v := range s.Labels {
			if labels[k] == nil {
				labels[k] = map[string]bool{}
			}
			labels[k][v] = true
		}
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return 0, []string{"dashboard: " + err.Error()}
	}
	report := func(where, format string, args ...any) {
		problems = append(problems, where+": "+fmt.Sprintf(format, args...))
	}
	used := map[string]bool{} // metrics the queries name

	// check reports what in refs is not in the scrape.
	check := func(where string, refs promRefs) {
		for _, sel := range refs.Selectors {
			used[sel.Metric] = true
			labels, ok := index[sel.Metric]
			if !ok {
				report(where, "metric %s is not in the exporter's output%s", sel.Metric, similar(index, sel.Metric))
				continue
			}
			for _, m := range sel.Matchers {
				if targetLabels[m.Label] {
					continue
				}
				values, ok := labels[m.Label]
				switch {
				case !ok:
					report(where, "%s has no label %s (it has %s)", sel.Metric, m.Label, keys(labels))
				case m.Op == "=" && m.Value != "" && !strings.Contains(m.Value, "$") && !values[m.Value]:
					report(where, "%s{%s=%q}: the workload emitted no such value (it emitted %s)", sel.Metric, m.Label, m.Value, keys(values))
				}
			}
			for _, l := range refs.Grouping {
				if _, ok := labels[l]; !ok && !targetLabels[l] {
					report(where, "uses label %s, which %s does not have (it has %s)", l, sel.Metric, keys(labels))
				}
			}
		}
	}

	// Datasources: every reference is the ${datasource} variable.
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "datasource" {
					if ds, ok := c.(map[string]any); !ok || ds["uid"] != "${datasource}" || ds["type"] != "prometheus" {
						report(path, `datasource %v: want {"type": "prometheus", "uid": "${datasource}"}`, c)
					}
				}
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s/%d", path, i), c)
			}
		}
	}
	var tree any
	_ = json.Unmarshal(raw, &tree)
	walk("", tree)

	vars := d.Templating.List
	if len(vars) == 0 || vars[0].Type != "datasource" || vars[0].Name != "datasource" || string(vars[0].Query) != `"prometheus"` {
		report("templating", "the first variable must be the Prometheus datasource variable named datasource")
	}
	for _, v := range vars {
		if v.Type != "query" {
			continue
		}
		queries++
		where := "variable " + v.Name
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			report(where, "query: %v", err)
			continue
		}
		if v.Definition != q.Query {
			report(where, "definition %q differs from the query %q", v.Definition, q.Query)
		}
		sel, label, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(q.Query, "label_values("), ")"), ",")
		if !strings.HasPrefix(q.Query, "label_values(") || !ok {
			report(where, "%q: only label_values(<selector>, <label>) is checked", q.Query)
			continue
		}
		refs, err := parsePromQL(sel)
		if err != nil {
			report(where, "%v", err)
			continue
		}
		refs.Grouping = append(refs.Grouping, strings.TrimSpace(label)) // checked as a by label: on every metric
		check(where, refs)
	}

	var panels func([]panel)
	panels = func(ps []panel) {
		for _, p := range ps {
			panels(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				report("panel "+p.Title, "no queries")
			}
			for _, tg := range p.Targets {
				queries++
				where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
				refs, err := parsePromQL(tg.Expr)
				if err != nil {
					report(where, "%v", err)
					continue
				}
				if len(refs.Selectors) == 0 {
					report(where, "names no metric")
				}
				check(where, refs)
			}
		}
	}
	panels(d.Panels)

	// Coverage: every latchkey metric of the scrape is on some panel.
	families := map[string]bool{}
	for name := range index {
		if strings.HasPrefix(name, "latchkey_") {
			families[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
		}
	}
	for f := range families {
		if !used[f] && !used[f+"_bucket"] && !used[f+"_count"] && !used[f+"_sum"] {
			report("coverage", "%s is emitted but no query reads it", f)
		}
	}
	sort.Strings(problems)
	return queries, problems
}

// The parts of Grafana's JSON model that the check reads.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Definition string          `json:"definition"` // what Grafana shows of the query
			Query      json.RawMessage `json:"query"`      // a string for the datasource variable, an object for a query
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// similar names the scraped metrics sharing name's first three words.
func similar(index map[string]map[string]map[string]bool, name string) string {
	words := strings.SplitN(name, "_", 4)
	prefix := strings.Join(words[:min(3, len(words))], "_")
	var out []string
	for m := range index {
		if strings.HasPrefix(m, prefix) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return ""
	}
	sort.Strings(out)
	return " (there are " + strings.Join(out, ", ") + ")"
}

func keys[V any](m map[string]V) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
