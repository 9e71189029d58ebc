package core

import (
	"math/rand/v2"
	"testing"
)

// The watchdog's steady state with 100,000 auto-renewed leases: pop the
// earliest, push it back one period later (its next renewal), the leases
// scattered in memory as a real Client's are.
func BenchmarkLeaseHeapCycle(b *testing.B) {
	const n = 100000
	rng := rand.New(rand.NewPCG(1, 2))
	leases := make([]*lease, n)
	junk := make([][]byte, 0, n)
	for i := range leases {
		leases[i] = &lease{idx: -1}
		junk = append(junk, make([]byte, 200+rng.IntN(400))) // spread them out
	}
	var h leaseHeap
	const period = int64(1e9)
	for _, i := range rng.Perm(n) {
		h.push(rng.Int64N(period), leases[i])
	}
	b.ResetTimer()
	for range b.N {
		at := h[0].at
		l := h.remove(0)
		h.push(at+period+rng.Int64N(1e6), l)
	}
	_ = junk
}
