package temporallock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
)

// seen is an Observer that keeps what it was told.
type seen struct {
	mu       sync.Mutex
	types    []string
	outcomes []string
	fences   []int64
	errs     []error
}

type observerMark struct{}

func (s *seen) ActivityLockStart(ctx context.Context, activityType string) (context.Context, func(string, int64, error)) {
	s.mu.Lock()
	s.types = append(s.types, activityType)
	s.mu.Unlock()
	return context.WithValue(ctx, observerMark{}, true), func(outcome string, fence int64, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.outcomes = append(s.outcomes, outcome)
		s.fences = append(s.fences, fence)
		s.errs = append(s.errs, err)
	}
}

func TestObserver(t *testing.T) {
	mem := mustNew(core.NewMemory())
	defer mem.Close()
	obs := &seen{}
	w := newWorks()
	ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount), temporallock.WithFailFast(),
		temporallock.WithObserver(obs)))

	// Ran: the outcome, the fence of the lease, no error.
	if _, err := activityEnv(ic, w).ExecuteActivity(w.Hold, Order{Account: "a1"}); err != nil {
		t.Fatal(err)
	}
	// Busy: the key is held elsewhere.
	holder, err := mem.TryLock(context.Background(), temporallock.KeyPrefix+"Hold:a2")
	if err != nil {
		t.Fatal(err)
	}
	_, busyErr := activityEnv(ic, w).ExecuteActivity(w.Hold, Order{Account: "a2"})
	holder.Release(context.Background())
	// Not keyed: not observed.
	if _, err := activityEnv(ic, w).ExecuteActivity(w.Free, Order{Account: "a3"}); err != nil {
		t.Fatal(err)
	}

	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.outcomes) != 2 {
		t.Fatalf("%d executions observed, want 2 (the unkeyed one is not): %v", len(obs.outcomes), obs.outcomes)
	}
	if obs.types[0] != "Hold" || obs.outcomes[0] != temporallock.OutcomeRan || obs.fences[0] <= 0 || obs.errs[0] != nil {
		t.Errorf("ran: type %q outcome %q fence %d err %v", obs.types[0], obs.outcomes[0], obs.fences[0], obs.errs[0])
	}
	if obs.outcomes[1] != temporallock.OutcomeBusy || obs.fences[1] != 0 || !temporallock.IsBusy(obs.errs[1]) || !temporallock.IsBusy(busyErr) {
		t.Errorf("busy: outcome %q fence %d err %v", obs.outcomes[1], obs.fences[1], obs.errs[1])
	}
}
