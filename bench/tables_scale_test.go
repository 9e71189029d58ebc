package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// The sweep runs every size once, memory first, each run bounding itself.
func TestScaleRuns(t *testing.T) {
	runs := scaleRuns(sizes["scale"], nil)
	want := len(scaleMemory) + len(scaleLeases) + len(scaleWaiters)*len(scaleKeys) + len(scaleClients)
	if len(runs) != want {
		t.Fatalf("%d runs, want %d", len(runs), want)
	}
	for i, r := range runs {
		if !slices.Contains(r, "-max-time") {
			t.Errorf("run %d has no time bound: %v", i, r)
		}
		if i < len(scaleMemory) && r[1] != "memory" {
			t.Errorf("run %d is %v, want the memory runs first", i, r)
		}
	}
	if err := runMatrix(matrixOptions{kind: "scale", rounds: 2}); err == nil || !strings.Contains(err.Error(), "one round") {
		t.Errorf("two rounds of the sweep: %v", err)
	}
}

// writeScale prints a table per curve, sizes in order, and nothing for a
// report without a sweep.
func TestWriteScale(t *testing.T) {
	rs := []Result{
		{Scenario: "renew", Driver: "latchkey", Leases: 100000, TTLMS: 3000, ClientPct: 36, RedisPct: 48.5, Lost: 0},
		{Scenario: "renew", Driver: "latchkey", Leases: 1000, TTLMS: 3000, ClientPct: 0.5, RedisPct: 0.7},
		{Scenario: "contended", Driver: "latchkey", Clients: 500, Workers: 10000, Starved: 3, Rate: 688},
		{Scenario: "contended", Driver: "latchkey", Clients: 5, Workers: 100, LockKeys: 10, Rate: 4000},
		{Scenario: "contended", Driver: "latchkey", Clients: 10, Workers: 20, LockKeys: 10},
		{Scenario: "contended", Driver: "latchkey", Clients: 100, Workers: 200, LockKeys: 10},
		{Scenario: "memory", Driver: "latchkey", Ops: 1000, BytesPerKey: 170},
		{Scenario: "memory", Driver: "latchkey", Ops: 100000, BytesPerKey: 165},
	}
	var b bytes.Buffer
	writeScale(&b, rs)
	out := b.String()
	for _, s := range []string{"### Renewals", "TTL 3s", "### Waiters", "### Clients", "on 10 keys", "### Memory"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	if i, j := strings.Index(out, "| 1000 |"), strings.Index(out, "| 100000 |"); i < 0 || j < 0 || i > j {
		t.Errorf("renewal rows not by size:\n%s", out)
	}
	if !strings.Contains(out, "| 10000 | 1 | 500 |") {
		t.Errorf("the 10,000 waiters on one key are missing:\n%s", out)
	}

	b.Reset()
	writeScale(&b, rs[:1])
	if b.Len() != 0 {
		t.Errorf("one renew run printed a sweep:\n%s", b.String())
	}
}
