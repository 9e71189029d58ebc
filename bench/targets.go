package main

import (
	"fmt"
	"io"
	"strings"
)

// Tables are found by what their runs were, not by title.
func isSerial(r Result) bool { return r.Scenario == "serial" && r.Pair == "" && r.Keys != "goroutine" }
func isParallel(r Result) bool {
	return r.Scenario == "parallel" && r.Pair == "" && r.Keys != "goroutine"
}
func isPaired(scenario, keys string) func(Result) bool {
	return func(r Result) bool { return r.Scenario == scenario && r.Pair == "raw" && r.Keys == keys }
}
func isContended(workers int, think bool) func(Result) bool {
	return func(r Result) bool {
		return r.Scenario == "contended" && r.Workers == workers && (r.ThinkUS > 0) == think
	}
}

// find returns the rows of the first table matching pred.
func find(gs [][]*group, pred func(Result) bool) []*group {
	for _, rows := range gs {
		if pred(rows[0].runs[0]) {
			return rows
		}
	}
	return nil
}

func findRow(rows []*group, label string) *group {
	for _, g := range rows {
		if g.label == label {
			return g
		}
	}
	return nil
}

// labels lists every row label of the lock tables, in table order.
func labels(gs [][]*group) []string {
	seen := map[string]bool{}
	var out []*group
	for _, rows := range gs {
		for _, g := range rows {
			if g.runs[0].Scenario != "ping" && !seen[g.label] {
				seen[g.label] = true
				out = append(out, g)
			}
		}
	}
	var names []string
	for _, g := range out {
		names = append(names, g.label)
	}
	return names
}

// primitiveLabel reports whether a row is one of the latchkey primitives
// other than the mutex: the targets are the mutex's.
func primitiveLabel(label string) bool {
	f := strings.Fields(label)
	return len(f) > 0 && registry[f[0]].primitive
}

func rate(r Result) float64      { return r.Rate }
func pairedP50(r Result) float64 { return r.P50 / r.PairP50 }

// cpuPerCycle is the median client + Redis CPU per cycle, or 0 if unknown.
func cpuPerCycle(g *group) float64 {
	if medOrNeg(g, func(r Result) float64 { return r.RedisCPU }) < 0 {
		return 0
	}
	return g.med(func(r Result) float64 { return r.ClientCPU }) + g.med(func(r Result) float64 { return r.RedisCPU })
}
func p50(r Result) float64 { return r.P50 }

// writeGlance prints one line per driver across the scenarios.
func writeGlance(w io.Writer, gs [][]*group) {
	serial, parallel := find(gs, isSerial), find(gs, isParallel)
	greedy := find(gs, isContended(8, false))
	think1, think7 := find(gs, isContended(2, true)), find(gs, isContended(8, true))
	if serial == nil && parallel == nil && greedy == nil {
		return
	}
	fmt.Fprintf(w, "## At a glance\n\n")
	header(w, "driver", "serial cycles/s (× raw)", "serial p50 µs (× raw)", "parallel cycles/s (× raw)",
		"contended acq/s (× raw)", "contended: wait p99 ms", "contended: acq per goroutine min–max",
		"contended: cmds per acq", "handoff p50 / p99 µs, 1 waiter", "handoff p50 / p99 µs, 7 waiters",
		"paired serial p50 × raw: new keys / reused")
	paired := func(scenario, label string, f func(Result) float64) string {
		var v []string
		for _, keys := range []string{"cycle", "goroutine"} {
			x := "–"
			if g := findRow(find(gs, isPaired(scenario, keys)), label); g != nil {
				x = fmt.Sprintf("%.2f", g.med(f))
			}
			v = append(v, x)
		}
		return strings.Join(v, " / ")
	}
	withRatio := func(rows []*group, label string, f func(Result) float64) string {
		g := findRow(rows, label)
		if g == nil {
			return "–"
		}
		s := num(g.med(f))
		if b := baseline(rows); b != nil {
			s += " (" + ratio(g.med(f), b.med(f)) + ")"
		}
		return s
	}
	handoff := func(rows []*group, label string) string {
		g := findRow(rows, label)
		if g == nil {
			return "–"
		}
		return handoffMed(g, func(r Result) float64 { return r.HandoffP50 }) + " / " +
			handoffMed(g, func(r Result) float64 { return r.HandoffP99 }) + " · " +
			num(g.med(func(r Result) float64 { return r.Cmds })) + " cmds"
	}
	for _, l := range labels(gs) {
		if primitiveLabel(l) {
			continue // the primitives have a table of their own
		}
		waitP99, spread, cmds := "–", "–", "–"
		if g := findRow(greedy, l); g != nil {
			waitP99 = num(g.med(func(r Result) float64 { return r.WaitP99 }) / 1000)
			spread = perWorkerCell(g)
			cmds = num(g.med(func(r Result) float64 { return r.Cmds }))
		}
		row(w, l, withRatio(serial, l, rate), withRatio(serial, l, p50), withRatio(parallel, l, rate),
			withRatio(greedy, l, rate), waitP99, spread, cmds, handoff(think1, l), handoff(think7, l),
			paired("serial", l, pairedP50))
	}
	fmt.Fprintf(w, "\nContended columns: 8 greedy goroutines, hold 1 ms. Handoff columns: think 500 µs after each release, so each handoff goes to a goroutine already waiting.\n\n")
}

func handoffMed(g *group, f func(Result) float64) string {
	v := g.col(func(r Result) float64 {
		if r.HandoffN == 0 {
			return -1
		}
		return f(r)
	})
	if len(v) == 0 {
		return "–"
	}
	return num(median(v))
}

