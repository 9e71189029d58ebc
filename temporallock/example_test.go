package temporallock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// ChargeInput is the argument of the Charge activity of the examples.
type ChargeInput struct {
	AccountID string
	Cents     int
}

// ledger stands for the storage the examples' activities write to.
type ledger struct {
	mu      sync.Mutex
	inside  int // Charge executions running now
	maxSeen int
	entries []string
}

// Charge is an activity that must not run twice at once for one account.
func (l *ledger) Charge(ctx context.Context, in ChargeInput) error {
	l.mu.Lock()
	l.inside++
	l.maxSeen = max(l.maxSeen, l.inside)
	l.mu.Unlock()
	time.Sleep(10 * time.Millisecond) // the work
	fence, _ := temporallock.FenceFromContext(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inside--
	l.entries = append(l.entries, fmt.Sprintf("%s %+d (fence %d)", in.AccountID, in.Cents, fence))
	return nil
}

// quietSuite returns a test suite whose environments do not log.
func quietSuite() *testsuite.WorkflowTestSuite {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	return &s
}

// This example runs two workers — each with its own core.Client, as two
// processes would have — and has both charge one account at the same
// moment. The interceptor makes the second charge wait for the first; the
// fences show the order the storage would enforce.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	books := &ledger{}
	key := temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })
	var wg sync.WaitGroup
	for _, cents := range []int{-500, -700} {
		client, err := core.NewRedis(rdb) // one per worker process
		if err != nil {
			panic(err)
		}
		defer client.Close()
		ic, err := temporallock.NewInterceptor(client, temporallock.WithKey(key))
		if err != nil {
			panic(err)
		}

		env := quietSuite().NewTestActivityEnvironment() // stands for a worker
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
		env.RegisterActivity(books)
		wg.Go(func() {
			if _, err := env.ExecuteActivity(books.Charge, ChargeInput{AccountID: "acct-42", Cents: cents}); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("charges:", len(books.entries), "at most at once:", books.maxSeen)
	// Output:
	// charges: 2 at most at once: 1
}

// This example installs the interceptor in a worker: Charge activities of
// one account, on any worker sharing the Redis, take turns; a charge whose
// account stays busy for 30 seconds fails with the retryable
// ErrTypeBusy error and Temporal retries it.
func ExampleNewInterceptor() {
	mem, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	ic, err := temporallock.NewInterceptor(mem,
		temporallock.WithKey(temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })),
		temporallock.WithWaitTimeout(30*time.Second),
		temporallock.WithLockOptions(core.WithTTL(10*time.Second)),
	)
	if err != nil {
		fmt.Println("misconfigured:", err)
		return
	}
	// With a real server:
	//   w := worker.New(tc, "billing", worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	env := quietSuite().NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	books := &ledger{}
	env.RegisterActivity(books)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		a := workflow.ExecuteActivity(ctx, "Charge", ChargeInput{"acct-7", -100})
		b := workflow.ExecuteActivity(ctx, "Charge", ChargeInput{"acct-7", -200})
		return errorsOf(ctx, a, b)
	}, workflow.RegisterOptions{Name: "Billing"})
	env.ExecuteWorkflow("Billing")
	fmt.Println("workflow error:", env.GetWorkflowError())
	fmt.Println("charges:", len(books.entries), "at most at once:", books.maxSeen)
	// Output:
	// workflow error: <nil>
	// charges: 2 at most at once: 1
}

// errorsOf waits for the futures and returns the first error.
func errorsOf(ctx workflow.Context, fs ...workflow.Future) error {
	var first error
	for _, f := range fs {
		if err := f.Get(ctx, nil); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// This example keys Charge by its first argument's account: the key, and
// the lock key on the core.Client, are derived from the activity's input.
func ExampleKeyByArg() {
	key := temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })
	info := activity.Info{ActivityType: activity.Type{Name: "Charge"}}
	k, ok := key(info, []any{ChargeInput{AccountID: "acct-42", Cents: 100}})
	fmt.Println(k, ok, "->", temporallock.KeyPrefix+k)
	info.ActivityType.Name = "SendReceipt"
	k, ok = key(info, []any{ChargeInput{AccountID: "acct-42"}})
	fmt.Printf("%q %v\n", k, ok)
	// Output:
	// Charge:acct-42 true -> temporal:Charge:acct-42
	// "" false
}

