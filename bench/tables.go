package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeReport prints the markdown report: setup, a summary, the checks
// against latchkey's targets, every table in full, then one verdict line
// per target (verdicts.go).
func writeReport(w io.Writer, results []Result, m reportMeta) {
	gs := groups(results)
	fmt.Fprintf(w, "## Setup\n\n")
	for _, line := range setupLines(m) {
		fmt.Fprintf(w, "- %s\n", line)
	}
	fmt.Fprintf(w, "\nCells are the median over runs, with (min–max) when there was more than one run.\n\n")
	writePrimitives(w, results)
	writeScale(w, results)
	writeGlance(w, gs)
	writeTargets(w, gs)
	fmt.Fprintf(w, "## Full tables\n\n")
	for _, rows := range gs {
		fmt.Fprintf(w, "### %s\n\n", rows[0].table)
		switch rows[0].runs[0].Scenario {
		case "ping":
			writePing(w, rows)
		case "contended":
			writeContended(w, rows)
		case "memory":
			writeMemory(w, rows)
		default:
			if rows[0].runs[0].Pair != "" {
				writePaired(w, rows)
				break
			}
			writeCycles(w, rows)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, legend)
	fmt.Fprintln(w)
	writeVerdicts(w, gs)
}

const legend = `Columns: "cmds" are commands seen by go-redis process/pipeline hooks on every
client the driver opened; "trips" the round trips they took (a pipeline is one);
"wire" the commands parsed from the bytes written on every connection, which also
sees pub/sub connections (SUBSCRIBE/UNSUBSCRIBE/PING); both include the handshake
of any connection opened in the measured window (after a warm-up, rarely any).
"executed" is the rise in Redis INFO commandstats calls (Lua's inner calls
included), known only when the servers served this benchmark alone. A handoff is
an acquisition by a different goroutine than the last holder, where at least one
goroutine other than the releaser was waiting when Release was called; its gap
runs from the releaser's Release call to the new holder's return from Acquire.
`

func setupLines(m reportMeta) []string {
	var l []string
	if !m.when.IsZero() {
		kind := fmt.Sprintf("matrix %q", m.kind)
		if m.primitives {
			kind = fmt.Sprintf("primitives section, %q sizes", m.kind)
		}
		l = append(l, fmt.Sprintf("Date: %s UTC; %s, %d round(s) in shuffled order, seed %d; took %s; %d failed runs",
			m.when.UTC().Format("2006-01-02 15:04"), kind, m.rounds, m.seed, m.elapsed.Round(time.Second), m.failures))
	}
	if len(m.files) > 0 {
		l = append(l, "From: "+strings.Join(m.files, ", "))
	}
	l = append(l, fmt.Sprintf("Machine: %s, %d CPUs, GOMAXPROCS %d, kernel %s, %s %s/%s",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), readTrim("/proc/sys/kernel/osrelease"),
		runtime.Version(), runtime.GOOS, runtime.GOARCH))
	if m.addr != "" {
		where := "shared server (executed-command and Redis-CPU figures unknown)"
		if m.exclusive {
			where = "private server started for this matrix"
		}
		l = append(l, fmt.Sprintf("Redis %s on %s, %s", redisVersion(m.addr), m.addr, where))
	}
	if m.core != "" {
		l = append(l, "latchkey core at the start: "+m.core)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var mods []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/bsm/redislock", "github.com/go-redsync/redsync/v4":
				mods = append(mods, d.Path+" "+d.Version)
			}
		}
		l = append(l, "Modules: "+strings.Join(mods, ", "))
	}
	return l
}

// coreRevision describes the latchkey checkout when run from bench/: the
// last commit and whether core/ has uncommitted changes. It reads git only.
func coreRevision() string {
	if _, err := os.Stat("../core"); err != nil {
		return ""
	}
	out, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h %cI %s").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--", "core").Output(); err == nil && len(st) > 0 {
		rev += fmt.Sprintf(" + uncommitted changes in core/ (%d files)", strings.Count(string(st), "\n"))
	}
	return rev
}

