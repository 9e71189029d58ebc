package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The bars of bench/targets.go that a chart can draw as a line. The
// verdicts are bench's (its report and `make bench`); the charts only show
// where the bars lie.
const (
	targetSerialRatio = 1.05 // serial p50 ≤ 1.05× raw
	targetParallel    = 0.9  // parallel cycles/s ≥ 0.9× raw
	targetHandoffP50  = 250  // µs, a goroutine already waiting
	targetHandoffP99  = 600  // µs
	targetRenewPct    = 15   // % of a core, each side, renewing 100k leases
)

// target is a horizontal line across a panel.
type target struct {
	name  string
	value float64
}

// panel is one plot: bars (or, on a logarithmic axis, dots) per category,
// one colour per series, and whiskers from the least to the most of the runs.
type panel struct {
	title, yLabel string
	categories    []string
	series        []series
	targets       []target
	log           bool
}

// figure is one SVG file: its panels stacked top to bottom.
type figure struct {
	name   string // the file is <input name>-<name>.svg
	panels []panel
}

func (p panel) empty() bool { return len(p.categories) == 0 }

// newPanel builds a panel from points; see collect.
func newPanel(title, yLabel string, pts []point, catRank, serRank func(string) int) panel {
	cats, ss := collect(pts, catRank, serRank)
	return panel{title: title, yLabel: yLabel, categories: cats, series: ss}
}

// figures returns the charts a results file supports: the lock matrix's
// and the primitives section's, or the backend comparison's.
func figures(rs []record) []figure {
	var out []figure
	for _, f := range slices.Concat(matrixFigures(rs), backendFigures(rs), scaleFigures(rs)) {
		var keep []panel
		for _, p := range f.panels {
			if !p.empty() {
				keep = append(keep, p)
			}
		}
		if len(keep) > 0 {
			out = append(out, figure{name: f.name, panels: keep})
		}
	}
	return out
}

// matrixFigures draws the tables of bench's report: serial, parallel,
// contended and the handoff to a waiting goroutine, per driver.
func matrixFigures(rs []record) []figure {
	var serial, paired, parallel, cpu, acq, wait, h50, h99 []point
	parallelWorkers := 0
	for _, r := range rs {
		switch {
		case r.Scenario == "serial" && r.Pair == "" && r.Keys != "goroutine":
			serial = append(serial, point{r.Label, "", r.P50})
		case r.Scenario == "serial" && r.Pair == "raw" && r.PairP50 > 0:
			keys := "a new key per cycle"
			if r.Keys == "goroutine" {
				keys = "one key, reused"
			}
			paired = append(paired, point{r.Label, keys, r.P50 / r.PairP50})
		case r.Scenario == "parallel" && r.Pair == "" && r.Keys != "goroutine":
			parallel = append(parallel, point{r.Label, "", r.Rate})
			cpu = append(cpu, point{r.Label, "client", r.ClientCPU})
			if r.RedisCPU >= 0 {
				cpu = append(cpu, point{r.Label, "Redis", r.RedisCPU})
			}
			parallelWorkers = r.Workers
		case r.Scenario == "contended" && r.Clients == 0: // fleets are the scale sweep's
			acq = append(acq, point{r.Label, setting(r), r.Rate})
			wait = append(wait, point{r.Label, setting(r), r.WaitP99 / 1000})
			if r.ThinkUS > 0 && r.HandoffN > 0 {
				w := fmt.Sprintf("%d waiters", r.Workers-1)
				if r.Workers == 2 {
					w = "1 waiter"
				}
				h50 = append(h50, point{r.Label, w, r.HandoffP50})
				h99 = append(h99, point{r.Label, w, r.HandoffP99})
			}
		}
	}

	serialP := newPanel("serial: 1 goroutine, acquire+release on a new key per cycle",
		"p50 µs per cycle", serial, driverRank, noRank)
	pairedP := newPanel("serial, each cycle alternating with a raw cycle in the same goroutine",
		"p50 × raw's, same run", paired, driverRank, noRank)
	if !pairedP.empty() {
		pairedP.targets = []target{{fmt.Sprintf("latchkey's target: ≤ %.2f× raw", targetSerialRatio), targetSerialRatio}}
	}
	parallelP := newPanel(fmt.Sprintf("parallel: %d goroutines, acquire+release on new keys", parallelWorkers),
		"cycles/s", parallel, driverRank, noRank)
	if b := baseline(parallelP.categories, parallelP.series); b > 0 {
		parallelP.targets = []target{{fmt.Sprintf("latchkey's target: ≥ %.1f× raw", targetParallel), targetParallel * b}}
	}
	cpuP := newPanel("the same runs: CPU per cycle (Redis: all its servers, known when they are private)",
		"µs per cycle", cpu, driverRank, func(s string) int { return map[string]int{"client": 0, "Redis": 1}[s] })
	acqP := newPanel("contended: goroutines on one key, hold 1 ms", "acquisitions/s", acq, driverRank, settingRank)
	waitP := newPanel("contended: wait p99 (Acquire call to return)", "ms, log scale", wait, driverRank, settingRank)
	waitP.log = true
	h50P := newPanel("handoff to a goroutine already waiting (think 500 µs): p50", "µs, log scale", h50, driverRank, noRank)
	h50P.log, h50P.targets = true, []target{{fmt.Sprintf("latchkey's target: ≤ %d µs", targetHandoffP50), targetHandoffP50}}
	h99P := newPanel("the same handoffs: p99", "µs, log scale", h99, driverRank, noRank)
	h99P.log, h99P.targets = true, []target{{fmt.Sprintf("latchkey's target: ≤ %d µs", targetHandoffP99), targetHandoffP99}}

	return []figure{
		{"serial", []panel{serialP, pairedP}},
		{"parallel", []panel{parallelP, cpuP}},
		{"contended", []panel{acqP, waitP}},
		{"handoff", []panel{h50P, h99P}},
	}
}