// This example keys activities by the ID of the workflow that runs them,
// so an attempt retried after a heartbeat timeout never overlaps the
// attempt that is still running.
func ExampleKeyByWorkflowID() {
	key := temporallock.KeyByWorkflowID("Rebuild")
	info := activity.Info{ActivityType: activity.Type{Name: "Rebuild"}}
	info.WorkflowExecution.ID = "index-eu"
	fmt.Println(key(info, nil))
	// Output:
	// workflow:index-eu true
}

// This example combines key shapes: charges by account, rebuilds by
// workflow; every other activity runs without a lock.
func ExampleFirstKey() {
	key := temporallock.FirstKey(
		temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID }),
		temporallock.KeyByWorkflowID("Rebuild"),
	)
	for _, typ := range []string{"Charge", "Rebuild", "SendReceipt"} {
		info := activity.Info{ActivityType: activity.Type{Name: typ}}
		info.WorkflowExecution.ID = "wf-1"
		k, ok := key(info, []any{ChargeInput{AccountID: "acct-9"}})
		fmt.Printf("%s: %q %v\n", typ, k, ok)
	}
	// Output:
	// Charge: "Charge:acct-9" true
	// Rebuild: "workflow:wf-1" true
	// SendReceipt: "" false
}

// This example reads the fence inside an activity; a storage that keeps
// the highest fence per key rejects a write from an attempt that lost its
// lease without noticing.
func ExampleFenceFromContext() {
	mem, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	ic, err := temporallock.NewInterceptor(mem,
		temporallock.WithKey(temporallock.KeyByArg("Write", func(row string) string { return row })))
	if err != nil {
		panic(err)
	}
	env := quietSuite().NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	env.RegisterActivityWithOptions(func(ctx context.Context, row string) error {
		fence, ok := temporallock.FenceFromContext(ctx)
		key, _ := temporallock.LockKeyFromContext(ctx)
		fmt.Println("writing", row, "under", key, "with a fence:", ok && fence > 0)
		return nil // e.g. UPDATE rows SET ..., fence = $1 WHERE id = $2 AND fence < $1
	}, activity.RegisterOptions{Name: "Write"})
	if _, err := env.ExecuteActivity("Write", "row-1"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// writing row-1 under temporal:Write:row-1 with a fence: true
}

// This example shows what a workflow sees when its activity's key stays
// busy and the retry policy does not retry that: an activity error that
// IsBusy recognises.
func ExampleIsBusy() {
	mem, err := core.NewMemory()
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	held, _ := mem.TryLock(context.Background(), temporallock.KeyPrefix+"Charge:acct-1")
	defer held.Release(context.Background())

	ic, err := temporallock.NewInterceptor(mem, temporallock.WithFailFast(),
		temporallock.WithKey(temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })))
	if err != nil {
		panic(err)
	}
	env := quietSuite().NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	env.RegisterActivity(&ledger{})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{NonRetryableErrorTypes: []string{temporallock.ErrTypeBusy}},
		})
		err := workflow.ExecuteActivity(ctx, "Charge", ChargeInput{"acct-1", -100}).Get(ctx, nil)
		if temporallock.IsBusy(err) {
			return fmt.Errorf("account busy, try later: %w", err)
		}
		return err
	}, workflow.RegisterOptions{Name: "Pay"})
	env.ExecuteWorkflow("Pay")
	err = env.GetWorkflowError()
	fmt.Println("busy:", temporallock.IsBusy(err), "lost:", temporallock.IsLost(err))
	// Output:
	// busy: true lost: false
}

// This example limits Charge to two executions per account at once across
// the fleet: six charges of one account, started together on three
// workers, run at most two at a time.
func ExampleWithLimit() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	books := &ledger{}
	key := temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })
	var wg sync.WaitGroup
	for range 3 {
		client, err := core.NewRedis(rdb) // one per worker process
		if err != nil {
			panic(err)
		}
		defer client.Close()
		ic, err := temporallock.NewInterceptor(client, temporallock.WithKey(key), temporallock.WithLimit(2))
		if err != nil {
			panic(err)
		}
		for range 2 {
			env := quietSuite().NewTestActivityEnvironment() // stands for a worker slot
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
			env.RegisterActivity(books)
			wg.Go(func() {
				if _, err := env.ExecuteActivity(books.Charge, ChargeInput{AccountID: "acct-42", Cents: -100}); err != nil {
					fmt.Println(err)
				}
			})
		}
	}
	wg.Wait()
	fmt.Println("charges:", len(books.entries), "at most at once:", books.maxSeen <= 2)
	// Output:
	// charges: 6 at most at once: true
}
