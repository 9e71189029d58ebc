package core

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The watchdog's steady state with 100,000 auto-renewed leases, scattered
// in memory as a real Client's are: take the leases that came due, and
// schedule each one period later (its next renewal), the leases of one
// batch together as their renewals are. One op is one lease's cycle.
func BenchmarkWatchdogScheduleCycle(b *testing.B) {
	const n = 100000
	rng := rand.New(rand.NewPCG(1, 2))
	leases := make([]*lease, n)
	junk := make([][]byte, 0, n)
	for i := range leases {
		leases[i] = &lease{}
		junk = append(junk, make([]byte, 200+rng.IntN(400))) // spread them out
	}
	w := &watchdog{epoch: time.Now(), started: true, kick: make(chan struct{}, 1)}
	const period = int64(time.Second)
	w.mu.Lock()
	for _, i := range rng.Perm(n) {
		w.pushLocked(leases[i], w.epoch.Add(time.Duration(rng.Int64N(period))))
	}
	w.mu.Unlock()
	var due []*lease
	b.ResetTimer()
	for done := 0; done < b.N; {
		w.mu.Lock()
		now := w.h[0].at
		due = w.takeDueLocked(due[:0], now, now+int64(batchWindow))
		next := w.epoch.Add(time.Duration(now + period))
		for _, l := range due {
			w.pushLocked(l, next)
		}
		w.mu.Unlock()
		done += len(due)
	}
	_ = junk
}
