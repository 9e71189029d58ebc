// Command queuesim simulates the fleet scenario's waiting under an ideal
// lock: N goroutines, each taking one of K keys at random, holding it for
// a fixed time and choosing a key again at once; every key hands over in
// arrival order and the handoff itself costs nothing. It prints the wait
// percentiles such a lock would show, to compare with what bench measures
// (bench/results/fleet-*.md): the spread of waits comes from the queues
// being unbalanced (keys are chosen at random, and nothing evens the
// queues out), not from the lock.
//
//	go run ./cmd/queuesim -n 1000 -keys 10 -hold 1ms
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

func main() {
	n := flag.Int("n", 1000, "goroutines (waiters)")
	keys := flag.Int("keys", 10, "keys, one chosen at random per acquisition")
	hold := flag.Duration("hold", time.Millisecond, "time each acquisition holds the key (and the time between two holders: a free handoff)")
	simulated := flag.Duration("time", 200*time.Second, "simulated time (the first tenth is not counted)")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	w := simulate(*n, *keys, *hold, *simulated, *seed)
	fmt.Printf("ideal FIFO lock, %d waiters on %d keys, hold %v: %d acquisitions, %.0f/s; wait p50 %v, p99 %v, mean %v\n",
		*n, *keys, *hold, len(w), float64(len(w))/(*simulated-*simulated/10).Seconds(),
		pct(w, 0.50), pct(w, 0.99), mean(w))
}

// completion is the end of the hold on key at t.
type completion struct {
	t   time.Duration
	key int
}

type events []completion

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].t < e[j].t }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(completion)) }
func (e *events) Pop() any {
	old := *e
	c := old[len(old)-1]
	*e = old[:len(old)-1]
	return c
}

// simulate returns every counted wait: from joining a key's queue to
// holding it.
func simulate(n, keys int, hold, until time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	queues := make([][]time.Duration, keys) // arrival times; the head holds the key
	var ev events
	for range n {
		k := rng.IntN(keys)
		queues[k] = append(queues[k], 0)
	}
	for k := range queues {
		if len(queues[k]) > 0 {
			heap.Push(&ev, completion{hold, k})
		}
	}
	var waits []time.Duration
	warm := until / 10
	for ev.Len() > 0 {
		c := heap.Pop(&ev).(completion)
		if c.t > until {
			break
		}
		q := queues[c.key][1:] // the holder leaves
		queues[c.key] = q
		if len(q) > 0 { // the next in line takes it at once
			if c.t > warm {
				waits = append(waits, c.t-q[0])
			}
			heap.Push(&ev, completion{c.t + hold, c.key})
		}
		k := rng.IntN(keys) // the one that left asks again
		queues[k] = append(queues[k], c.t)
		if len(queues[k]) == 1 { // free: no wait
			if c.t > warm {
				waits = append(waits, 0)
			}
			heap.Push(&ev, completion{c.t + hold, k})
		}
	}
	slices.Sort(waits)
	return waits
}

func pct(w []time.Duration, p float64) time.Duration {
	if len(w) == 0 {
		return 0
	}
	return w[min(int(p*float64(len(w))), len(w)-1)].Round(time.Millisecond)
}

func mean(w []time.Duration) time.Duration {
	if len(w) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range w {
		s += d
	}
	return (s / time.Duration(len(w))).Round(time.Millisecond)
}
