package temporallock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// Two workers (each its own core.Client and test activity environment)
// run the same keyed activity concurrently, several times each: never two
// at once, every run succeeds after waiting its turn, and the fences the
// runs see strictly increase in the order they entered.
func TestSameKeyNeverOverlaps(t *testing.T) {
	forEachBackend(t, false, func(t *testing.T, b backend) {
		w := newWorks()
		account := uniqueID(t)
		const workers, runsEach = 2, 4
		var wg sync.WaitGroup
		errs := make(chan error, workers*runsEach)
		for i := range workers {
			ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount)))
			for j := range runsEach {
				env := activityEnv(ic, w) // one environment per execution
				wg.Go(func() {
					_, err := env.ExecuteActivity(w.Hold, Order{Account: account, ID: i*runsEach + j})
					errs <- err
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Hold: %v", err)
			}
		}
		if w.runs != workers*runsEach {
			t.Errorf("%d runs, want %d", w.runs, workers*runsEach)
		}
		if w.maxIn[account] != 1 {
			t.Errorf("up to %d executions of one key ran at once, want 1", w.maxIn[account])
		}
		if f := w.fences[account]; !slices.IsSorted(f) || len(slices.Compact(slices.Clone(f))) != len(f) || f[0] <= 0 {
			t.Errorf("fences in entry order %v: want positive and strictly increasing", f)
		}
	})
}

// Executions with different keys run at the same time: each waits inside
// its critical section until all of them are inside, which never happens
// if the interceptor serialised them.
func TestDifferentKeysRunInParallel(t *testing.T) {
	forEachBackend(t, false, func(t *testing.T, b backend) {
		w := newWorks()
		const n = 3
		w.partner = newBarrier(n)
		ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount)))
		id := uniqueID(t)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			env := activityEnv(ic, w)
			wg.Go(func() {
				_, errs[i] = env.ExecuteActivity(w.Meet, Order{Account: id + "-" + string(rune('a'+i))})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Meet %d: %v", i, err)
			}
		}
	})
}

// A lease lost while the activity runs (its key deleted, as by a Redis
// that lost its data) cancels the activity's context with a cause matching
// ErrLost and core.ErrLost, and the activity fails with the retryable
// ErrTypeLost error even though it returned only ctx.Err().
func TestLostLeaseCancelsActivity(t *testing.T) {
	forEachBackend(t, true, func(t *testing.T, b backend) {
		w := newWorks()
		client := b.newClient(t)
		ic := mustNew(temporallock.NewInterceptor(client, temporallock.WithKey(byAccount),
			temporallock.WithLockOptions(core.WithTTL(300*time.Millisecond))))
		account := uniqueID(t)
		lockKey := temporallock.KeyPrefix + "Block:" + account
		env := activityEnv(ic, w)
		done := make(chan error, 1)
		go func() {
			_, err := env.ExecuteActivity(w.Block, Order{Account: account})
			done <- err
		}()
		select {
		case <-w.started:
		case <-time.After(10 * time.Second):
			t.Fatal("Block never started")
		}
		b.steal(t, lockKey)
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the activity was not cancelled within 10s of losing its lease")
		}
		if !temporallock.IsLost(err) || temporallock.IsBusy(err) {
			t.Fatalf("error %v: want IsLost", err)
		}
		if app := appError(t, err); app.Type() != temporallock.ErrTypeLost || app.NonRetryable() {
			t.Errorf("type %q non-retryable %v: want %q, retryable", app.Type(), app.NonRetryable(), temporallock.ErrTypeLost)
		}
		w.mu.Lock()
		cause := w.cause
		w.mu.Unlock()
		if !errors.Is(cause, temporallock.ErrLost) || !errors.Is(cause, core.ErrLost) {
			t.Errorf("activity context cause %v: want ErrLost and core.ErrLost", cause)
		}
		if held(t, client, lockKey) {
			t.Errorf("%q still held after the activity ended", lockKey)
		}
	})
}

