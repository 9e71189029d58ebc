package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// run builds a result as the matrix would have written it.
func run(scenario, label string, workers int, think float64, f func(*Result)) Result {
	r := Result{Scenario: scenario, Driver: strings.Fields(label)[0], Workers: workers, ThinkUS: think,
		Rate: 1000, P50: 100, Ops: 100, Cmds: 3, Trips: 3, Wire: 3, Executed: -1, RedisCPU: -1, OtherPct: -1}
	describe(&r, Config{Scenario: scenario, Driver: r.Driver, Workers: workers, Hold: time.Millisecond,
		Think: time.Duration(think) * time.Microsecond, Keys: "cycle"})
	r.Label = label
	if scenario == "contended" {
		r.HoldP50, r.WaitP99, r.PerWorker = 1000, 1500, []int{50, 50}
		r.HandoffN, r.HandoffP50, r.HandoffP99 = 10, 200, 500
	}
	f(&r)
	return r
}

func TestVerdictsOneLinePerTarget(t *testing.T) {
	paired := func(p50 float64) func(*Result) {
		return func(r *Result) {
			describe(r, Config{Scenario: "serial", Driver: r.Driver, Workers: 1, Keys: "cycle", Pair: "raw"})
			r.P50, r.PairP50 = p50, 100
		}
	}
	results := []Result{
		run("serial", "raw", 1, 0, func(*Result) {}),
		run("serial", "latchkey", 1, 0, func(r *Result) { r.P50 = 200 }), // unpaired: not what decides
		run("serial", "latchkey", 1, 0, paired(103)),
		run("serial", "latchkey", 1, 0, paired(104)),
		run("parallel", "raw", 16, 0, func(*Result) {}),
		run("parallel", "latchkey", 16, 0, func(r *Result) { r.Rate = 800 }),
		run("contended", "raw", 2, 500, func(*Result) {}),
		run("contended", "latchkey", 2, 500, func(r *Result) { r.HandoffP99 = 700 }),
		run("contended", "raw", 8, 0, func(r *Result) { r.WaitP99 = 40000 }),
		run("contended", "latchkey", 8, 0, func(r *Result) { r.WaitP99 = 30000; r.PerWorker = []int{5, 20} }),
		run("serial", "redsync5", 1, 0, func(r *Result) { r.P50 = 600 }),
		run("serial", "latchkey-redlock5", 1, 0, func(r *Result) { r.P50 = 500 }),
	}
	var buf bytes.Buffer
	writeReport(&buf, results, reportMeta{})
	out := buf.String()
	_, tail, ok := strings.Cut(out, "## Verdicts\n")
	if !ok {
		t.Fatalf("no verdicts:\n%s", out)
	}
	var lines []string
	for _, l := range strings.Split(tail, "\n") {
		if strings.HasPrefix(l, "- ") {
			lines = append(lines, l)
		}
	}
	if n := len(verdicts(groups(results))); len(lines) != n {
		t.Fatalf("%d verdict lines, want one per target (%d):\n%s", len(lines), n, tail)
	}
	for _, want := range []string{
		"- MET: serial p50 ≤ 1.05× raw in every run — worst run 1.04× raw",
		"- NOT MET: parallel cycles/s ≥ 0.9× raw — 0.80× raw (800 vs 1000 cycles/s)",
		"- MET: handoff p50 ≤ 250 µs to a goroutine already waiting — 200 µs (2 goroutines, think 500 µs)",
		"- NOT MET: handoff p99 ≤ 600 µs to a goroutine already waiting — 700 µs (2 goroutines, think 500 µs)",
		"- MET: wait p99 with 8 goroutines ≤ raw's — 30.0 vs raw 40.0 ms (8 goroutines, greedy)",
		"- NOT MET: wait p99 ≤ 2 × waiters × hold, every contended table below 1,000 goroutines — worst of 2 tables: 30.0 ms against a bar of 14.0 ms (8 goroutines, greedy)",
		"- NOT MEASURED: 1,000 waiters on one key",
		"- MET: ≤ 4 commands per acquisition — at most 3.00 (hooks), 3.00 (wire) over 2 contended tables",
		"- NOT MET: no goroutine below half the mean acquisitions — least-served / mean 0.40 at worst (8 goroutines, greedy)",
		"- MET: 0 overlaps, fence regressions, timeouts and errors — 0 over 6 runs",
		"- NOT MEASURED: renewing 100k leases",
		"- NOT MEASURED: Redis memory a released key leaves: nothing older than a few minutes (no key without expiry, largest TTL ≤ 5 min) — not in this run; the memory scenario measures it: go run . -scenario memory -driver latchkey -spawn 1 -exclusive",
		"- MET: Redlock over 5 nodes, uncontended cycle: p50 ≤ redsync5's — 500 vs 600 µs (0.83×)",
		"- NOT MEASURED: Redlock over 5 nodes, contended",
	} {
		if !strings.Contains(tail, want) {
			t.Errorf("verdicts lack %q:\n%s", want, tail)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), lines[len(lines)-1]) {
		t.Errorf("the report does not end with the verdicts")
	}
}

