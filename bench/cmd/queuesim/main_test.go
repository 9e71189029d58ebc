package main

import (
	"testing"
	"time"
)

// One key: alone, nobody waits; two goroutines take turns, each waiting
// exactly the other's hold; with three, two holds.
func TestSimulateOneKey(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 0}, {2, time.Millisecond}, {3, 2 * time.Millisecond}} {
		w := simulate(tc.n, 1, time.Millisecond, time.Second, 1)
		if len(w) < 800 {
			t.Fatalf("n=%d: %d waits in 0.9 s of 1 ms holds", tc.n, len(w))
		}
		for _, d := range w {
			if d != tc.want {
				t.Fatalf("n=%d: a wait of %v, want %v every time", tc.n, d, tc.want)
			}
		}
	}
}
