package core_test

// The workers of the fault-injection suite (fault_test.go): a crew of
// Clients contending for the run's key, a scenario's own holder, the
// go-redis options they use, and the goroutine-leak check.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// observer counts lost leases for the run.
func (r *faultRun) observer() core.Observer { return lossCounter{r} }

type lossCounter struct{ r *faultRun }

func (o lossCounter) OpStart(ctx context.Context, op core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	start := time.Now()
	return ctx, func(res core.OpResult) {
		if res.Err != nil {
			o.r.debugf("%v fence %d failed after %v: %v", op, res.Fence, time.Since(start).Round(time.Millisecond), res.Err)
		}
	}
}

func (o lossCounter) LeaseLost(_ context.Context, key string, _ core.Kind, fence int64, _ time.Duration, cause error) {
	o.r.lost.Add(1)
	if !errors.Is(cause, core.ErrLost) {
		o.r.t.Errorf("%s: LeaseLost(%q, %d) cause does not match ErrLost: %v", o.r.name, key, fence, cause)
	}
}

// redisClient returns a Client on rdb, as one worker process would have.
func (r *faultRun) redisClient(rdb redis.UniversalClient) *core.Client {
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(r.prefix), core.WithObserver(r.observer())))
	r.t.Cleanup(func() { c.Close() })
	return c
}

// redlockClient returns a Redlock Client over nodes.
func (r *faultRun) redlockClient(nodes []redis.UniversalClient) *core.Client {
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(r.prefix), core.WithObserver(r.observer())))
	r.t.Cleanup(func() { c.Close() })
	return c
}

// lockVictim takes the key for a scenario's own holder (worker w): Lock,
// retried for up to 10 s when the backend rather than contention failed
// (a slow node under the race detector, a reconnect). It records the grant.
func (r *faultRun) lockVictim(ctx context.Context, c *core.Client, w int, opts ...core.LockOption) *holding {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		floor := r.floor()
		l, err := c.Lock(ctx, r.key, opts...)
		if err == nil {
			return r.acquired(w, l, floor)
		}
		r.callerError("lock", err)
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: worker %d could not take the key for 10 s: %v", r.name, w, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A crew is a set of workers, each with its own Client (as separate
// processes would have), contending for the run's key until stopped.
type crew struct {
	r      *faultRun
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// body is a worker's critical section; it must commit (or decide not to).
type body func(w, round int, h *holding)

// holdFor returns a body that holds the lock for a random time in
// [lo, hi], then commits.
func (r *faultRun) holdFor(lo, hi time.Duration) body {
	return func(_, _ int, h *holding) {
		time.Sleep(lo + rand.N(hi-lo+1))
		r.commit(h)
	}
}

// startCrew starts one worker per client. Each worker loops: Lock, body,
// Release, for rounds rounds (0: until stop). The crew's Clients are closed
// as their workers end.
func (r *faultRun) startCrew(clients []*core.Client, rounds int, b body, opts ...core.LockOption) *crew {
	cr := &crew{r: r}
	cr.ctx, cr.cancel = context.WithCancel(context.Background())
	for w, c := range clients {
		cr.wg.Add(1)
		r.active.Add(1)
		go func() {
			defer cr.wg.Done()
			defer r.active.Add(-1)
			defer c.Close()
			for round := 0; rounds == 0 || round < rounds; round++ {
				if cr.ctx.Err() != nil {
					return
				}
				floor := r.floor()
				ctx, cancel := context.WithTimeout(cr.ctx, lockBound)
				l, err := c.Lock(ctx, r.key, opts...)
				cancel()
				if err != nil {
					if cr.ctx.Err() != nil {
						return
					}
					r.callerError("lock", err)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				h := r.acquired(w, l, floor)
				h.crew = true
				b(w, round, h)
				r.release(h)
				// A breath between jobs, as real workers take: without it
				// the releasing worker, which needs no wake-up, wins the key
				// back almost every time and a worker that must be woken
				// (the victim behind a proxy) can starve in the default,
				// unfair mode.
				time.Sleep(time.Millisecond + rand.N(2*time.Millisecond))
			}
		}()
	}
	return cr
}

// stop ends the workers (after their current round) and waits for them.
func (cr *crew) stop() {
	cr.cancel()
	cr.wg.Wait()
}

// wait waits for workers with a fixed number of rounds.
func (cr *crew) wait() {
	cr.wg.Wait()
	cr.cancel()
}

// faultRedis returns a go-redis client for one worker: context deadlines
// bound its commands, its timeouts are short enough that a dead or silent
// server is noticed within a lease, and it dials once per try, so a refused
// connection is reported as such. The pool is large because go-redis stops
// dialling for up to a second once PoolSize dials have failed (counted over
// the client's life), which would hide the server's return.
func faultRedis(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		PoolSize:              64,
		MaxRetries:            1,
		DialerRetries:         1,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// waitReachable waits (bounded) until rdb answers PING again: after a
// fault is undone, go-redis may report the last dial error for a while.
func waitReachable(t *testing.T, rdb *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis unreachable 5 s after the fault was undone: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noLeaks checks, after the test and all its cleanups, that it left no
// goroutine running. Call it first, so that its cleanup runs last. It
// allows a few seconds: a go-redis pool that failed to dial keeps a probe
// goroutine that notices the pool's Close only after its 1 s sleep.
// faultTest opens a fault-injection test: skipped under -short (make test),
// run by make ci, with its own goroutine-leak check.
func faultTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault-injection suite: run without -short")
	}
	noLeaks(t)
}

func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := goleak.Find(opt)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left behind: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
