package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// describe fills a result's identity: the table it belongs to and its row.
func describe(r *Result, cfg Config) {
	r.Scenario, r.Driver = cfg.Scenario, cfg.Driver
	r.Label = cfg.Driver
	if cfg.Retry > 0 {
		r.Label += " retry=" + cfg.Retry.String()
	}
	if cfg.PerWorker {
		r.Label += " (clients per goroutine)"
	}
	switch cfg.Scenario {
	case "ping":
		r.Driver, r.Label = "", "go-redis"
		r.IdleUS = us(cfg.Idle)
		r.Table = "ping: go-redis PING round trip, 1 connection"
		if cfg.Idle > 0 {
			r.Table += fmt.Sprintf(", each PING after %v asleep", cfg.Idle)
		}
	case "serial", "parallel":
		r.Workers, r.Keys, r.Pair = cfg.Workers, cfg.Keys, cfg.Pair
		who := "1 goroutine"
		if cfg.Scenario == "parallel" {
			who = fmt.Sprintf("%d goroutines", cfg.Workers)
		}
		keys := "distinct keys"
		if cfg.Keys == "goroutine" {
			keys = "one key per goroutine, reused"
		}
		r.Table = fmt.Sprintf("%s: %s, %s, acquire+release cycles", cfg.Scenario, who, keys)
		if cfg.Pair != "" {
			r.Table = fmt.Sprintf("%s, paired with %s: %s, %s, each cycle alternating with a %s cycle",
				cfg.Scenario, cfg.Pair, who, keys, cfg.Pair)
		}
	case "renew":
		r.TTLMS = cfg.TTL.Milliseconds()
		r.Table = fmt.Sprintf("renew: %d leases of TTL %v on one Client, auto-renewed every TTL/3; a %v window", cfg.N, cfg.TTL, cfg.RenewWindow)
	case "memory":
		r.Workers = cfg.Workers
		r.Table = fmt.Sprintf("memory: %d distinct keys, each acquired and released once by %d goroutines; what Redis keeps after", cfg.N, cfg.Workers)
	case "contended":
		r.Workers, r.HoldUS, r.ThinkUS, r.RetryUS = cfg.Workers, us(cfg.Hold), us(cfg.Think), us(cfg.Retry)
		r.Table = fmt.Sprintf("contended: %d goroutines on one key, hold %v", cfg.Workers, cfg.Hold)
		if cfg.LockKeys > 1 {
			r.LockKeys = cfg.LockKeys
			r.Table = fmt.Sprintf("contended: %d goroutines on %d keys (one at random per acquisition), hold %v", cfg.Workers, cfg.LockKeys, cfg.Hold)
		}
		if cfg.Clients > 0 {
			r.Clients = cfg.Clients
			r.Table += fmt.Sprintf(", %d clients", cfg.Clients)
			r.Label = fmt.Sprintf("%s (%d clients)", cfg.Driver, cfg.Clients)
		}
		if cfg.Think > 0 {
			r.Table += fmt.Sprintf(", think %v after each release", cfg.Think)
		}
	}
}

// printResult prints one run for a person.
func printResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "%s\n%s: %d ops in %.2fs = %.0f/s", r.Table, r.Label, r.Ops, r.Seconds, r.Rate)
	if r.Truncated {
		fmt.Fprintf(w, " (cut short by -max-time; target %d)", r.Target)
	}
	fmt.Fprintf(w, "\n  latency p50 %s µs, p99 %s µs, max %s µs; errors %d\n", num(r.P50), num(r.P99), num(r.Max), r.Errors)
	fmt.Fprintf(w, "  per op: %s commands (hooks), %s round trips, %s on the wire, %s executed; dials in window %d\n",
		num(r.Cmds), num(r.Trips), num(r.Wire), opt(r.Executed), r.Dials)
	fmt.Fprintf(w, "  CPU per op: client %s µs, Redis %s µs; steal %.1f%%, other %s%%\n",
		opt(r.ClientCPU), opt(r.RedisCPU), r.StealPct, opt(r.OtherPct))
	if r.Pair != "" {
		fmt.Fprintf(w, "  paired %s: p50 %s µs, p99 %s µs, mean %s µs, %s commands per cycle; %s/%s: p50 × %s, mean × %s\n",
			r.Pair, num(r.PairP50), num(r.PairP99), num(r.PairMean), num(r.PairCmds), r.Driver, r.Pair,
			ratio(r.P50, r.PairP50), ratio(r.Mean, r.PairMean))
	}
	if r.Scenario == "renew" {
		fmt.Fprintf(w, "  %d leases renewed: client %.1f%% of a core, Redis %s%% of a core; leases lost %d\n",
			r.Leases, r.ClientPct, opt(r.RedisPct), r.Lost)
	}
	if r.Scenario == "memory" {
		fmt.Fprintf(w, "  used_memory %d -> %d bytes (%+d): %s bytes per released key; DBSIZE %d -> %d\n",
			r.MemBefore, r.MemAfter, r.MemAfter-r.MemBefore, num(r.BytesPerKey), r.DBSizeBefore, r.DBSizeAfter)
		fmt.Fprintf(w, "  keys left %d, without expiry %d, largest PTTL %s", r.KeysLeft, r.NoExpiry, time.Duration(r.MaxPTTLMS)*time.Millisecond)
		if r.KeysLeft > 0 {
			fmt.Fprintf(w, "; MEMORY USAGE %s bytes each (mean of up to %d), e.g. %s", num(r.KeyBytes), memoryInspectSample, r.LeftExample)
		}
		fmt.Fprintln(w)
	}
	if r.Scenario == "contended" {
		fmt.Fprintf(w, "  hold p50 %s µs; handoff to a waiting goroutine: %d, p50 %s µs, p99 %s µs; gap (any) p50 %s µs\n",
			num(r.HoldP50), r.HandoffN, num(r.HandoffP50), num(r.HandoffP99), num(r.GapP50))
		fmt.Fprintf(w, "  same owner again %.1f%%; wait p50 %s p99 %s max %s µs; per goroutine %v\n",
			r.SameOwnerPct, num(r.WaitP50), num(r.WaitP99), num(r.WaitMax), r.PerWorker)
		fmt.Fprintf(w, "  timeouts %d, overlaps %d, fence regressions %s, goroutines that never acquired %d\n", r.Timeouts, r.Overlaps, fenceCell(r), r.Starved)
	}
}

