package otel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

var (
	name    = attribute.Key("latchkey.lock.name")
	op      = attribute.Key("latchkey.operation.name")
	outcome = attribute.Key("latchkey.outcome")
	errType = attribute.Key("error.type")
)

// TestDoSpans: Do under a caller's span makes latchkey.acquire and
// latchkey.release children of it, with the lock name (not the key), the
// attempts, fence, wait and held time, status Unset and no error.type.
func TestDoSpans(t *testing.T) {
	tel := newTelemetry(t)
	c, _, _ := redisClient(t, tel.inst)
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	var fence int64
	err := c.Do(ctx, uniqueKey(t, "sku"), func(ctx context.Context) error {
		h, err := c.TryLock(ctx, uniqueKey(t, "sku")) // re-enters
		if err != nil {
			return err
		}
		fence = h.Fence()
		return h.Release(ctx)
	})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	acq, rel := tel.spans("latchkey.acquire"), tel.spans("latchkey.release")
	if len(acq) != 2 || len(rel) != 2 {
		t.Fatalf("spans: %s", tel.names())
	}
	// Ended in order: Do's acquire, the nested one; the nested release, Do's.
	pc := parent.SpanContext()
	checkSpan(t, acq[0], pc, codes.Unset, name.String("sku"), op.String("acquire"), outcome.String("acquired"),
		attribute.Int64("latchkey.lock.fence", fence), attribute.Int("latchkey.lock.attempts", 1))
	checkSpan(t, acq[1], pc, codes.Unset, outcome.String("reentered"))
	checkSpan(t, rel[0], pc, codes.Unset, outcome.String("reentered"), op.String("release"))
	checkSpan(t, rel[1], pc, codes.Unset, outcome.String("released"), attribute.Int64("latchkey.lock.fence", fence))
	if _, ok := attrs(acq[0])["latchkey.lock.wait.duration"]; !ok {
		t.Errorf("acquire span has no wait duration: %v", acq[0].Attributes())
	}
	if held, ok := attrs(rel[1])["latchkey.lock.held.duration"]; !ok || held.AsFloat64() <= 0 {
		t.Errorf("release span held duration %v", held.String())
	}
	for _, s := range tel.sr.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == uniqueKey(t, "sku") {
				t.Errorf("%s carries the raw key in %s", s.Name(), kv.Key)
			}
		}
	}
	if got := tel.value(t, "latchkey.lock.held.count"); got != 0 {
		t.Errorf("held count %v after Do", got)
	}
}

// TestAcquireOutcomes: contention is an outcome (status Unset, no
// error.type); a wait timeout, a cancelled wait and a Redis failure are
// errors, with the same error.type on the span and on the metrics.
func TestAcquireOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		lock    func(ctx context.Context, c *core.Client, key string) error
		down    bool // Redis is gone
		outcome string
		errType string
	}{
		{"contended", func(ctx context.Context, c *core.Client, key string) error {
			_, err := c.TryLock(ctx, key)
			return err
		}, false, "contended", ""},
		{"retry-budget", func(ctx context.Context, c *core.Client, key string) error {
			_, err := c.Lock(ctx, key, core.WithRetryBudget(1))
			return err
		}, false, "contended", ""},
		{"wait-timeout", func(ctx context.Context, c *core.Client, key string) error {
			_, err := c.Lock(ctx, key, core.WithWaitTimeout(30*time.Millisecond))
			return err
		}, false, "failed", "timeout"},
		{"cancelled", func(ctx context.Context, c *core.Client, key string) error {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(30*time.Millisecond, cancel)
			_, err := c.Lock(ctx, key)
			return err
		}, false, "failed", "canceled"},
		{"redis-down", func(ctx context.Context, c *core.Client, key string) error {
			_, err := c.TryLock(ctx, key)
			return err
		}, true, "failed", "backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			key := uniqueKey(t, "order")
			c, rdb, mr := redisClient(t, tel.inst)
			holder := mustNew(core.NewRedis(rdb)) // not observed
			t.Cleanup(func() { holder.Close() })
			if _, err := holder.TryLock(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			if tt.down {
				mr.Close()
			}
			ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
			err := tt.lock(ctx, c, key)
			parent.End()
			if err == nil {
				t.Fatal("acquired a held key")
			}
			status := codes.Unset
			want := []attribute.KeyValue{outcome.String(tt.outcome), name.String("order")}
			if tt.errType != "" {
				status = codes.Error
				want = append(want, errType.String(tt.errType))
			}
			s := tel.span(t, "latchkey.acquire")
			checkSpan(t, s, parent.SpanContext(), status, want...)
			if tt.errType != "" && s.Status().Description != err.Error() {
				t.Errorf("status description %q, want %q", s.Status().Description, err.Error())
			}
			m := tel.collect(t)
			for _, metric := range []string{"latchkey.lock.operation.duration", "latchkey.lock.wait.duration"} {
				ps := points(m[metric])
				if len(ps) != 1 {
					t.Fatalf("%s: %d points", metric, len(ps))
				}
				got, has := ps[0].attrs.Value(errType)
				if has != (tt.errType != "") || (has && got.AsString() != tt.errType) {
					t.Errorf("%s: error.type %q (present %v), want %q", metric, got.String(), has, tt.errType)
				}
				if o, _ := ps[0].attrs.Value(outcome); o.AsString() != tt.outcome {
					t.Errorf("%s: outcome %q", metric, o.String())
				}
			}
			if got := tel.value(t, "latchkey.lock.held.count"); got != 0 {
				t.Errorf("held count %v", got)
			}
		})
	}
}

