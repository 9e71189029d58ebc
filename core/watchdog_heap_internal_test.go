package core

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The watchdog's heap, under random pushes, time changes and removals, keeps
// the heap order and every cohort's idx, and pops in time order.
func TestCohortHeapRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h cohortHeap
	var in []*cohort // cohorts in the heap
	check := func(step int) {
		t.Helper()
		if len(h) != len(in) {
			t.Fatalf("step %d: %d entries, want %d", step, len(h), len(in))
		}
		for i, e := range h {
			if e.c.idx != i {
				t.Fatalf("step %d: entry %d has idx %d", step, i, e.c.idx)
			}
			if i > 0 && h[(i-1)/heapArity].at > e.at {
				t.Fatalf("step %d: entry %d (%d) is due before its parent (%d)", step, i, e.at, h[(i-1)/heapArity].at)
			}
		}
	}
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(in) == 0:
			c := &cohort{idx: -1}
			h.push(rng.Int64N(1000), c)
			in = append(in, c)
		case op < 7:
			c := in[rng.IntN(len(in))]
			h[c.idx].at = rng.Int64N(1000)
			h.fix(c.idx)
		default:
			k := rng.IntN(len(in))
			c := in[k]
			if got := h.remove(c.idx); got != c || c.idx != -1 {
				t.Fatalf("step %d: remove returned %p (idx %d), want %p", step, got, c.idx, c)
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

// Leases scheduled, rescheduled and removed at random, and taken when due as
// the loop takes them: every scheduled lease is in exactly one cohort, at
// the index it records; no cohort on the heap is empty or over maxBatch; a
// lease is taken no later than its due time and at most two batchWindows
// before it; and none is lost or taken twice.
func TestWatchdogCohortsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := &watchdog{epoch: time.Now(), started: true, kick: make(chan struct{}, 1)} // no loop: the test takes
	const n = 3000
	leases := make([]*lease, n)
	dueAt := make(map[*lease]int64) // scheduled leases and their due time
	for i := range leases {
		leases[i] = &lease{}
	}
	now := int64(0)
	check := func(step int) {
		t.Helper()
		seen := 0
		for i, e := range w.h {
			c := e.c
			if c.idx != i || e.at != c.at {
				t.Fatalf("step %d: heap entry %d: idx %d, at %d/%d", step, i, c.idx, e.at, c.at)
			}
			if len(c.members) == 0 || len(c.members) > maxBatch {
				t.Fatalf("step %d: a cohort on the heap has %d members", step, len(c.members))
			}
			for j, l := range c.members {
				if l.co != c || l.ci != j {
					t.Fatalf("step %d: member %d of a cohort records (%p, %d)", step, j, l.co, l.ci)
				}
				d, ok := dueAt[l]
				if !ok {
					t.Fatalf("step %d: an unscheduled lease is in a cohort", step)
				}
				if d < c.at || d-c.at > int64(batchWindow) {
					t.Fatalf("step %d: lease due %d in a cohort due %d", step, d, c.at)
				}
				seen++
			}
		}
		if seen != len(dueAt) {
			t.Fatalf("step %d: %d leases in cohorts, %d scheduled", step, seen, len(dueAt))
		}
		if w.tail != nil && w.tail.idx < 0 {
			t.Fatalf("step %d: the tail is off the heap", step)
		}
	}
	var due []*lease
	for step := range 30000 {
		switch op := rng.IntN(10); {
		case op < 6: // schedule or reschedule, mostly later than now, in runs of close times
			l := leases[rng.IntN(n)]
			d := now + rng.Int64N(int64(50*time.Millisecond))
			if rng.IntN(4) == 0 {
				d = now + int64(time.Second)
			}
			w.mu.Lock()
			w.pushLocked(l, w.epoch.Add(time.Duration(d)))
			w.mu.Unlock()
			dueAt[l] = d
		case op < 8: // released
			l := leases[rng.IntN(n)]
			w.mu.Lock()
			if l.co != nil {
				w.leaveLocked(l)
			}
			w.mu.Unlock()
			delete(dueAt, l)
		default: // time passes; the loop takes what is due
			now += rng.Int64N(int64(20 * time.Millisecond))
			w.mu.Lock()
			due = w.takeDueLocked(due[:0], now, now+int64(batchWindow))
			w.mu.Unlock()
			for _, l := range due {
				d, ok := dueAt[l]
				if !ok {
					t.Fatalf("step %d: an unscheduled lease was taken", step)
				}
				if l.co != nil {
					t.Fatalf("step %d: a lease taken is still in a cohort", step)
				}
				if d > now+2*int64(batchWindow) { // its cohort was due by the horizon

					t.Fatalf("step %d: lease due %d taken at %d", step, d, now)
				}
				delete(dueAt, l)
			}
			if len(due) < 8*maxBatch {
				for _, d := range dueAt {
					if d <= now {
						t.Fatalf("step %d: lease due %d left behind at %d", step, d, now)
					}
				}
			}
		}
		check(step)
	}
}
