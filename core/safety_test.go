package core_test

// Regression tests for the adversarial review of the holder's promise: a
// holder is told (Lost closes) no later than anyone else can take its key.
// Each failed on the code before the per-lease deadlines.

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// sharedRedis returns a client of its own on the shared Redis and a key
// prefix; the test's keys are deleted when it ends.
func sharedRedis(t *testing.T, opts ...func(*redis.Options)) (*redis.Client, string) {
	t.Helper()
	o := &redis.Options{Addr: redistest.Addr(t)}
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() }) // runs after Prefix's cleanup
	return rdb, redistest.Prefix(t, rdb)
}

// cleanPrefix deletes every key under prefix (bounded).
func cleanPrefix(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	redistest.CleanPrefix(t, rdb, prefix)
}

// lossClock is an Observer that records when each lease was reported lost
// (LeaseLost runs before Lost closes, so the time is exact).
type lossClock struct {
	mu   sync.Mutex
	lost map[int64]time.Time // by fence
}

func newLossClock() *lossClock { return &lossClock{lost: map[int64]time.Time{}} }

func (o *lossClock) OpStart(ctx context.Context, _ core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	return ctx, func(core.OpResult) {}
}

func (o *lossClock) LeaseLost(_ context.Context, _ string, _ core.Kind, fence int64, _ time.Duration, _ error) {
	o.mu.Lock()
	o.lost[fence] = time.Now()
	o.mu.Unlock()
}

// at returns when the lease of fence was reported lost.
func (o *lossClock) at(fence int64) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.lost[fence]
	return t, ok
}

