package core_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// testPrefix keeps the keys of one test run apart from any other.
func testPrefix() string { return "lktest-" + rand.Text()[:10] }

func TestRedisConformance(t *testing.T) {
	rdb := redistest.Client(t)
	locktest.Run(t, func(t *testing.T) *core.Client {
		return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(redistest.Prefix(t, rdb))))
	})
}

func TestClusterConformance(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	locktest.Run(t, func(t *testing.T) *core.Client {
		return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(testPrefix())))
	})
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Two clients, as two processes would have, on one real Redis.
func TestRedisAcrossClients(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	b := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer a.Close()
	defer b.Close()
	ctx := ctxFor(t, 30*time.Second)

	held, err := a.TryLock(ctx, "k", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "k"); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("B on A's key: %v", err)
	}
	got := make(chan *core.Lock, 1)
	go func() {
		// A's lease lasts a minute; only the release notification wakes B
		// before its wait timeout.
		l, err := b.Lock(ctx, "k", core.WithWaitTimeout(3*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= held.Fence() {
		t.Fatalf("fence did not rise across clients: %d then %d", held.Fence(), l.Fence())
	}
	if err := held.Release(ctx); err != nil { // idempotent, and B is not disturbed
		t.Fatal(err)
	}
	if info, _ := a.Inspect(ctx, "k"); info.Token != l.Token() {
		t.Fatalf("B's lease was disturbed: %+v", info)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Fences keep rising after Redis restarts with no data: otherwise every
// fenced store would reject all writes after the restart.
func TestFenceSurvivesEmptyRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	var last int64
	for i := 0; i < 5; i++ {
		l, err := c.TryLock(ctx, "stock:1")
		if err != nil {
			t.Fatal(err)
		}
		last = l.Fence()
		l.Release(ctx)
	}
	srv.Kill(t)
	srv.Restart(t)
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("restarted server not empty: %d keys, %v", n, err)
	}
	l, err := c.TryLock(ctx, "stock:1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() <= last {
		t.Fatalf("fence after an empty restart %d is not above %d", l.Fence(), last)
	}
}

// A backend failure is returned as itself, never as contention, and a
// holder whose server disappears is told its lease is lost.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	c := mustNew(core.NewRedis(srv.Client(t)))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	held, err := c.TryLock(ctx, "held", core.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	_, err = c.TryLock(ctx, "other")
	if err == nil || errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryLock with Redis down: got %v, want the connection error", err)
	}
	_, err = c.Lock(ctx, "other", core.WithWaitTimeout(10*time.Second))
	if err == nil || errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("Lock with Redis down: got %v, want the connection error at once", err)
	}
	select {
	case <-held.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told that its lease could not be renewed")
	}
	if !errors.Is(held.Err(), core.ErrLost) {
		t.Fatalf("Err: %v", held.Err())
	}
}

