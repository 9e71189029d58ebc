package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

type matrixOptions struct {
	kind      string // smoke or full
	rounds    int
	drivers   []string
	out       string
	addrs     []string
	spawn     int
	exclusive bool
	seed      uint64
	// primitives runs the primitives section (primitiveRuns) instead of
	// the lock matrix.
	primitives bool
}

// matrixSizes are the per-run operation counts and time bound of a matrix.
type matrixSizes struct {
	ping, pingIdle, serial, parallel, contended, think int
	maxTime                                            time.Duration
}

var sizes = map[string]matrixSizes{
	// smoke: the whole matrix in well under a minute.
	"smoke": {ping: 3000, pingIdle: 300, serial: 2000, parallel: 5000, contended: 400, think: 200, maxTime: 15 * time.Second},
	// full: the largest counts (the published tables).
	"full": {ping: 20000, pingIdle: 3000, serial: 10000, parallel: 20000, contended: 2000, think: 1000, maxTime: 60 * time.Second},
	// scale: latchkey alone as it grows (scaleRuns); each run carries its
	// own time bound, and maxTime bounds the longest.
	"scale": {maxTime: 300 * time.Second},
}

// The scale sweep's sizes: leases renewed at once; waiters, over how many
// keys; Clients (processes) of a fleet; distinct keys acquired and
// released once.
var (
	scaleLeases  = []int{1000, 10000, 100000, 400000}
	scaleWaiters = []int{100, 1000, 10000}
	scaleKeys    = []int{1, 10, 1000}
	scaleClients = []int{10, 100, 500}
	scaleMemory  = []int{1000, 10000, 100000}
)

// Goroutines per Client in the sweep's two contended shapes: they tell a
// run of one from a run of the other (isFleet; cmd/charts says the same).
const (
	waitersPerClient = 20 // the waiters runs
	fleetPerClient   = 2  // the fleets of Clients
)

// isFleet reports whether a contended run of the sweep is one of its
// fleets of Clients rather than of its waiters runs.
func isFleet(r Result) bool { return r.Clients > 0 && r.Workers == fleetPerClient*r.Clients }

// scaleRuns lists the scale sweep (-matrix scale), latchkey's driver
// alone: renewals of 1k to 400k leases at TTL 3 s; 100 to 10k waiters
// over 1 to 1k keys, 20 waiters per Client (process), each holding 1 ms,
// for 30 s; a fleet of 10 to 500 Clients, two goroutines each, on 10 keys,
// for 20 s; and what 1k to 100k released keys leave on the server.
// Contended runs are bounded by time, not by count, and wait up to a
// minute, so that a waiter that never acquires is starved, not timed out.
// The runs keep this order (no shuffle): each size is a point of a curve,
// not a driver to compare in the same conditions.
func scaleRuns(matrixSizes, []string) [][]string {
	n := strconv.Itoa
	var runs [][]string
	// What released keys leave comes first, in a row, while nothing an
	// earlier run left can expire under its reading of used_memory (fence
	// counters live 5 minutes).
	for _, m := range scaleMemory {
		runs = append(runs, []string{"-scenario", "memory", "-driver", "latchkey", "-n", n(m), "-max-time", "150s"})
	}
	for _, l := range scaleLeases {
		// Taking and releasing 400k leases takes minutes on 2 vCPUs.
		runs = append(runs, []string{"-scenario", "renew", "-driver", "latchkey", "-n", n(l), "-ttl", "3s",
			"-renew-window", "10s", "-max-time", "300s"})
	}
	fleet := func(clients, workers, keys int, d string) []string {
		return []string{"-scenario", "contended", "-driver", "latchkey", "-clients", n(clients), "-workers", n(workers),
			"-lock-keys", n(keys), "-pool", "2", "-n", "100000000", "-max-time", d, "-wait-timeout", "60s"}
	}
	for _, w := range scaleWaiters {
		for _, k := range scaleKeys {
			runs = append(runs, fleet(max(w/waitersPerClient, 5), w, k, "30s"))
		}
	}
	for _, c := range scaleClients {
		runs = append(runs, fleet(c, fleetPerClient*c, 10, "20s"))
	}
	return runs
}

// matrixRuns lists one round of runs, each as command-line arguments.
func matrixRuns(sz matrixSizes, drivers []string) [][]string {
	n := strconv.Itoa
	runs := [][]string{
		{"-scenario", "ping", "-n", n(sz.ping)},
		{"-scenario", "ping", "-idle", "1ms", "-n", n(sz.pingIdle)},
	}
	for _, d := range drivers {
		runs = append(runs,
			[]string{"-scenario", "serial", "-driver", d, "-n", n(sz.serial)},
			[]string{"-scenario", "parallel", "-driver", d, "-n", n(sz.parallel)})
	}
	for _, d := range drivers {
		if d == "raw" {
			continue
		}
		// Paired serial runs only: in a saturated parallel run the drivers
		// share one CPU budget, so pairing hides their cost differences.
		for _, keys := range []string{"cycle", "goroutine"} {
			runs = append(runs, []string{"-scenario", "serial", "-driver", d, "-pair", "raw", "-keys", keys, "-n", n(sz.serial)})
		}
	}
	shapes := [][]string{
		{"-workers", "8", "-n", n(sz.contended)},
		{"-workers", "2", "-n", n(sz.contended)},
		{"-workers", "2", "-think", "500us", "-n", n(sz.think)},
		{"-workers", "8", "-think", "500us", "-n", n(sz.think)},
	}
	for _, shape := range shapes {
		for _, d := range drivers {
			base := append([]string{"-scenario", "contended", "-driver", d}, shape...)
			runs = append(runs, base)
			if registry[d].fastRetry {
				runs = append(runs, append(append([]string{}, base...), "-retry", "1ms"))
			}
		}
	}
	return runs
}

