// Command temporal shows temporallock: Temporal activities that must not
// overlap run under a latchkey lock.
//
//  1. A workflow charges one account three times in parallel (and another
//     account once): the charges of one account take turns, in fence order.
//  2. An operator holds an account while a charge arrives: the charge waits
//     (bounded), fails with the retryable LockBusy error, and Temporal's
//     retry policy runs it once the account is free.
//  3. A rebuild loses its lease mid-run (its key vanishes, as after a Redis
//     failover that lost it): its context is cancelled, the attempt fails
//     with LockLost, and the retry rebuilds under a new fence.
//
// Without TEMPORAL_ADDRESS the workflows run in the Temporal SDK's test
// environment (no server; retries skip ahead in simulated time). With it,
// two workers — each with its own core.Client, as two processes would have
// — poll one task queue of that server.
//
//	cd examples && go run ./temporal                      # test environment, embedded miniredis
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 TEMPORAL_ADDRESS=127.0.0.1:7233 go run ./temporal
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const (
	taskQueue = "latchkey-demo"
	prefix    = "demo" // the core.Clients' key prefix
)

func main() {
	rdb, where, cleanup, err := demo.Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a := newApp()
	var r runner
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		sr, err := newServerRunner(addr, rdb, a)
		if err != nil {
			log.Fatal(err)
		}
		r = sr
		fmt.Println("using", where, "and the Temporal server at", addr, "(two workers)")
	} else {
		client, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix))
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		r = testRunner{ics: interceptors(client, a), app: a}
		fmt.Println("using", where, "and the Temporal test environment (set TEMPORAL_ADDRESS for a server)")
	}
	defer r.close()

	fmt.Println("\n1. three charges of acct-42 and one of acct-7, started together")
	a.begin()
	err = r.execute(ctx, "Billing", []ChargeInput{{"acct-42", -500}, {"acct-42", -700}, {"acct-7", -100}, {"acct-42", -900}})
	fmt.Printf("   workflow error: %v; acct-42 charges at once at most: %d\n", err, a.maxInside("acct-42"))

	fmt.Println("\n2. an operator holds acct-9 for 1.5s; a charge waits at most 0.5s per attempt")
	a.begin()
	operator, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix))
	if err != nil {
		log.Fatal(err)
	}
	defer operator.Close()
	held, err := operator.TryLock(ctx, temporallock.KeyPrefix+"Charge:acct-9")
	if err != nil {
		log.Fatal(err)
	}
	time.AfterFunc(1500*time.Millisecond, func() {
		a.say("operator releases acct-9")
		held.Release(context.Background())
	})
	err = r.execute(ctx, "Billing", []ChargeInput{{"acct-9", -250}})
	fmt.Printf("   workflow error: %v\n", err)

	fmt.Println("\n3. a rebuild loses its lease mid-run")
	a.begin()
	go func() { // plays the Redis failover that loses the key
		select {
		case key := <-a.rebuilding:
			a.say("the lease %q vanishes from Redis", key)
			rdb.Del(ctx, prefix+":{"+key+"}")
		case <-ctx.Done():
		}
	}()
	err = r.execute(ctx, "Reindex", "products")
	fmt.Printf("   workflow error: %v\n", err)
}

// interceptors are those every worker installs: a reporter that prints the
// attempts the lock failed, outside temporallock.
func interceptors(c *core.Client, a *app) []interceptor.WorkerInterceptor {
	return []interceptor.WorkerInterceptor{&reporter{app: a}, newInterceptor(c)}
}

// newInterceptor is the temporallock interceptor: charges keyed by
// account, rebuilds by workflow ID; waits of at most half a second; short
// leases so the lost lease shows quickly.
func newInterceptor(c *core.Client) *temporallock.Interceptor {
	ic, err := temporallock.NewInterceptor(c,
		temporallock.WithKey(temporallock.FirstKey(
			temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID }),
			temporallock.KeyByWorkflowID("Rebuild"),
		)),
		temporallock.WithWaitTimeout(500*time.Millisecond),
		temporallock.WithLockOptions(core.WithTTL(600*time.Millisecond)),
	)
	if err != nil {
		log.Fatal(err)
	}
	return ic
}

// ChargeInput is the argument of Charge.
type ChargeInput struct {
	AccountID string
	Cents     int
}

// app holds the activities and what they saw.
type app struct {
	mu         sync.Mutex
	start      time.Time
	inside     map[string]int
	maxIn      map[string]int
	rebuilding chan string // the lock key of a rebuild's first attempt
}

func newApp() *app {
	return &app{inside: map[string]int{}, maxIn: map[string]int{}, rebuilding: make(chan string, 1)}
}

// begin starts a scenario: a new clock and new counters.
func (a *app) begin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.start = time.Now()
	clear(a.inside)
	clear(a.maxIn)
}

func (a *app) say(format string, args ...any) {
	a.mu.Lock()
	at := time.Since(a.start)
	a.mu.Unlock()
	fmt.Printf("   %5.2fs  %s\n", at.Seconds(), fmt.Sprintf(format, args...))
}

