package temporallock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A backend makes the core.Clients of the "workers" of one test: every
// call is a new Client (a new process) on the same lock store.
type backend struct {
	name string
	// newClient returns a Client closed at cleanup.
	newClient func(t *testing.T) *core.Client
	// steal deletes the lease of lockKey behind its holder's back, as a
	// Redis that lost its data would; nil when the backend cannot.
	steal func(t *testing.T, lockKey string)
}

// backends returns a function giving the lock store of each backend for
// one test: miniredis (ageing keys in real time), the shared real Redis
// (its subtest skips or fails when it is missing) and process memory.
func backends() []struct {
	name string
	make func(t *testing.T) backend
} {
	return []struct {
		name string
		make func(t *testing.T) backend
	}{
		{"miniredis", func(t *testing.T) backend {
			mr := miniredis.RunT(t)
			stop := mrclock.Run(mr)
			t.Cleanup(stop)
			return redisBackend(t, "miniredis", func(t *testing.T) *redis.Client {
				rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
				t.Cleanup(func() { rdb.Close() })
				return rdb
			})
		}},
		{"redis", func(t *testing.T) backend {
			redistest.Addr(t) // skip (or fail) now when there is none
			return redisBackend(t, "redis", func(t *testing.T) *redis.Client { return redistest.Client(t) })
		}},
		{"memory", func(t *testing.T) backend {
			mem := mustNew(core.NewMemory())
			t.Cleanup(func() { mem.Close() })
			return backend{name: "memory", newClient: func(*testing.T) *core.Client { return mem }}
		}},
	}
}

func redisBackend(t *testing.T, name string, dial func(t *testing.T) *redis.Client) backend {
	admin := dial(t)
	t.Cleanup(func() { forgetKeys(t, admin) })
	return backend{
		name: name,
		newClient: func(t *testing.T) *core.Client {
			c := mustNew(core.NewRedis(dial(t)))
			t.Cleanup(func() { c.Close() })
			return c
		},
		steal: func(t *testing.T, lockKey string) {
			t.Helper()
			if err := admin.Del(context.Background(), core.DefaultKeyPrefix+":{"+lockKey+"}").Err(); err != nil {
				t.Fatalf("steal %q: %v", lockKey, err)
			}
		},
	}
}

// forgetKeys deletes the leases and fence counters that t and its
// subtests left in rdb: the keys of their uniqueIDs.
func forgetKeys(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	glob := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(t.Name())
	iter := rdb.Scan(ctx, 0, core.DefaultKeyPrefix+":{"+temporallock.KeyPrefix+"*:"+glob+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("forget %q: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("forget the keys of %s: %v", t.Name(), err)
	}
}

// forEachBackend runs fn as a subtest per backend, redisOnly skipping the
// memory backend.
func forEachBackend(t *testing.T, redisOnly bool, fn func(t *testing.T, b backend)) {
	for _, bk := range backends() {
		if redisOnly && bk.name == "memory" {
			continue
		}
		t.Run(bk.name, func(t *testing.T) { fn(t, bk.make(t)) })
	}
}

// uniqueID returns a string that no other test (or test run sharing the
// real Redis) uses.
func uniqueID(t *testing.T) string {
	return fmt.Sprintf("%s-%s", t.Name(), rand.Text()[:8])
}

// activityEnv returns a test activity environment — one "worker" — with
// the interceptor installed and the activities of w registered.
func activityEnv(ic *temporallock.Interceptor, w *works) *testsuite.TestActivityEnvironment {
	env := suite().NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
	env.RegisterActivity(w)
	return env
}

// suite returns a test suite whose environments log nothing (a panicking
// test activity would print its stack otherwise).
func suite() *testsuite.WorkflowTestSuite {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	return &s
}

// Order is the argument of the test activities; Account is their key.
type Order struct {
	Account string
	ID      int
}

// byAccount keys Hold, Meet and Block by the order's account.
var byAccount = temporallock.FirstKey(
	temporallock.KeyByArg("Hold", func(o Order) string { return o.Account }),
	temporallock.KeyByArg("Meet", func(o Order) string { return o.Account }),
	temporallock.KeyByArg("Block", func(o Order) string { return o.Account }),
	temporallock.KeyByArg("Beat", func(o Order) string { return o.Account }),
	temporallock.KeyByArg("Fail", func(o Order) string { return o.Account }),
)

// works holds the test activities and what they observed. Its methods are
// registered as activities named after them.
type works struct {
	mu       sync.Mutex
	inFlight map[string]int // by account
	maxIn    map[string]int
	fences   map[string][]int64 // in entry order, by account
	runs     int
	// maxAttempt is the highest activity attempt that entered.
	maxAttempt int32

	hold    time.Duration // how long Hold stays inside
	partner *barrier      // Meet waits here
	started chan string   // Block sends its account here once inside
	cause   error         // context.Cause seen by Block
}

func newWorks() *works {
	return &works{inFlight: map[string]int{}, maxIn: map[string]int{}, fences: map[string][]int64{},
		hold: 20 * time.Millisecond, started: make(chan string, 16)}
}

// allAccounts counts the executions of every account together.
const allAccounts = "*"

func (w *works) enter(ctx context.Context, o Order) {
	fence, _ := temporallock.FenceFromContext(ctx)
	attempt := activity.GetInfo(ctx).Attempt
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs++
	w.maxAttempt = max(w.maxAttempt, attempt)
	for _, a := range []string{o.Account, allAccounts} {
		w.inFlight[a]++
		w.maxIn[a] = max(w.maxIn[a], w.inFlight[a])
	}
	w.fences[o.Account] = append(w.fences[o.Account], fence)
}

func (w *works) leave(o Order) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inFlight[o.Account]--
	w.inFlight[allAccounts]--
}

