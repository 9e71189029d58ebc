package core_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// markerTopologies runs f on a private redis-server and on a private
// 3-master Cluster, so that the commands Redis executed (INFO
// commandstats, summed over nodes) are this test's alone. newRedis gives a
// go-redis client of its own (as another process has) on the same servers.
func markerTopologies(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, nodes []*redis.Client)) {
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		f(t, srv.Client(t), func() redis.UniversalClient { return srv.Client(t) }, []*redis.Client{srv.Client(t)})
	})
	if testing.Short() {
		return
	}
	t.Run("cluster", func(t *testing.T) {
		cl, nodes := startCluster3(t)
		f(t, cl.Client(t), func() redis.UniversalClient { return cl.Client(t) }, nodes)
	})
}

// startCluster3 starts a 3-master Cluster and returns it with a client of
// each master.
func startCluster3(t *testing.T) (*redistest.Cluster, []*redis.Client) {
	cl := redistest.StartCluster(t, 3)
	var nodes []*redis.Client
	for _, n := range cl.Nodes() {
		nodes = append(nodes, n.Client(t))
	}
	return cl, nodes
}

// executed sums, over nodes, the calls of each command Redis executed
// since its last CONFIG RESETSTAT (those scripts ran included), by name
// ("publish", "zpopmin", ...).
func executed(t *testing.T, nodes []*redis.Client) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, n := range nodes {
		s, err := n.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					calls[strings.TrimPrefix(name, "cmdstat_")] += c
				}
			}
		}
	}
	return calls
}

func resetStats(t *testing.T, nodes []*redis.Client) {
	t.Helper()
	for _, n := range nodes {
		if err := n.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUncontendedReleasePublishesNothing: a release that nobody waits
// for deletes the lease and tells nobody — no PUBLISH (which on a Cluster
// goes to every node), no look into the waiters' queue — whether the lock
// was taken by TryLock or by a Lock that did not have to wait.
func TestUncontendedReleasePublishesNothing(t *testing.T) {
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, _ func() redis.UniversalClient, nodes []*redis.Client) {
		ctx := ctxFor(t, 30*time.Second)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(testPrefix())))
		defer c.Close()
		cycle := func(i int, lock func(context.Context, string, ...core.LockOption) (*core.Lock, error)) {
			l, err := lock(ctx, "u:"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cycle(-1, c.TryLock) // the scripts are loaded
		cycle(-2, c.Lock)
		resetStats(t, nodes)
		const n = 50
		for i := range n {
			cycle(i, c.TryLock)
			cycle(n+i, c.Lock)
		}
		got := executed(t, nodes)
		if got["evalsha"] != 4*n {
			t.Errorf("%d EVALSHA for %d cycles, want %d: %v", got["evalsha"], 2*n, 4*n, got)
		}
		for _, cmd := range []string{"publish", "spublish", "zpopmin"} {
			if got[cmd] != 0 {
				t.Errorf("%d cycles nobody waited for ran %s %d times: %v", 2*n, strings.ToUpper(cmd), got[cmd], got)
			}
		}
	})
}

// unfairOnly keeps Lock's waiters in the default mode (they never queue),
// so that what wakes them is a release's notification or their fallback
// timer, and nothing else, until restore.
func unfairOnly(t *testing.T) {
	t.Cleanup(core.SetStarvationThreshold(time.Hour))
}

// releaseToWaiter releases h with the nodes' command counts reset, waits
// for the waiter started by waitWoken (got) to get the lock, and returns
// how long after the release it did, and the commands the nodes executed.
func releaseToWaiter(ctx context.Context, t *testing.T, h *core.Lock, got <-chan time.Time, nodes []*redis.Client) (time.Duration, map[string]int64) {
	t.Helper()
	resetStats(t, nodes)
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	return at.Sub(released), executed(t, nodes)
}

// waitWoken starts w.Lock(key) (in the default mode, unless opts say
// otherwise) and returns the time it got the lock on a channel (zero, the
// error reported, if it failed).
func waitWoken(ctx context.Context, t *testing.T, w *core.Client, key string, opts ...core.LockOption) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		l, err := w.Lock(ctx, key, append([]core.LockOption{core.WithWaitTimeout(15 * time.Second)}, opts...)...)
		at := time.Now()
		if err != nil {
			t.Error(err)
			at = time.Time{}
		} else {
			_ = l.Release(ctx)
		}
		got <- at
	}()
	return got
}

