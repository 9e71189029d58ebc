//go:build !nolatchkey

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPrimitiveScenarios runs the scenarios of the primitives section
// briefly with every primitive on the shared Redis: no errors, and never
// more holders at once than the primitive lets in.
func TestPrimitiveScenarios(t *testing.T) {
	addr := redisAddr(t)
	base := Config{Addrs: []string{addr}, MaxTime: 20 * time.Second}
	for _, d := range primitiveDrivers(nil) {
		if !registry[d].primitive {
			continue
		}
		t.Run(d, func(t *testing.T) {
			for _, tc := range []Config{
				with(base, "serial", d, func(c *Config) { c.N = 50 }),
				with(base, "serial", d, func(c *Config) { c.N = 50; c.Pair = "raw" }),
				with(base, "contended", d, func(c *Config) { c.N = 80; c.Workers = primitiveWorkers }),
			} {
				r, err := runOne(tc)
				if err != nil {
					t.Fatalf("%s: %v", r.Table, err)
				}
				if r.Ops != tc.N || r.Errors != 0 || r.Overlaps != 0 || r.Timeouts != 0 || r.FenceBad != 0 || r.Truncated {
					t.Fatalf("%s: %+v", r.Table, r)
				}
				if r.Cmds < 2 || r.Trips > r.Cmds {
					t.Errorf("%s: commands per op: hooks %.2f, trips %.2f", r.Table, r.Cmds, r.Trips)
				}
				if tc.Scenario != "contended" {
					continue
				}
				allowed := holdersAtOnce(d, tc.Workers)
				if r.Capacity != allowed || r.MostInside < 1 || r.MostInside > allowed {
					t.Errorf("%s: %d holders allowed, %d reported, %d seen at once", r.Table, allowed, r.Capacity, r.MostInside)
				}
				// 8 greedy goroutines, 1 ms holds: a lock that lets several
				// in is seen with several in.
				if allowed > 1 && r.MostInside < 2 {
					t.Errorf("%s: never more than one holder, %d allowed", r.Table, allowed)
				}
				if allowed == 1 && !r.FenceChecked {
					t.Errorf("%s: fences not checked", r.Table)
				}
			}
		})
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if left, _ := admin.Keys(context.Background(), "*lkbench:*").Result(); len(left) > 0 {
		t.Errorf("keys left behind: %d, e.g. %s", len(left), left[0])
	}
}

// TestGroupKeysTags checks the two LockAll variants: core stores a key as
// "<prefix>:{<key>}…", and the three keys of lockall3 share a hash tag
// while those of lockall3-notag have one each.
func TestGroupKeysTags(t *testing.T) {
	tag := func(stored string) string { // Redis Cluster's rule
		i := strings.IndexByte(stored, '{')
		j := strings.IndexByte(stored[i+1:], '}')
		return stored[i+1 : i+1+j]
	}
	tags := func(shared bool) map[string]bool {
		m := map[string]bool{}
		for _, k := range groupKeys("lkbench:x:c:d0:1", shared) {
			m[tag("latchkey:{"+k+"}:fence")] = true
		}
		return m
	}
	if n := len(tags(true)); n != 1 {
		t.Errorf("lockall3: %d hash tags, want 1", n)
	}
	if n := len(tags(false)); n != 3 {
		t.Errorf("lockall3-notag: %d hash tags, want 3", n)
	}
}

func TestPrimitiveRunsAndTable(t *testing.T) {
	drivers := primitiveDrivers([]string{"latchkey-sem4"})
	if strings.Join(drivers, " ") != "raw latchkey-sem4" {
		t.Fatalf("drivers %v", drivers)
	}
	var joined []string
	for _, r := range primitiveRuns(sizes["smoke"], drivers) {
		joined = append(joined, strings.Join(r, " "))
	}
	all := strings.Join(joined, "\n")
	for _, want := range []string{
		"-scenario serial -driver raw -n 2000",
		"-scenario serial -driver latchkey-sem4 -pair raw -keys cycle -n 2000",
		"-scenario contended -driver raw -workers 8 -n 400",
		"-scenario contended -driver latchkey-sem4 -workers 8 -n 1600",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("primitive runs lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "-driver raw -pair") {
		t.Errorf("raw paired with itself:\n%s", all)
	}
	if m := matrixRuns(sizes["smoke"], []string{"raw"}); len(m) == 0 {
		t.Fatal("no lock matrix")
	}

	// Contended ratios are taken within a round: round 1 raw 500, sem 2000
	// (4.00); round 2 raw 1000, sem 3000 (3.00); median 3.50.
	var res []Result
	add := func(scenario, driver string, round int, cfgf func(*Config), rf func(*Result)) {
		cfg := Config{Scenario: scenario, Driver: driver, Workers: 1, Keys: "cycle", Hold: time.Millisecond}
		if scenario == "contended" {
			cfg.Workers = primitiveWorkers
		}
		cfgf(&cfg)
		r := Result{Round: round, P50: 100, P99: 200, Ops: 10, Cmds: 2, Trips: 2, Wire: 2, Executed: 6, RedisCPU: 10, ClientCPU: 20}
		describe(&r, cfg)
		rf(&r)
		res = append(res, r)
	}
	nop := func(*Config) {}
	for round, rates := range [][2]float64{{500, 2000}, {1000, 3000}} {
		add("contended", "raw", round+1, nop, func(r *Result) { r.Rate, r.Capacity, r.MostInside = rates[0], 1, 1 })
		add("contended", "latchkey-sem4", round+1, nop, func(r *Result) { r.Rate, r.Capacity, r.MostInside = rates[1], 4, 4 })
		add("serial", "raw", round+1, nop, func(r *Result) { r.Executed = 4 })
		add("serial", "latchkey-sem4", round+1, func(c *Config) { c.Pair = "raw" },
			func(r *Result) { r.PairP50, r.PairP99, r.P50 = 50, 90, 100+float64(round)*10 })
	}
	var buf bytes.Buffer
	writeReport(&buf, res, reportMeta{})
	out := buf.String()
	for _, want := range []string{
		"## latchkey primitives against the raw floor",
		"| raw | 2.00 · 4.00 | 20.0 + 10.0 | 100 (100–100) | 200 (200–200) | – | – | 750 (500–1000) | 1 / 1 |",
		"| **latchkey-sem4** | – | – | 105 (100–110) | 200 (200–200) | 50.0 / 90.0 | 2.10 (2.00–2.20) | 2500 (2000–3000) | 4 / 4 | 750 (500–1000) | 3.50 (3.00–4.00) |",
		"holders at once: allowed / most seen",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "latchkey-sem4: serial p50") {
		t.Errorf("targets checked for a primitive:\n%s", out)
	}
}