// A pause shorter than the TTL is ridden out by retrying renewals.
func TestRenewalRidesOutPause(t *testing.T) {
	srv := redistest.StartServer(t)
	c := mustNew(core.NewRedis(srv.Client(t)))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	l, err := c.TryLock(ctx, "k", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	time.Sleep(1500 * time.Millisecond) // one renewal falls into the pause
	srv.Resume(t)
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatalf("lease lost across a pause shorter than its TTL: %v", l.Err())
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Scripts are loaded again after SCRIPT FLUSH (or a restart), also in the
// watchdog's pipelined renewals.
func TestScriptsReloaded(t *testing.T) {
	rdb := redistest.Client(t)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(redistest.Prefix(t, rdb))))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	var locks []*core.Lock
	for _, k := range []string{"a", "b", "c"} {
		l, err := c.TryLock(ctx, k, core.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	for _, l := range locks {
		select {
		case <-l.Lost():
			t.Fatalf("%s lost after SCRIPT FLUSH: %v", l.Key(), l.Err())
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The Redis layout is part of the contract: operators and other tools read it.
func TestRedisKeyLayout(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)

	l, err := c.TryLock(ctx, "sku:42", core.WithMetadata("host/1"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := rdb.Get(ctx, prefix+":{sku:42}").Result()
	if err != nil || v != l.Token()+"|host/1" {
		t.Fatalf("lease value %q, %v", v, err)
	}
	f, err := rdb.Get(ctx, prefix+":{sku:42}:fence").Int64()
	if err != nil || f != l.Fence() {
		t.Fatalf("fence counter %d, %v (want %d)", f, err, l.Fence())
	}
	l.Release(ctx)
	if n, _ := rdb.Exists(ctx, prefix+":{sku:42}").Result(); n != 0 {
		t.Fatal("lease left after release")
	}
}

// TestConstructorErrors: the constructors refuse what cannot work, and
// Close on what they return then (nil) does nothing.
func TestConstructorErrors(t *testing.T) {
	var nilClient *redis.Client
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		name string
		new  func() (*core.Client, error)
		want error
	}{
		{"nil", func() (*core.Client, error) { return core.NewRedis(nil) }, core.ErrNilClient},
		{"typed nil", func() (*core.Client, error) { return core.NewRedis(nilClient) }, core.ErrNilClient},
		{"bad prefix", func() (*core.Client, error) { return core.NewRedis(rdb, core.WithKeyPrefix("a{b")) }, core.ErrInvalidOption},
		{"memory bad prefix", func() (*core.Client, error) { return core.NewMemory(core.WithKeyPrefix("a{b")) }, core.ErrInvalidOption},
		{"memory bad ttl", func() (*core.Client, error) { return core.NewMemory(core.WithTTL(-time.Second)) }, core.ErrInvalidTTL},
		{"redlock none", func() (*core.Client, error) { return core.NewRedlock(nil) }, core.ErrInvalidOption},
		{"redlock nil node", func() (*core.Client, error) {
			return core.NewRedlock([]redis.UniversalClient{rdb, nilClient, rdb})
		}, core.ErrNilClient},
	} {
		c, err := tc.new()
		if !errors.Is(err, tc.want) || c != nil {
			t.Errorf("%s: %v, %v; want nil, %v", tc.name, c, err, tc.want)
		}
		if err := c.Close(); err != nil {
			t.Errorf("%s: Close on nil: %v", tc.name, err)
		}
	}
}

// A fair waiter that died still sits in the queue: the grant it cannot
// claim expires and the key passes on — the queue never blocks the key.
func TestFairDeadWaiterPassesOn(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	holder, err := c.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that queued and then crashed: its entry lives a few seconds.
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 10*time.Second)

	got := make(chan *core.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(15*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Inspect(ctx, "k"); info.Token != "dead-waiter" {
		t.Fatalf("the release did not grant to the head of the queue: %+v", info)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= holder.Fence()+1 {
		t.Fatalf("fence %d: the dead waiter's grant took %d, the next must be higher", l.Fence(), holder.Fence()+1)
	}
	l.Release(ctx)
}

// WithReplicaAck: a lease write that too few replicas acknowledge does not
// count, and is taken back.
func TestReplicaAck(t *testing.T) {
	primary := redistest.StartServer(t)
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port()))
	ctx := ctxFor(t, 30*time.Second)
	rrdb := replica.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := rrdb.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never linked: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	prdb := primary.Client(t)
	c := mustNew(core.NewRedis(prdb, core.WithReplicaAck(1, time.Second)))
	defer c.Close()

	// A TTL long enough that a renewal attempt (a third of the time left)
	// leaves WAIT room to answer on a loaded machine.
	l, err := c.TryLock(ctx, "k", core.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("with the replica up: %v", err)
	}
	if v, _ := rrdb.Get(ctx, "latchkey:{k}").Result(); v != l.Token() {
		t.Fatalf("lease not on the replica when acquire returned: %q", v)
	}
	time.Sleep(2500 * time.Millisecond) // renewals, acknowledged, keep it
	select {
	case <-l.Lost():
		t.Fatalf("lost with the replica up: %v", l.Err())
	default:
	}

	replica.Kill(t)
	other := mustNew(core.NewRedis(prdb, core.WithReplicaAck(1, 50*time.Millisecond)))
	defer other.Close()
	_, err = other.TryLock(ctx, "other")
	if !errors.Is(err, core.ErrReplicaAck) {
		t.Fatalf("with the replica down: got %v, want ErrReplicaAck", err)
	}
	if n, _ := prdb.Exists(ctx, "latchkey:{other}").Result(); n != 0 {
		t.Fatal("an unacknowledged lease was left on the primary")
	}
	select { // renewals can no longer be acknowledged: the holder is told
	case <-l.Lost():
		if !errors.Is(l.Err(), core.ErrReplicaAck) {
			t.Fatalf("lost for another reason: %v", l.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("renewals without acknowledgement did not end the lease")
	}
	if _, err := core.NewRedis(prdb, core.WithReplicaAck(-1, 0)); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("bad WithReplicaAck: %v", err)
	}
}

// A Sentinel group through redis.NewFailoverClient: the same contract.
func TestSentinelConformance(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, master, "lkmaster")
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "lkmaster",
		SentinelAddrs: []string{sentinel.Addr()},
	})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("through the sentinel: %v", err)
	}
	locktest.Run(t, func(t *testing.T) *core.Client {
		return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(testPrefix())))
	})
}