// The watchdog renews the lease on its own while an activity that never
// heartbeats runs for four TTLs: another worker's attempts to take the key
// are refused for longer than two TTLs, and none succeeds while the
// activity is inside.
func TestRenewedWithoutHeartbeats(t *testing.T) {
	const ttl = 150 * time.Millisecond
	forEachBackend(t, false, func(t *testing.T, b backend) {
		w := newWorks()
		w.hold = 4 * ttl
		ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount),
			temporallock.WithLockOptions(core.WithTTL(ttl))))
		account := uniqueID(t)
		lockKey := temporallock.KeyPrefix + "Hold:" + account
		done := make(chan error, 1)
		env := activityEnv(ic, w)
		go func() {
			_, err := env.ExecuteActivity(w.Hold, Order{Account: account})
			done <- err
		}()
		other := b.newClient(t)
		deadline := time.After(10 * time.Second)
		var first, last time.Time // of the refusals
		for running := true; running; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Hold: %v", err)
				}
				running = false
			case <-deadline:
				t.Fatal("Hold did not end within 10s")
			case <-time.After(20 * time.Millisecond):
				lk, err := other.TryLock(context.Background(), lockKey)
				switch {
				case err == nil:
					w.mu.Lock()
					inside := w.inFlight[account]
					w.mu.Unlock()
					lk.Release(context.Background())
					if inside > 0 {
						t.Fatalf("another worker took %q while the activity was inside", lockKey)
					}
				case errors.Is(err, core.ErrNotAcquired):
					if first.IsZero() {
						first = time.Now()
					}
					last = time.Now()
				default:
					t.Fatalf("TryLock: %v", err)
				}
			}
		}
		if span := last.Sub(first); span < 2*ttl {
			t.Errorf("the key was refused to another worker over %v, want over 2×TTL (%v): it was not renewed", span, 2*ttl)
		}
	})
}

// With WithFailFast an activity whose key is held fails at once with the
// retryable ErrTypeBusy error and does not run; a bounded wait that runs
// out does the same; a wait that sees the key freed in time runs it.
func TestBusy(t *testing.T) {
	cases := []struct {
		name    string
		opt     temporallock.Option
		release time.Duration // when the holder lets go; 0: never
		wantRun bool
	}{
		{"fail fast", temporallock.WithFailFast(), 0, false},
		{"wait timeout 0", temporallock.WithWaitTimeout(0), 0, false},
		{"wait runs out", temporallock.WithWaitTimeout(150 * time.Millisecond), 0, false},
		{"wait succeeds", temporallock.WithWaitTimeout(10 * time.Second), 100 * time.Millisecond, true},
	}
	forEachBackend(t, false, func(t *testing.T, b backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				w := newWorks()
				account := uniqueID(t)
				holder, err := b.newClient(t).TryLock(context.Background(), temporallock.KeyPrefix+"Hold:"+account)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Release(context.Background())
				if tc.release > 0 {
					time.AfterFunc(tc.release, func() { holder.Release(context.Background()) })
				}
				ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount), tc.opt))
				_, err = activityEnv(ic, w).ExecuteActivity(w.Hold, Order{Account: account})
				if tc.wantRun {
					if err != nil || w.runs != 1 {
						t.Fatalf("err %v, %d runs: want the activity to run once", err, w.runs)
					}
					return
				}
				if w.runs != 0 {
					t.Errorf("the activity ran %d times while its key was held", w.runs)
				}
				if !temporallock.IsBusy(err) {
					t.Fatalf("error %v: want IsBusy", err)
				}
				app := appError(t, err)
				if app.Type() != temporallock.ErrTypeBusy || app.NonRetryable() || app.Category() != temporal.ApplicationErrorCategoryBenign {
					t.Errorf("type %q non-retryable %v category %v: want %q, retryable, benign",
						app.Type(), app.NonRetryable(), app.Category(), temporallock.ErrTypeBusy)
				}
			})
		}
	})
}

// The lock is released whatever the activity returns: an error, a panic.
func TestReleasedAfterErrorAndPanic(t *testing.T) {
	forEachBackend(t, false, func(t *testing.T, b backend) {
		client := b.newClient(t)
		ic := mustNew(temporallock.NewInterceptor(client, temporallock.WithKey(byAccount)))
		for _, id := range []int{1, -1} { // -1 panics
			w := newWorks()
			account := uniqueID(t)
			_, err := activityEnv(ic, w).ExecuteActivity(w.Fail, Order{Account: account, ID: id})
			if err == nil || w.runs != 1 {
				t.Fatalf("Fail(%d): err %v after %d runs: want its own error after one run", id, err, w.runs)
			}
			if temporallock.IsBusy(err) || temporallock.IsLost(err) {
				t.Errorf("Fail(%d): %v: want the activity's own error", id, err)
			}
			if held(t, client, temporallock.KeyPrefix+"Fail:"+account) {
				t.Errorf("Fail(%d): key still held after the activity returned", id)
			}
		}
	})
}

