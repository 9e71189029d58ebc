package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// runContended has cfg.Workers goroutines take turns on one key. Each
// acquisition holds the lock for cfg.Hold (time.Sleep), releases it, sleeps
// cfg.Think (0: asks again at once, "greedy") and asks again, until cfg.N
// acquisitions have been made in total. A lock that lets several holders in
// at once (a semaphore's permits, read holds: the driver's capacity) is
// checked against that number instead of one.
func runContended(ctx context.Context, cfg Config, e *env) (Result, error) {
	drivers, err := e.openWorkers(cfg.Workers)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		for _, d := range drivers {
			d.Close()
		}
	}()

	// Warm up on a different key: dials, script loads, subscriptions —
	// at most 5 s (thousands of goroutines would take minutes for 4 each).
	warm := newContention(cfg, 4*cfg.Workers)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err = warm.run(wctx, drivers, e.prefix+"warm")
	wcancel()
	if err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}

	c := newContention(cfg, cfg.N)
	a := e.prober.take(ctx)
	start := time.Now()
	err = c.run(ctx, drivers, e.prefix+"lock")
	elapsed := time.Since(start)
	var r Result
	e.prober.fill(&r, a, e.prober.take(ctx), int(c.acquired.Load()))
	c.report(&r, elapsed)
	r.Truncated = ctx.Err() != nil && r.Ops < cfg.N
	return r, err
}

// contention is the shared state of one contended run. The bookkeeping of
// who released when is guarded by mu, which a holder takes only while it
// holds the lock under test, so mu itself is not contended.
type contention struct {
	cfg      Config
	n        int
	capacity int          // holders the lock lets in at once, per key
	keys     int          // keys contended on
	most     atomic.Int32 // the most holders seen at once
	tickets  atomic.Int64
	acquired atomic.Int64
	waiting  atomic.Int32 // goroutines inside Acquire
	inside   atomic.Int32 // goroutines that believe they hold the lock
	overlaps atomic.Int64
	timeouts atomic.Int64
	errs     atomic.Int64
	firstErr atomic.Pointer[error]

	mu          sync.Mutex
	released    bool
	lastRelease time.Time // when the last holder called Release
	lastOwner   int
	othersWere  bool // someone else was waiting at that Release call
	lastFence   int64
	keyFence    map[string]int64 // with -lock-keys: each key's last fence
	fenced      bool
	fenceBad    int
	gaps        Samples // every acquisition after a release
	handoffs    Samples // to another goroutine that was waiting at the release
	sameOwner   int
	afterRel    int

	waits     []Samples
	holds     []Samples
	perWorker []int
}

func newContention(cfg Config, n int) *contention {
	return &contention{
		cfg: cfg, n: n, capacity: holdersAtOnce(cfg.Driver, cfg.Workers),
		keys:      max(cfg.LockKeys, 1),
		waits:     make([]Samples, cfg.Workers),
		holds:     make([]Samples, cfg.Workers),
		perWorker: make([]int, cfg.Workers),
	}
}

func (c *contention) run(ctx context.Context, drivers []Driver, key string) error {
	keys := []string{key}
	if c.cfg.LockKeys > 1 {
		keys = keys[:0]
		for i := range c.cfg.LockKeys {
			keys = append(keys, fmt.Sprintf("%s%d", key, i))
		}
	}
	var wg sync.WaitGroup
	for g := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.worker(ctx, g, drivers[g%len(drivers)], keys)
		}()
	}
	wg.Wait()
	if c.acquired.Load() == 0 {
		if p := c.firstErr.Load(); p != nil {
			return *p
		}
	}
	return nil
}

func (c *contention) fail(err error) {
	c.errs.Add(1)
	c.firstErr.CompareAndSwap(nil, &err)
}

