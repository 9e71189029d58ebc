package main

import (
	"slices"
	"time"
)

// Result is what one run reports. It is written as one JSON line, so a matrix
// can run each scenario in its own process and a report can be rebuilt later
// from saved lines. Times are in microseconds; "per op" means per cycle
// (serial, parallel), per acquisition (contended) or per PING.
type Result struct {
	Scenario string `json:"scenario"`
	Driver   string `json:"driver"`
	Label    string `json:"label"` // table row: driver plus variant
	Table    string `json:"table"` // table title: scenario plus settings
	Start    string `json:"start"`
	Round    int    `json:"round,omitempty"` // matrix round, set by the matrix

	Workers int     `json:"workers,omitempty"`
	HoldUS  float64 `json:"hold_us,omitempty"`
	ThinkUS float64 `json:"think_us,omitempty"`
	IdleUS  float64 `json:"idle_us,omitempty"`
	RetryUS float64 `json:"retry_us,omitempty"`

	Ops       int     `json:"ops"`
	Target    int     `json:"target"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"rate"` // ops per second
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	Max       float64 `json:"max_us"`
	Mean      float64 `json:"mean_us,omitempty"`
	Errors    int     `json:"errors"`
	Truncated bool    `json:"truncated,omitempty"` // stopped by -max-time

	Cmds      float64 `json:"cmds_per_op"`      // hook-counted commands
	Trips     float64 `json:"trips_per_op"`     // hook-counted round trips
	Wire      float64 `json:"wire_per_op"`      // commands parsed off the wire
	Dials     int64   `json:"dials"`            // connections opened in the window
	Executed  float64 `json:"executed_per_op"`  // Redis commandstats; -1 unknown
	ClientCPU float64 `json:"client_cpu_us_op"` // this process
	RedisCPU  float64 `json:"redis_cpu_us_op"`  // -1 unknown
	StealPct  float64 `json:"steal_pct"`
	OtherPct  float64 `json:"other_pct"` // -1 unknown

	Starved  int `json:"starved,omitempty"`   // contended: goroutines that never acquired
	Clients  int `json:"clients,omitempty"`   // contended: driver instances (-clients), like processes
	LockKeys int `json:"lock_keys,omitempty"` // contended: keys contended on (-lock-keys) when more than one

	// renew
	Leases    int     `json:"leases,omitempty"`     // leases held and renewed
	TTLMS     int64   `json:"ttl_ms,omitempty"`     // their TTL
	ClientPct float64 `json:"client_pct,omitempty"` // client CPU, % of one core
	RedisPct  float64 `json:"redis_pct,omitempty"`  // Redis CPU, % of one core; -1 unknown
	Lost      int     `json:"lost,omitempty"`       // leases lost by the end of the window

	// memory: what the server keeps once every key is released
	MemBefore    int64   `json:"used_memory_before,omitempty"` // INFO memory used_memory before the cycles, bytes
	MemAfter     int64   `json:"used_memory_after,omitempty"`  // the same after them
	DBSizeBefore int64   `json:"dbsize_before,omitempty"`
	DBSizeAfter  int64   `json:"dbsize_after,omitempty"`
	BytesPerKey  float64 `json:"bytes_per_key,omitempty"` // (MemAfter - MemBefore) / Ops
	KeysLeft     int     `json:"keys_left,omitempty"`     // keys not there before the cycles
	NoExpiry     int     `json:"no_expiry,omitempty"`     // of them, keys with no expiry (PTTL -1)
	MaxPTTLMS    int64   `json:"max_pttl_ms,omitempty"`   // the largest PTTL among them
	KeyBytes     float64 `json:"key_bytes,omitempty"`     // mean MEMORY USAGE of up to 100 of them
	LeftExample  string  `json:"left_example,omitempty"`  // one of their names

	// serial and parallel
	Keys     string  `json:"keys,omitempty"` // "cycle" or "goroutine"
	Pair     string  `json:"pair,omitempty"` // driver run alternately in the same goroutines
	PairP50  float64 `json:"pair_p50_us,omitempty"`
	PairP99  float64 `json:"pair_p99_us,omitempty"`
	PairMean float64 `json:"pair_mean_us,omitempty"`
	PairCmds float64 `json:"pair_cmds_per_op,omitempty"`

	// contended only
	HoldP50      float64 `json:"hold_p50_us,omitempty"`
	GapP50       float64 `json:"gap_p50_us,omitempty"` // every change of holder or not
	GapP99       float64 `json:"gap_p99_us,omitempty"`
	HandoffN     int     `json:"handoffs,omitempty"`
	HandoffP50   float64 `json:"handoff_p50_us,omitempty"`
	HandoffP99   float64 `json:"handoff_p99_us,omitempty"`
	SameOwnerPct float64 `json:"same_owner_pct,omitempty"`
	WaitP50      float64 `json:"wait_p50_us,omitempty"`
	WaitP99      float64 `json:"wait_p99_us,omitempty"`
	WaitMax      float64 `json:"wait_max_us,omitempty"`
	PerWorker    []int   `json:"per_worker,omitempty"`
	Timeouts     int     `json:"timeouts,omitempty"`
	Overlaps     int     `json:"overlaps,omitempty"`    // holders above Capacity
	Capacity     int     `json:"capacity,omitempty"`    // holders let in at once (absent: 1)
	MostInside   int     `json:"most_inside,omitempty"` // the most holders seen at once
	FenceChecked bool    `json:"fence_checked,omitempty"`
	FenceBad     int     `json:"fence_bad,omitempty"` // fence not above the previous holder's
}

// Samples collects durations.
type Samples []time.Duration

func (s *Samples) Add(d time.Duration) { *s = append(*s, d) }

// Mean returns the mean in microseconds.
func (s Samples) Mean() float64 {
	if len(s) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return us(t) / float64(len(s))
}

// Summary holds the usual percentiles of a set of samples, in microseconds.
type Summary struct {
	N             int
	P50, P99, Max float64
}

// Summarize sorts s in place and returns its percentiles (nearest rank).
func (s Samples) Summarize() Summary {
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	return Summary{N: len(s), P50: us(pct(s, 50)), P99: us(pct(s, 99)), Max: us(s[len(s)-1])}
}

// pct returns the p-th percentile of sorted s by nearest rank.
func pct(s Samples, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median of a float slice (not modified); NaN-free input assumed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// perOp divides a total by the number of operations, or returns 0.
func perOp(total float64, ops int) float64 {
	if ops == 0 {
		return 0
	}
	return total / float64(ops)
}