// TestLostLease: a lease lost under Do gives a latchkey.lost span with
// error status, child of the lease's acquire span; an event on the caller's
// span; one loss counted; and a held count back at zero with the lease
// table empty.
func TestLostLease(t *testing.T) {
	tel := newTelemetry(t)
	c, _, mr := redisClient(t, tel.inst)
	key := uniqueKey(t, "doc")
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	err := c.Do(ctx, key, func(ctx context.Context) error {
		// Another holder has the key (a Redis that lost the lease, and a
		// Client that took the key since): the next renewal finds out. (A
		// lease that vanished with nobody taking the key since reads as
		// released: core.Lock.Release.)
		mr.Set("latchkey:{"+key+"}", "intruder")
		<-ctx.Done()
		return context.Cause(ctx)
	}, core.WithTTL(150*time.Millisecond))
	parent.End()
	if !errors.Is(err, core.ErrLost) {
		t.Fatalf("Do: %v", err)
	}
	acq := tel.span(t, "latchkey.acquire")
	lost := tel.span(t, "latchkey.lost")
	checkSpan(t, lost, acq.SpanContext(), codes.Error, name.String("doc"), errType.String("lost"), outcome.String("lost"),
		attribute.Int64("latchkey.lock.fence", attrs(acq)["latchkey.lock.fence"].AsInt64()))
	rel := tel.span(t, "latchkey.release")
	checkSpan(t, rel, parent.SpanContext(), codes.Error, outcome.String("lost"), errType.String("lost"))

	req := tel.span(t, "request")
	if ev := req.Events(); len(ev) != 1 || ev[0].Name != "latchkey.lease.lost" {
		t.Errorf("caller's events: %v", ev)
	}
	if got := tel.value(t, "latchkey.lock.losses", name.String("doc")); got != 1 {
		t.Errorf("losses %v, want 1", got)
	}
	if got := tel.value(t, "latchkey.lock.held.duration", outcome.String("lost")); got != 1 {
		t.Errorf("held durations of lost leases: %v, want 1", got)
	}
	if got := tel.value(t, "latchkey.lock.held.duration", outcome.String("released")); got != 0 {
		t.Errorf("the lost lease's release was counted as a release: %v", got)
	}
	if got := tel.value(t, "latchkey.lock.held.count"); got != 0 {
		t.Errorf("held count %v", got)
	}
}

// TestHeldCountBackToZero: the held-locks gauge counts leases, not
// handles, and returns to zero after successes, errors, panics in Do,
// re-entry, stale releases, expiry without renewal and Close.
func TestHeldCountBackToZero(t *testing.T) {
	tel := newTelemetry(t)
	c, _, mr := redisClient(t, tel.inst)
	ctx := context.Background()
	held := func() float64 { return tel.value(t, "latchkey.lock.held.count") }
	k := func(s string) string { return uniqueKey(t, "k") + ":" + s }

	a, _ := c.TryLock(ctx, k("a"))
	_ = c.Do(ctx, k("b"), func(ctx context.Context) error {
		nested, err := c.Lock(a.WithContext(ctx), k("a")) // re-enters a
		if err != nil {
			t.Fatal(err)
		}
		if got := held(); got != 2 {
			t.Errorf("held %v inside Do with a re-entered hold, want 2", got)
		}
		return nested.Release(ctx)
	})
	a.Release(ctx)
	if got := held(); got != 0 {
		t.Fatalf("held %v after releases", got)
	}

	_ = c.Do(ctx, k("err"), func(context.Context) error { return errors.New("handler failed") })
	func() {
		defer func() { recover() }()
		_ = c.Do(ctx, k("panic"), func(context.Context) error { panic("nil map") })
	}()
	stale, _ := c.TryLock(ctx, k("stale"), core.WithAutoRenew(false))
	mr.Set("latchkey:{"+k("stale")+"}", "intruder") // taken over
	if err := stale.Release(ctx); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("stale release: %v", err)
	}
	expiring, _ := c.TryLock(ctx, k("expiring"), core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	<-expiring.Lost()
	expiring.Release(ctx)
	_, _ = c.TryLock(ctx, k("kept")) // never released: Close reports it lost
	// Lost() closes just before core tells the observer: wait for it.
	waitFor(t, "the expiry counted out", 5*time.Second, func() bool { return held() == 1 })
	c.Close()
	if got := held(); got != 0 {
		t.Errorf("held %v after errors, a panic, a stale release, an expiry and Close", got)
	}
	if got := tel.value(t, "latchkey.lock.losses"); got != 2 {
		t.Errorf("losses %v, want 2 (expiry, Close)", got)
	}
	if got := tel.value(t, "latchkey.lock.held.duration", outcome.String("not_held")); got != 1 {
		t.Errorf("stale releases %v, want 1", got)
	}
}

