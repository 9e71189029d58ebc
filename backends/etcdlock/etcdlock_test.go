package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// The conformance suite, with watches and with polling; each subtest's
// Client has its own connection to etcd, as separate processes would.
func TestConformance(t *testing.T) {
	ep := startEtcd(t)
	for name, opts := range map[string][]etcdlock.Option{
		"watch": nil,
		"poll":  {etcdlock.WithNotify(false)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			locktest.Run(t, func(t *testing.T) *core.Client {
				return newClient(t, newCli(t, ep), opts...)
			})
		})
	}
}

func TestCapabilities(t *testing.T) {
	cli := newCli(t, "127.0.0.1:1") // never dialled: New makes no call
	want := core.CapFair | core.CapNotify | core.CapReplicaAck | core.CapList | core.CapClaims
	if got := newClient(t, cli).Capabilities(); got != want {
		t.Fatalf("Capabilities: %s, want %s", got, want)
	}
	if got := newClient(t, cli, etcdlock.WithNotify(false)).Capabilities(); got != want&^core.CapNotify {
		t.Fatalf("Capabilities with WithNotify(false): %s", got)
	}
}

func TestOptions(t *testing.T) {
	cli := newCli(t, "127.0.0.1:1")
	for name, tc := range map[string]struct {
		cli  *clientv3.Client
		opts []etcdlock.Option
	}{
		"nil client":       {nil, nil},
		"zero timeout":     {cli, []etcdlock.Option{etcdlock.WithRequestTimeout(0)}},
		"negative timeout": {cli, []etcdlock.Option{etcdlock.WithRequestTimeout(-time.Second)}},
		"negative skew":    {cli, []etcdlock.Option{etcdlock.WithClockSkew(-time.Second)}},
		"core option":      {cli, []etcdlock.Option{etcdlock.WithClientOptions(core.WithKeyPrefix(""))}},
		"replica ack":      {cli, []etcdlock.Option{etcdlock.WithClientOptions(core.WithReplicaAck(1, time.Second))}},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := etcdlock.New(tc.cli, tc.opts...); !errors.Is(err, core.ErrInvalidOption) || c != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

// A release in another process wakes a waiter at once: with a minute-long
// lease, only the watch gets the waiter in before a fair waiter's
// fallback poll (0.8 s to 1 s after it queued, at 50 ms: core's
// starvation guard queues it), and within three attempts (the first, the
// one that queues, the one the release wakes).
func TestNotifyWakesOtherProcess(t *testing.T) {
	ep := startEtcd(t)
	a, b := newClient(t, newCli(t, ep)), newClient(t, newCli(t, ep))
	ctx := ctxT(t)
	held, err := a.TryLock(ctx, "notify", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, "notify", core.WithRetryBudget(3), core.WithWaitTimeout(800*time.Millisecond))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter subscribes and sleeps
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

// An expiry passes the key on too: etcd deletes the key when its lease
// runs out, and the watch delivers the deletion. (The waiter queues after
// 50 ms and may poll once or twice meanwhile; that the expiry itself
// wakes the head is TestExpiryWakesHead.)
func TestNotifyOnExpiry(t *testing.T) {
	ep := startEtcd(t)
	a, b := newClient(t, newCli(t, ep)), newClient(t, newCli(t, ep))
	ctx := ctxT(t)
	held, err := a.TryLock(ctx, "expiry", core.WithTTL(time.Second), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Lock(ctx, "expiry", core.WithRetryBudget(6), core.WithWaitTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("the waiter was not woken by the expiry: %v", err)
	}
	defer l.Release(ctx)
	select {
	case <-held.Lost():
	default:
		t.Fatal("the waiter got the key while the holder was not told")
	}
	if l.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), held.Fence())
	}
}

// Fences are etcd revisions: they rise across keys, across deletions, and
// equal the key's create revision as etcd shows it.
func TestFenceIsRevision(t *testing.T) {
	ep := startEtcd(t)
	cli := newCli(t, ep)
	c := newClient(t, cli)
	ctx := ctxT(t)
	var last int64
	for i := range 6 {
		key := []string{"f1", "f2"}[i%2]
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d not above %d", l.Fence(), last)
		}
		last = l.Fence()
		resp, err := cli.Get(ctx, "latchkey:{"+key+"}")
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != l.Fence() {
			t.Fatalf("the key in etcd: %v %v, want create revision %d", resp, err, l.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A compaction does not take revisions back.
	if _, err := cli.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "f1")
	if err != nil || l.Fence() <= last {
		t.Fatalf("after compaction: fence %v, %v; want above %d", l, err, last)
	}
	l.Release(ctx)
}

// A re-entry or Extend asking for more than the etcd lease's TTL moves the
// key to a longer lease, keeping the fence; the old lease is revoked.
func TestLongerTTLMovesLease(t *testing.T) {
	ep := startEtcd(t)
	cli := newCli(t, ep)
	c := newClient(t, cli)
	ctx := ctxT(t)
	const key = "latchkey:{grow}"
	leaseOf := func() (clientv3.LeaseID, time.Duration) {
		t.Helper()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("Get: %v %v", resp, err)
		}
		id := clientv3.LeaseID(resp.Kvs[0].Lease)
		ttl, err := cli.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return id, time.Duration(ttl.GrantedTTL) * time.Second
	}
	l, err := c.TryLock(ctx, "grow", core.WithTTL(1500*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	first, granted := leaseOf()
	if granted != 2*time.Second {
		t.Fatalf("a TTL of 1.5 s granted %v, want 2 s (rounded up)", granted)
	}
	r, err := c.TryLock(ctx, "grow", core.WithToken(l.Token()), core.WithTTL(10*time.Second), core.WithMetadata("m"))
	if err != nil || r.Fence() != l.Fence() {
		t.Fatalf("re-entry: %v, fence %d want %d", err, r.Fence(), l.Fence())
	}
	second, granted := leaseOf()
	if second == first || granted != 10*time.Second {
		t.Fatalf("after re-entry: lease %x (was %x), TTL %v, want a new 10 s lease", second, first, granted)
	}
	if ttl, err := cli.TimeToLive(ctx, first); err != nil || ttl.TTL != -1 {
		t.Fatalf("the old lease: %+v %v, want revoked", ttl, err)
	}
	info, err := c.Inspect(ctx, "grow")
	if err != nil || info.Metadata != "m" || info.TTL < 8*time.Second {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if err := r.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if third, granted := leaseOf(); third == second || granted != 30*time.Second {
		t.Fatalf("after Extend: lease %x, TTL %v, want a new 30 s lease", third, granted)
	}
	if err := r.Extend(ctx, time.Second); err != nil { // shorter: renews the 30 s lease
		t.Fatal(err)
	}
	if _, granted := leaseOf(); granted != 30*time.Second {
		t.Fatalf("a shorter Extend changed the lease's TTL to %v", granted)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, _ := cli.Get(ctx, key); len(resp.Kvs) != 0 {
		t.Fatal("the key survived its release")
	}
}

// A client wrapped by etcd's namespace package keeps every key under its
// prefix; listing strips it again.
func TestNamespace(t *testing.T) {
	ep := startEtcd(t)
	raw := newCli(t, ep)
	ns := newCli(t, ep)
	ns.KV = namespace.NewKV(ns.KV, "/app/")
	ns.Watcher = namespace.NewWatcher(ns.Watcher, "/app/")
	ns.Lease = namespace.NewLease(ns.Lease, "/app/")
	c := newClient(t, ns)
	ctx := ctxT(t)
	l, err := c.TryLock(ctx, "nsk")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := raw.Get(ctx, "/app/latchkey:{nsk}"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the key is not under the namespace: %v %v", resp, err)
	}
	n := 0
	for info, err := range c.Scan(ctx, "*") {
		if err != nil {
			t.Fatal(err)
		}
		if info.Key != "nsk" || !info.Held {
			t.Fatalf("Scan: %+v", info)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("Scan listed %d keys", n)
	}
	l.Release(ctx)
}

// Scan pages through more keys than one request reads.
func TestScanPages(t *testing.T) {
	ep := startEtcd(t)
	c := newClient(t, newCli(t, ep))
	ctx := ctxT(t)
	const n = 300 // above the page of 256
	var locks []*core.Lock
	for i := range n {
		l, err := c.TryLock(ctx, "page:"+strings.Repeat("k", 1+i%7)+string(rune('a'+i%26))+":"+time.Now().Format("150405.000000000"))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	seen := map[string]bool{}
	for info, err := range c.Scan(ctx, "page:*") {
		if err != nil {
			t.Fatal(err)
		}
		if seen[info.Key] {
			t.Fatalf("Scan listed %q twice", info.Key)
		}
		seen[info.Key] = true
	}
	if len(seen) != n {
		t.Fatalf("Scan listed %d of %d keys", len(seen), n)
	}
	for _, l := range locks {
		l.Release(ctx)
	}
}

// The leader of a three-member cluster is killed while two locks are held
// and each has a waiter. The holder of x talks to the leader alone: it can
// no longer renew, and must be told Lost before its waiter gets x. The
// holder of y talks to every member: it may keep y across the failover
// (then releases it) or lose it, but never while its waiter holds it. A
// referee reads each key through the surviving members all along: while a
// holder believes, etcd shows its token. Both waiters get in, with higher
// fences.
func TestLeaderKilled(t *testing.T) {
	ms := startCluster(t, 3)
	ctx := ctxT(t)
	var all []string
	for _, m := range ms {
		all = append(all, m.clientURL)
	}
	leader := leaderOf(t, ctx, ms)
	var others []string
	for _, m := range ms {
		if m != leader {
			others = append(others, m.clientURL)
		}
	}
	const ttl = 2 * time.Second
	holder := newClient(t, newCli(t, leader.clientURL))
	keeper := newClient(t, newCli(t, all...))
	lx, err := holder.TryLock(ctx, "x", core.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ly, err := keeper.TryLock(ctx, "y", core.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		l   *core.Lock
		err error
		at  time.Time
	}
	var released atomic.Bool // ly released by the test
	wait := func(key string) chan outcome {
		ch := make(chan outcome, 1)
		w := newClient(t, newCli(t, others...))
		go func() {
			// A call that reaches etcd mid-election may time out
			// (ErrUnavailable): the waiter asks again, as a caller would,
			// within the same 20 s.
			deadline := time.Now().Add(20 * time.Second)
			for {
				l, err := w.Lock(ctx, key, core.WithTTL(ttl), core.WithWaitTimeout(time.Until(deadline)))
				if errors.Is(err, core.ErrUnavailable) && time.Until(deadline) > time.Second {
					continue
				}
				ch <- outcome{l, err, time.Now()}
				return
			}
		}()
		return ch
	}
	wx, wy := wait("x"), wait("y")

	// The referee: a holder that still believes after a read was believing
	// during it, so etcd must have shown its token.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var violations atomic.Int64
	referee := newCli(t, others...)
	for key, l := range map[string]*core.Lock{"x": lx, "y": ly} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			believes := func() bool {
				select {
				case <-l.Lost():
					return false
				default:
					return !(key == "y" && released.Load())
				}
			}
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				resp, err := referee.Get(rctx, "latchkey:{"+key+"}")
				cancel()
				if err != nil {
					continue // no leader yet
				}
				if !believes() {
					continue
				}
				if len(resp.Kvs) == 0 || !strings.HasPrefix(string(resp.Kvs[0].Value), l.Token()+"|") {
					violations.Add(1)
					t.Errorf("%s: the holder believes, etcd shows %v", key, resp.Kvs)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	time.Sleep(300 * time.Millisecond) // the waiters subscribe
	killedAt := time.Now()
	leader.kill()
	t.Logf("killed the leader %s", leader.name)

	// x: the holder is cut off; it is told, then its waiter gets in.
	ox := <-wx
	if ox.err != nil {
		t.Fatalf("x's waiter: %v", ox.err)
	}
	select {
	case <-lx.Lost():
	default:
		t.Fatal("x's waiter got the key while its holder was not told")
	}
	if ox.l.Fence() <= lx.Fence() {
		t.Fatalf("x: fence %d after %d", ox.l.Fence(), lx.Fence())
	}
	t.Logf("x: holder lost (%v), waiter in %v after the kill, fence %d -> %d", lx.Err(), ox.at.Sub(killedAt), lx.Fence(), ox.l.Fence())

	// y: keep holding a while past the TTL, then release.
	time.Sleep(time.Until(killedAt.Add(2 * ttl)))
	select {
	case o := <-wy:
		if o.err != nil {
			t.Fatalf("y's waiter: %v", o.err)
		}
		select {
		case <-ly.Lost():
			t.Logf("y: the holder lost it in the failover (%v); waiter in %v after the kill", ly.Err(), o.at.Sub(killedAt))
		default:
			t.Fatal("y's waiter got the key while its holder was not told")
		}
		wy <- o
	default:
		select {
		case <-ly.Lost():
			t.Logf("y: the holder lost it (%v); the waiter is not in yet", ly.Err())
		default:
			t.Logf("y: the holder kept it across the failover")
		}
		released.Store(true)
		_ = ly.Release(ctx)
	}
	oy := <-wy
	if oy.err != nil {
		t.Fatalf("y's waiter: %v", oy.err)
	}
	if oy.l.Fence() <= ly.Fence() {
		t.Fatalf("y: fence %d after %d", oy.l.Fence(), ly.Fence())
	}
	for _, l := range []*core.Lock{ox.l, oy.l} {
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %s: %v", l.Key(), err)
		}
	}
	if violations.Load() > 0 {
		t.Fatalf("%d reads showed another holder while the holder believed", violations.Load())
	}
}

// leaderOf asks each member for its status and returns the leader.
func leaderOf(t *testing.T, ctx context.Context, ms []*member) *member {
	t.Helper()
	var endpoints []string
	for _, m := range ms {
		endpoints = append(endpoints, m.clientURL)
	}
	cli := newCli(t, endpoints...)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range ms {
			st, err := cli.Status(ctx, m.clientURL)
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return m
			}
		}
	}
	t.Fatal("no leader")
	return nil
}

// BenchmarkCycle: TryLock and Release, one after the other, on a
// single-member etcd on loopback (a Grant, two transactions and a Revoke,
// each a raft commit).
func BenchmarkCycle(b *testing.B) {
	ep := startEtcd(b)
	c := newClient(b, newCli(b, ep))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.TryLock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