func (c *contention) worker(ctx context.Context, g int, d Driver, keys []string) {
	relCtx := context.WithoutCancel(ctx)
	rng := rand.New(rand.NewPCG(uint64(g), 20261126))
	for ctx.Err() == nil && c.tickets.Add(1) <= int64(c.n) {
		key := keys[rng.IntN(len(keys))]
		c.waiting.Add(1)
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, c.cfg.WaitTimeout)
		h, err := d.Acquire(actx, key)
		cancel()
		got := time.Now()
		c.waiting.Add(-1)
		if err != nil {
			switch {
			case ctx.Err() != nil: // the run's own time bound: not a timeout
			case errors.Is(err, context.DeadlineExceeded):
				c.timeouts.Add(1)
			default:
				c.fail(fmt.Errorf("goroutine %d: acquire: %w", g, err))
			}
			continue
		}
		if in := c.inside.Add(1); in > int32(c.capacity*c.keys) {
			c.overlaps.Add(1)
		} else {
			for m := c.most.Load(); in > m && !c.most.CompareAndSwap(m, in); m = c.most.Load() {
			}
		}
		c.acquired.Add(1)
		c.noteAcquired(g, got, h, key)
		c.waits[g].Add(got.Sub(t0))
		c.perWorker[g]++

		time.Sleep(c.cfg.Hold)

		rel := time.Now()
		c.mu.Lock()
		c.released, c.lastOwner, c.lastRelease = true, g, rel
		c.othersWere = c.waiting.Load() > 0
		c.mu.Unlock()
		c.holds[g].Add(rel.Sub(got))
		c.inside.Add(-1)
		if err := h.Release(relCtx); err != nil {
			c.fail(fmt.Errorf("goroutine %d: release: %w", g, err))
		}
		if c.cfg.Think > 0 {
			time.Sleep(c.cfg.Think)
		}
	}
}

// noteAcquired records the gap since the previous release and checks the
// fencing token, if the driver has one. Both need one holder at a time:
// with several, a release hands nothing over to the next holder, and two
// holders may reach this point out of the order their tokens were issued.
func (c *contention) noteAcquired(g int, got time.Time, h Held, key string) {
	if c.capacity != 1 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.LockKeys > 1 { // several keys: fences per key; no handoff to speak of
		if f, ok := h.(Fenced); ok {
			if c.keyFence == nil {
				c.keyFence = map[string]int64{}
			}
			if last, seen := c.keyFence[key]; seen && f.Fence() <= last {
				c.fenceBad++
			}
			c.fenced, c.keyFence[key] = true, f.Fence()
		}
		return
	}
	if c.released {
		gap := got.Sub(c.lastRelease)
		c.gaps.Add(gap)
		c.afterRel++
		if c.lastOwner == g {
			c.sameOwner++
		} else if c.othersWere {
			c.handoffs.Add(gap)
		}
	}
	if f, ok := h.(Fenced); ok {
		tok := f.Fence()
		if c.fenced && tok <= c.lastFence {
			c.fenceBad++
		}
		c.fenced, c.lastFence = true, tok
	}
}

func (c *contention) report(r *Result, elapsed time.Duration) {
	var waits, holds Samples
	for g := range c.waits {
		waits = append(waits, c.waits[g]...)
		holds = append(holds, c.holds[g]...)
	}
	w, h := waits.Summarize(), holds.Summarize()
	gap, ho := c.gaps.Summarize(), c.handoffs.Summarize()
	r.Ops = int(c.acquired.Load())
	r.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		r.Rate = float64(r.Ops) / elapsed.Seconds()
	}
	// For contended runs the headline latency is the wait.
	r.P50, r.P99, r.Max = w.P50, w.P99, w.Max
	r.WaitP50, r.WaitP99, r.WaitMax = w.P50, w.P99, w.Max
	r.HoldP50 = h.P50
	r.GapP50, r.GapP99 = gap.P50, gap.P99
	r.HandoffN, r.HandoffP50, r.HandoffP99 = ho.N, ho.P50, ho.P99
	if c.afterRel > 0 {
		r.SameOwnerPct = 100 * float64(c.sameOwner) / float64(c.afterRel)
	}
	r.PerWorker = c.perWorker
	for _, n := range c.perWorker {
		if n == 0 {
			r.Starved++
		}
	}
	r.Timeouts = int(c.timeouts.Load())
	r.Overlaps = int(c.overlaps.Load())
	r.Capacity, r.MostInside = c.capacity, int(c.most.Load())
	r.Errors = int(c.errs.Load())
	r.FenceChecked, r.FenceBad = c.fenced, c.fenceBad
}