// wokenWithin is the bound on a waiter's wake-up after a release: far
// below any fallback the tests leave it (a second or more).
const wokenWithin = 200 * time.Millisecond

// twoClients returns a prefix of the test's own and two Clients under it:
// one on rdb (to hold), one on a go-redis client of its own (to wait),
// closed when the test ends.
func twoClients(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient) (prefix string, holder, waiter *core.Client) {
	t.Helper()
	prefix = testPrefix()
	holder = mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { holder.Close() })
	waiter = mustNew(core.NewRedis(newRedis(), core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { waiter.Close() })
	return prefix, holder, waiter
}

// TestUnfairWaiterWokenByRelease: a waiter of the default mode that sleeps
// (its fallback is seconds away: the holder's lease has a minute left) is
// woken by the release at once, every time.
func TestUnfairWaiterWokenByRelease(t *testing.T) {
	unfairOnly(t)
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, nodes []*redis.Client) {
		ctx := ctxFor(t, 60*time.Second)
		_, holder, waiter := twoClients(t, rdb, newRedis)
		for i := range 3 {
			h, err := holder.TryLock(ctx, "k", core.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			got := waitWoken(ctx, t, waiter, "k")
			time.Sleep(300 * time.Millisecond) // it attempted, joined, attempted again, and sleeps
			d, p := releaseToWaiter(ctx, t, h, got, nodes)
			if d > wokenWithin {
				t.Errorf("round %d: the waiter got the lock %v after the release, want within %v", i, d, wokenWithin)
			} else {
				t.Logf("round %d: woken %v after the release", i, d)
			}
			if p["publish"]+p["spublish"] == 0 {
				t.Errorf("round %d: the release someone waited for published nothing: %v", i, p)
			}
		}
	})
}

// TestWaitMarkerOutlivesLongWaits: every failed attempt of a waiter keeps
// the sign that someone waits alive, so a release long after the waiter
// began (here twice the sign's lifetime, and the sign shortened to a
// little more than the waiter's longest sleep) still tells it.
func TestWaitMarkerOutlivesLongWaits(t *testing.T) {
	unfairOnly(t)
	t.Cleanup(core.SetWaitMarkTTL(2500 * time.Millisecond))
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, nodes []*redis.Client) {
		ctx := ctxFor(t, 60*time.Second)
		_, holder, waiter := twoClients(t, rdb, newRedis)
		// A renewed lease of 1.5 s: the waiter sleeps at most that long
		// between attempts.
		h, err := holder.TryLock(ctx, "long", core.WithTTL(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		got := waitWoken(ctx, t, waiter, "long")
		time.Sleep(5 * time.Second)
		d, p := releaseToWaiter(ctx, t, h, got, nodes)
		if d > wokenWithin {
			t.Errorf("the waiter got the lock %v after the release, want within %v", d, wokenWithin)
		}
		if p["publish"]+p["spublish"] == 0 {
			t.Errorf("a release after a long wait published nothing: %v", p)
		}
	})
}

// TestReleaseBetweenAttemptAndSubscribe: the holder releases after the
// waiter's attempt found the key held and before the waiter subscribed to
// the key's channel. The message goes to nobody; the waiter's attempt
// right after it subscribed finds the key free.
func TestReleaseBetweenAttemptAndSubscribe(t *testing.T) {
	unfairOnly(t)
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, _ []*redis.Client) {
		ctx := ctxFor(t, 30*time.Second)
		prefix := testPrefix()
		holder := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer holder.Close()
		h, err := holder.TryLock(ctx, "race", core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wr := newRedis()
		var fired atomic.Bool
		wr.AddHook(releaseAfterAttempt{release: func() {
			if !fired.Swap(true) {
				if err := h.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}})
		waiter := mustNew(core.NewRedis(wr, core.WithKeyPrefix(prefix)))
		defer waiter.Close()
		start := time.Now()
		at := <-waitWoken(ctx, t, waiter, "race")
		if at.IsZero() {
			t.FailNow()
		}
		if !fired.Load() {
			t.Fatal("the hook never released")
		}
		if d := at.Sub(start); d > time.Second {
			t.Errorf("the waiter got the lock %v after it began, want well within its fallback", d)
		}
	})
}

