package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.temporal.io/server/temporaltest"
)

// TestTemporalLimit runs WithLimit on a real Temporal server and the
// shared Redis: two workers poll one task queue, each with its own Temporal
// client and its own core.Client, as two processes would have. Every
// core.Client uses a key prefix of this test's own, so that the test can
// tell, with SCAN, what it left in Redis.
func TestTemporalLimit(t *testing.T) {
	admin := redistest.Client(t)
	prefix := limitPrefix(t, admin)
	ts := startServer(t)
	newCore := func(t *testing.T) *core.Client {
		c := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { c.Close() })
		return c
	}
	var used []string // the keys the subtests limit
	t.Run("at most n per key across workers, keys independent", func(t *testing.T) { testLimitAcrossWorkers(t, ts, newCore, &used) })
	t.Run("full limit fails fast with LockBusy and the retry runs", func(t *testing.T) { testLimitFailFast(t, ts, newCore, &used) })

	// Every execution gave its permit back: of the keys under the prefix
	// only the fence counters of the semaphores used remain (they outlive
	// their permits by design, so that fences keep rising), with the marks
	// of their releases ("…:sem:rel:<nonce>": core keeps them 15 s, for a
	// release go-redis sends again), and nothing else was created. limitPrefix deletes them at
	// cleanup.
	want := map[string]bool{}
	for _, k := range used {
		sem := prefix + ":{" + temporallock.KeyPrefix + "Limited:" + k + "}:sem"
		want[sem+":fence"] = true
	}
	left := scanPrefix(t, admin, prefix)
	for _, k := range left {
		if sem, _, ok := strings.Cut(k, ":rel:"); ok && want[sem+":fence"] {
			continue // a release's mark
		}
		if !want[k] {
			t.Errorf("left in Redis after every execution returned: %q (want only the fence counters of %v)", k, used)
		}
	}
	t.Logf("after every execution returned, %d keys under the prefix: %q", len(left), left)
}

// limitPrefix returns a core key prefix unique to t; at cleanup it deletes
// every key under it and then checks, with SCAN, that none is left.
func limitPrefix(t *testing.T, admin *redis.Client) string {
	t.Helper()
	var prefix string
	t.Cleanup(func() { // runs after redistest.Prefix's own cleanup has deleted
		if left := scanPrefix(t, admin, prefix); len(left) > 0 {
			t.Errorf("keys left in Redis at the end: %q", left)
		}
	})
	prefix = redistest.Prefix(t, admin)
	return prefix
}

// scanPrefix returns the keys under prefix, sorted.
func scanPrefix(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s:*: %v", prefix, err)
	}
	slices.Sort(keys)
	return keys
}

