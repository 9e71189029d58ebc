package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/core"
)

// runRenew holds cfg.N leases (default 100,000) of cfg.TTL on one latchkey
// Client, auto-renewed (every TTL/3), and measures one window of renewals
// (-renew-window, default 10 s) after a settling period of one TTL: the
// CPU the client process and the Redis servers spend, as a share of one
// core, and the leases lost. An op is one lease renewal due in the window
// (N × window / (TTL/3)); the per-op figures are per renewal.
func runRenew(ctx context.Context, cfg Config, e *env) (Result, error) {
	// No command counting: the scenario reports none, and the counting
	// hook parses every byte the client writes, which would be charged to
	// the client's CPU (a tenth of it at 100,000 renewals a second).
	d, err := openDriver(e.cfg.Driver, openArgs{addrs: e.cfg.Addrs, ttl: e.cfg.TTL, retry: e.cfg.Retry})
	if err != nil {
		return Result{}, err
	}
	defer d.Close()
	ld, ok := d.(*latchkeyDriver)
	if !ok {
		return Result{}, fmt.Errorf("-scenario renew runs the latchkey driver, not %s", cfg.Driver)
	}
	c := ld.c

	locks := make([]*core.Lock, cfg.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.N || ctx.Err() != nil {
					return
				}
				l, err := c.TryLock(ctx, fmt.Sprintf("%srenew:%d", e.prefix, i))
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				locks[i] = l
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return Result{}, fmt.Errorf("taking %d leases: %w", cfg.N, firstErr)
	}
	defer func() { // as they were taken: 8 goroutines
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(locks) && rctx.Err() == nil; i = int(next.Add(1)) - 1 {
					if locks[i] != nil {
						_ = locks[i].Release(rctx)
					}
				}
			}()
		}
		wg.Wait()
	}()

	// Let the renewals spread out as they will (the first round comes in
	// a burst, as the leases were taken), then measure.
	select {
	case <-time.After(cfg.TTL):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	var r Result
	stopProf := func() {}
	if cfg.WindowProf != "" {
		if stopProf, err = startCPUProfile(cfg.WindowProf); err != nil {
			return Result{}, err
		}
	}
	a := e.prober.take(ctx)
	select {
	case <-time.After(cfg.RenewWindow):
	case <-ctx.Done():
		stopProf()
		return Result{}, errors.Join(errors.New("-max-time ended the window"), ctx.Err())
	}
	b := e.prober.take(ctx)
	stopProf()
	for _, l := range locks {
		select {
		case <-l.Lost():
			r.Lost++
		default:
		}
	}
	renewals := int(float64(cfg.N) * cfg.RenewWindow.Seconds() / (cfg.TTL / 3).Seconds())
	r.Ops, r.Target, r.Seconds = renewals, renewals, cfg.RenewWindow.Seconds()
	r.Rate = float64(renewals) / r.Seconds
	e.prober.fill(&r, a, b, renewals)
	r.Leases = cfg.N
	r.ClientPct = 100 * (b.clientCPU - a.clientCPU).Seconds() / r.Seconds
	r.RedisPct = -1
	if a.redisOK && b.redisOK {
		r.RedisPct = 100 * (b.redisCPU - a.redisCPU).Seconds() / r.Seconds
	}
	return r, nil
}
