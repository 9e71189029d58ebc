package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRespScannerCountsCommandsAcrossWrites(t *testing.T) {
	stream := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\nv\r\nwith\r\nCRLF\r\n" + // CRLF inside a bulk
		"*1\r\n$4\r\nPING\r\n" +
		"PING\r\n" + // inline
		"*2\r\n$9\r\nSUBSCRIBE\r\n$0\r\n\r\n"
	for chunk := 1; chunk <= len(stream); chunk++ {
		var p respScanner
		n := 0
		for i := 0; i < len(stream); i += chunk {
			n += p.feed([]byte(stream[i:min(i+chunk, len(stream))]))
		}
		if n != 4 {
			t.Fatalf("chunk %d: counted %d commands, want 4", chunk, n)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var s Samples
	for i := 100; i >= 1; i-- {
		s.Add(time.Duration(i) * time.Microsecond)
	}
	sum := s.Summarize()
	if sum.P50 != 50 || sum.P99 != 99 || sum.Max != 100 || sum.N != 100 {
		t.Fatalf("got %+v", sum)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Fatalf("median = %v", m)
	}
}

// TestScenariosEveryDriver runs every scenario briefly with every driver on
// the shared Redis and checks the invariants the tables rely on.
func TestScenariosEveryDriver(t *testing.T) {
	addr := redisAddr(t)
	base := Config{Addrs: []string{addr}, MaxTime: 20 * time.Second}
	r, err := runOne(with(base, "ping", "", func(c *Config) { c.N = 50 }))
	if err != nil || r.Ops != 50 || r.P50 <= 0 {
		t.Fatalf("ping: %+v, %v", r, err)
	}
	for _, d := range singleNodeDrivers() {
		t.Run(d, func(t *testing.T) {
			for _, tc := range []Config{
				with(base, "serial", d, func(c *Config) { c.N = 50 }),
				with(base, "parallel", d, func(c *Config) { c.N = 200; c.Workers = 4 }),
				with(base, "serial", d, func(c *Config) { c.N = 50; c.Pair = "raw"; c.Keys = "goroutine" }),
				with(base, "parallel", d, func(c *Config) { c.N = 100; c.Workers = 4; c.Pair = "raw" }),
				with(base, "contended", d, func(c *Config) { c.N = 40; c.Workers = 4 }),
				with(base, "contended", d, func(c *Config) { c.N = 20; c.Workers = 2; c.Think = 500 * time.Microsecond }),
				with(base, "contended", d, func(c *Config) { c.N = 20; c.Workers = 3; c.PerWorker = true }),
			} {
				r, err := runOne(tc)
				if err != nil {
					t.Fatalf("%s: %v", r.Table, err)
				}
				if r.Ops != tc.N || r.Errors != 0 || r.Overlaps != 0 || r.Timeouts != 0 || r.FenceBad != 0 || r.Truncated {
					t.Fatalf("%s: %+v", r.Table, r)
				}
				if tc.Pair != "" && (r.PairP50 <= 0 || r.PairCmds < 2) {
					t.Errorf("%s: pair figures missing: %+v", r.Table, r)
				}
				// Every acquisition and release goes through the hooks.
				if r.Cmds < 2 || r.Trips > r.Cmds || r.Wire < r.Cmds-0.01 {
					t.Errorf("%s: commands per op: hooks %.2f, trips %.2f, wire %.2f", r.Table, r.Cmds, r.Trips, r.Wire)
				}
				if tc.Scenario == "contended" {
					total := 0
					for _, n := range r.PerWorker {
						total += n
					}
					if total != tc.N || len(r.PerWorker) != tc.Workers {
						t.Errorf("%s: per worker %v", r.Table, r.PerWorker)
					}
				}
			}
		})
	}
	// Runs clean up after themselves.
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if left, _ := admin.Keys(context.Background(), "lkbench:*").Result(); len(left) > 0 {
		t.Errorf("keys left behind: %d, e.g. %s", len(left), left[0])
	}
}

func with(c Config, scenario, driver string, f func(*Config)) Config {
	c.Scenario, c.Driver = scenario, driver
	f(&c)
	return c
}

func TestSpawnedServerIsExclusiveAndStops(t *testing.T) {
	needRedisServer(t)
	srv, err := spawnServers(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: "serial", Driver: "raw", N: 100, Addrs: srv.addrs, Exclusive: true}
	r, err := runOne(cfg)
	if err != nil {
		srv.stop()
		t.Fatal(err)
	}
	// SET + EVALSHA, and GET + DEL inside the script: 4 executed per cycle.
	if r.Executed < 3.9 || r.Executed > 4.1 || r.RedisCPU <= 0 {
		t.Errorf("executed %.2f per cycle, Redis CPU %.2f µs", r.Executed, r.RedisCPU)
	}
	proc := srv.cmds[0].Process
	srv.stop()
	if _, err := os.Stat("/proc/" + strconv.Itoa(proc.Pid) + "/status"); err == nil {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(proc.Pid) + "/status")
		if !bytes.Contains(b, []byte("redis")) {
			return // PID reused by something else
		}
		t.Errorf("redis-server %d still exists after stop", proc.Pid)
	}
}

func TestMatrixListsVariantsAndFitsSmokeBudget(t *testing.T) {
	runs := matrixRuns(sizes["smoke"], []string{"raw", "redsync"})
	var joined []string
	for _, r := range runs {
		joined = append(joined, strings.Join(r, " "))
	}
	all := strings.Join(joined, "\n")
	for _, want := range []string{
		"-scenario ping -n", "-scenario ping -idle 1ms",
		"-scenario contended -driver redsync -workers 8 -n 400 -retry 1ms",
		"-scenario contended -driver raw -workers 2 -think 500us",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("matrix lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "-driver raw -workers 8 -n 400 -retry") {
		t.Errorf("raw should have no retry variant")
	}
}

func TestReportHasTablesAndTargets(t *testing.T) {
	mk := func(scenario, label string, workers int, think float64, f func(*Result)) Result {
		r := Result{Scenario: scenario, Driver: strings.Fields(label)[0], Label: label, Workers: workers, ThinkUS: think,
			Rate: 1000, P50: 100, Ops: 100, Cmds: 2, Trips: 2, Wire: 2, Executed: -1, RedisCPU: -1, OtherPct: -1}
		cfg := Config{Scenario: scenario, Driver: r.Driver, Workers: workers, Hold: time.Millisecond, Think: time.Duration(think) * time.Microsecond}
		describe(&r, cfg)
		r.Label = label
		if scenario == "contended" {
			r.PerWorker = []int{50, 50}
			r.HandoffN, r.HandoffP50, r.HandoffP99 = 10, 200, 500
		}
		f(&r)
		return r
	}
	results := []Result{
		mk("serial", "raw", 1, 0, func(r *Result) {}),
		mk("serial", "latchkey", 1, 0, func(r *Result) { r.P50 = 110 }),
		mk("parallel", "raw", 16, 0, func(r *Result) {}),
		mk("parallel", "latchkey", 16, 0, func(r *Result) { r.Rate = 950 }),
		mk("contended", "raw", 2, 500, func(r *Result) {}),
		mk("contended", "latchkey", 2, 500, func(r *Result) {}),
	}
	var buf bytes.Buffer
	writeReport(&buf, results, reportMeta{})
	out := buf.String()
	for _, want := range []string{
		"## At a glance", "## Full tables", "### serial: 1 goroutine",
		"| latchkey: serial p50 | serial: 1 goroutine, distinct keys, acquire+release cycles | 1.10× raw (110 vs 100) | ≤ 1.05× raw | **miss** |",
		"| latchkey: parallel cycles/s | parallel: 16 goroutines, distinct keys, acquire+release cycles | 0.95× raw",
		"| latchkey: handoff p50 | contended: 2 goroutines on one key, hold 1ms, think 500µs after each release | 200 µs | ≤ 250 µs | ok |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestMemoryScenario(t *testing.T) {
	if _, err := runMemory(context.Background(), Config{Scenario: "memory", Driver: "raw", N: 10}, &env{prober: &prober{}}); err == nil {
		t.Errorf("a shared server: no error")
	}
	needRedisServer(t)
	var results []Result
	for _, d := range []string{"raw", "latchkey"} {
		r, err := runOne(Config{Scenario: "memory", Driver: d, N: 300, Workers: 4, Spawn: 1})
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if r.Ops != 300 || r.Errors != 0 || r.Truncated || r.NoExpiry != 0 || r.MemBefore <= 0 || r.DBSizeAfter != r.DBSizeBefore+int64(r.KeysLeft) {
			t.Errorf("%s: %+v", d, r)
		}
		results = append(results, r)
	}
	// raw deletes its key on release; latchkey keeps a fence counter per
	// key, expiring within core's retention.
	if raw := results[0]; raw.KeysLeft != 0 {
		t.Errorf("raw left %d keys, e.g. %s", raw.KeysLeft, raw.LeftExample)
	}
	// Nothing left means no memory either: not the driver's connections,
	// not the inspecting commands' latency histograms (tens of KB each).
	if raw := results[0]; raw.MemAfter-raw.MemBefore > 16<<10 || raw.MemAfter-raw.MemBefore < -16<<10 {
		t.Errorf("raw: used_memory %d -> %d bytes", raw.MemBefore, raw.MemAfter)
	}
	if lk := results[1]; lk.KeysLeft != 300 || lk.MaxPTTLMS <= 0 || lk.MaxPTTLMS > fenceRetentionMS ||
		!strings.HasSuffix(lk.LeftExample, ":fence") || lk.KeyBytes <= 0 {
		t.Errorf("latchkey: %d keys left (e.g. %s), largest PTTL %d ms, %v bytes each",
			lk.KeysLeft, lk.LeftExample, lk.MaxPTTLMS, lk.KeyBytes)
	}
	var buf bytes.Buffer
	writeReport(&buf, results, reportMeta{})
	for _, want := range []string{"### memory: 300 distinct keys", "| latchkey | 1 | 300 |", "- MET: Redis memory a released key leaves"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

// needRedisServer skips the test when there is no redis-server binary to
// spawn, or fails it where servers are required (LATCHKEY_REQUIRE_SERVERS=1,
// as make ci sets).
func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(redisServerPath()); err != nil {
		msg := fmt.Sprintf("no redis-server binary: %v", err)
		if os.Getenv("LATCHKEY_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}
