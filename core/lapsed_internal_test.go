package core

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// lostCounter is an Observer that counts the leases it is told are lost.
type lostCounter struct{ n atomic.Int32 }

func (*lostCounter) OpStart(ctx context.Context, _ Op, _ string, _ Kind) (context.Context, func(OpResult)) {
	return ctx, func(OpResult) {}
}

func (o *lostCounter) LeaseLost(context.Context, string, Kind, int64, time.Duration, error) {
	o.n.Add(1)
}

// lateTimer stands for a runtime that has not run l's deadline timer yet:
// the deadline is already behind, and nothing has told the holder.
// (An auto-renewed lease has no timer before its first renewal, a third
// of its TTL in, so none fires here.)
func lateTimer(l *lease) {
	l.mu.Lock()
	l.deadline = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
}

// A holder that asks is told its lease is lost once the deadline has
// passed, though the timer that would tell it has not run: Err, Lost and
// the context of Do's callback each look at the deadline themselves. The
// Observer hears of the loss once.
func TestLapsedLeaseToldWhenAsked(t *testing.T) {
	ctx := context.Background()
	obs := &lostCounter{}
	c := mustNew(NewMemory(WithObserver(obs)))
	defer c.Close()

	t.Run("Err", func(t *testing.T) {
		h, err := c.TryLock(ctx, "err", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		if err := h.Err(); err != nil {
			t.Fatalf("Err before the deadline: %v", err)
		}
		lateTimer(h.l)
		if err := h.Err(); !errors.Is(err, ErrLost) {
			t.Fatalf("Err after the deadline, its timer not run: %v; want ErrLost", err)
		}
		select {
		case <-h.Lost():
		default:
			t.Fatal("Lost not closed after Err found the lease lost")
		}
	})
	t.Run("Lost", func(t *testing.T) {
		h, err := c.TryLock(ctx, "lost", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		early := h.Lost()
		lateTimer(h.l)
		select {
		case <-h.Lost():
		default:
			t.Fatal("Lost after the deadline, its timer not run: not closed")
		}
		select {
		case <-early: // the channel of an earlier call is the same one
		default:
			t.Fatal("the channel Lost returned before the deadline is still open")
		}
	})
	t.Run("Do", func(t *testing.T) {
		err := c.Do(ctx, "do", func(ctx context.Context) error {
			if err := ctx.Err(); err != nil {
				t.Fatalf("ctx.Err before the deadline: %v", err)
			}
			b, _ := ctx.Value(bindKey{}).(*binding)
			lateTimer(b.l)
			if ctx.Err() == nil {
				t.Fatal("the callback's ctx.Err after the deadline, its timer not run: nil")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, ErrLost) {
				t.Fatalf("cause %v; want ErrLost", cause)
			}
			return nil
		}, WithTTL(time.Minute))
		if !errors.Is(err, ErrLost) {
			t.Fatalf("Do: %v; want ErrLost", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		h, err := c.TryLock(ctx, "ctx", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		hctx := h.WithContext(ctx)
		lateTimer(h.l)
		if again, err := c.TryLock(hctx, "ctx"); err == nil {
			again.Release(ctx)
			t.Fatal("the lease was re-entered after its deadline, its timer not run")
		}
		if h.Err() == nil {
			t.Fatal("Err nil after a re-entry found the lease past its deadline")
		}

		h, err = c.TryLock(ctx, "ctx2", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		hctx = h.WithContext(ctx)
		lateTimer(h.l)
		if _, ok := FenceFromContext(hctx); ok {
			t.Fatal("FenceFromContext after the deadline, its timer not run: still held")
		}
		if h.Err() == nil {
			t.Fatal("Err nil after FenceFromContext found the lease past its deadline")
		}
	})
	t.Run("Group", func(t *testing.T) {
		g, err := c.TryLockAll(ctx, []string{"g1", "g2"}, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release(ctx)
		lateTimer(g.Locks()[1].l)
		select {
		case <-g.Lost():
		default:
			t.Fatal("Group.Lost with a member past its deadline, its timer not run: not closed")
		}
	})
	if n := obs.n.Load(); n != 6 {
		t.Fatalf("the Observer heard of %d losses; want 6", n)
	}
}