func cpuModel() string {
	for _, line := range strings.Split(readTrim("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func redisVersion(addr string) string {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

func row(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func header(w io.Writer, cells ...string) {
	row(w, cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	row(w, seps...)
}

func steal(g *group) string {
	return g.cell(func(r Result) float64 { return r.StealPct }) + " · " + g.cell(func(r Result) float64 { return r.OtherPct })
}

func cmdsCell(g *group) string {
	return num(g.med(func(r Result) float64 { return r.Cmds })) + " / " +
		num(g.med(func(r Result) float64 { return r.Trips })) + " / " +
		num(g.med(func(r Result) float64 { return r.Wire }))
}

func baseline(rows []*group) *group {
	for _, g := range rows {
		if g.label == "raw" {
			return g
		}
	}
	return nil
}

func writePing(w io.Writer, rows []*group) {
	header(w, "client", "runs", "p50 µs", "p99 µs", "PINGs/s", "steal % · other %")
	for _, g := range rows {
		row(w, g.label, fmt.Sprint(len(g.runs)), g.cell(func(r Result) float64 { return r.P50 }),
			g.cell(func(r Result) float64 { return r.P99 }), g.cell(func(r Result) float64 { return r.Rate }), steal(g))
	}
}

func writeCycles(w io.Writer, rows []*group) {
	header(w, "driver", "runs", "cycles/s", "× raw", "p50 µs", "× raw", "p99 µs",
		"cmds / trips / wire per cycle", "executed per cycle", "CPU µs per cycle: client + Redis", "errors", "steal % · other %")
	base := baseline(rows)
	for _, g := range rows {
		rate := g.med(func(r Result) float64 { return r.Rate })
		p50 := g.med(func(r Result) float64 { return r.P50 })
		xr, xp := "–", "–"
		if base != nil {
			xr = ratio(rate, base.med(func(r Result) float64 { return r.Rate }))
			xp = ratio(p50, base.med(func(r Result) float64 { return r.P50 }))
		}
		cpu := num(g.med(func(r Result) float64 { return r.ClientCPU })) + " + " + opt(medOrNeg(g, func(r Result) float64 { return r.RedisCPU }))
		row(w, g.label, fmt.Sprint(len(g.runs)), g.cell(func(r Result) float64 { return r.Rate }), xr,
			g.cell(func(r Result) float64 { return r.P50 }), xp, g.cell(func(r Result) float64 { return r.P99 }),
			cmdsCell(g), opt(medOrNeg(g, func(r Result) float64 { return r.Executed })), cpu,
			fmt.Sprint(g.sum(func(r Result) int { return r.Errors })), steal(g))
	}
}

// medOrNeg is the median of a figure that is negative when unknown, or -1.
func medOrNeg(g *group, f func(Result) float64) float64 {
	if len(g.col(f)) == 0 {
		return -1
	}
	return g.med(f)
}

func writeContended(w io.Writer, rows []*group) {
	cols := []string{"driver", "runs", "acq/s", "× raw", "hold p50 µs", "handoff p50 µs", "handoff p99 µs",
		"same owner again %", "wait p50 µs", "wait p99 µs", "wait max µs", "acq per goroutine min–max",
		"cmds / trips / wire per acq", "executed per acq", "timeouts · overlaps · errors", "fence regressions", "steal % · other %"}
	// Locks that let several holders in at once (the primitives section)
	// get a column saying how many; the handoff and fence cells need one.
	several := slices.ContainsFunc(rows, func(g *group) bool { return g.runs[0].Capacity > 1 })
	if several {
		cols = append(cols, "holders at once: allowed / most seen")
	}
	header(w, cols...)
	base := baseline(rows)
	for _, g := range rows {
		xr := "–"
		if base != nil {
			xr = ratio(g.med(func(r Result) float64 { return r.Rate }), base.med(func(r Result) float64 { return r.Rate }))
		}
		handoff := func(f func(Result) float64) func(Result) float64 {
			return func(r Result) float64 {
				if r.HandoffN == 0 {
					return -1
				}
				return f(r)
			}
		}
		fence := "–"
		if g.runs[0].FenceChecked {
			fence = fmt.Sprint(g.sum(func(r Result) int { return r.FenceBad }))
		}
		cells := []string{g.label, fmt.Sprint(len(g.runs)), g.cell(func(r Result) float64 { return r.Rate }), xr,
			g.cell(func(r Result) float64 { return r.HoldP50 }),
			g.cell(handoff(func(r Result) float64 { return r.HandoffP50 })),
			g.cell(handoff(func(r Result) float64 { return r.HandoffP99 })),
			g.cell(func(r Result) float64 { return r.SameOwnerPct }),
			g.cell(func(r Result) float64 { return r.WaitP50 }), g.cell(func(r Result) float64 { return r.WaitP99 }),
			g.cell(func(r Result) float64 { return r.WaitMax }), perWorkerCell(g), cmdsCell(g),
			opt(medOrNeg(g, func(r Result) float64 { return r.Executed })),
			fmt.Sprintf("%d · %d · %d", g.sum(func(r Result) int { return r.Timeouts }),
				g.sum(func(r Result) int { return r.Overlaps }), g.sum(func(r Result) int { return r.Errors })),
			fence, steal(g)}
		if several {
			most := 0
			for _, r := range g.runs {
				most = max(most, r.MostInside)
			}
			cells = append(cells, fmt.Sprintf("%d / %d", max(g.runs[0].Capacity, 1), most))
		}
		row(w, cells...)
	}
}

// perWorkerCell gives the median over runs of the least and the most
// acquisitions any one goroutine made.
func perWorkerCell(g *group) string {
	lo := g.med(func(r Result) float64 { return float64(minMax(r.PerWorker, false)) })
	hi := g.med(func(r Result) float64 { return float64(minMax(r.PerWorker, true)) })
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

func minMax(v []int, wantMax bool) int {
	if len(v) == 0 {
		return 0
	}
	m := v[0]
	for _, x := range v {
		if (wantMax && x > m) || (!wantMax && x < m) {
			m = x
		}
	}
	return m
}

// writePaired prints runs where every cycle alternated with a cycle of the
// pair driver in the same goroutine, so both saw the same machine state.
// Ratios are taken within each run, then summarised over runs.
func writePaired(w io.Writer, rows []*group) {
	pair := rows[0].runs[0].Pair
	header(w, "driver", "runs", "p50 µs", pair+" p50 µs", "p50 × "+pair, "mean × "+pair,
		"p99 µs", pair+" p99 µs", "cmds per cycle ("+pair+")", "errors")
	for _, g := range rows {
		row(w, g.label, fmt.Sprint(len(g.runs)), g.cell(func(r Result) float64 { return r.P50 }),
			g.cell(func(r Result) float64 { return r.PairP50 }),
			g.cell(func(r Result) float64 { return r.P50 / r.PairP50 }),
			g.cell(func(r Result) float64 { return r.Mean / r.PairMean }),
			g.cell(func(r Result) float64 { return r.P99 }), g.cell(func(r Result) float64 { return r.PairP99 }),
			num(g.med(func(r Result) float64 { return r.Cmds }))+" ("+num(g.med(func(r Result) float64 { return r.PairCmds }))+")",
			fmt.Sprint(g.sum(func(r Result) int { return r.Errors })))
	}
}

// writeMemory prints what each driver's released keys left on the server.
func writeMemory(w io.Writer, rows []*group) {
	header(w, "driver", "runs", "keys released", "cycles/s", "keys left", "left without expiry",
		"largest TTL left s", "used_memory rise, bytes", "bytes per released key", "MEMORY USAGE per key left", "errors")
	for _, g := range rows {
		row(w, g.label, fmt.Sprint(len(g.runs)),
			countCell(g, func(r Result) int { return r.Ops }),
			g.cell(func(r Result) float64 { return r.Rate }),
			countCell(g, func(r Result) int { return r.KeysLeft }),
			fmt.Sprint(g.sum(func(r Result) int { return r.NoExpiry })),
			g.cell(ifLeft(func(r Result) float64 { return float64(r.MaxPTTLMS) / 1000 })),
			g.signedCell(func(r Result) float64 { return float64(r.MemAfter - r.MemBefore) }),
			g.signedCell(func(r Result) float64 { return r.BytesPerKey }),
			g.cell(ifLeft(func(r Result) float64 { return r.KeyBytes })),
			fmt.Sprint(g.sum(func(r Result) int { return r.Errors })))
	}
}

// ifLeft is f for a run that left keys, and unknown (–) for one that left none.
func ifLeft(f func(Result) float64) func(Result) float64 {
	return func(r Result) float64 {
		if r.KeysLeft == 0 {
			return -1
		}
		return f(r)
	}
}

// countCell formats a count as "median (min–max)", in whole numbers.
func countCell(g *group, f func(Result) int) string {
	v := make([]float64, len(g.runs))
	for i, r := range g.runs {
		v[i] = float64(f(r))
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return fmt.Sprintf("%.0f", lo)
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", median(v), lo, hi)
}
