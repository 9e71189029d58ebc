package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/temporaltest"
)

// TestTemporalServer runs the interceptor on a real Temporal server with
// two workers polling one task queue, on each lock store: the same
// scenarios on Redis and on the open backends (sqllock, etcdlock, zklock,
// memcachelock), whose Clients temporallock takes unchanged.
func TestTemporalServer(t *testing.T) {
	ts := startServer(t)
	for _, ls := range lockStores() {
		t.Run(ls.name, func(t *testing.T) {
			store := ls.make(t)
			t.Run("WithLimit needs semaphores", func(t *testing.T) { testLimitNeedsPrimitives(t, store) })
			t.Run("no overlap across workers", func(t *testing.T) { testNoOverlap(t, ts, store) })
			t.Run("retry after heartbeat timeout waits for the running attempt", func(t *testing.T) { testHeartbeatRetry(t, ts, store) })
			t.Run("busy and lost reach the workflow", func(t *testing.T) { testErrorsReachWorkflow(t, ts, store) })
		})
	}
}

// WithLimit runs each key on a core.Semaphore (core.CapPrimitives): a
// Client whose backend offers it takes the option, one whose backend does
// not — every open backend here — is refused at start-up with
// core.ErrUnsupported, not at the first activity.
func testLimitNeedsPrimitives(t *testing.T, store lockStore) {
	c := store.client(t)
	key := temporallock.WithKey(keys)
	ic, err := temporallock.NewInterceptor(c, key, temporallock.WithLimit(3))
	if c.Capabilities()&core.CapPrimitives != 0 {
		if err != nil {
			t.Fatalf("NewInterceptor with WithLimit(3) on %s (%s): %v", store.name, c.Capabilities(), err)
		}
		return
	}
	if ic != nil || !errors.Is(err, core.ErrUnsupported) || !errors.Is(err, temporallock.ErrInvalidOption) {
		t.Fatalf("NewInterceptor with WithLimit(3) on %s (%s): %v, %v; want core.ErrUnsupported and ErrInvalidOption",
			store.name, c.Capabilities(), ic, err)
	}
	t.Logf("refused: %v", err)
}

// execute runs a workflow to completion (at most a minute) and puts its
// result in out. It may be called from any goroutine.
func execute(t *testing.T, tc client.Client, queue, name string, out any, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: uniqueID(t), TaskQueue: queue}, name, args...)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	return run.Get(ctx, out)
}

// Three workflows, served by two workers, each charge one account three
// times in parallel (and another account once): the nine charges of that
// account never overlap, and all succeed.
func testNoOverlap(t *testing.T, ts *temporaltest.TestServer, store lockStore) {
	tr := newTracker()
	queue := uniqueID(t)
	tc := startWorkers(t, ts, store, queue, tr)
	account := uniqueID(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			errs[i] = execute(t, tc, queue, "ChargeAll", nil, []ChargeInput{
				{account, -100}, {account, -200}, {account + "-other", -1}, {account, -300},
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("workflow %d: %v", i, err)
		}
	}
	lockKey := temporallock.KeyPrefix + "Charge:" + account
	maxIn, attempts, byWorker, events := tr.snapshot(lockKey)
	if len(attempts) != 9 || maxIn != 1 {
		t.Errorf("%d executions of the account entered, up to %d at once: want 9, 1 at once", len(attempts), maxIn)
	}
	// One at a time, so the order they entered in is the order they took
	// the lock in: each fence above the one before, across both workers.
	fences := tr.fenceList(lockKey)
	for i, f := range fences {
		if f <= 0 || i > 0 && f <= fences[i-1] {
			t.Errorf("fences in the activities' contexts, in the order they entered: %v; want positive and rising", fences)
			break
		}
	}
	t.Logf("executions per worker: %v; attempts that entered: %v; fences: %v", byWorker, attempts, fences)
	if t.Failed() || testing.Verbose() {
		for _, e := range events {
			t.Log(e)
		}
	}
}

// The motivating case: the server times out the first attempt of Sync
// (heartbeat timeout 1s) and retries it while that attempt — which never
// heartbeats, so never hears of it — still runs for 3s under the lock. The
// retries wait (at most half the heartbeat timeout each), fail busy and are
// retried, and the attempt that finally runs enters only after the first
// one left.
func testHeartbeatRetry(t *testing.T, ts *temporaltest.TestServer, store lockStore) {
	tr := newTracker()
	queue := uniqueID(t)
	tc := startWorkers(t, ts, store, queue, tr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := uniqueID(t)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "SyncOnce", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("SyncOnce: %v", err)
	}
	maxIn, attempts, _, events := tr.snapshot(temporallock.KeyPrefix + "workflow:" + id)
	for _, e := range events {
		t.Log(e)
	}
	if maxIn != 1 {
		t.Errorf("up to %d attempts of Sync ran at once, want 1", maxIn)
	}
	if len(attempts) < 2 || attempts[0] != 1 || attempts[len(attempts)-1] < 2 {
		t.Errorf("attempts that entered %v: want attempt 1 first, then a retry", attempts)
	}
}

// The error types cross the server: a workflow whose single attempt found
// the key held sees IsBusy; one whose attempt lost its lease sees IsLost.
func testErrorsReachWorkflow(t *testing.T, ts *temporaltest.TestServer, store lockStore) {
	tr := newTracker()
	queue := uniqueID(t)
	tc := startWorkers(t, ts, store, queue, tr,
		temporallock.WithWaitTimeout(200*time.Millisecond),
		temporallock.WithLockOptions(core.WithTTL(600*time.Millisecond)))

	account := uniqueID(t)
	holder, err := store.client(t).TryLock(context.Background(), temporallock.KeyPrefix+"Charge:"+account)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := execute(t, tc, queue, "Once", &got, "Charge", ChargeInput{account, -1}); err != nil || got != "busy" {
		t.Errorf("Charge of a held account: workflow saw %q (%v), want busy", got, err)
	}
	holder.Release(context.Background())
	if err := execute(t, tc, queue, "Once", &got, "Charge", ChargeInput{account, -1}); err != nil || got != "ok" {
		t.Errorf("Charge of a free account: workflow saw %q (%v), want ok", got, err)
	}

	done := make(chan error, 1)
	go func() {
		var got string
		err := execute(t, tc, queue, "Once", &got, "Block", ChargeInput{account, -1})
		if err == nil && got != "lost" {
			err = fmt.Errorf("workflow saw %q, want lost", got)
		}
		done <- err
	}()
	select {
	case key := <-tr.started:
		store.steal(t, key)
	case <-time.After(30 * time.Second):
		t.Fatal("Block never started")
	}
	if err := <-done; err != nil {
		t.Errorf("Block losing its lease: %v", err)
	}
}
