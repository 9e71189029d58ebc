package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// runPing measures go-redis PING round trips on one connection: back to back,
// or each after -idle asleep (the round trip a woken waiter pays).
func runPing(ctx context.Context, cfg Config, e *env) (Result, error) {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], PoolSize: 1})
	e.counter.Instrument(rdb)
	defer rdb.Close()
	for range 200 { // warm up: dial, handshake, CPU caches
		if err := rdb.Ping(ctx).Err(); err != nil {
			return Result{}, err
		}
	}
	var r Result
	lat := make(Samples, 0, cfg.N)
	a := e.prober.take(ctx)
	start := time.Now()
	for range cfg.N {
		if ctx.Err() != nil {
			r.Truncated = true
			break
		}
		if cfg.Idle > 0 {
			time.Sleep(cfg.Idle)
		}
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			r.Errors++
			continue
		}
		lat.Add(time.Since(t0))
	}
	elapsed := time.Since(start)
	e.prober.fill(&r, a, e.prober.take(ctx), len(lat))
	r.setLatency(lat, elapsed)
	return r, nil
}

// runCycles runs acquire+release cycles with cfg.Workers goroutines:
// "serial" is one goroutine, "parallel" many. Keys are distinct between
// goroutines: a new key per cycle, or with -keys goroutine one key per
// goroutine, reused. Acquisition is a single attempt (TryAcquire): nobody
// else holds these keys, so any failure is an error.
//
// With -pair, every cycle of the driver is matched by a cycle of the pair
// driver (raw) in the same goroutine, in alternating order, so both see the
// same machine state; the result carries both and their ratio is reliable
// even when the machine's speed drifts between runs.
func runCycles(ctx context.Context, cfg Config, e *env) (Result, error) {
	ds, counters, err := e.openPaired()
	if err != nil {
		return Result{}, err
	}
	defer func() {
		for _, d := range ds {
			d.Close()
		}
	}()
	reuse := cfg.Keys == "goroutine"

	// Warm up with the same shape of load: fills connection pools and loads
	// scripts so the measured window has neither dials nor NOSCRIPT misses.
	warm := max(200, 20*cfg.Workers)
	if _, _, err := cycleLoop(ctx, ds, cfg.Workers, warm, e.prefix+"warm:", reuse); err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}

	var r Result
	a := e.prober.take(ctx)
	var before Counts
	if len(ds) > 1 {
		before = counters[1].Snapshot()
	}
	start := time.Now()
	lat, errs, err := cycleLoop(ctx, ds, cfg.Workers, cfg.N, e.prefix+"c:", reuse)
	elapsed := time.Since(start)
	e.prober.fill(&r, a, e.prober.take(ctx), len(lat[0]))
	r.Errors = errs
	r.Truncated = ctx.Err() != nil && len(lat[0])+errs < cfg.N
	r.setLatency(lat[0], elapsed)
	if len(ds) > 1 {
		// The prober saw both drivers' CPU: only the counts split cleanly.
		r.ClientCPU, r.RedisCPU, r.Executed = -1, -1, -1
		b := lat[1].Summarize()
		r.PairP50, r.PairP99, r.PairMean = b.P50, b.P99, lat[1].Mean()
		r.Mean = lat[0].Mean()
		r.PairCmds = perOp(float64(counters[1].Snapshot().Sub(before).Cmds), len(lat[1]))
	}
	return r, err
}

// cycleLoop shares n tickets among workers goroutines; a ticket is one
// acquire+release cycle with each driver, in an order that alternates from
// ticket to ticket. It returns each driver's cycle latencies and the number
// of failed cycles; the error is the first failure, returned only when no
// cycle succeeded.
func cycleLoop(ctx context.Context, ds []Driver, workers, n int, prefix string, reuse bool) ([]Samples, int, error) {
	var (
		next   atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		all    = make([]Samples, len(ds))
		first  error
		wg     sync.WaitGroup
		relCtx = context.WithoutCancel(ctx)
	)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]Samples, len(ds))
			defer func() {
				mu.Lock()
				for k := range ds {
					all[k] = append(all[k], lat[k]...)
				}
				mu.Unlock()
			}()
			fail := func(err error) {
				errs.Add(1)
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("goroutine %d: %w", g, err)
				}
				mu.Unlock()
			}
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				for j := range ds {
					k := (j + int(i)) % len(ds)
					key := fmt.Sprintf("%sd%d:%d", prefix, k, i)
					if reuse {
						key = fmt.Sprintf("%sd%d:g%d", prefix, k, g)
					}
					t0 := time.Now()
					h, err := ds[k].TryAcquire(ctx, key)
					if err != nil {
						if errors.Is(err, errBusy) {
							err = fmt.Errorf("uncontended key %s reported busy", key)
						}
						fail(err)
						continue
					}
					if err := h.Release(relCtx); err != nil {
						fail(err)
						continue
					}
					lat[k].Add(time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	if len(all[0]) == 0 && first != nil {
		return all, int(errs.Load()), first
	}
	return all, int(errs.Load()), nil
}

// setLatency fills the rate and percentiles from per-op latencies.
func (r *Result) setLatency(lat Samples, elapsed time.Duration) {
	s := lat.Summarize()
	r.Ops, r.P50, r.P99, r.Max = s.N, s.P50, s.P99, s.Max
	r.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		r.Rate = float64(s.N) / elapsed.Seconds()
	}
}
