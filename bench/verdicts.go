package main

import (
	"fmt"
	"io"
	"strings"
)

// The report closes with one verdict line per performance target: those
// of targets.go and those of the project's performance issue (#16), for
// the default driver, latchkey, and for the Redlock targets latchkey-redlock5
// against redsync5. A target is met when every table of the run that
// measures it meets it; a target the run did not measure says which run
// would.

// outcome is a verdict's result.
type outcome int

const (
	unmeasured outcome = iota
	met
	notMet
)

func (o outcome) String() string {
	return [...]string{"NOT MEASURED", "MET", "NOT MET"}[o]
}

// verdict is one closing line: the target as stated, and what the run
// measured (or how to measure it).
type verdict struct {
	target   string
	outcome  outcome
	measured string
}

func judged(ok bool) outcome {
	if ok {
		return met
	}
	return notMet
}

// The drivers the verdicts are about.
const (
	verdictDriver = "latchkey"
	redlockDriver = "latchkey-redlock5"
	redlockPeer   = "redsync5"
)

// writeVerdicts prints the closing lines.
func writeVerdicts(w io.Writer, gs [][]*group) {
	fmt.Fprintf(w, "## Verdicts\n\n")
	fmt.Fprintf(w, "One line per target: `%s` (the default mode), and for the Redlock targets `%s` against `%s`.\n", verdictDriver, redlockDriver, redlockPeer)
	fmt.Fprintf(w, "MET means every table of this run that measures the target meets it.\n\n")
	for _, v := range verdicts(gs) {
		fmt.Fprintf(w, "- %s: %s — %s\n", v.outcome, v.target, v.measured)
	}
}

// verdicts judges every target against the runs.
func verdicts(gs [][]*group) []verdict {
	var rs []Result
	for _, rows := range gs {
		for _, g := range rows {
			rs = append(rs, g.runs...)
		}
	}
	return []verdict{
		serialVerdict(gs),
		parallelVerdict(gs),
		handoffVerdict(gs, "handoff p50 ≤ 250 µs to a goroutine already waiting", func(r Result) float64 { return r.HandoffP50 }, 250),
		handoffVerdict(gs, "handoff p99 ≤ 600 µs to a goroutine already waiting", func(r Result) float64 { return r.HandoffP99 }, 600),
		waitAgainstRawVerdict(gs),
		waitBarVerdict(gs, 2, 999, "wait p99 ≤ 2 × waiters × hold, every contended table below 1,000 goroutines"),
		waitBarVerdict(gs, 1000, 1<<30, "1,000 waiters on one key: wait p99 ≤ 2 × waiters × hold"),
		commandsVerdict(gs),
		spreadVerdict(gs),
		starvedVerdict(gs),
		cleanVerdict(gs),
		renewVerdict(rs),
		memoryVerdict(rs),
		redlockSerialVerdict(gs),
		redlockContendedVerdict(gs),
	}
}