func TestRenewVerdict(t *testing.T) {
	for _, tc := range []struct {
		client, redis float64
		lost          int
		want          outcome
	}{
		{12, 10, 0, met},
		{12, 10, 1, notMet},
		{16, 10, 0, notMet},
		{12, -1, 0, notMet}, // Redis CPU unknown: not shown to be within the bar
	} {
		r := Result{Scenario: "renew", Driver: "latchkey", Leases: 100000, ClientPct: tc.client, RedisPct: tc.redis, Lost: tc.lost}
		if v := renewVerdict([]Result{r}); v.outcome != tc.want {
			t.Errorf("%+v: %v (%s), want %v", tc, v.outcome, v.measured, tc.want)
		}
	}
	if v := renewVerdict(nil); v.outcome != unmeasured {
		t.Errorf("no renew run: %v", v.outcome)
	}
}

func TestMemoryVerdict(t *testing.T) {
	mem := func(driver string, left, noExpiry int, pttl int64, bytes float64) Result {
		return Result{Scenario: "memory", Driver: driver, Ops: 100000, KeysLeft: left, NoExpiry: noExpiry, MaxPTTLMS: pttl, BytesPerKey: bytes}
	}
	for _, tc := range []struct {
		name string
		r    Result
		want outcome
	}{
		{"fence counters that expire within the retention", mem("latchkey", 100000, 0, 299990, 164), met},
		{"nothing left", mem("latchkey", 0, 0, 0, -0.2), met},
		{"a key without expiry", mem("latchkey", 100000, 1, 299990, 164), notMet},
		{"a key that outlives the retention (the old 24 h)", mem("latchkey", 100000, 0, 86400000, 200), notMet},
	} {
		if v := memoryVerdict([]Result{tc.r}); v.outcome != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, v.outcome, v.measured, tc.want)
		}
	}
	v := memoryVerdict([]Result{mem("raw", 0, 0, 0, -0.18), mem("latchkey", 100000, 0, 299995, 164.3)})
	want := "100000 keys released: 100000 left, 0 without expiry, largest TTL 300.0 s, 164 bytes per released key (per released key: raw -0.18 B, 0 keys left)"
	if v.outcome != met || v.measured != want {
		t.Errorf("got %v: %q\nwant %q", v.outcome, v.measured, want)
	}
	// The peers alone do not measure latchkey's target.
	if v := memoryVerdict([]Result{mem("raw", 0, 0, 0, 0)}); v.outcome != unmeasured || !strings.Contains(v.measured, "-scenario memory") {
		t.Errorf("no latchkey run: %v (%s)", v.outcome, v.measured)
	}
}

func TestRedlockContendedVerdict(t *testing.T) {
	contended := func(driver string, think float64, rate, waitP99 float64) Result {
		return run("contended", driver, 8, think, func(r *Result) { r.Rate, r.WaitP99 = rate, waitP99 })
	}
	greedy := []Result{
		contended("redsync5", 0, 650, 340000),
		contended("latchkey-redlock5", 0, 600, 25000), // behind on the greedy table
	}
	for _, tc := range []struct {
		name       string
		rate, wait float64 // latchkey-redlock5's on the think table; redsync5: 400/s, 400 ms
		want       outcome
	}{
		{"ahead on both", 640, 30000, met},
		{"too few acquisitions", 560, 30000, notMet},
		{"waits too long", 640, 90000, notMet},
	} {
		rs := append([]Result{contended("redsync5", 500, 400, 400000), contended("latchkey-redlock5", 500, tc.rate, tc.wait)}, greedy...)
		v := redlockContendedVerdict(groups(rs))
		if v.outcome != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, v.outcome, v.measured, tc.want)
		}
		if !strings.Contains(v.measured, "think 500 µs; greedy (no think time): 0.92× the acq/s") {
			t.Errorf("%s: the greedy table is not reported beside the judged one: %s", tc.name, v.measured)
		}
	}
	if v := redlockContendedVerdict(groups(greedy)); v.outcome != unmeasured {
		t.Errorf("greedy table alone: %v (%s), want not measured", v.outcome, v.measured)
	}
}
