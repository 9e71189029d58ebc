package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// writePrimitives prints the primitives section (go run . -primitives): for
// raw, latchkey's mutex and each latchkey primitive, the uncontended cycle
// next to raw's from the same runs (the serial scenario paired with raw) and
// the contended throughput next to raw's from the same rounds. It prints
// nothing when the results hold no primitive.
func writePrimitives(w io.Writer, results []Result) {
	if !slices.ContainsFunc(results, func(r Result) bool { return registry[r.Driver].primitive }) {
		return
	}
	var drivers []string
	for _, d := range driverNames() {
		if d != "raw" && d != "latchkey" && !registry[d].primitive {
			continue
		}
		for _, r := range results {
			if r.Driver == d && r.Label == d {
				drivers = append(drivers, d)
				break
			}
		}
	}

	contended := isContended(primitiveWorkers, false)
	// raw's contended rates by table and round: each primitive's run is
	// compared with raw's run of the same round, which saw the same state
	// of the machine (rounds run in a new shuffled order each).
	type slot struct {
		table string
		round int
	}
	rawRates := map[slot][]float64{}
	for _, r := range results {
		if r.Label == "raw" && contended(r) {
			rawRates[slot{r.Table, r.Round}] = append(rawRates[slot{r.Table, r.Round}], r.Rate)
		}
	}

	fmt.Fprintf(w, "## latchkey primitives against the raw floor\n\n")
	header(w, "driver", "trips · executed per cycle", "CPU µs per cycle: client + Redis",
		"serial p50 µs", "serial p99 µs", "raw p50 / p99 µs, same runs", "p50 × raw",
		fmt.Sprintf("contended acq/s, %d goroutines", primitiveWorkers), "holders at once: allowed / most seen",
		"raw acq/s, same rounds", "acq/s × raw", "wait p50 / p99 ms", "cmds per acq",
		"overlaps · timeouts · errors")
	for _, d := range drivers {
		serial := &group{label: d}
		paired := &group{label: d}
		cont := &group{label: d}
		for _, r := range results {
			if r.Label != d {
				continue
			}
			switch {
			case isSerial(r):
				serial.runs = append(serial.runs, r)
			case isPaired("serial", "cycle")(r):
				paired.runs = append(paired.runs, r)
			case contended(r):
				cont.runs = append(cont.runs, r)
			}
		}
		trips, cpu := "–", "–"
		if len(serial.runs) > 0 {
			trips = num(serial.med(func(r Result) float64 { return r.Trips })) + " · " +
				opt(medOrNeg(serial, func(r Result) float64 { return r.Executed }))
			cpu = num(serial.med(func(r Result) float64 { return r.ClientCPU })) + " + " +
				opt(medOrNeg(serial, func(r Result) float64 { return r.RedisCPU }))
		}
		p50, p99, floor, x := "–", "–", "–", "–"
		switch {
		case len(paired.runs) > 0:
			p50, p99 = paired.cell(func(r Result) float64 { return r.P50 }), paired.cell(func(r Result) float64 { return r.P99 })
			floor = num(paired.med(func(r Result) float64 { return r.PairP50 })) + " / " +
				num(paired.med(func(r Result) float64 { return r.PairP99 }))
			x = paired.cell(pairedP50)
		case d == "raw" && len(serial.runs) > 0:
			p50, p99 = serial.cell(func(r Result) float64 { return r.P50 }), serial.cell(func(r Result) float64 { return r.P99 })
		}
		acq, holders, rawAcq, xAcq, wait, cmds := "–", "–", "–", "–", "–", "–"
		if len(cont.runs) > 0 {
			acq = cont.cell(rate)
			allowed, most := 1, 0
			for _, r := range cont.runs {
				allowed, most = max(r.Capacity, 1), max(most, r.MostInside)
			}
			holders = fmt.Sprintf("%d / %d", allowed, most)
			wait = num(cont.med(func(r Result) float64 { return r.WaitP50 })/1000) + " / " +
				num(cont.med(func(r Result) float64 { return r.WaitP99 })/1000)
			cmds = num(cont.med(func(r Result) float64 { return r.Cmds }))
			floorOf := func(r Result) float64 {
				if v := rawRates[slot{r.Table, r.Round}]; len(v) > 0 {
					return median(v)
				}
				return -1
			}
			if d != "raw" {
				rawAcq = cont.cell(floorOf)
				xAcq = cont.cell(func(r Result) float64 {
					if f := floorOf(r); f > 0 {
						return r.Rate / f
					}
					return -1
				})
			}
		}
		bad := func(f func(Result) int) int { return serial.sum(f) + paired.sum(f) + cont.sum(f) }
		name := d
		if registry[d].primitive {
			name = "**" + d + "**"
		}
		row(w, name, trips, cpu, p50, p99, floor, x, acq, holders, rawAcq, xAcq, wait, cmds,
			fmt.Sprintf("%d · %d · %d", bad(func(r Result) int { return r.Overlaps }),
				bad(func(r Result) int { return r.Timeouts }), bad(func(r Result) int { return r.Errors })))
	}
	fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(fmt.Sprintf(primitivesLegend, primitiveWorkers)))
	for _, d := range drivers {
		fmt.Fprintf(w, "- `%s`: %s\n", d, registry[d].about)
	}
	fmt.Fprintln(w)
}

const primitivesLegend = `
A cycle is one acquire and its release on a key nobody else uses. "trips ·
executed" are the round trips the driver's clients made (hooks) and the
commands Redis ran (INFO commandstats, Lua's inner calls included), from the
unpaired serial run; "serial p50/p99" come from the serial run paired with
raw, where each cycle alternates with a raw cycle (SET NX PX, then a Lua
compare-and-delete) in the same goroutine, and "raw p50 / p99" are those
raw cycles ("p50 × raw" is taken within each run); raw's own row shows its
unpaired serial run. Contended: %d goroutines
on one key, each holding 1 ms and asking again at once; raw's run is in the
same round (every round runs in a new shuffled order) and "acq/s × raw" is
taken within each round. raw lets one holder in at a time: a semaphore of k
permits lets k in, and read holds let every goroutine in, so their acq/s
over raw's is not a like-for-like ratio — it should approach the holders
allowed. Runs of a lock with several holders at once were given that many
times the acquisitions, to last about as long as the others. Overlaps count
holders above the number allowed.`