// TestRenewals: renewals are measured; they are traced only with
// WithRenewalSpans, as children of the lease's acquire span.
func TestRenewals(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			tel := newTelemetry(t, otel.WithRenewalSpans(on))
			c, _, _ := redisClient(t, tel.inst)
			h, err := c.TryLock(context.Background(), uniqueKey(t, "job"), core.WithTTL(600*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a renewal", 5*time.Second, func() bool { // the span ends just after the measurement
				return tel.value(t, "latchkey.lock.operation.duration", op.String("renew"), outcome.String("renewed")) >= 1 &&
					(!on || len(tel.spans("latchkey.renew")) >= 1)
			})
			h.Release(context.Background())
			renews := tel.spans("latchkey.renew")
			if on != (len(renews) >= 1) {
				t.Fatalf("%d renewal spans with WithRenewalSpans(%v)", len(renews), on)
			}
			for _, r := range renews {
				if attrs(r)[outcome].AsString() == "renewed" {
					checkSpan(t, r, tel.span(t, "latchkey.acquire").SpanContext(), codes.Unset, name.String("job"))
					return
				}
			}
			if on {
				t.Errorf("no renewal span with outcome renewed")
			}
		})
	}
}

// TestExtend: an extension is a latchkey.extend span; extending a lease
// that is gone is not_held, an error.
func TestExtend(t *testing.T) {
	tel := newTelemetry(t)
	c, _, mr := redisClient(t, tel.inst)
	ctx := context.Background()
	key := uniqueKey(t, "lease")
	h, _ := c.TryLock(ctx, key, core.WithAutoRenew(false))
	if err := h.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	mr.Del("latchkey:{" + key + "}")
	if err := h.Extend(ctx, time.Minute); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("extend of a deleted lease: %v", err)
	}
	ext := tel.spans("latchkey.extend")
	if len(ext) != 2 {
		t.Fatalf("spans %s", tel.names())
	}
	checkSpan(t, ext[0], ext[0].Parent(), codes.Unset, outcome.String("extended"))
	checkSpan(t, ext[1], ext[1].Parent(), codes.Error, outcome.String("not_held"), errType.String("not_held"))
	if got := tel.value(t, "latchkey.lock.operation.duration", op.String("extend"), errType.String("not_held")); got != 1 {
		t.Errorf("failed extensions %v", got)
	}
	h.Release(ctx)
	if got := tel.value(t, "latchkey.lock.held.count"); got != 0 {
		t.Errorf("held count %v", got)
	}
}

// waitFor polls cond until it holds or the generous bound passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPrimitiveMetrics: permits held and waiters carry their kind, the
// waiters gauge goes up while an acquisition waits and back to zero, and
// leadership changes count elections, resignations and losses.
func TestPrimitiveMetrics(t *testing.T) {
	tel := newTelemetry(t)
	c := mustNew(core.NewMemory(core.WithObserver(tel.inst)))
	defer c.Close()
	ctx := context.Background()
	kind := attribute.Key("latchkey.lock.kind")
	permits := func() float64 { return tel.value(t, "latchkey.lock.held.count", kind.String("permit")) }
	waiters := func() float64 { return tel.value(t, "latchkey.lock.waiters", kind.String("permit")) }

	sem := c.Semaphore("pool:a", 2)
	p1, _ := sem.TryAcquire(ctx)
	p2, _ := sem.TryAcquire(ctx)
	if got := permits(); got != 2 {
		t.Errorf("permits held %v, want 2", got)
	}
	got := make(chan *core.Lock)
	go func() {
		p, err := sem.Acquire(ctx, core.WithWaitTimeout(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "a waiter", 5*time.Second, func() bool { return waiters() == 1 })
	p1.Release(ctx)
	p3 := <-got
	if w := waiters(); w != 0 {
		t.Errorf("waiters %v after the wait, want 0", w)
	}
	p2.Release(ctx)
	p3.Release(ctx)
	if got := permits(); got != 0 {
		t.Errorf("permits held %v at the end", got)
	}

	changes := func(outcome string) float64 {
		return tel.value(t, "latchkey.leader.changes", attribute.String("latchkey.outcome", outcome))
	}
	l, err := c.Campaign(ctx, "jobs:leader", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	l, err = c.Campaign(ctx, "jobs:leader", "node-a", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	waitFor(t, "the loss counted", 5*time.Second, func() bool { return changes("lost") == 1 })
	l.Release(ctx)
	if e, r := changes("elected"), changes("resigned"); e != 2 || r != 1 {
		t.Errorf("elected %v resigned %v, want 2 and 1", e, r)
	}
	if got := tel.value(t, "latchkey.lock.held.count"); got != 0 {
		t.Errorf("held count %v at the end", got)
	}
}
