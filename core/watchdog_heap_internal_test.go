package core

import (
	"math/rand/v2"
	"testing"
)

// The watchdog's heap, under random pushes, time changes and removals, keeps
// the heap order and every lease's idx, and pops in time order.
func TestLeaseHeapRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h leaseHeap
	var in []*lease // leases in the heap
	check := func(step int) {
		t.Helper()
		if len(h) != len(in) {
			t.Fatalf("step %d: %d entries, want %d", step, len(h), len(in))
		}
		for i, e := range h {
			if e.l.idx != i {
				t.Fatalf("step %d: entry %d has idx %d", step, i, e.l.idx)
			}
			if i > 0 && h[(i-1)/heapArity].at > e.at {
				t.Fatalf("step %d: entry %d (%d) is due before its parent (%d)", step, i, e.at, h[(i-1)/heapArity].at)
			}
		}
	}
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(in) == 0:
			l := &lease{idx: -1}
			h.push(rng.Int64N(1000), l)
			in = append(in, l)
		case op < 7:
			l := in[rng.IntN(len(in))]
			h[l.idx].at = rng.Int64N(1000)
			h.fix(l.idx)
		default:
			k := rng.IntN(len(in))
			l := in[k]
			if got := h.remove(l.idx); got != l || l.idx != -1 {
				t.Fatalf("step %d: remove returned %p (idx %d), want %p", step, got, l.idx, l)
			}
			in = append(in[:k], in[k+1:]...)
		}
		check(step)
	}
	prev := int64(-1)
	for len(h) > 0 {
		at := h[0].at
		h.remove(0)
		if at < prev {
			t.Fatalf("popped %d after %d", at, prev)
		}
		prev = at
	}
}