func (a *app) maxInside(account string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.maxIn[account]
}

// Charge books one charge; it takes 200ms.
func (a *app) Charge(ctx context.Context, in ChargeInput) error {
	fence, _ := temporallock.FenceFromContext(ctx)
	info := activity.GetInfo(ctx)
	a.mu.Lock()
	a.inside[in.AccountID]++
	a.maxIn[in.AccountID] = max(a.maxIn[in.AccountID], a.inside[in.AccountID])
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inside[in.AccountID]--
		a.mu.Unlock()
	}()
	a.say("charge %s %+d starts (attempt %d, fence %d)", in.AccountID, in.Cents, info.Attempt, fence)
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	a.say("charge %s %+d done", in.AccountID, in.Cents)
	return nil
}

// Rebuild rebuilds an index. Its first attempt takes long enough to lose
// its lease; it stops when its context says so.
func (a *app) Rebuild(ctx context.Context, index string) (string, error) {
	fence, _ := temporallock.FenceFromContext(ctx)
	key, _ := temporallock.LockKeyFromContext(ctx)
	attempt := activity.GetInfo(ctx).Attempt
	a.say("rebuild %s starts (attempt %d, fence %d)", index, attempt, fence)
	if attempt == 1 {
		a.rebuilding <- key
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			a.say("rebuild %s stops: %v (lock lost: %v)", index, cause, errors.Is(cause, temporallock.ErrLost))
			return "", cause
		case <-time.After(5 * time.Second):
		}
	}
	a.say("rebuild %s done", index)
	return "rebuilt " + index, nil
}

// Billing charges in parallel.
func Billing(ctx workflow.Context, charges []ChargeInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 1},
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

// Reindex rebuilds one index, retrying a lost lease.
func Reindex(ctx workflow.Context, index string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, "Rebuild", index).Get(ctx, &out)
	if temporallock.IsLost(err) {
		workflow.GetLogger(ctx).Info("rebuild lost its lock", "Error", err)
	}
	return out, err
}

// registry is what a worker and the test environment share for
// registration.
type registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivity(a any)
}

func register(r registry, a *app) {
	r.RegisterWorkflowWithOptions(Billing, workflow.RegisterOptions{Name: "Billing"})
	r.RegisterWorkflowWithOptions(Reindex, workflow.RegisterOptions{Name: "Reindex"})
	r.RegisterActivity(a)
}

// A runner runs a workflow to completion.
type runner interface {
	execute(ctx context.Context, workflowName string, args ...any) error
	close()
}

// quiet is the Temporal logger of the demo: the printed lines tell the story.
var quiet = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// testRunner runs each workflow in a fresh SDK test environment.
type testRunner struct {
	ics []interceptor.WorkerInterceptor
	app *app
}

func (r testRunner) execute(_ context.Context, name string, args ...any) error {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quiet)
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: r.ics})
	register(env, r.app)
	env.ExecuteWorkflow(name, args...)
	return env.GetWorkflowError()
}

func (testRunner) close() {}

// serverRunner runs workflows on a Temporal server, served by two workers.
type serverRunner struct {
	tc      client.Client
	workers []worker.Worker
	clients []*core.Client
}

func newServerRunner(addr string, rdb redis.UniversalClient, a *app) (*serverRunner, error) {
	tc, err := client.Dial(client.Options{HostPort: addr, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_ADDRESS: %w", err)
	}
	r := &serverRunner{tc: tc}
	for range 2 {
		c, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix)) // one per worker process
		if err != nil {
			log.Fatal(err)
		}
		w := worker.New(tc, taskQueue, worker.Options{Interceptors: interceptors(c, a)})
		register(w, a)
		r.clients = append(r.clients, c)
		r.workers = append(r.workers, w)
		if err := w.Start(); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *serverRunner) execute(ctx context.Context, name string, args ...any) error {
	run, err := r.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: taskQueue}, name, args...)
	if err != nil {
		return err
	}
	return run.Get(ctx, nil)
}

func (r *serverRunner) close() {
	for _, w := range r.workers {
		w.Stop()
	}
	for _, c := range r.clients {
		c.Close()
	}
	r.tc.Close()
}

// reporter prints the activity attempts that failed with a temporallock
// error. Installed before temporallock, it sees what Temporal will see.
type reporter struct {
	interceptor.WorkerInterceptorBase
	app *app
}

func (r *reporter) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &reportInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, app: r.app}
}

type reportInbound struct {
	interceptor.ActivityInboundInterceptorBase
	app *app
}

func (ri *reportInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := ri.Next.ExecuteActivity(ctx, in)
	var app *temporal.ApplicationError
	if (temporallock.IsBusy(err) || temporallock.IsLost(err)) && errors.As(err, &app) {
		info := activity.GetInfo(ctx)
		ri.app.say("attempt %d of %s fails: %s (%s, retryable)", info.Attempt, info.ActivityType.Name, app.Message(), app.Type())
	}
	return res, err
}
