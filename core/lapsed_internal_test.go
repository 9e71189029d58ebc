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

// FenceFromContext reads the lease under its lock while a Release of the
// lease runs (go test -race).
func TestFenceFromContextDuringRelease(t *testing.T) {
	ctx := context.Background()
	c := mustNew(NewMemory())
	defer c.Close()
	for range 200 {
		h, err := c.TryLock(ctx, "ffc", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		hctx := h.WithContext(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			FenceFromContext(hctx)
		}()
		_ = h.Release(ctx)
		<-done
	}
}

// slowCancel re-enters key with Do under ctx and gives the nested Do's
// context many children, so that its cancellation (one of the lease's
// onLost funcs) takes long enough to be caught half done. It returns once
// the nested callback runs; the func it returns ends it.
func slowCancel(c *Client, ctx context.Context, key string) (end func()) {
	ready, done, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_ = c.Do(ctx, key, func(ctx context.Context) error {
			cancels := make([]context.CancelFunc, 0, 50000)
			for range cap(cancels) {
				_, cancel := context.WithCancel(ctx)
				cancels = append(cancels, cancel)
			}
			close(ready)
			<-done
			for _, f := range cancels {
				f()
			}
			return nil
		})
	}()
	<-ready
	return func() { close(done); <-finished }
}

// lostNow reports whether l's loss is recorded.
func (l *lease) lostNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr != nil
}

// Once one caller found the lease lost past its deadline, every signal is
// given to whoever asks next, though the finder may still be cancelling
// contexts: Do's context's Err and a Group's Lost as much as Lock.Err (they
// are given in the critical section that records the loss). Tried on
// several leases: which onLost func runs first varies.
func TestLapsedSignalsGivenTogether(t *testing.T) {
	lossTrials(t, "together", 6, func(h *Lock) (wait func()) {
		return func() {
			for !h.l.lostNow() {
			}
		}
	})
}

// A goroutine that Lost's channel wakes finds Do's context done and the
// Group's Lost closed: the channel closes after the onLost funcs ran, not
// before (found by a review of b4dcdae).
func TestLostClosesAfterTheOtherSignals(t *testing.T) {
	lossTrials(t, "after", 10, func(h *Lock) (wait func()) {
		lost := h.Lost() // the channel, got before the loss
		return func() { <-lost }
	})
}