// primitiveRuns lists one round of the primitives section: for every
// driver, an unpaired serial run (its cycles/s, executed commands and CPU
// per cycle), a serial run paired with raw (each cycle alternating with a
// raw cycle in the same goroutine: the uncontended figures next to the
// floor), and the contended scenario with 8 greedy goroutines, whose raw
// run is in the same round. A lock that lets k holders in at once gets k
// times the acquisitions, so that every contended run lasts about as long.
func primitiveRuns(sz matrixSizes, drivers []string) [][]string {
	n := strconv.Itoa
	var runs [][]string
	for _, d := range drivers {
		runs = append(runs, []string{"-scenario", "serial", "-driver", d, "-n", n(sz.serial)})
		if d != "raw" {
			runs = append(runs, []string{"-scenario", "serial", "-driver", d, "-pair", "raw", "-keys", "cycle", "-n", n(sz.serial)})
		}
		runs = append(runs, []string{"-scenario", "contended", "-driver", d, "-workers", n(primitiveWorkers),
			"-n", n(sz.contended * holdersAtOnce(d, primitiveWorkers))})
	}
	return runs
}

// primitiveWorkers is the number of goroutines of the primitives section's
// contended runs.
const primitiveWorkers = 8

// primitiveDrivers lists the drivers of the primitives section: raw (the
// floor) and latchkey's mutex for reference, then every primitive; or
// those named, with raw added.
func primitiveDrivers(named []string) []string {
	if len(named) > 0 {
		if !slices.Contains(named, "raw") {
			named = append([]string{"raw"}, named...)
		}
		return named
	}
	var out []string
	for _, d := range driverNames() {
		if s := registry[d]; s.nodes == 1 && (s.primitive || d == "raw" || d == "latchkey") {
			out = append(out, d)
		}
	}
	return out
}

func runMatrix(o matrixOptions) error {
	sz, ok := sizes[o.kind]
	if !ok {
		return fmt.Errorf("unknown matrix %q (smoke, full or scale)", o.kind)
	}
	listRuns := matrixRuns
	switch {
	case o.kind == "scale" && o.rounds > 1:
		// Its memory runs read used_memory, which what an earlier round
		// left would move as it expired.
		return fmt.Errorf("-matrix scale runs one round")
	case o.kind == "scale":
		o.drivers, listRuns = []string{"latchkey"}, scaleRuns
	case o.primitives:
		o.drivers, listRuns = primitiveDrivers(o.drivers), primitiveRuns
	case len(o.drivers) == 0:
		for _, d := range driverNames() {
			if s := registry[d]; s.nodes == 1 && !s.optional && !s.primitive {
				o.drivers = append(o.drivers, d)
			}
		}
	}
	nodes := 1
	for _, d := range o.drivers {
		s, err := lookupDriver(d)
		if err != nil {
			return err
		}
		nodes = max(nodes, s.nodes)
	}
	if o.spawn > 0 {
		srv, err := spawnServers(max(o.spawn, nodes))
		if err != nil {
			return err
		}
		defer srv.stop()
		o.addrs, o.exclusive = srv.addrs, true
	} else if len(o.addrs) < nodes {
		return fmt.Errorf("the drivers need %d Redis servers; give -addr a list or use -spawn", nodes)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	common := []string{"-json", "-addr", strings.Join(o.addrs, ",")}
	if o.kind != "scale" { // its runs bound themselves
		common = append(common, "-max-time", sz.maxTime.String())
	}
	if o.exclusive {
		common = append(common, "-exclusive")
	}

	var outFile *os.File
	if o.out != "" {
		if outFile, err = os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return err
		}
		defer outFile.Close()
	}
	started, core := time.Now(), coreRevision()
	var results []Result
	failures := 0
	for round := 1; round <= o.rounds; round++ {
		runs := listRuns(sz, o.drivers)
		if o.kind != "scale" { // see scaleRuns
			rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
		}
		for i, args := range runs {
			t0 := time.Now()
			r, err := runChild(exe, append(args, common...), sz.maxTime+60*time.Second)
			fmt.Fprintf(os.Stderr, "[round %d/%d, run %d/%d] %s: %.1fs", round, o.rounds, i+1, len(runs),
				strings.Join(args, " "), time.Since(t0).Seconds())
			if err != nil {
				failures++
				fmt.Fprintf(os.Stderr, " FAILED: %v\n", err)
				continue
			}
			fmt.Fprintln(os.Stderr)
			r.Round = round
			results = append(results, r)
			if outFile != nil {
				line, _ := json.Marshal(r)
				outFile.Write(append(line, '\n'))
			}
		}
	}
	meta := reportMeta{
		when: started, elapsed: time.Since(started), kind: o.kind, rounds: o.rounds, seed: seed,
		exclusive: o.exclusive, addr: o.addrs[0], failures: failures, core: core, primitives: o.primitives,
	}
	writeReport(os.Stdout, results, meta)
	if failures > 0 {
		return fmt.Errorf("%d runs failed", failures)
	}
	return nil
}

// runChild runs one scenario in its own process, so no run inherits another's
// heap, goroutines or connections, and a hung run is killed by the timeout.
func runChild(exe string, args []string, timeout time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return Result{}, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("bad output %q: %w", stdout.String(), err)
	}
	return r, nil
}