func fenceCell(r Result) string {
	if !r.FenceChecked {
		return "–"
	}
	return fmt.Sprint(r.FenceBad)
}

// reportFiles prints the tables for results saved as JSONL.
func reportFiles(w io.Writer, files []string) error {
	var results []Result
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			var r Result
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				fh.Close()
				return fmt.Errorf("%s: %w", f, err)
			}
			results = append(results, r)
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	writeReport(w, results, reportMeta{files: files})
	return nil
}

// group is the runs of one row of one table.
type group struct {
	table, label string
	runs         []Result
}

// groups orders results into tables (in scenario order) and rows (in driver
// order), keeping the first-seen order of the tables' titles otherwise.
func groups(results []Result) [][]*group {
	byTable := map[string]map[string]*group{}
	var tables []string
	for _, r := range results {
		rows, ok := byTable[r.Table]
		if !ok {
			rows = map[string]*group{}
			byTable[r.Table] = rows
			tables = append(tables, r.Table)
		}
		g, ok := rows[r.Label]
		if !ok {
			g = &group{table: r.Table, label: r.Label}
			rows[r.Label] = g
		}
		g.runs = append(g.runs, r)
	}
	sort.SliceStable(tables, func(i, j int) bool {
		return tableRank(byTable[tables[i]]) < tableRank(byTable[tables[j]])
	})
	var out [][]*group
	for _, t := range tables {
		var rows []*group
		for _, g := range byTable[t] {
			rows = append(rows, g)
		}
		sort.Slice(rows, func(i, j int) bool { return rowRank(rows[i]) < rowRank(rows[j]) })
		out = append(out, rows)
	}
	return out
}

func tableRank(rows map[string]*group) float64 {
	for _, g := range rows {
		r := g.runs[0]
		rank := map[string]float64{"ping": 0, "serial": 1e6, "parallel": 2e6, "contended": 3e6, "memory": 4e6}[r.Scenario]
		switch {
		case r.Scenario == "ping":
			rank += r.IdleUS
		case r.Scenario != "contended":
			if r.Keys == "goroutine" {
				rank += 2e5
			}
			if r.Pair != "" {
				rank += 5e5
			}
		case r.ThinkUS > 0: // think-time tables after the greedy ones
			rank += 1e5 + r.ThinkUS + float64(r.Workers)
		default:
			rank += 1e4 - float64(r.Workers) + r.HoldUS/1e3
		}
		return rank
	}
	return 0
}

func rowRank(g *group) string {
	r := g.runs[0]
	order := 999
	if s, ok := registry[r.Driver]; ok {
		order = s.order
	}
	return fmt.Sprintf("%04d %s", order, g.label)
}

// col extracts a metric from every run of a group.
func (g *group) col(f func(Result) float64) []float64 {
	v := make([]float64, 0, len(g.runs))
	for _, r := range g.runs {
		if x := f(r); x >= 0 && !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	return v
}

func (g *group) med(f func(Result) float64) float64 { return median(g.col(f)) }

// cell formats a metric as "median (min–max)", or just the value for one run.
func (g *group) cell(f func(Result) float64) string { return cellOf(g.col(f)) }

// signedCell is cell for a figure that may fall below zero (a memory
// difference), where a negative value is not "unknown".
func (g *group) signedCell(f func(Result) float64) string {
	v := make([]float64, len(g.runs))
	for i, r := range g.runs {
		v[i] = f(r)
	}
	return cellOf(v)
}

func cellOf(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	if len(v) == 1 {
		return num(v[0])
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(lo), num(hi))
}

func (g *group) sum(f func(Result) int) int {
	t := 0
	for _, r := range g.runs {
		t += f(r)
	}
	return t
}

// num formats with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// opt formats a figure that is negative when unknown.
func opt(v float64) string {
	if v < 0 {
		return "–"
	}
	return num(v)
}

func ratio(v, base float64) string {
	if base == 0 || v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/base)
}

type reportMeta struct {
	when       time.Time
	elapsed    time.Duration
	kind       string
	rounds     int
	seed       uint64
	exclusive  bool
	addr       string
	failures   int
	files      []string
	core       string // latchkey checkout when the matrix started
	primitives bool   // the primitives section rather than the lock matrix
}