// lossTrials has another goroutine's Lock.Err find a lease lost past its
// deadline while Do's context has many children to cancel (slowCancel), on
// the lease of a Do and on a member of a Group, trials times each. Once
// the wait that heard returns (heard is called before the loss) ends, Do's
// context must be done and the Group's Lost closed.
func lossTrials(t *testing.T, key string, trials int, heard func(h *Lock) (wait func())) {
	ctx := context.Background()
	c := mustNew(NewMemory())
	defer c.Close()
	for trial := range trials {
		err := c.Do(ctx, key, func(runCtx context.Context) error {
			h := &Lock{l: runCtx.Value(bindKey{}).(*binding).l}
			wait := heard(h)
			end := slowCancel(c, runCtx, key)
			defer end()
			lateTimer(h.l)
			go h.Err() // finds the loss, and cancels
			wait()
			// Done first: Err takes the lease's lock, and would wait for
			// the finder to finish.
			select {
			case <-runCtx.Done():
			default:
				t.Errorf("trial %d: the lease is lost past its deadline, and Do's context's Done is open", trial)
			}
			if runCtx.Err() == nil {
				t.Errorf("trial %d: the lease is lost past its deadline, and the Err of Do's context is nil", trial)
			}
			return nil
		}, WithTTL(time.Minute))
		if !errors.Is(err, ErrLost) {
			t.Fatalf("Do: %v; want ErrLost", err)
		}

		g, err := c.TryLockAll(ctx, []string{key + "1", key + "2"}, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		m := g.Locks()[0]
		wait := heard(m)
		end := slowCancel(c, m.WithContext(ctx), m.Key())
		lateTimer(m.l)
		go m.Err()
		wait()
		select {
		case <-g.Lost():
		default:
			t.Errorf("trial %d: a member is lost past its deadline, and Group.Lost is open", trial)
		}
		end()
		_ = g.Release(ctx)
	}
}

// The Err of a nested Do's context finds the outer Do's lease past its
// deadline too, though its timer has not run: the outer loss cancels the
// nested context (found by a review of b4dcdae).
func TestLapsedOuterLeaseToldInNestedDo(t *testing.T) {
	ctx := context.Background()
	c := mustNew(NewMemory())
	defer c.Close()
	err := c.Do(ctx, "outer", func(octx context.Context) error {
		outer := octx.Value(bindKey{}).(*binding).l
		err := c.Do(octx, "inner", func(ictx context.Context) error {
			lateTimer(outer)
			if ictx.Err() == nil {
				t.Error("the outer lease is past its deadline, and the nested Do's context's Err is nil")
			}
			if !errors.Is(context.Cause(ictx), ErrLost) {
				t.Errorf("nested Do's context's cause %v; want ErrLost", context.Cause(ictx))
			}
			return nil
		}, WithTTL(time.Minute))
		if err != nil {
			t.Errorf("inner Do: %v", err)
		}
		return nil
	}, WithTTL(time.Minute))
	if !errors.Is(err, ErrLost) {
		t.Fatalf("outer Do: %v; want ErrLost", err)
	}
}

// blockingObserver's LeaseLost waits until release is closed.
type blockingObserver struct {
	lostCounter
	release chan struct{}
}

func (o *blockingObserver) LeaseLost(ctx context.Context, key string, kind Kind, fence int64, held time.Duration, cause error) {
	<-o.release
	o.lostCounter.LeaseLost(ctx, key, kind, fence, held, cause)
}

// A holder's question that finds the lease past its deadline answers
// without waiting for the Observer, which hears of the loss on a goroutine
// of its own: the question may be asked on the library's own goroutines
// (a coalescer's leader asks its callers' contexts' Err), which must not
// run the Observer. The release still ends after LeaseLost returns.
func TestLapsedObserverOffTheAskersGoroutine(t *testing.T) {
	ctx := context.Background()
	obs := &blockingObserver{release: make(chan struct{})}
	c := mustNew(NewMemory(WithObserver(obs)))
	defer c.Close()
	h, err := c.TryLock(ctx, "asked", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lateTimer(h.l)
	answered := make(chan error, 1)
	go func() { answered <- h.Err() }()
	select {
	case err := <-answered:
		if !errors.Is(err, ErrLost) {
			t.Fatalf("Err: %v; want ErrLost", err)
		}
	case <-time.After(10 * time.Second):
		close(obs.release)
		t.Fatal("Err waited for the Observer's LeaseLost")
	}
	released := make(chan struct{})
	go func() { _ = h.Release(ctx); close(released) }()
	select {
	case <-released:
		t.Fatal("Release returned before LeaseLost did")
	case <-time.After(50 * time.Millisecond):
	}
	close(obs.release)
	<-released
	if n := obs.n.Load(); n != 1 {
		t.Fatalf("the Observer heard of %d losses; want 1", n)
	}
}

// slowObserver's LeaseLost takes a while, then records that it ended.
type slowObserver struct {
	lostCounter
	finished atomic.Bool
}

func (o *slowObserver) LeaseLost(context.Context, string, Kind, int64, time.Duration, error) {
	time.Sleep(100 * time.Millisecond)
	o.finished.Store(true)
}

// Close returns only once the Observer has heard of a loss a holder's
// question found, on a goroutine of its own (found by a review of
// 9e0565e).
func TestCloseWaitsForLeaseLostFoundByAQuestion(t *testing.T) {
	obs := &slowObserver{}
	c := mustNew(NewMemory(WithObserver(obs)))
	h, err := c.TryLock(context.Background(), "close-obs", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lateTimer(h.l)
	if err := h.Err(); !errors.Is(err, ErrLost) {
		t.Fatalf("Err: %v; want ErrLost", err)
	}
	c.Close()
	if !obs.finished.Load() {
		t.Fatal("Close returned while Observer.LeaseLost was still running")
	}
}