// Twelve executions of each of two keys, started together in six
// workflows and served by two workers with WithLimit(3): each key runs at
// most three at a time, and three at a time of one key do not keep the
// other key's three from running meanwhile. Each execution waits, once
// inside, until six run at once (as the limit allows) or the test gives
// up, so the limit is reached whatever the machine's speed; then it holds
// its permit a little longer, so that a limit not kept would show as
// more than three inside.
func testLimitAcrossWorkers(t *testing.T, ts *temporaltest.TestServer, newCore func(*testing.T) *core.Client, used *[]string) {
	const limit, perKey, perWorkflow = 3, 12, 4
	la := newLimitActs(limit, 200*time.Millisecond, 20*time.Second)
	queue := uniqueID(t)
	tc := startLimitWorkers(t, ts, queue, la, [2]int{limit, limit}, newCore)
	keys := []string{uniqueID(t), uniqueID(t)}
	*used = append(*used, keys...)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, key := range keys {
		for range perKey / perWorkflow {
			in := make([]LimitInput, perWorkflow)
			for i := range in {
				in[i] = LimitInput{Key: key, Gather: true}
			}
			wg.Go(func() {
				if err := execute(t, tc, queue, "LimitedAll", nil, in); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("LimitedAll: %v", err)
	}

	for _, key := range keys {
		st := la.stats(temporallock.KeyPrefix + "Limited:" + key)
		if st.max > limit {
			t.Errorf("key %s: up to %d executions ran at once across the workers, limit %d", key, st.max, limit)
		} else if st.max < limit {
			t.Errorf("key %s: at most %d executions ran at once, want the limit %d to be reached", key, st.max, limit)
		}
		if len(st.fences) != perKey {
			t.Errorf("key %s: %d executions entered, want %d", key, len(st.fences), perKey)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(st.fences)))) != len(st.fences) {
			t.Errorf("key %s: fences %v, want each execution its own", key, st.fences)
		}
		t.Logf("key %s: up to %d at once; executions by worker %v", key, st.max, st.byWorker)
	}
	// Each key stays within its limit, so 2*limit at once means both keys
	// ran limit executions at the same moment.
	if m := la.total.max.Load(); m < 2*limit {
		t.Errorf("up to %d executions of the two keys ran at once, want %d: the keys limit each other", m, 2*limit)
	}
	byWorker := la.byWorker()
	if len(byWorker) != 2 {
		t.Errorf("executions by worker %v: want both workers to run some", byWorker)
	}
	if t.Failed() || testing.Verbose() {
		for _, e := range la.eventLog() {
			t.Log(e)
		}
	}
}

// With WithFailFast and WithLimit(3), an execution of a key whose three
// permits are held elsewhere fails at once with the retryable LockBusy
// error — a workflow that allows one attempt sees it, and the server
// records it as the last failure of an activity it retries — and the retry
// that finds a permit free runs, beside the two permits still held.
func testLimitFailFast(t *testing.T, ts *temporaltest.TestServer, newCore func(*testing.T) *core.Client, used *[]string) {
	const limit = 3
	la := newLimitActs(limit, 0, 0)
	queue := uniqueID(t)
	tc := startLimitWorkers(t, ts, queue, la, [2]int{limit, limit}, newCore, temporallock.WithFailFast())
	key := uniqueID(t)
	*used = append(*used, key)
	lockKey := temporallock.KeyPrefix + "Limited:" + key

	// Another process holds every permit of the key.
	sem := newCore(t).Semaphore(lockKey, limit)
	var permits []*core.Lock
	defer func() {
		for _, p := range permits {
			p.Release(context.Background())
		}
	}()
	for range limit {
		p, err := sem.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}

	var out LimitOutcome
	if err := execute(t, tc, queue, "LimitedOnce", &out, LimitInput{Key: key}); err != nil {
		t.Fatal(err)
	}
	if !out.Busy || out.Type != temporallock.ErrTypeBusy || out.NonRetryable {
		t.Errorf("single attempt on a full limit: workflow saw %+v, want a retryable %s error", out, temporallock.ErrTypeBusy)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: uniqueID(t), TaskQueue: queue}, "LimitedAll", []LimitInput{{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the server has retried the activity after a busy attempt.
	for {
		d, err := tc.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
		if err != nil {
			t.Fatal(err)
		}
		if st := la.stats(lockKey); len(st.attempts) != 0 || d.GetWorkflowExecutionInfo().GetCloseTime() != nil {
			t.Fatalf("attempts %v ran while every permit was held (workflow closed: %v)",
				st.attempts, d.GetWorkflowExecutionInfo().GetCloseTime() != nil)
		}
		if pa := d.GetPendingActivities(); len(pa) == 1 && pa[0].GetAttempt() >= 2 {
			app := pa[0].GetLastFailure().GetApplicationFailureInfo()
			if app.GetType() != temporallock.ErrTypeBusy || app.GetNonRetryable() {
				t.Fatalf("activity retried after %v, want a retryable %s failure", pa[0].GetLastFailure(), temporallock.ErrTypeBusy)
			}
			t.Logf("attempt %d pending after: %s", pa[0].GetAttempt(), pa[0].GetLastFailure().GetMessage())
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the activity was never retried: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	// One permit comes free: the next attempt runs, while two are held.
	if err := permits[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	permits = permits[1:]
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("LimitedAll after a permit came free: %v", err)
	}
	st := la.stats(lockKey)
	if len(st.attempts) != 1 || st.attempts[0] < 2 {
		t.Errorf("attempts that ran: %v, want one, a retry", st.attempts)
	}
	if t.Failed() {
		for _, e := range la.eventLog() {
			t.Log(e)
		}
	}
}

// startLimitWorkers starts two workers on queue, worker i with its own
// Temporal client and core.Client and the interceptor of
// WithLimit(limits[i]) and opts, serving Limited (through la), LimitedAll
// and LimitedOnce. They stop at cleanup, before the server.
func startLimitWorkers(t *testing.T, ts *temporaltest.TestServer, queue string, la *limitActs, limits [2]int,
	newCore func(*testing.T) *core.Client, opts ...temporallock.Option) client.Client {
	t.Helper()
	var first client.Client
	for i, n := range limits {
		name := fmt.Sprintf("worker-%d", i)
		tc := ts.NewClientWithOptions(client.Options{Logger: quiet, Identity: name})
		ic, err := temporallock.NewInterceptor(newCore(t), append([]temporallock.Option{
			temporallock.WithKey(temporallock.KeyByArg("Limited", func(in LimitInput) string { return in.Key })),
			temporallock.WithLimit(n),
		}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		w := worker.New(tc, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
		w.RegisterActivityWithOptions(func(ctx context.Context, in LimitInput) error { return la.run(ctx, in, name) },
			activity.RegisterOptions{Name: "Limited"})
		w.RegisterWorkflowWithOptions(LimitedAll, workflow.RegisterOptions{Name: "LimitedAll"})
		w.RegisterWorkflowWithOptions(LimitedOnce, workflow.RegisterOptions{Name: "LimitedOnce"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		if first == nil {
			first = tc
		}
	}
	return first
}

// LimitInput is the argument of Limited; Key is its key. With Gather, an
// execution waits once inside until 2*limit executions ran at once.
type LimitInput struct {
	Key    string
	Gather bool
}

// LimitOutcome is what LimitedOnce saw.
type LimitOutcome struct {
	Err          string
	Type         string // of the application error, if any
	NonRetryable bool
	Busy         bool // temporallock.IsBusy
}

// LimitedAll runs Limited for every input in parallel, retrying every
// 200ms.
func LimitedAll(ctx workflow.Context, in []LimitInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1},
	})
	fs := make([]workflow.Future, len(in))
	for i, x := range in {
		fs[i] = workflow.ExecuteActivity(ctx, "Limited", x)
	}
	var errs []error
	for _, f := range fs {
		errs = append(errs, f.Get(ctx, nil))
	}
	return errors.Join(errs...)
}

// LimitedOnce runs Limited with a single attempt and tells how it ended.
func LimitedOnce(ctx workflow.Context, in LimitInput) (LimitOutcome, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	err := workflow.ExecuteActivity(ctx, "Limited", in).Get(ctx, nil)
	if err == nil {
		return LimitOutcome{}, nil
	}
	out := LimitOutcome{Err: err.Error(), Busy: temporallock.IsBusy(err)}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		out.Type, out.NonRetryable = app.Type(), app.NonRetryable()
	}
	return out, nil
}

// gauge counts the executions inside and the most there were at once.
type gauge struct{ in, max atomic.Int32 }

func (g *gauge) enter() int32 {
	n := g.in.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			return n
		}
	}
}

func (g *gauge) leave() { g.in.Add(-1) }

// limitActs is the Limited activity of every worker of a subtest: the
// workers run in one process, so it sees the executions of all of them.
type limitActs struct {
	limit    int32
	hold     time.Duration // how long an execution stays inside after gathering
	gathered chan struct{} // closed when 2*limit executions were inside at once
	giveUp   time.Time     // when executions stop waiting for gathered
	once     sync.Once
	total    gauge // executions inside, of every key

	mu     sync.Mutex
	keys   map[string]*keyStats
	events []string
	start  time.Time
}

type keyStats struct {
	gauge
	attempts []int32 // of the executions that entered, in order
	fences   []int64
	byWorker map[string]int
}

// keySnapshot is a copy of a keyStats.
type keySnapshot struct {
	max      int32
	attempts []int32
	fences   []int64
	byWorker map[string]int
}

// newLimitActs returns the activities of a subtest with that limit; with
// Gather, executions wait at most gatherFor from now.
func newLimitActs(limit int32, hold, gatherFor time.Duration) *limitActs {
	return &limitActs{limit: limit, hold: hold, gathered: make(chan struct{}), giveUp: time.Now().Add(gatherFor),
		keys: map[string]*keyStats{}, start: time.Now()}
}

func (a *limitActs) run(ctx context.Context, in LimitInput, worker string) error {
	key, ok := temporallock.LockKeyFromContext(ctx)
	if !ok {
		return temporal.NewNonRetryableApplicationError("Limited ran without a permit", "test", nil)
	}
	fence, _ := temporallock.FenceFromContext(ctx)
	attempt := activity.GetInfo(ctx).Attempt
	a.mu.Lock()
	ks := a.keys[key]
	if ks == nil {
		ks = &keyStats{byWorker: map[string]int{}}
		a.keys[key] = ks
	}
	ks.attempts = append(ks.attempts, attempt)
	ks.fences = append(ks.fences, fence)
	ks.byWorker[worker]++
	a.mu.Unlock()

	inKey := ks.enter()
	if a.total.enter() >= 2*a.limit {
		a.once.Do(func() { close(a.gathered) })
	}
	a.event("%s enters (%d inside) attempt %d fence %d on %s", key, inKey, attempt, fence, worker)
	defer func() {
		a.event("%s leaves attempt %d on %s", key, attempt, worker)
		ks.leave()
		a.total.leave()
	}()
	if in.Gather {
		select {
		case <-a.gathered:
		case <-time.After(time.Until(a.giveUp)):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	select {
	case <-time.After(a.hold):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (a *limitActs) event(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, fmt.Sprintf("%.2fs ", time.Since(a.start).Seconds())+fmt.Sprintf(format, args...))
}

func (a *limitActs) stats(key string) keySnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	ks := a.keys[key]
	if ks == nil {
		return keySnapshot{}
	}
	byWorker := map[string]int{}
	for w, n := range ks.byWorker {
		byWorker[w] = n
	}
	return keySnapshot{max: ks.max.Load(), attempts: slices.Clone(ks.attempts), fences: slices.Clone(ks.fences), byWorker: byWorker}
}

// byWorker counts the executions of every key by worker.
func (a *limitActs) byWorker() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := map[string]int{}
	for _, ks := range a.keys {
		for w, c := range ks.byWorker {
			n[w] += c
		}
	}
	return n
}

func (a *limitActs) eventLog() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}
