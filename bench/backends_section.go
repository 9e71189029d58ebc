package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
)

// backendOptions are the settings of the backend comparison (-backends).
type backendOptions struct {
	names   []string      // backends, in table order; empty: all
	rounds  int           // each round runs every backend in a new shuffled order
	serialN int           // serial: TryLock+Release cycles per run
	serialT time.Duration // serial: time bound per run
	window  time.Duration // contended: measuring window
	procs   int           // contended: worker processes
	hold    time.Duration // contended: time each holder holds
	idle    time.Duration // idle window before each serial run: counter noise
	seed    uint64
	out     string // JSONL of every run, appended
	exe     string // worker binary (default: this one)
	quiet   bool   // no progress lines
}

// backendRun is one measured run of the section, written as one JSON line.
type backendRun struct {
	Backend string  `json:"backend"`
	Kind    string  `json:"kind"` // serial | contended
	Round   int     `json:"round"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"` // cycles/s or acquisitions/s
	P50     float64 `json:"p50_us"`
	P99     float64 `json:"p99_us"` // serial: cycle; contended: wait
	Errors  int     `json:"errors"`

	// contended
	Procs    int   `json:"procs,omitempty"`
	PerProc  []int `json:"per_proc,omitempty"`
	Overlaps int   `json:"overlaps,omitempty"`
	// PendingMax is the longest wait still unfinished at the end of the
	// window (µs): what a starved process waited without acquiring.
	PendingMax float64 `json:"pending_max_us,omitempty"`
	WaitMax    float64 `json:"wait_max_us,omitempty"`
	// Handoffs counts acquisitions by another process than the previous one.
	Handoffs int `json:"handoffs,omitempty"`
	FenceBad int `json:"fence_bad,omitempty"`

	// per op; absent: not measured
	Counts map[string]float64 `json:"counts,omitempty"`
	// counters' rise per second over an idle window before the run (a
	// shared server's other clients); absent: not measured
	Noise map[string]float64 `json:"noise_per_s,omitempty"`
}

// workerSpec is what a contended worker process gets in $LKBENCH_BACKEND_WORKER.
type workerSpec struct {
	Conf   backendConf `json:"conf"`
	Key    string      `json:"key"`
	HoldUS int64       `json:"hold_us"`
}

// workerAcq is one acquisition by a worker: wall-clock times, comparable
// between processes of one machine.
type workerAcq struct {
	Got   int64 `json:"got"`  // Lock returned (unix ns)
	Rel   int64 `json:"rel"`  // Release called (unix ns)
	Wait  int64 `json:"wait"` // Lock call to return (ns)
	Fence int64 `json:"fence"`
	Proc  int   `json:"-"` // set by the parent
}

type workerResult struct {
	Acqs    []workerAcq        `json:"acqs"`
	Errors  int                `json:"errors"`
	FirstEr string             `json:"first_error,omitempty"`
	Counts  map[string]float64 `json:"counts,omitempty"` // client-side counts in the window
	// Pending is the wait still in progress when the window ended (ns):
	// a starved process's wait, which no acquisition reports.
	Pending int64 `json:"pending"`
}

const workerEnv = "LKBENCH_BACKEND_WORKER"

