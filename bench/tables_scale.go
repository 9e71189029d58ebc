package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"
)

// writeScale prints the scale sweep's curves as tables (-matrix scale):
// one row per size, in order of size. A table needs runs at two sizes or
// more; other reports print nothing here.
func writeScale(w io.Writer, results []Result) {
	var renew, waiters, fleet, memory []Result
	for _, r := range results {
		if r.Driver != "latchkey" {
			continue
		}
		switch {
		case r.Scenario == "renew":
			renew = append(renew, r)
		case r.Scenario == "memory":
			memory = append(memory, r)
		case r.Scenario == "contended" && isFleet(r):
			fleet = append(fleet, r)
		case r.Scenario == "contended" && r.Clients > 0:
			waiters = append(waiters, r)
		}
	}
	distinct := func(rs []Result, size func(Result) int) bool {
		seen := map[int]bool{}
		for _, r := range rs {
			seen[size(r)] = true
		}
		return len(seen) >= 2
	}
	bySize := func(rs []Result, size ...func(Result) int) {
		slices.SortStableFunc(rs, func(a, b Result) int {
			for _, s := range size {
				if c := cmp.Compare(s(a), s(b)); c != 0 {
					return c
				}
			}
			return 0
		})
	}
	leases := func(r Result) int { return r.Leases }
	workers := func(r Result) int { return r.Workers }
	keys := func(r Result) int { return max(r.LockKeys, 1) }
	clients := func(r Result) int { return r.Clients }
	released := func(r Result) int { return r.Ops }
	if !distinct(renew, leases) && !distinct(waiters, workers) && !distinct(fleet, clients) && !distinct(memory, released) {
		return
	}
	fmt.Fprintf(w, "## Scale\n\nlatchkey alone, one run per size (`-matrix scale`).\n\n")
	if distinct(renew, leases) {
		bySize(renew, leases)
		fmt.Fprintf(w, "### Renewals: leases of TTL %v on one Client, renewed every TTL/3\n\n", time.Duration(renew[0].TTLMS)*time.Millisecond)
		header(w, "leases", "renewals due/s", "client, % of a core", "Redis, % of a core", "client µs per renewal",
			"Redis µs per renewal", "Redis cmds per renewal", "leases lost")
		for _, r := range renew {
			row(w, fmt.Sprint(r.Leases), num(r.Rate), num(r.ClientPct), opt(r.RedisPct), opt(r.ClientCPU),
				opt(r.RedisCPU), opt(r.Executed), fmt.Sprint(r.Lost))
		}
		fmt.Fprintln(w)
	}
	if distinct(waiters, workers) {
		bySize(waiters, workers, keys)
		fmt.Fprintf(w, "### Waiters: goroutines on keys (one at random per acquisition), 20 per Client, hold 1 ms\n\n")
		header(w, "waiters", "keys", "Clients", "acq/s", "wait p50 ms", "wait p99 ms", "wait max ms",
			"Redis cmds/acq", "never acquired", "timeouts", "overlaps + fence regressions")
		for _, r := range waiters {
			row(w, fmt.Sprint(r.Workers), fmt.Sprint(keys(r)), fmt.Sprint(r.Clients), num(r.Rate),
				num(r.WaitP50/1000), num(r.WaitP99/1000), num(r.WaitMax/1000), opt(r.Executed),
				fmt.Sprint(r.Starved), fmt.Sprint(r.Timeouts), fmt.Sprint(r.Overlaps+r.FenceBad))
		}
		fmt.Fprintln(w)
	}
	if distinct(fleet, clients) {
		bySize(fleet, clients)
		fmt.Fprintf(w, "### Clients: a fleet of processes, two goroutines each, on %d keys, hold 1 ms\n\n", keys(fleet[0]))
		header(w, "Clients", "goroutines", "acq/s", "wait p50 ms", "wait p99 ms", "client cmds/acq",
			"Redis cmds/acq", "client µs/acq", "Redis µs/acq", "never acquired", "timeouts", "overlaps + fence regressions")
		for _, r := range fleet {
			row(w, fmt.Sprint(r.Clients), fmt.Sprint(r.Workers), num(r.Rate), num(r.WaitP50/1000), num(r.WaitP99/1000),
				num(r.Cmds), opt(r.Executed), opt(r.ClientCPU), opt(r.RedisCPU),
				fmt.Sprint(r.Starved), fmt.Sprint(r.Timeouts), fmt.Sprint(r.Overlaps+r.FenceBad))
		}
		fmt.Fprintln(w)
	}
	if distinct(memory, released) {
		bySize(memory, released)
		fmt.Fprintf(w, "### Memory: distinct keys, each acquired and released once\n\n")
		header(w, "keys released", "keys left", "left without expiry", "largest TTL left s",
			"used_memory rise per released key, bytes", "MEMORY USAGE per key left")
		for _, r := range memory {
			row(w, fmt.Sprint(r.Ops), fmt.Sprint(r.KeysLeft), fmt.Sprint(r.NoExpiry),
				num(float64(r.MaxPTTLMS)/1000), num(r.BytesPerKey), num(r.KeyBytes))
		}
		fmt.Fprintln(w)
	}
}
