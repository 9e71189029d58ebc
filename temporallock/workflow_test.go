package temporallock_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// workflowEnv returns a test workflow environment with the interceptor
// installed, the activities of w registered and a workflow "Orders" that
// runs Hold for every order in parallel with the given retry policy.
func workflowEnv(ic *temporallock.Interceptor, w *works, policy *temporal.RetryPolicy) *testsuite.TestWorkflowEnvironment {
	env := suite().NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	env.RegisterActivity(w)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, orders []Order) ([]int64, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout:    time.Minute,
			ScheduleToCloseTimeout: 24 * time.Hour,
			RetryPolicy:            policy,
		})
		futures := make([]workflow.Future, len(orders))
		for i, o := range orders {
			futures[i] = workflow.ExecuteActivity(ctx, "Hold", o)
		}
		fences := make([]int64, len(orders))
		for i, f := range futures {
			if err := f.Get(ctx, &fences[i]); err != nil {
				return nil, err
			}
		}
		return fences, nil
	}, workflow.RegisterOptions{Name: "Orders"})
	return env
}

// A workflow runs keyed activities in parallel: those of one key take
// turns, with increasing fences, and all complete.
func TestWorkflowParallelActivities(t *testing.T) {
	forEachBackend(t, false, func(t *testing.T, b backend) {
		w := newWorks()
		ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount)))
		env := workflowEnv(ic, w, nil)
		id := uniqueID(t)
		orders := []Order{{id, 1}, {id, 2}, {id + "-b", 3}, {id, 4}, {id + "-c", 5}, {id, 6}}
		env.ExecuteWorkflow("Orders", orders)
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		if w.runs != len(orders) || w.maxIn[id] != 1 {
			t.Errorf("%d runs, up to %d of one key at once: want %d runs, 1 at once", w.runs, w.maxIn[id], len(orders))
		}
	})
}

// KeyByWorkflowID makes the activities of one workflow take turns, whatever
// their arguments.
func TestWorkflowKeyByWorkflowID(t *testing.T) {
	w := newWorks()
	mem := mustNew(core.NewMemory())
	t.Cleanup(func() { mem.Close() })
	ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(temporallock.KeyByWorkflowID("Hold"))))
	env := workflowEnv(ic, w, nil)
	id := uniqueID(t)
	env.ExecuteWorkflow("Orders", []Order{{id + "-a", 1}, {id + "-b", 2}, {id + "-c", 3}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if w.runs != 3 || w.maxIn[allAccounts] != 1 {
		t.Errorf("%d runs, up to %d at once: want 3 runs, 1 at once", w.runs, w.maxIn[allAccounts])
	}
}

// In fail-fast mode Temporal's retry policy takes over: an activity whose
// key is held when the workflow starts fails with ErrTypeBusy, is retried,
// and runs once the key is free (at an attempt after the first) — unless
// the policy names ErrTypeBusy non-retryable, when the workflow gets the
// busy error back.
func TestWorkflowRetriesBusy(t *testing.T) {
	cases := []struct {
		name         string
		nonRetryable []string
		wantBusy     bool
	}{
		{"retried", nil, false},
		{"busy non-retryable", []string{temporallock.ErrTypeBusy}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := mustNew(core.NewMemory())
			t.Cleanup(func() { mem.Close() })
			account := uniqueID(t)
			holder, err := mem.TryLock(context.Background(), temporallock.KeyPrefix+"Hold:"+account)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { holder.Release(context.Background()) })

			w := newWorks()
			ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount), temporallock.WithFailFast()))
			env := workflowEnv(ic, w, &temporal.RetryPolicy{
				InitialInterval: time.Second, BackoffCoefficient: 1, MaximumAttempts: 20,
				NonRetryableErrorTypes: tc.nonRetryable,
			})
			// The environment's clock skips ahead while nothing runs: the
			// retries come one (simulated) second apart, and the holder lets
			// go after four and a half.
			env.RegisterDelayedCallback(func() { holder.Release(context.Background()) }, 4500*time.Millisecond)
			env.ExecuteWorkflow("Orders", []Order{{account, 1}})
			err = env.GetWorkflowError()
			if tc.wantBusy {
				if !temporallock.IsBusy(err) || w.runs != 0 {
					t.Fatalf("workflow error %v after %d runs: want the busy error, no run", err, w.runs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.runs != 1 || w.maxAttempt < 2 {
				t.Errorf("%d runs, last at attempt %d: want one run, after a retry", w.runs, w.maxAttempt)
			}
		})
	}
}