// maybeBackendWorker runs this process as a contended worker if
// $LKBENCH_BACKEND_WORKER is set, and exits. It is called first by main
// and by TestMain, so the test binary can be a worker too.
func maybeBackendWorker() {
	spec := os.Getenv(workerEnv)
	if spec == "" {
		return
	}
	if err := backendWorker(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// backendWorker opens its own Client, warms it up, says "ready", waits for
// "go <window>", then takes the key over and over (Lock, hold, Release)
// until the window ends, and prints what it saw as one JSON line.
func backendWorker(specJSON string, in io.Reader, out io.Writer) error {
	var spec workerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	bc, err := openBackend(spec.Conf)
	if err != nil {
		return err
	}
	defer bc.Close()
	ctx := context.Background()
	for i := range 3 { // open connections, sessions, prepared paths
		l, err := bc.c.TryLock(ctx, fmt.Sprintf("%s:warm:%d:%d", spec.Key, os.Getpid(), i))
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("warm-up release: %w", err)
		}
	}
	fmt.Fprintln(out, "ready")
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	window, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(line, "go ")))
	if err != nil {
		return err
	}
	c0 := bc.clientCounts()
	end := time.Now().Add(window)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var res workerResult
	hold := time.Duration(spec.HoldUS) * time.Microsecond
	for time.Now().Before(end) {
		t0 := time.Now()
		l, err := bc.c.Lock(wctx, spec.Key)
		if err != nil {
			if wctx.Err() != nil {
				res.Pending = time.Since(t0).Nanoseconds()
				break // the window ended while waiting
			}
			res.Errors++
			if res.FirstEr == "" {
				res.FirstEr = err.Error()
			}
			continue
		}
		got := time.Now()
		time.Sleep(hold)
		rel := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err = l.Release(rctx)
		rcancel()
		if err != nil {
			res.Errors++
			if res.FirstEr == "" {
				res.FirstEr = "release: " + err.Error()
			}
		}
		if got.Before(end) {
			res.Acqs = append(res.Acqs, workerAcq{Got: got.UnixNano(), Rel: rel.UnixNano(), Wait: got.Sub(t0).Nanoseconds(), Fence: l.Fence()})
		}
	}
	res.Counts = subCounts(c0, bc.clientCounts(), nil)
	return json.NewEncoder(out).Encode(res)
}