// count says "1 run", "2 runs".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// contendedRows returns the contended tables that have a row for label.
func contendedRows(gs [][]*group, label string, keep func(Result) bool) []*group {
	var out []*group
	for _, rows := range gs {
		if r := rows[0].runs[0]; r.Scenario != "contended" || !keep(r) {
			continue
		}
		if g := findRow(rows, label); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// setting names a contended table in a verdict.
func setting(r Result) string {
	s := fmt.Sprintf("%d goroutines", r.Workers)
	if r.Workers > 8 {
		s = fmt.Sprintf("%d goroutines (%s)", r.Workers, strings.TrimPrefix(r.Table, "contended: "))
	}
	if r.ThinkUS > 0 {
		return s + ", think " + num(r.ThinkUS) + " µs"
	}
	return s + ", greedy"
}

func serialVerdict(gs [][]*group) verdict {
	v := verdict{target: "serial p50 ≤ 1.05× raw in every run"}
	worst, n := 0.0, 0
	var parts []string
	for _, keys := range []string{"cycle", "goroutine"} {
		g := findRow(find(gs, isPaired("serial", keys)), verdictDriver)
		if g == nil {
			continue
		}
		for _, x := range g.col(pairedP50) {
			worst, n = max(worst, x), n+1
		}
		what := map[string]string{"cycle": "new keys", "goroutine": "reused keys"}[keys]
		parts = append(parts, fmt.Sprintf("median %.2f× on %s", g.med(pairedP50), what))
	}
	if n > 0 {
		v.outcome = judged(worst <= 1.05)
		v.measured = fmt.Sprintf("worst run %.2f× raw, each cycle paired with a raw cycle (%s; %s)", worst, strings.Join(parts, ", "), count(n, "run"))
		return v
	}
	rows := find(gs, isSerial)
	g, b := findRow(rows, verdictDriver), baseline(rows)
	if g == nil || b == nil {
		v.measured = "no serial runs of latchkey and raw"
		return v
	}
	x := g.med(p50) / b.med(p50)
	v.outcome = judged(x <= 1.05)
	v.measured = fmt.Sprintf("%.2f× raw, medians of unpaired runs (%s vs %s µs)", x, num(g.med(p50)), num(b.med(p50)))
	return v
}

func parallelVerdict(gs [][]*group) verdict {
	v := verdict{target: "parallel cycles/s ≥ 0.9× raw"}
	rows := find(gs, isParallel)
	g, b := findRow(rows, verdictDriver), baseline(rows)
	if g == nil || b == nil || b.med(rate) == 0 {
		v.measured = "no parallel runs of latchkey and raw"
		return v
	}
	x := g.med(rate) / b.med(rate)
	v.outcome = judged(x >= 0.9)
	v.measured = fmt.Sprintf("%.2f× raw (%s vs %s cycles/s)", x, num(g.med(rate)), num(b.med(rate)))
	if cpuPerCycle(b) > 0 && cpuPerCycle(g) > 0 {
		v.measured += fmt.Sprintf("; CPU per cycle predicts %.2f×", cpuPerCycle(b)/cpuPerCycle(g))
	}
	return v
}

func handoffVerdict(gs [][]*group, target string, f func(Result) float64, bar float64) verdict {
	v := verdict{target: target}
	var parts []string
	ok := true
	for _, g := range contendedRows(gs, verdictDriver, func(r Result) bool { return r.ThinkUS > 0 }) {
		if handoffMed(g, f) == "–" {
			continue
		}
		x := g.med(f)
		ok = ok && x <= bar
		parts = append(parts, fmt.Sprintf("%s µs (%s)", num(x), setting(g.runs[0])))
	}
	if len(parts) == 0 {
		v.measured = "no contended run of latchkey with think time"
		return v
	}
	v.outcome, v.measured = judged(ok), strings.Join(parts, ", ")
	return v
}

func waitAgainstRawVerdict(gs [][]*group) verdict {
	v := verdict{target: "wait p99 with 8 goroutines ≤ raw's"}
	var parts []string
	ok := true
	wait := func(r Result) float64 { return r.WaitP99 }
	for _, rows := range gs {
		r := rows[0].runs[0]
		g, b := findRow(rows, verdictDriver), baseline(rows)
		if r.Scenario != "contended" || r.Workers != 8 || g == nil || b == nil {
			continue
		}
		ok = ok && g.med(wait) <= b.med(wait)
		parts = append(parts, fmt.Sprintf("%s vs raw %s ms (%s)", num(g.med(wait)/1000), num(b.med(wait)/1000), setting(r)))
	}
	if len(parts) == 0 {
		v.measured = "no contended run of latchkey and raw with 8 goroutines"
		return v
	}
	v.outcome, v.measured = judged(ok), strings.Join(parts, ", ")
	return v
}

// waitBarVerdict checks the wait p99 of the tables with lo to hi goroutines
// against twice the waiters times the hold.
func waitBarVerdict(gs [][]*group, lo, hi int, target string) verdict {
	v := verdict{target: target}
	worst, worstAt, n := 0.0, "", 0
	keep := func(r Result) bool {
		return r.Workers >= lo && r.Workers <= hi && (lo < 1000 || strings.Contains(r.Table, "on one key"))
	}
	for _, g := range contendedRows(gs, verdictDriver, keep) {
		bar := 2 * float64(g.runs[0].Workers-1) * g.med(func(r Result) float64 { return r.HoldP50 })
		if bar <= 0 {
			continue
		}
		wp := g.med(func(r Result) float64 { return r.WaitP99 })
		if x := wp / bar; n == 0 || x > worst {
			worst, worstAt = x, fmt.Sprintf("%s ms against a bar of %s ms (%s)", num(wp/1000), num(bar/1000), setting(g.runs[0]))
		}
		n++
	}
	switch {
	case n > 0:
		v.outcome = judged(worst <= 1)
		v.measured = fmt.Sprintf("worst of %s: %s", count(n, "table"), worstAt)
	case lo >= 1000:
		v.measured = "not in this run; a fleet run measures it: go run . -scenario contended -driver latchkey -spawn 1 -exclusive -clients 500 -workers 1000 -pool 2 -n 10000000 -max-time 20s"
	default:
		v.measured = "no contended run of latchkey"
	}
	return v
}

func commandsVerdict(gs [][]*group) verdict {
	v := verdict{target: "≤ 4 commands per acquisition"}
	worstHooks, worstWire, n := 0.0, 0.0, 0
	for _, g := range contendedRows(gs, verdictDriver, func(Result) bool { return true }) {
		worstHooks = max(worstHooks, g.med(func(r Result) float64 { return r.Cmds }))
		worstWire = max(worstWire, g.med(func(r Result) float64 { return r.Wire }))
		n++
	}
	if n == 0 {
		v.measured = "no contended run of latchkey"
		return v
	}
	v.outcome = judged(worstHooks <= 4 && worstWire <= 4)
	v.measured = fmt.Sprintf("at most %s (hooks), %s (wire) over %s", num(worstHooks), num(worstWire), count(n, "contended table"))
	return v
}

func spreadVerdict(gs [][]*group) verdict {
	v := verdict{target: "no goroutine below half the mean acquisitions"}
	worst, worstAt, n := 0.0, "", 0
	for _, g := range contendedRows(gs, verdictDriver, func(Result) bool { return true }) {
		x := g.med(func(r Result) float64 {
			mean := float64(r.Ops) / float64(max(1, r.Workers))
			return float64(minMax(r.PerWorker, false)) / max(mean, 1)
		})
		if n == 0 || x < worst {
			worst, worstAt = x, setting(g.runs[0])
		}
		n++
	}
	if n == 0 {
		v.measured = "no contended run of latchkey"
		return v
	}
	v.outcome = judged(worst >= 0.5)
	v.measured = fmt.Sprintf("least-served / mean %.2f at worst (%s)", worst, worstAt)
	return v
}

func starvedVerdict(gs [][]*group) verdict {
	v := verdict{target: "10,000 waiters on one key: none starved"}
	starved, n := 0, 0
	keep := func(r Result) bool { return r.Workers >= 10000 && strings.Contains(r.Table, "on one key") }
	for _, g := range contendedRows(gs, verdictDriver, keep) {
		starved += g.sum(func(r Result) int { return r.Starved })
		n += len(g.runs)
	}
	if n == 0 {
		v.measured = "not in this run; a fleet run measures it: go run . -scenario contended -driver latchkey -spawn 1 -exclusive -clients 500 -workers 10000 -pool 2 -n 100000000 -max-time 30s -wait-timeout 30s (each turn of 10,000 waiters takes longer than the default 10 s wait)"
		return v
	}
	v.outcome = judged(starved == 0)
	v.measured = fmt.Sprintf("%d goroutines never acquired, over %s", starved, count(n, "run"))
	return v
}

func cleanVerdict(gs [][]*group) verdict {
	v := verdict{target: "0 overlaps, fence regressions, timeouts and errors"}
	bad, n := 0, 0
	for _, rows := range gs {
		if g := findRow(rows, verdictDriver); g != nil {
			bad += g.sum(func(r Result) int { return r.Overlaps + r.FenceBad + r.Timeouts + r.Errors })
			n += len(g.runs)
		}
	}
	if n == 0 {
		v.measured = "no run of latchkey"
		return v
	}
	v.outcome = judged(bad == 0)
	v.measured = fmt.Sprintf("%d over %s", bad, count(n, "run"))
	return v
}

func renewVerdict(rs []Result) verdict {
	v := verdict{target: "renewing 100k leases at TTL 3 s: client and Redis ≤ 15 % of a core each, no lease lost"}
	var parts []string
	ok, n := true, 0
	for _, r := range rs {
		if r.Scenario != "renew" || r.Driver != verdictDriver || r.Leases < 100000 {
			continue
		}
		n++
		redis := "Redis unknown (a shared server)"
		if r.RedisPct >= 0 {
			redis = fmt.Sprintf("Redis %.1f %%", r.RedisPct)
		}
		ok = ok && r.ClientPct <= 15 && r.RedisPct >= 0 && r.RedisPct <= 15 && r.Lost == 0
		parts = append(parts, fmt.Sprintf("%d leases: client %.1f %%, %s, %d lost", r.Leases, r.ClientPct, redis, r.Lost))
	}
	if n == 0 {
		v.measured = "not in this run; the renew scenario measures it: go run . -scenario renew -driver latchkey -spawn 1 -exclusive -ttl 3s"
		return v
	}
	v.outcome, v.measured = judged(ok), strings.Join(parts, "; ")
	return v
}

// fenceRetentionMS is core's fenceRetention (core/backend.go), in
// milliseconds: the longest a released key's fence counter lives.
const fenceRetentionMS = 5 * 60 * 1000

// memoryVerdict judges the memory runs of latchkey: every key a released
// lock leaves expires, and none lives longer than core's fence retention.
// The peers' runs, when present, are named for comparison.
func memoryVerdict(rs []Result) verdict {
	v := verdict{target: "Redis memory a released key leaves: nothing older than a few minutes (no key without expiry, largest TTL ≤ 5 min)"}
	var parts, peers []string
	ok, n := true, 0
	for _, r := range rs {
		if r.Scenario != "memory" || r.Ops == 0 {
			continue
		}
		if r.Driver != verdictDriver {
			peers = append(peers, fmt.Sprintf("%s %s B, %d keys left", r.Driver, num(r.BytesPerKey), r.KeysLeft))
			continue
		}
		n++
		ok = ok && r.NoExpiry == 0 && r.MaxPTTLMS <= fenceRetentionMS
		parts = append(parts, fmt.Sprintf("%d keys released: %d left, %d without expiry, largest TTL %.1f s, %s bytes per released key",
			r.Ops, r.KeysLeft, r.NoExpiry, float64(r.MaxPTTLMS)/1000, num(r.BytesPerKey)))
	}
	if n == 0 {
		v.measured = "not in this run; the memory scenario measures it: go run . -scenario memory -driver latchkey -spawn 1 -exclusive"
		return v
	}
	v.outcome, v.measured = judged(ok), strings.Join(parts, "; ")
	if len(peers) > 0 {
		v.measured += " (per released key: " + strings.Join(peers, ", ") + ")"
	}
	return v
}

func redlockSerialVerdict(gs [][]*group) verdict {
	v := verdict{target: "Redlock over 5 nodes, uncontended cycle: p50 ≤ redsync5's"}
	rows := find(gs, isSerial)
	g, peer := findRow(rows, redlockDriver), findRow(rows, redlockPeer)
	if g == nil || peer == nil {
		v.measured = "not in this run; the matrix measures it with -drivers " + redlockPeer + "," + redlockDriver
		return v
	}
	v.outcome = judged(g.med(p50) <= peer.med(p50))
	v.measured = fmt.Sprintf("%s vs %s µs (%.2f×)", num(g.med(p50)), num(peer.med(p50)), g.med(p50)/peer.med(p50))
	return v
}

// redlockContendedVerdict judges Redlock under contention on the table
// issue 16's harness names: 8 goroutines, hold 1 ms, think 500 µs after
// each release, so that every acquisition is a handoff to a goroutine
// already waiting. The greedy table (no think time) is reported beside it:
// there redsync5's releasing goroutine takes the lock back before anyone
// else can, nearly every time, which is throughput its waiters pay for.
func redlockContendedVerdict(gs [][]*group) verdict {
	v := verdict{target: "Redlock over 5 nodes, contended (8 goroutines, hold 1 ms, think 500 µs): acq/s ≥ 1.5× redsync5's, wait p99 ≤ 1/5 of redsync5's"}
	wait := func(r Result) float64 { return r.WaitP99 }
	compare := func(think bool) (x, y float64, text string, ok bool) {
		rows := find(gs, isContended(8, think))
		g, peer := findRow(rows, redlockDriver), findRow(rows, redlockPeer)
		if g == nil || peer == nil || peer.med(rate) == 0 || peer.med(wait) == 0 {
			return 0, 0, "", false
		}
		x, y = g.med(rate)/peer.med(rate), g.med(wait)/peer.med(wait)
		text = fmt.Sprintf("%.2f× the acq/s (%s vs %s), wait p99 %.2f× (%s vs %s ms)",
			x, num(g.med(rate)), num(peer.med(rate)), y, num(g.med(wait)/1000), num(peer.med(wait)/1000))
		return x, y, text, true
	}
	x, y, text, ok := compare(true)
	if !ok {
		v.measured = "not in this run; the matrix measures it with -drivers " + redlockPeer + "," + redlockDriver
		return v
	}
	v.outcome = judged(x >= 1.5 && y <= 0.2)
	v.measured = text + ", think 500 µs"
	if _, _, gtext, ok := compare(false); ok {
		v.measured += fmt.Sprintf("; greedy (no think time): %s", gtext)
	}
	return v
}