// backendFigures draws bench's backend comparison: latchkey's Client on
// each backend, serial and contended.
func backendFigures(rs []record) []figure {
	var serial, acq, wait []point
	procs := 0
	for _, r := range rs {
		switch {
		case r.Backend == "":
		case r.Kind == "serial":
			serial = append(serial, point{r.Backend, "", r.P50})
		case r.Kind == "contended":
			acq = append(acq, point{r.Backend, "", r.Rate})
			wait = append(wait, point{r.Backend, "", r.P99 / 1000})
			procs = r.Procs
		}
	}
	serialP := newPanel("serial: one Client, TryLock+Release on a new key per cycle", "p50 µs, log scale",
		serial, backendRank, noRank)
	serialP.log = true
	who := "worker processes"
	if procs > 0 {
		who = fmt.Sprintf("%d worker processes", procs)
	}
	acqP := newPanel("contended: "+who+", a Client each, on one key", "acquisitions/s", acq, backendRank, noRank)
	waitP := newPanel("the same runs: wait p99", "ms, log scale", wait, backendRank, noRank)
	waitP.log = true
	return []figure{{"backends", []panel{serialP, acqP, waitP}}}
}

// tickLabel breaks a category name over lines so that long names fit
// under their bars: at spaces, and after "latchkey-".
func tickLabel(s string) string {
	s = strings.ReplaceAll(s, " ", "\n")
	if rest, ok := strings.CutPrefix(s, "latchkey-"); ok {
		s = "latchkey-\n" + rest
	}
	return s
}

// scaleFigures draws bench's scale sweep (-matrix scale): latchkey alone,
// one category per size.
func scaleFigures(rs []record) []figure {
	var renew, wait, waitAcq, fleet, fleetWait, memory []point
	for _, r := range rs {
		if r.Driver != "latchkey" {
			continue
		}
		switch {
		case r.Scenario == "renew":
			c := count(r.Leases)
			renew = append(renew, point{c, "client", r.ClientPct}, point{c, "Redis", r.RedisPct})
		case r.Scenario == "contended" && r.Clients > 0 && r.Workers == 2*r.Clients: // bench's isFleet
			c := count(r.Clients)
			fleet = append(fleet, point{c, "", r.Rate})
			fleetWait = append(fleetWait, point{c, "", r.WaitP99 / 1000})
		case r.Scenario == "contended" && r.Clients > 0:
			k := keysName(max(r.LockKeys, 1))
			wait = append(wait, point{count(r.Workers), k, r.WaitP99 / 1000})
			waitAcq = append(waitAcq, point{count(r.Workers), k, r.Rate})
		case r.Scenario == "memory":
			memory = append(memory, point{count(r.Ops), "", r.BytesPerKey})
		}
	}
	renewP := newPanel("renewals: leases of TTL 3 s on one Client, renewed every TTL/3", "CPU, % of one core",
		renew, countRank, func(s string) int { return map[string]int{"client": 0, "Redis": 1}[s] })
	if !renewP.empty() {
		renewP.targets = []target{{fmt.Sprintf("target at 100,000 leases: ≤ %d %%", targetRenewPct), targetRenewPct}}
	}
	waitP := newPanel("waiters on keys, 20 per Client, hold 1 ms: wait p99", "ms, log scale", wait, countRank, keysRank)
	waitP.log = true
	// (How many never acquired is in bench's table: a chart of zeros
	// would show nothing.)
	waitAcqP := newPanel("the same runs: acquisitions/s, all keys together", "acquisitions/s", waitAcq, countRank, keysRank)
	fleetP := newPanel("a fleet of Clients (processes), two goroutines each, on 10 keys", "acquisitions/s", fleet, countRank, noRank)
	fleetWaitP := newPanel("the same runs: wait p99", "ms, log scale", fleetWait, countRank, noRank)
	fleetWaitP.log = true
	memP := newPanel("distinct keys, each acquired and released once: what Redis keeps", "used_memory rise per key, bytes",
		memory, countRank, noRank)
	return []figure{
		{"renew", []panel{renewP}},
		{"waiters", []panel{waitP, waitAcqP}},
		{"clients", []panel{fleetP, fleetWaitP}},
		{"memory", []panel{memP}},
	}
}

// count names a size for a category ("10,000"), which countRank orders.
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func countRank(s string) int {
	n, _ := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	return n
}

func keysName(k int) string {
	if k == 1 {
		return "1 key"
	}
	return count(k) + " keys"
}

func keysRank(s string) int { return countRank(strings.Fields(s)[0]) }