// runBackends runs the section and writes its report to w. It returns the
// backends it skipped, with the reason.
func runBackends(w io.Writer, o backendOptions) (map[string]string, error) {
	if len(o.names) == 0 {
		o.names = backendNames
	}
	for _, n := range o.names {
		if !slices.Contains(backendNames, n) {
			return nil, fmt.Errorf("unknown backend %q (have: %s)", n, strings.Join(backendNames, ", "))
		}
	}
	if o.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.exe = exe
	}
	seed := o.seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	rng := mrand.New(mrand.NewPCG(seed, 0))
	var b [5]byte
	rand.Read(b[:])
	runID := hex.EncodeToString(b[:])
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}

	started := time.Now()
	setups := map[string]*backendSetup{}
	skipped := map[string]string{}
	var active []string
	defer func() {
		for _, n := range active {
			if err := setups[n].cleanup(); err != nil {
				fmt.Fprintf(os.Stderr, "cleanup %s: %v\n", n, err)
			}
		}
	}()
	for _, n := range o.names {
		t0 := time.Now()
		s, err := setupBackend(n, runID, 10*time.Second)
		if errors.Is(err, errUnavailable) {
			skipped[n] = err.Error()
			progress("%s: skipped: %v", n, err)
			continue
		}
		if err != nil {
			return skipped, fmt.Errorf("%s: %w", n, err)
		}
		setups[n] = s
		active = append(active, n)
		progress("%s: ready in %.1fs", n, time.Since(t0).Seconds())
	}

	var outFile *os.File
	if o.out != "" {
		var err error
		if outFile, err = os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return skipped, err
		}
		defer outFile.Close()
	}
	var runs []backendRun
	var failures []string
	for round := 1; round <= o.rounds; round++ {
		order := slices.Clone(active)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, n := range order {
			for _, kind := range []string{"serial", "contended"} {
				t0 := time.Now()
				var (
					r   backendRun
					err error
				)
				if kind == "serial" {
					r, err = backendSerial(setups[n], o, round)
				} else {
					r, err = backendContended(setups[n], o, round)
				}
				r.Backend, r.Kind, r.Round = n, kind, round
				progress("[round %d/%d] %s %s: %d ops, %.1fs", round, o.rounds, n, kind, r.Ops, time.Since(t0).Seconds())
				if err != nil {
					failures = append(failures, fmt.Sprintf("round %d %s %s: %v", round, n, kind, err))
					progress("  FAILED: %v", err)
					continue
				}
				runs = append(runs, r)
				if outFile != nil {
					line, _ := json.Marshal(r)
					outFile.Write(append(line, '\n'))
				}
			}
		}
	}
	writeBackendReport(w, runs, skipped, o, seed, time.Since(started))
	if len(failures) > 0 {
		return skipped, fmt.Errorf("%d runs failed:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	return skipped, nil
}

// readCounts reads the setup's server counters, or nil.
func readCounts(s *backendSetup) map[string]float64 {
	if s.read == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := s.read(ctx)
	if err != nil {
		return nil
	}
	return m
}

// mergeCounts adds b's counts into a copy of a (client-side counts are
// summed over processes and override nothing: each backend counts "reqs"
// on one side only).
func mergeCounts(a, b map[string]float64) map[string]float64 {
	if a == nil && b == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

func perOpCounts(d map[string]float64, ops int) map[string]float64 {
	if d == nil || ops == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range d {
		out[k] = v / float64(ops)
	}
	return out
}

// backendSerial: one Client, TryLock+Release cycles on a new key each,
// each cycle timed; the counters around the run, and over an idle window
// before it.
func backendSerial(s *backendSetup, o backendOptions, round int) (backendRun, error) {
	var r backendRun
	bc, err := openBackend(s.conf)
	if err != nil {
		return r, err
	}
	defer bc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.serialT+30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("lkbench:%s:r%d:serial:", s.conf.RunID, round)
	cycle := func(key string) error {
		l, err := bc.c.TryLock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	for i := range 20 {
		if err := cycle(fmt.Sprintf("%swarm:%d", prefix, i)); err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	if o.idle > 0 && s.read != nil {
		a := readCounts(s)
		time.Sleep(o.idle)
		if d := subCounts(a, readCounts(s), s.overhead); d != nil {
			r.Noise = map[string]float64{}
			for k, v := range d {
				r.Noise[k] = v / o.idle.Seconds()
			}
		}
	}
	before, c0 := readCounts(s), bc.clientCounts()
	var samples Samples
	start := time.Now()
	for i := 0; i < o.serialN && time.Since(start) < o.serialT; i++ {
		t0 := time.Now()
		if err := cycle(fmt.Sprintf("%s%d", prefix, i)); err != nil {
			r.Errors++
			if errors.Is(err, core.ErrNotAcquired) || r.Errors > 10 {
				return r, err
			}
			continue
		}
		samples.Add(time.Since(t0))
	}
	elapsed := time.Since(start)
	r.Ops, r.Seconds = len(samples), elapsed.Seconds()
	r.Rate = float64(r.Ops) / elapsed.Seconds()
	sum := samples.Summarize()
	r.P50, r.P99 = sum.P50, sum.P99
	r.Counts = perOpCounts(mergeCounts(subCounts(before, readCounts(s), s.overhead), subCounts(c0, bc.clientCounts(), nil)), r.Ops)
	return r, nil
}

// backendContended: o.procs worker processes, each with its own Client,
// contend for one key for o.window, each holding it o.hold at a time.
func backendContended(s *backendSetup, o backendOptions, round int) (backendRun, error) {
	r := backendRun{Procs: o.procs}
	spec, _ := json.Marshal(workerSpec{Conf: s.conf, Key: fmt.Sprintf("lkbench:%s:r%d:contended", s.conf.RunID, round),
		HoldUS: o.hold.Microseconds()})
	ctx, cancel := context.WithTimeout(context.Background(), o.window+90*time.Second)
	defer cancel()
	type worker struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr strings.Builder
	}
	ws := make([]*worker, o.procs)
	defer func() {
		for _, w := range ws {
			if w != nil && w.cmd.Process != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}
	}()
	for i := range ws {
		w := &worker{cmd: exec.CommandContext(ctx, o.exe)}
		w.cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
		w.cmd.Stderr = &w.stderr
		var err error
		if w.stdin, err = w.cmd.StdinPipe(); err != nil {
			return r, err
		}
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			return r, err
		}
		w.stdout = bufio.NewReader(out)
		if err := w.cmd.Start(); err != nil {
			return r, err
		}
		ws[i] = w
	}
	for i, w := range ws {
		line, err := w.stdout.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			_ = w.cmd.Wait()
			return r, fmt.Errorf("worker %d not ready (%q, %v): %s", i, line, err, strings.TrimSpace(w.stderr.String()))
		}
	}
	before := readCounts(s)
	for _, w := range ws {
		fmt.Fprintf(w.stdin, "go %s\n", o.window)
	}
	results := make([]workerResult, len(ws))
	for i, w := range ws {
		line, err := w.stdout.ReadString('\n')
		if err == nil {
			err = json.Unmarshal([]byte(line), &results[i])
		}
		if err != nil {
			_ = w.cmd.Wait()
			return r, fmt.Errorf("worker %d: %v: %s", i, err, strings.TrimSpace(w.stderr.String()))
		}
	}
	after := readCounts(s)
	for i, w := range ws {
		w.stdin.Close()
		if err := w.cmd.Wait(); err != nil {
			return r, fmt.Errorf("worker %d: %v: %s", i, err, strings.TrimSpace(w.stderr.String()))
		}
	}

	var all []workerAcq
	var waits Samples
	var client map[string]float64
	for _, res := range results {
		r.PerProc = append(r.PerProc, len(res.Acqs))
		r.Errors += res.Errors
		if res.FirstEr != "" {
			fmt.Fprintf(os.Stderr, "  %s: worker error: %s\n", s.conf.Name, res.FirstEr)
		}
		for _, a := range res.Acqs {
			a.Proc = len(r.PerProc)
			all = append(all, a)
		}
		for _, a := range res.Acqs {
			waits.Add(time.Duration(a.Wait))
		}
		client = mergeCounts(client, res.Counts)
		r.PendingMax = max(r.PendingMax, float64(res.Pending)/1e3)
	}
	// Each holder's interval (Lock returned .. Release called) lies inside
	// its lease; two that intersect are an overlap. Fences must rise from
	// holder to holder.
	slices.SortFunc(all, func(a, b workerAcq) int { return cmp.Compare(a.Got, b.Got) })
	for i := 1; i < len(all); i++ {
		if all[i].Got < all[i-1].Rel {
			r.Overlaps++
		}
		if all[i].Fence <= all[i-1].Fence {
			r.FenceBad++
		}
		if all[i].Proc != all[i-1].Proc {
			r.Handoffs++
		}
	}
	r.Ops, r.Seconds = len(all), o.window.Seconds()
	r.Rate = float64(r.Ops) / o.window.Seconds()
	sum := waits.Summarize()
	r.P50, r.P99, r.WaitMax = sum.P50, sum.P99, sum.Max
	r.Counts = perOpCounts(mergeCounts(subCounts(before, after, s.overhead), client), r.Ops)
	return r, nil
}

// writeBackendReport prints the section's markdown: the summary table
// (medians over rounds), the per-round figures, and what was skipped.
func writeBackendReport(w io.Writer, runs []backendRun, skipped map[string]string, o backendOptions, seed uint64, elapsed time.Duration) {
	fmt.Fprintf(w, "## latchkey on each backend\n\n")
	fmt.Fprintf(w, "%d round(s), seed %d, %.0f s. Serial: 1 Client, TryLock+Release on a new key per cycle, up to %d cycles or %v per run. "+
		"Contended: %d worker processes, each with its own Client and connections, on one key for %v, holding it %v each time (Lock, sleep, Release). "+
		"Medians over rounds; per process: the least and most acquisitions of one process, over all rounds; "+
		"wait percentiles are over completed acquisitions, and the longest wait includes a wait still unfinished when the window closed (a starved process).\n\n",
		o.rounds, seed, elapsed.Seconds(), o.serialN, o.serialT, o.procs, o.window, o.hold)
	fmt.Fprintln(w, "| backend | serial p50 µs | serial p99 µs | cycles/s | contended acq/s | handoffs/s (holder changes process) | wait p50 ms | wait p99 ms | longest wait ms, unfinished included | acq per process | overlaps / fence regressions / errors | requests per serial cycle | requests per contended acq | commits per serial cycle | commits per contended acq |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range backendNames {
		var ser, con []backendRun
		for _, r := range runs {
			if r.Backend != n {
				continue
			}
			if r.Kind == "serial" {
				ser = append(ser, r)
			} else {
				con = append(con, r)
			}
		}
		if len(ser)+len(con) == 0 {
			continue
		}
		lo, hi, bad, longest := math.MaxInt, 0, [3]int{}, 0.0
		for _, r := range con {
			longest = max(longest, r.WaitMax, r.PendingMax)
			for _, c := range r.PerProc {
				lo, hi = min(lo, c), max(hi, c)
			}
			bad[0] += r.Overlaps
			bad[1] += r.FenceBad
			bad[2] += r.Errors
		}
		for _, r := range ser {
			bad[2] += r.Errors
		}
		perProc := "–"
		if hi > 0 {
			perProc = fmt.Sprintf("%d–%d", lo, hi)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %d / %d / %d | %s | %s | %s | %s |\n", n,
			medOf(ser, func(r backendRun) float64 { return r.P50 }, "%.0f"),
			medOf(ser, func(r backendRun) float64 { return r.P99 }, "%.0f"),
			medOf(ser, func(r backendRun) float64 { return r.Rate }, "%.0f"),
			medOf(con, func(r backendRun) float64 { return r.Rate }, "%.0f"),
			medOf(con, func(r backendRun) float64 { return float64(r.Handoffs) / r.Seconds }, "%.0f"),
			medOf(con, func(r backendRun) float64 { return r.P50 / 1000 }, "%.2f"),
			medOf(con, func(r backendRun) float64 { return r.P99 / 1000 }, "%.1f"),
			longest/1000, perProc, bad[0], bad[1], bad[2],
			countOf(ser, "reqs"), countOf(con, "reqs"), countOf(ser, "commits"), countOf(con, "commits"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What the request and commit columns count (\"–\": not measured):")
	fmt.Fprintln(w)
	for _, n := range backendNames {
		if _, ok := skipped[n]; ok {
			continue
		}
		fmt.Fprintf(w, "- %s: %s\n", n, countSpec[n])
	}
	extra := false
	for _, n := range backendNames {
		for _, r := range runs {
			if r.Backend == n && r.Kind == "serial" && r.Counts != nil {
				for _, k := range []string{"executed", "fsyncs", "prepares"} {
					if _, ok := r.Counts[k]; ok {
						if !extra {
							fmt.Fprint(w, "\nFurther server counters per serial cycle / per contended acquisition (medians):\n\n")
							extra = true
						}
						var ser, con []backendRun
						for _, x := range runs {
							if x.Backend == n && x.Kind == "serial" {
								ser = append(ser, x)
							} else if x.Backend == n {
								con = append(con, x)
							}
						}
						fmt.Fprintf(w, "- %s %s: %s / %s\n", n, k, countOf(ser, k), countOf(con, k))
					}
				}
				break
			}
		}
	}
	fmt.Fprint(w, "\nCounter noise: the server counter's rise per second over an idle window before each serial run (requests; Redis: executed commands), from other clients of a shared server or our own sessions' pings, median (max):\n\n")
	for _, n := range backendNames {
		var v []float64
		for _, r := range runs {
			if r.Backend == n && r.Kind == "serial" && r.Noise != nil {
				x, ok := r.Noise["reqs"]
				if !ok {
					x = r.Noise["executed"] // Redis counts its requests client-side
				}
				v = append(v, x)
			}
		}
		if len(v) > 0 {
			fmt.Fprintf(w, "- %s: %.1f (%.1f)\n", n, median(v), slices.Max(v))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprint(w, "\nSkipped:\n\n")
		for _, n := range backendNames {
			if why, ok := skipped[n]; ok {
				fmt.Fprintf(w, "- %s: %s\n", n, why)
			}
		}
	}
	fmt.Fprint(w, "\nEvery run:\n\n")
	fmt.Fprintln(w, "| round | backend | kind | ops | rate/s | handoffs | p50 µs | p99 µs | per process | requests/op | commits/op |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		pp := "–"
		if len(r.PerProc) > 0 {
			pp = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.PerProc)), " "), "[]")
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %.0f | %d | %.0f | %.0f | %s | %s | %s |\n", r.Round, r.Backend, r.Kind, r.Ops, r.Rate, r.Handoffs, r.P50, r.P99, pp,
			countOf([]backendRun{r}, "reqs"), countOf([]backendRun{r}, "commits"))
	}
}

func medOf(rs []backendRun, f func(backendRun) float64, format string) string {
	if len(rs) == 0 {
		return "–"
	}
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return fmt.Sprintf(format, median(v))
}

func countOf(rs []backendRun, key string) string {
	var v []float64
	for _, r := range rs {
		if x, ok := r.Counts[key]; ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", median(v))
}