// check is one line of the targets table.
type check struct {
	what, table, measured, bar string
	ok                         bool
}

// writeTargets compares every latchkey row with the project's goals:
// uncontended cost close to raw, fast handoff with few commands,
// and no starved goroutine.
func writeTargets(w io.Writer, gs [][]*group) {
	var checks []check
	for _, l := range labels(gs) {
		if strings.HasPrefix(l, "latchkey") && !primitiveLabel(l) {
			checks = append(checks, targetChecks(gs, l)...)
		}
	}
	if len(checks) == 0 {
		return
	}
	fmt.Fprintf(w, "## latchkey against its targets\n\n")
	header(w, "driver: target", "table", "measured", "bar", "verdict")
	for _, c := range checks {
		v := "**miss**"
		if c.ok {
			v = "ok"
		}
		row(w, c.what, c.table, c.measured, c.bar, v)
	}
	fmt.Fprintln(w)
}

func targetChecks(gs [][]*group, label string) []check {
	var cs []check
	ratioCheck := func(rows []*group, what string, f func(Result) float64, bar float64, atMost bool) {
		g, b := findRow(rows, label), baseline(rows)
		if g == nil || b == nil || b.med(f) == 0 {
			return
		}
		x := g.med(f) / b.med(f)
		op := "≥"
		if atMost {
			op = "≤"
		}
		cs = append(cs, check{label + ": " + what, rows[0].table, fmt.Sprintf("%.2f× raw (%s vs %s)", x, num(g.med(f)), num(b.med(f))),
			fmt.Sprintf("%s %.2f× raw", op, bar), (atMost && x <= bar) || (!atMost && x >= bar)})
	}
	ratioCheck(find(gs, isSerial), "serial p50", p50, 1.05, true)
	ratioCheck(find(gs, isParallel), "parallel cycles/s", rate, 0.9, false)
	pairedCheck := func(rows []*group, what string, f func(Result) float64, bar float64, atMost bool) {
		g := findRow(rows, label)
		if g == nil {
			return
		}
		x := g.med(f)
		op := "≥"
		if atMost {
			op = "≤"
		}
		cs = append(cs, check{label + ": " + what, rows[0].table, fmt.Sprintf("%.2f× raw", x),
			fmt.Sprintf("%s %.2f× raw", op, bar), (atMost && x <= bar) || (!atMost && x >= bar)})
	}
	for _, keys := range []string{"cycle", "goroutine"} {
		pairedCheck(find(gs, isPaired("serial", keys)), "paired serial p50", pairedP50, 1.05, true)
	}
	// Parallel throughput is CPU-bound on 2 cores, so the CPU per cycle
	// (client + Redis) predicts it with less noise than the rate itself.
	if rows := find(gs, isParallel); rows != nil {
		g, b := findRow(rows, label), baseline(rows)
		if g != nil && b != nil && cpuPerCycle(b) > 0 && cpuPerCycle(g) > 0 {
			x := cpuPerCycle(b) / cpuPerCycle(g)
			cs = append(cs, check{label + ": parallel throughput predicted from CPU per cycle", rows[0].table,
				fmt.Sprintf("%.2f× raw (%s vs %s µs client + Redis)", x, num(cpuPerCycle(g)), num(cpuPerCycle(b))),
				"≥ 0.90× raw", x >= 0.9})
		}
	}

	for _, rows := range gs {
		g := findRow(rows, label)
		if g == nil || g.runs[0].Scenario != "contended" {
			continue
		}
		t := rows[0].table
		if h := handoffMed(g, func(r Result) float64 { return r.HandoffP50 }); h != "–" {
			p := g.med(func(r Result) float64 { return r.HandoffP50 })
			cs = append(cs, check{label + ": handoff p50", t, h + " µs", "≤ 250 µs", p <= 250})
			p = g.med(func(r Result) float64 { return r.HandoffP99 })
			cs = append(cs, check{label + ": handoff p99", t, num(p) + " µs", "≤ 600 µs", p <= 600})
		}
		c := g.med(func(r Result) float64 { return r.Cmds })
		wire := g.med(func(r Result) float64 { return r.Wire })
		cs = append(cs, check{label + ": commands per acquisition", t,
			fmt.Sprintf("%s (hooks), %s (wire)", num(c), num(wire)), "≤ 4", c <= 4 && wire <= 4})
		fair := g.med(func(r Result) float64 {
			mean := float64(r.Ops) / float64(max(1, r.Workers))
			return float64(minMax(r.PerWorker, false)) / max(mean, 1)
		})
		cs = append(cs, check{label + ": least-served goroutine / mean", t, fmt.Sprintf("%.2f", fair), "≥ 0.50", fair >= 0.5})
		waitBar := 2 * float64(g.runs[0].Workers-1) * g.med(func(r Result) float64 { return r.HoldP50 })
		wp := g.med(func(r Result) float64 { return r.WaitP99 })
		cs = append(cs, check{label + ": wait p99", t, num(wp) + " µs",
			"≤ 2 × waiters × hold = " + num(waitBar) + " µs", wp <= waitBar})
		bad := g.sum(func(r Result) int { return r.Overlaps + r.FenceBad + r.Timeouts + r.Errors })
		cs = append(cs, check{label + ": overlaps + fence regressions + timeouts + errors", t, fmt.Sprint(bad), "0", bad == 0})
	}
	return cs
}