// releaseAfterAttempt calls release when an acquisition's script answers,
// before the caller reads the answer.
type releaseAfterAttempt struct{ release func() }

func (releaseAfterAttempt) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r releaseAfterAttempt) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "evalsha" && (a[1] == core.AcquireHash || a[1] == core.AcquireShardedHash) {
			r.release()
		}
		return err
	}
}

func (releaseAfterAttempt) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReleaseAfterWaitLooksIntoQueueFirst: a lease taken after waiting is
// released into a queue that likely holds others: the release grants to
// the next waiter without first asking whether anyone waits (no EXISTS).
// When in fact nobody waits any more, it still publishes nothing.
func TestReleaseAfterWaitLooksIntoQueueFirst(t *testing.T) {
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, nodes []*redis.Client) {
		ctx := ctxFor(t, 30*time.Second)
		prefix, a, w := twoClients(t, rdb, newRedis)
		holder, err := a.TryLock(ctx, "k", core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		first := fairLockAsync(ctx, t, w, "k")
		waitQueueLen(ctx, t, rdb, prefix, "k", 1)
		second := fairLockAsync(ctx, t, w, "k")
		waitQueueLen(ctx, t, rdb, prefix, "k", 2)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l1 := <-first
		if l1 == nil {
			t.FailNow()
		}
		resetStats(t, nodes)
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l2 := <-second
		if l2 == nil {
			t.FailNow()
		}
		got := executed(t, nodes)
		if got["exists"] != 0 || got["zpopmin"] != 1 {
			t.Errorf("a release after waiting, with a waiter queued, and its grantee's claim ran EXISTS %d times and ZPOPMIN %d times, want 0 and 1: %v", got["exists"], got["zpopmin"], got)
		}
		resetStats(t, nodes)
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got = executed(t, nodes)
		if got["publish"]+got["spublish"] != 0 {
			t.Errorf("a release after waiting that nobody waits for published: %v", got)
		}
		if info, err := a.Inspect(ctx, "k"); err != nil || info.Held {
			t.Errorf("after the last release: %+v, %v; want the key free", info, err)
		}
	})
}

// TestReleaseAfterWaitWakesUnfairWaiter: a lease taken after waiting is
// released into the queue first (TestReleaseAfterWaitLooksIntoQueueFirst);
// with nobody queued but a waiter of the default mode waiting (the mark
// set), that release still wakes it at once.
func TestReleaseAfterWaitWakesUnfairWaiter(t *testing.T) {
	unfairOnly(t)
	markerTopologies(t, func(t *testing.T, rdb redis.UniversalClient, newRedis func() redis.UniversalClient, nodes []*redis.Client) {
		ctx := ctxFor(t, 30*time.Second)
		_, a, w := twoClients(t, rdb, newRedis)
		first, err := a.TryLock(ctx, "k", core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// w takes the key after waiting: its lease is released with the hint.
		waited := make(chan *core.Lock, 1)
		go func() {
			l, err := w.Lock(ctx, "k", core.WithTTL(time.Minute), core.WithWaitTimeout(15*time.Second))
			if err != nil {
				t.Error(err)
			}
			waited <- l
		}()
		time.Sleep(300 * time.Millisecond) // it waits
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h := <-waited
		if h == nil {
			t.FailNow()
		}
		got := waitWoken(ctx, t, a, "k")
		time.Sleep(300 * time.Millisecond) // it attempted (marking the key), and sleeps
		d, p := releaseToWaiter(ctx, t, h, got, nodes)
		if d > wokenWithin {
			t.Errorf("the waiter got the lock %v after a release of a lease taken after waiting, want within %v", d, wokenWithin)
		}
		if p["publish"]+p["spublish"] == 0 {
			t.Errorf("the release someone waited for published nothing: %v", p)
		}
	})
}