// A heartbeating activity works unchanged under the lock: it reads the
// details of the previous attempt and its heartbeats reach the worker.
func TestHeartbeatsPassThrough(t *testing.T) {
	w := newWorks()
	mem := mustNew(core.NewMemory())
	t.Cleanup(func() { mem.Close() })
	ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount)))
	env := activityEnv(ic, w)
	env.SetHeartbeatDetails(41)
	var mu sync.Mutex
	var beats []int
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var n int
		if details.Get(&n) == nil {
			mu.Lock()
			beats = append(beats, n)
			mu.Unlock()
		}
	})
	val, err := env.ExecuteActivity(w.Beat, Order{Account: uniqueID(t)})
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := val.Get(&got); err != nil || got != 42 {
		t.Fatalf("result %d (%v): want 42 from the previous attempt's 41", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(beats, 42) {
		t.Errorf("heartbeats seen %v: want 42 among them", beats)
	}
}

// Beat is a heartbeating activity keyed by account: it resumes from the
// last attempt's heartbeat and records its progress.
func (w *works) Beat(ctx context.Context, o Order) (int, error) {
	if _, ok := temporallock.FenceFromContext(ctx); !ok {
		return 0, errors.New("Beat ran without its lock")
	}
	var n int
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &n); err != nil {
			return 0, err
		}
	}
	n++
	activity.RecordHeartbeat(ctx, n)
	return n, nil
}

// An activity the key function does not key runs without a lock.
func TestUnkeyedRunsUnlocked(t *testing.T) {
	mem := mustNew(core.NewMemory())
	t.Cleanup(func() { mem.Close() })
	w := newWorks()
	ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount)))
	val, err := activityEnv(ic, w).ExecuteActivity(w.Free, Order{Account: uniqueID(t)})
	if err != nil {
		t.Fatal(err)
	}
	var locked bool
	if err := val.Get(&locked); err != nil || locked {
		t.Errorf("Free saw a fence (%v, %v): want none", locked, err)
	}
}

// With WithLimit(3), up to three executions of one key run at once across
// two workers — and never more; every run succeeds, each with its own
// fence.
func TestLimitPerKey(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) { testLimitPerKey(t, fair) })
	}
}

// testLimitPerKey is TestLimitPerKey with or without core.WithFair (FIFO
// permits).
func testLimitPerKey(t *testing.T, fair bool) {
	var lockOpts []core.LockOption
	if fair {
		lockOpts = append(lockOpts, core.WithFair())
	}
	forEachBackend(t, false, func(t *testing.T, b backend) {
		w := newWorks()
		account := uniqueID(t)
		const workers, runsEach, limit = 2, 5, 3
		var wg sync.WaitGroup
		errs := make(chan error, workers*runsEach)
		for i := range workers {
			ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount), temporallock.WithLimit(limit),
				temporallock.WithLockOptions(lockOpts...)))
			for j := range runsEach {
				env := activityEnv(ic, w)
				wg.Go(func() {
					_, err := env.ExecuteActivity(w.Hold, Order{Account: account, ID: i*runsEach + j})
					errs <- err
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Hold: %v", err)
			}
		}
		if w.runs != workers*runsEach {
			t.Errorf("%d runs, want %d", w.runs, workers*runsEach)
		}
		if m := w.maxIn[account]; m > limit || m < 2 {
			t.Errorf("up to %d executions of one key ran at once, want 2 to %d", m, limit)
		}
		if f := w.fences[account]; len(slices.Compact(slices.Sorted(slices.Values(f)))) != len(f) {
			t.Errorf("fences %v: want each execution its own", f)
		}
	})
}

// WithLimit refuses a limit below one.
func TestLimitInvalid(t *testing.T) {
	mem := mustNew(core.NewMemory())
	defer mem.Close()
	for _, n := range []int{0, -1, core.MaxSemaphoreLimit + 1} {
		if _, err := temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount), temporallock.WithLimit(n)); !errors.Is(err, temporallock.ErrInvalidOption) {
			t.Errorf("WithLimit(%d): %v, want ErrInvalidOption", n, err)
		}
	}
}
