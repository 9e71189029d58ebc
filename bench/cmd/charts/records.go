package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// record is one line of a results file. The lock matrix and the primitives
// section write bench's Result (scenario, driver, label, …); the backend
// comparison writes bench's backendRun (backend, kind, …). Only the fields
// the charts draw are decoded; the names and units are those of the JSON.
type record struct {
	// lock matrix and primitives
	Scenario   string  `json:"scenario"`
	Driver     string  `json:"driver"`
	Label      string  `json:"label"`
	Table      string  `json:"table"`
	Workers    int     `json:"workers"`
	ThinkUS    float64 `json:"think_us"`
	Keys       string  `json:"keys"`
	Pair       string  `json:"pair"`
	PairP50    float64 `json:"pair_p50_us"`
	ClientCPU  float64 `json:"client_cpu_us_op"`
	RedisCPU   float64 `json:"redis_cpu_us_op"` // -1: unknown
	HandoffN   int     `json:"handoffs"`
	HandoffP50 float64 `json:"handoff_p50_us"`
	HandoffP99 float64 `json:"handoff_p99_us"`
	WaitP99    float64 `json:"wait_p99_us"`

	// the scale sweep (-matrix scale)
	Leases      int     `json:"leases"`
	ClientPct   float64 `json:"client_pct"`
	RedisPct    float64 `json:"redis_pct"` // -1: unknown
	Lost        int     `json:"lost"`
	Clients     int     `json:"clients"`
	LockKeys    int     `json:"lock_keys"`
	Ops         int     `json:"ops"`
	BytesPerKey float64 `json:"bytes_per_key"`

	// backend comparison
	Backend string `json:"backend"`
	Kind    string `json:"kind"` // serial | contended
	Procs   int    `json:"procs"`

	// both
	Rate float64 `json:"rate"`   // cycles/s or acquisitions/s
	P50  float64 `json:"p50_us"` // per cycle (serial, parallel)
	P99  float64 `json:"p99_us"` // backends: the wait, when contended
}

// readRecords decodes a JSONL file, skipping blank lines.
func readRecords(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