// contend tries to take key from rival every few milliseconds for d. It
// fails the test if rival gets the key while holder (whose losses clock
// records) had not been told yet, and returns whether rival got it.
func contend(t *testing.T, rival *core.Client, key string, holder *core.Lock, clock *lossClock, d time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		l, err := rival.TryLock(ctx, key, core.WithTTL(5*time.Second))
		got := time.Now()
		if err == nil {
			told, ok := clock.at(holder.Fence())
			if !ok || told.After(got) {
				t.Errorf("a rival took %q (fence %d) while its holder (fence %d) still believed it held it (told: %v)",
					key, l.Fence(), holder.Fence(), ok)
			}
			l.Release(ctx)
			return true
		}
		if !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("rival TryLock: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Finding 1: a renewal that hangs (one key's commands stalled, as on a
// slow shard or a stuck connection) must not starve the other leases of
// the Client: before, one watchdog loop waited for each batch, so lease B
// expired in Redis and was taken while its holder still believed in it.
func TestSafetyHungRenewalStarvesNobody(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	kf := newKeyFault(t, rdb)
	clock := newLossClock()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(clock)))
	defer c.Close()
	rival := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer rival.Close()
	ctx := context.Background()

	a, err := c.TryLock(ctx, "a", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.TryLock(ctx, "b", core.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	// Every command on a's lease now hangs for 4 s, whatever its context.
	hang := kf.add(&faultRule{key: prefix + ":{a}", delay: 4 * time.Second, onWire: true})
	waitHit(t, hang, 2*time.Second) // a's first renewal, at 1 s

	if contend(t, rival, "b", b, clock, 2500*time.Millisecond) {
		t.Errorf("b was taken: its renewals were held up by a's")
	}
	select {
	case <-b.Lost():
		t.Errorf("b lost although only a's commands hang: %v", b.Err())
	default:
	}
	kf.clear()
}

// Finding 2: an Extend racing a renewal that carries the old, shorter TTL
// must not end up shortened when the old renewal reaches Redis last.
func TestSafetyExtendRacingRenewal(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	kf := newKeyFault(t, rdb)
	clock := newLossClock()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(clock)))
	defer c.Close()
	rival := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer rival.Close()
	ctx := context.Background()

	// The first renewal (asking for 900 ms) is held 400 ms and then reaches
	// Redis anyway, after the Extend below.
	slow := kf.add(&faultRule{key: prefix + ":{k}", ttlMs: 900, delay: 400 * time.Millisecond, onWire: true, times: 1})
	l, err := c.TryLock(ctx, "k", core.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	waitHit(t, slow, 2*time.Second)
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the held renewal has landed
	if pttl := rdb.PTTL(ctx, prefix+":{k}").Val(); pttl < 3*time.Second {
		t.Errorf("lease TTL after Extend(5s) and a late renewal(900ms): %v, want > 3s", pttl)
	}
	if contend(t, rival, "k", l, clock, 1500*time.Millisecond) {
		t.Errorf("the extended lease was taken")
	}
}

// Finding 2, second form: re-entering with WithToken and a shorter TTL must
// not shorten the lease its first holder relies on.
func TestSafetyReentryNeverShortens(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []core.LockOption
	}{
		{"plain", nil},
		{"fair", []core.LockOption{core.WithFair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, prefix := sharedRedis(t)
			clock := newLossClock()
			c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(clock)))
			defer c.Close()
			other := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			defer other.Close()
			rival := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			defer rival.Close()
			ctx := context.Background()

			l, err := c.TryLock(ctx, "k", append([]core.LockOption{core.WithTTL(3 * time.Second)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			opts := append([]core.LockOption{core.WithToken(l.Token()), core.WithTTL(200 * time.Millisecond), core.WithAutoRenew(false)}, tc.opts...)
			if _, err := other.TryLock(ctx, "k", opts...); err != nil {
				t.Fatalf("re-entry: %v", err)
			}
			if pttl := rdb.PTTL(ctx, prefix+":{k}").Val(); pttl < 2*time.Second {
				t.Errorf("lease TTL after re-entry with 200ms: %v, want about 3s", pttl)
			}
			if contend(t, rival, "k", l, clock, 1200*time.Millisecond) {
				t.Errorf("the lease was taken after a shorter re-entry")
			}
		})
	}
}

// Finding 3: Close with a renewal in flight tells that lease and releases
// it; its Release and Extend then say ErrClosed.
func TestSafetyCloseDuringRenewal(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	kf := newKeyFault(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	ctx := context.Background()

	stall := kf.add(&faultRule{key: prefix + ":{k}", ttlMs: 600, delay: 3 * time.Second, times: 1})
	l, err := c.TryLock(ctx, "k", core.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitHit(t, stall, 2*time.Second)
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v with a renewal hanging", d)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Close left a lease whose renewal was in flight believing it is held")
	}
	if !errors.Is(l.Err(), core.ErrClosed) || !errors.Is(l.Err(), core.ErrLost) {
		t.Errorf("Err after Close: %v, want ErrLost and ErrClosed", l.Err())
	}
	if n := rdb.Exists(ctx, prefix+":{k}").Val(); n != 0 {
		t.Errorf("Close did not release the lease whose renewal was in flight")
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Extend after Close: %v, want ErrClosed", err)
	}
	if err := l.Release(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
}

// Finding 5: a SUBSCRIBE that fails (the waiter's context ended while the
// subscription connection was dialling) must not leave go-redis subscribed
// for ever: the channel is unsubscribed once idle, like any other.
func TestSafetySubscriptionNotLeaked(t *testing.T) {
	var slowDial atomic.Bool
	rdb, prefix := sharedRedis(t, func(o *redis.Options) {
		d := &net.Dialer{Timeout: time.Second}
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slowDial.Load() {
				time.Sleep(100 * time.Millisecond)
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	holder := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer holder.Close()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	bg := context.Background()

	h, err := holder.TryLock(bg, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)
	if _, err := c.TryLock(bg, "k"); !errors.Is(err, core.ErrNotAcquired) { // warm the pool
		t.Fatal(err)
	}
	slowDial.Store(true)
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	_, err = c.Lock(ctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want a deadline", err)
	}
	channel := prefix + ":{k}"
	probe := redistest.Client(t)
	deadline := time.Now().Add(8 * time.Second)
	for {
		n := probe.PubSubNumSub(bg, channel).Val()[channel]
		if n == 0 && time.Since(deadline.Add(-8*time.Second)) > 3500*time.Millisecond {
			return // idle past the linger and not subscribed
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions to %q left 8 s after its only waiter gave up", n, channel)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Finding 7: a key must work on Cluster whatever its braces, or be refused.
func TestSafetyKeyBraces(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	if _, err := c.TryLock(context.Background(), "}x"); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("TryLock(\"}x\"): %v, want ErrInvalidKey", err)
	}
	if _, err := c.Inspect(context.Background(), "}x"); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Inspect(\"}x\"): %v, want ErrInvalidKey", err)
	}
}

// Finding 6: a Redlock renewal that found the lease gone on one node heals
// it there (SET NX) — but never after the holder released it, which would
// leave a zombie lease nobody releases.
func TestSafetyRedlockNoHealAfterRelease(t *testing.T) {
	var nodes []redis.UniversalClient
	var third *redis.Client
	for i := 0; i < 3; i++ {
		_, rdb := redistest.Miniredis(t, false)
		nodes = append(nodes, rdb)
		third = rdb
	}
	kf := newKeyFault(t, third)
	c := mustNew(core.NewRedlock(nodes))
	defer c.Close()
	warmUp(t, c)
	ctx := context.Background()

	// A TTL of seconds: under CI's load a renewal late by more than the
	// lease's slack would lose the lease instead of healing it, and a node
	// answering after the node timeout (a tenth of the TTL, 500 ms at
	// most) heals nothing that round.
	l, err := c.TryLock(ctx, "k", core.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease := core.DefaultKeyPrefix + ":{k}"
	// TryLock returns once a majority answered: the third node's write may
	// land later, after the DEL below, and leave nothing to heal (seen 1 in
	// 12 runs under -race).
	for end := time.Now().Add(5 * time.Second); third.Exists(ctx, lease).Val() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the third node never got the lease")
		}
	}
	heal := kf.add(&faultRule{key: lease, names: []string{"set"}, delay: 300 * time.Millisecond, onWire: true, times: 1})
	third.Del(ctx, lease)            // the third node restarted empty
	waitHit(t, heal, 10*time.Second) // a renewal (every 2 s) heals the third node, slowly
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // the held heal has landed, if it was sent
	for i, rdb := range nodes {
		if n := rdb.Exists(ctx, lease).Val(); n != 0 {
			t.Errorf("node %d holds the lease after Release returned: a zombie until its TTL", i)
		}
	}
}