// Hold stays inside its critical section for w.hold and returns its fence.
func (w *works) Hold(ctx context.Context, o Order) (int64, error) {
	w.enter(ctx, o)
	defer w.leave(o)
	select {
	case <-time.After(w.hold):
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	fence, _ := temporallock.FenceFromContext(ctx)
	return fence, nil
}

// Meet enters, then waits until w.partner has everyone inside at once.
func (w *works) Meet(ctx context.Context, o Order) error {
	w.enter(ctx, o)
	defer w.leave(o)
	return w.partner.arrive(ctx, 10*time.Second)
}

// Block enters, reports it, and stays until its context ends.
func (w *works) Block(ctx context.Context, o Order) error {
	w.enter(ctx, o)
	defer w.leave(o)
	w.started <- o.Account
	<-ctx.Done()
	w.mu.Lock()
	w.cause = context.Cause(ctx)
	w.mu.Unlock()
	return ctx.Err()
}

// Fail returns an error, or panics when the order ID is negative.
func (w *works) Fail(ctx context.Context, o Order) error {
	w.enter(ctx, o)
	defer w.leave(o)
	if o.ID < 0 {
		panic("Fail panics on purpose")
	}
	return errors.New("Fail fails on purpose")
}

// Free is not keyed: it reports whether it got a fence.
func (w *works) Free(ctx context.Context, o Order) (bool, error) {
	_, ok := temporallock.FenceFromContext(ctx)
	return ok, nil
}

// barrier lets n activities through once all n are inside.
type barrier struct {
	mu   sync.Mutex
	n    int
	full chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, full: make(chan struct{})} }

func (b *barrier) arrive(ctx context.Context, limit time.Duration) error {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.full)
	}
	b.mu.Unlock()
	select {
	case <-b.full:
		return nil
	case <-time.After(limit):
		return errors.New("the others never arrived: executions were serialised")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// appError returns the *temporal.ApplicationError in err's chain, failing
// the test when there is none.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("error %v (%T) holds no ApplicationError", err, err)
	}
	return app
}

// held reports whether lockKey is held right now.
func held(t *testing.T, c *core.Client, lockKey string) bool {
	t.Helper()
	info, err := c.Inspect(context.Background(), lockKey)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", lockKey, err)
	}
	return info.Held
}
