package integration_test

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/temporallock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// ChargeInput is the argument of Charge and Block; Account is their key.
type ChargeInput struct {
	Account string
	Cents   int
}

// keys is the key function of every worker: Charge and Block by account,
// Sync by workflow ID.
var keys = temporallock.FirstKey(
	temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.Account }),
	temporallock.KeyByArg("Block", func(in ChargeInput) string { return in.Account }),
	temporallock.KeyByWorkflowID("Sync"),
)

// acts are the activities of one worker.
type acts struct {
	tr     *tracker
	worker string
}

// Charge takes 100ms inside its lock.
func (a *acts) Charge(ctx context.Context, in ChargeInput) error {
	key, _ := temporallock.LockKeyFromContext(ctx)
	a.tr.enter(ctx, key, a.worker)
	defer a.tr.leave(ctx, key, a.worker)
	select {
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Sync's first attempt runs for hold without heartbeating and without
// looking at its context — as a stuck attempt that has not heard of its
// heartbeat timeout does; later attempts finish at once.
func (a *acts) Sync(ctx context.Context, hold time.Duration) error {
	key, _ := temporallock.LockKeyFromContext(ctx)
	a.tr.enter(ctx, key, a.worker)
	defer a.tr.leave(ctx, key, a.worker)
	if activity.GetInfo(ctx).Attempt == 1 {
		time.Sleep(hold)
	}
	return nil
}

// Block reports that it is inside, then waits for its context to end.
func (a *acts) Block(ctx context.Context, in ChargeInput) error {
	key, _ := temporallock.LockKeyFromContext(ctx)
	a.tr.enter(ctx, key, a.worker)
	defer a.tr.leave(ctx, key, a.worker)
	a.tr.started <- key
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(20 * time.Second):
		return errors.New("Block was never cancelled")
	}
}

// ChargeAll runs Charge for every input in parallel.
func ChargeAll(ctx workflow.Context, charges []ChargeInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1},
	})
	fs := make([]workflow.Future, len(charges))
	for i, c := range charges {
		fs[i] = workflow.ExecuteActivity(ctx, "Charge", c)
	}
	var errs []error
	for _, f := range fs {
		errs = append(errs, f.Get(ctx, nil))
	}
	return errors.Join(errs...)
}

// SyncOnce runs Sync with a one-second heartbeat timeout, so the server
// times its first attempt out and retries while that attempt still runs.
func SyncOnce(ctx workflow.Context, hold time.Duration) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		HeartbeatTimeout:    time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1},
	})
	return workflow.ExecuteActivity(ctx, "Sync", hold).Get(ctx, nil)
}

// Once runs one activity with a single attempt and tells what the workflow
// saw: "ok", "busy", "lost" or the error's text.
func Once(ctx workflow.Context, activityName string, in ChargeInput) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	err := workflow.ExecuteActivity(ctx, activityName, in).Get(ctx, nil)
	switch {
	case err == nil:
		return "ok", nil
	case temporallock.IsBusy(err):
		return "busy", nil
	case temporallock.IsLost(err):
		return "lost", nil
	}
	return err.Error(), nil
}

func registerAll(w worker.Worker, a *acts) {
	w.RegisterActivity(a)
	w.RegisterWorkflowWithOptions(ChargeAll, workflow.RegisterOptions{Name: "ChargeAll"})
	w.RegisterWorkflowWithOptions(SyncOnce, workflow.RegisterOptions{Name: "SyncOnce"})
	w.RegisterWorkflowWithOptions(Once, workflow.RegisterOptions{Name: "Once"})
}
