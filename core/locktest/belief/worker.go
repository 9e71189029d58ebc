package belief

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
)

// worker locks a random key through a random Client, holds it for a
// random time (often across renewals), sometimes extends it, releases it,
// and records the belief.
func (r *run) worker(ctx context.Context, rng *rand.Rand) {
	ttls := r.cfg.TTLs
	pick := func(d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d) + 1)) }
	for ctx.Err() == nil {
		i := rng.IntN(len(r.clients))
		key := r.cfg.Keys[rng.IntN(len(r.cfg.Keys))]
		ttl := ttls[rng.IntN(len(ttls))]
		lctx, slot := withSlot(ctx)
		call := time.Now()
		l, err := r.clients[i].Lock(lctx, key, core.WithTTL(ttl), core.WithWaitTimeout(r.cfg.WaitTimeout))
		from := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return // the run ended during the call: not an attempt
			}
			r.count(true, false, "lock: "+cause(err))
			if errors.Is(err, core.ErrUnavailable) {
				r.mu.Lock()
				r.outages++
				r.mu.Unlock()
			}
			if !errors.Is(err, core.ErrNotAcquired) {
				sleep(ctx, 10*time.Millisecond) // an outage: do not spin
			}
			continue
		}
		r.count(true, true, "")
		rec := record{client: i, key: key, fence: l.Fence(), ttl: ttl, call: r.since(call), from: r.since(from)}
		var hold time.Duration
		extend := false
		switch p := rng.IntN(10); {
		case p < 5:
			hold = pick(ttl / 2)
		case p < 8:
			hold = ttl + pick(2*ttl) // across renewals
		default:
			hold, extend = pick(ttl/2), true
		}
		seen := holdFor(ctx, l, hold)
		if extend && l.Err() == nil {
			ext := ttls[rng.IntN(len(ttls))]
			rec.ttl = max(rec.ttl, ext)
			if err := l.Extend(context.Background(), ext); err != nil {
				r.count(false, false, "extend: "+cause(err))
			}
			seen = holdFor(ctx, l, pick(ttl))
		}
		end := time.Now()
		if err := l.Release(context.Background()); err != nil {
			r.count(false, false, "release: "+cause(err))
		}
		if l.Err() != nil { // lost: when Lost closed, as the Observer or this worker saw it first
			at, told := slot.wait(time.Second)
			if !told {
				r.harness("Client %d: a lease was lost and the Observer was not told: install the Observer Open is given (core.WithObserver)", i)
				at = end
			}
			if !seen.IsZero() && seen.Before(at) {
				at = seen
			}
			if at.Before(end) {
				end, rec.lost = at, true
			}
		}
		rec.to = max(r.since(end), rec.from)
		r.mu.Lock()
		r.beliefs = append(r.beliefs, rec)
		r.mu.Unlock()
	}
}

// count records an attempt (and whether it acquired) and an error.
func (r *run) count(attempt, acquired bool, err string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if attempt {
		r.attempts++
	}
	if acquired {
		r.acquired++
	}
	if err != "" {
		r.errs[err]++
	}
}

// holdFor holds l for d, or until the run ends, or until l is lost: then
// it returns when it saw Lost close.
func holdFor(ctx context.Context, l *core.Lock, d time.Duration) (lost time.Time) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return time.Time{}
	case <-ctx.Done():
		return time.Time{}
	case <-l.Lost():
		return time.Now()
	}
}

// cause names an error for the Report.
func cause(err error) string {
	for _, e := range []error{core.ErrNotAcquired, core.ErrNotHeld, core.ErrLost, core.ErrClosed, core.ErrUnavailable, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return strings.TrimPrefix(e.Error(), "core: ")
		}
	}
	return "other"
}

// The run is its Clients' Observer: LeaseLost records when each lease was
// lost, in the slot its acquisition's context carried (OpStart's context
// travels with the lease to LeaseLost).
func (r *run) OpStart(ctx context.Context, _ core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	return ctx, func(core.OpResult) {}
}

// LeaseLost implements core.Observer.
func (r *run) LeaseLost(ctx context.Context, _ string, _ core.Kind, _ int64, _ time.Duration, _ error) {
	at := time.Now()
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.set(at)
	}
}

// A slot receives the loss time of the one lease whose acquisition
// context carried it.
type slot struct {
	once sync.Once
	at   time.Time
	told chan struct{} // closed once at is set
}

type slotKey struct{}

func withSlot(ctx context.Context) (context.Context, *slot) {
	s := &slot{told: make(chan struct{})}
	return context.WithValue(ctx, slotKey{}, s), s
}

func (s *slot) set(at time.Time) {
	s.once.Do(func() {
		s.at = at
		close(s.told)
	})
}

// wait returns the loss time, waiting up to d for it (core tells the
// Observer just after it closes Lost).
func (s *slot) wait(d time.Duration) (time.Time, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.told:
		return s.at, true
	case <-t.C:
		return time.Time{}, false
	}
}
