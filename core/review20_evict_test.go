package core_test

// Review 20: the operator's Evict — its evict.lua sent again by go-redis
// after a lost answer (MaxRetries), and a holder that changed between its
// Inspect and its eviction. Each failed before evict.lua took only the
// holds Inspect showed, and remembered its answer.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// r20warm loads evict.lua on c's connection: an eviction of a key held.
func r20warm(t *testing.T, ctx context.Context, c, other *core.Client) {
	t.Helper()
	if _, err := other.TryLock(ctx, "r20warm", core.WithAutoRenew(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Evict(ctx, "r20warm"); err != nil {
		t.Fatal(err)
	}
}

// An Evict whose answer is lost: go-redis sends evict.lua again, which
// found nothing left to remove and answered 0, so the operator was told
// ErrNotHeld ("nothing holds it") for an eviction carried out.
func TestR20EvictLostAnswerSaysNotHeld(t *testing.T) {
	r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
		ctx := ctxFor(t, 20*time.Second)
		r20warm(t, ctx, c, other)
		l, err := other.TryLock(ctx, "r20ev", core.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		lost := p.LoseAnswer([]byte("{r20ev}:sem:fence")) // evict.lua alone names it
		_, err = c.Evict(ctx, "r20ev")
		mustLose(t, lost)
		info, _ := other.Inspect(ctx, "r20ev")
		t.Logf("Evict, its answer lost: %v; key held after: %v", err, info.Held)
		if info.Held {
			t.Fatal("the lease was not evicted at all")
		}
		if err != nil {
			t.Fatalf("Evict removed the holder but reported %v", err)
		}
	})
}

// Worse: the first run evicts the stuck holder and publishes the release;
// a waiter takes the key at once; go-redis's second run of evict.lua
// evicted the waiter's new lease too, which nobody asked for: it was told
// only at its next renewal, and a third Client could take the key first.
func TestR20EvictLostAnswerEvictsNextHolder(t *testing.T) {
	r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
		ctx := ctxFor(t, 20*time.Second)
		r20warm(t, ctx, c, other)
		stuck, err := other.TryLock(ctx, "r20ev2", core.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Release(ctx)
		got := make(chan *core.Lock, 1)
		go func() {
			w, err := other.Lock(ctx, "r20ev2", core.WithTTL(30*time.Second), core.WithWaitTimeout(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		time.Sleep(300 * time.Millisecond) // the waiter waits (and has marked the key)
		lost := p.LoseAnswer([]byte("{r20ev2}:sem:fence"))
		info, err := c.Evict(ctx, "r20ev2")
		mustLose(t, lost)
		t.Logf("Evict: evicted token %q (fence %d), err %v", info.Token, info.Fence, err)
		var w *core.Lock
		select {
		case w = <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter never took the key")
		}
		if w == nil {
			return
		}
		defer w.Release(ctx)
		time.Sleep(50 * time.Millisecond)
		after, _ := other.Inspect(ctx, "r20ev2")
		t.Logf("waiter took it with fence %d; key after Evict: held=%v token=%q", w.Fence(), after.Held, after.Token)
		if !after.Held {
			t.Fatalf("the waiter that took the key after the eviction (fence %d) lost its lease to the eviction's resend", w.Fence())
		}
		if err != nil && !errors.Is(err, core.ErrNotHeld) {
			t.Log(err)
		}
	})
}

// evictHook runs before, once, just before the first evict.lua call (the
// only script naming "}:sem:fence"), i.e. between Evict's Inspect and its
// eviction.
type evictHook struct {
	once   sync.Once
	before func()
}

func (h *evictHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *evictHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *evictHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasSuffix(s, "}:sem:fence") {
				h.once.Do(h.before)
				break
			}
		}
		return next(ctx, cmd)
	}
}

// Evict reads the key (Inspect), then runs evict.lua, which deleted
// whatever lease was there: a holder that took the key between the two
// (the stuck holder released, someone else acquired) was evicted in its
// place, and Evict reported — and the admin page and `latchkey release
// --force` recorded and printed — the earlier holder.
func TestR20EvictRemovesHolderItDidNotInspect(t *testing.T) {
	admin := redistest.Client(t)
	prefix := redistest.Prefix(t, admin)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { rdb.Close() })
	h := &evictHook{}
	rdb.AddHook(h)
	op := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { op.Close() })
	app := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { app.Close() })
	ctx := ctxFor(t, 20*time.Second)

	a, err := app.TryLock(ctx, "r20toctou", core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var b *core.Lock
	h.before = func() {
		_ = a.Release(ctx)
		b, err = app.TryLock(ctx, "r20toctou", core.WithTTL(30*time.Second))
		if err != nil {
			t.Error(err)
		}
	}
	info, err := op.Evict(ctx, "r20toctou")
	if b == nil {
		t.Fatal("B did not take the key")
	}
	if !errors.Is(err, core.ErrNotHeld) {
		t.Errorf("Evict of a holder gone since its Inspect: %v, want ErrNotHeld", err)
	}
	defer b.Release(ctx)
	after, _ := app.Inspect(ctx, "r20toctou")
	t.Logf("asked to evict %q (fence %d); Evict reports token %q fence %d; B (fence %d) holds now: %v",
		a.Token(), a.Fence(), info.Token, info.Fence, b.Fence(), after.Held)
	if !after.Held {
		t.Fatalf("Evict removed B's lease (token %q, fence %d), taken after its Inspect, and reported A's (token %q, fence %d) as evicted",
			b.Token(), b.Fence(), info.Token, info.Fence)
	}
}
