package temporallock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
)

// armer's activity arms a lost answer for the lock's release, then returns
// successfully: nothing else happens to the lease.
type armer struct {
	p    *faultnet.Proxy
	lost func() int
	key  []byte
}

type ROrder struct{ Account string }

func (a *armer) Succeed(ctx context.Context, o ROrder) (string, error) {
	if _, ok := temporallock.FenceFromContext(ctx); !ok {
		return "", nil
	}
	a.lost = a.p.LoseAnswer(a.key)
	return "done", nil
}

// A keyed activity that held its lock throughout and returned a result
// failed with ErrTypeLost (retryable: Temporal ran it again) when the
// release's answer was lost and go-redis sent the release again, which
// then found nothing (review 17). A mutex's release knows its own first
// run now, when nobody took the key since; a permit's (WithLimit) does not
// yet (see core.NewRedis).
func TestReleaseLostAnswerIsNotLost(t *testing.T) {
	for _, limit := range []int{1} {
		t.Run(map[int]string{1: "lock", 2: "limit2"}[limit], func(t *testing.T) {
			p, client := lossyClient(t)
			account := uniqueID(t)
			lockKey := temporallock.KeyPrefix + "Succeed:" + account
			opts := []temporallock.Option{temporallock.WithKey(temporallock.KeyByArg("Succeed", func(o ROrder) string { return o.Account }))}
			if limit > 1 {
				opts = append(opts, temporallock.WithLimit(limit))
			}
			ic := mustNew(temporallock.NewInterceptor(client, opts...))
			a := &armer{p: p, key: []byte("never-sent")}
			env := suite().NewTestActivityEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
			env.RegisterActivity(a)
			// warm: scripts loaded
			if _, err := env.ExecuteActivity(a.Succeed, ROrder{Account: account + "-warm"}); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			a.key = []byte(lockKey)
			_, err := env.ExecuteActivity(a.Succeed, ROrder{Account: account})
			t.Logf("answers lost: %d; activity error: %v", a.lost(), err)
			if a.lost() != 1 {
				t.Fatal("no answer was lost: the case under test did not arise")
			}
			if temporallock.IsLost(err) {
				t.Errorf("a successful activity that held its lock throughout failed as %s", temporallock.ErrTypeLost)
			}
			if held(t, client, lockKey) {
				t.Errorf("%q still held", lockKey)
			}
		})
	}
}

// The acquisition's answer is lost and go-redis sends it again: the
// activity should run (once), and the key be free afterwards.
func TestAcquireLostAnswer(t *testing.T) {
	for _, limit := range []int{1, 2} {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("limit%d-failfast%v", limit, fail), func(t *testing.T) {
				p, client := lossyClient(t)
				account := uniqueID(t)
				lockKey := temporallock.KeyPrefix + "Succeed:" + account
				opts := []temporallock.Option{temporallock.WithKey(temporallock.KeyByArg("Succeed", func(o ROrder) string { return o.Account }))}
				if limit > 1 {
					opts = append(opts, temporallock.WithLimit(limit))
				}
				if fail {
					opts = append(opts, temporallock.WithFailFast())
				}
				ic := mustNew(temporallock.NewInterceptor(client, opts...))
				a := &armer{p: p, key: []byte("never-sent")}
				env := suite().NewTestActivityEnvironment()
				env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
				env.RegisterActivity(a)
				if _, err := env.ExecuteActivity(a.Succeed, ROrder{Account: account + "-warm"}); err != nil {
					t.Fatalf("warm-up: %v", err)
				}
				lost := p.LoseAnswer([]byte(lockKey))
				_, err := env.ExecuteActivity(a.Succeed, ROrder{Account: account})
				t.Logf("acquire answers lost: %d; activity error: %v", lost(), err)
				if lost() != 1 {
					t.Fatal("no answer was lost")
				}
				if err != nil {
					t.Errorf("activity: %v", err)
				}
				if held(t, client, lockKey) {
					t.Errorf("%q still held", lockKey)
				}
				if info, _ := client.Inspect(context.Background(), lockKey); len(info.Holds) > 0 {
					t.Errorf("permits still held: %+v", info.Holds)
				}
			})
		}
	}
}

type renewer struct {
	p    *faultnet.Proxy
	key  []byte
	lost func() int
}

func (r *renewer) Linger(ctx context.Context, o ROrder) (string, error) {
	r.lost = r.p.LoseAnswer(r.key) // the next command of the key: a renewal (TTL/3 in)
	select {
	case <-time.After(700 * time.Millisecond):
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	return "done", nil
}

// A renewal whose answer is lost and that go-redis sends again.
func TestRenewLostAnswer(t *testing.T) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			p, client := lossyClient(t)
			account := uniqueID(t)
			lockKey := temporallock.KeyPrefix + "Linger:" + account
			opts := []temporallock.Option{temporallock.WithKey(temporallock.KeyByArg("Linger", func(o ROrder) string { return o.Account })),
				temporallock.WithLockOptions(core.WithTTL(600 * time.Millisecond))}
			if limit > 1 {
				opts = append(opts, temporallock.WithLimit(limit))
			}
			ic := mustNew(temporallock.NewInterceptor(client, opts...))
			r := &renewer{p: p, key: []byte(lockKey)}
			env := suite().NewTestActivityEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
			env.RegisterActivity(r)
			_, err := env.ExecuteActivity(r.Linger, ROrder{Account: account})
			t.Logf("answers lost: %d; activity error: %v", r.lost(), err)
			if err != nil {
				t.Errorf("activity: %v", err)
			}
		})
	}
}

// lossyClient is a Client on the shared Redis through a proxy that can
// lose an answer (go-redis's default retries send the command again);
// the keys the test made are deleted when it ends.
func lossyClient(t *testing.T) (*faultnet.Proxy, *core.Client) {
	admin := redistest.Client(t)
	t.Cleanup(func() { forgetKeys(t, admin) })
	p := faultnet.Start(t, redistest.Addr(t))
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	client := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() { client.Close() })
	return p, client
}
