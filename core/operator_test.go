package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scanAll collects what Scan yields, as "key kind count" lines, sorted.
func scanAll(t *testing.T, c *core.Client, match string) []string {
	t.Helper()
	var out []string
	for info, err := range c.Scan(context.Background(), match) {
		if err != nil {
			t.Fatalf("Scan(%q): %v", match, err)
		}
		switch {
		case info.Held:
			out = append(out, fmt.Sprintf("%s lock %s", info.Key, info.Metadata))
		default:
			out = append(out, fmt.Sprintf("%s %s %d", info.Key, info.Holds[0].Kind, len(info.Holds)))
		}
	}
	slices.Sort(out)
	return out
}

// TestScanAndEvict: Scan lists every held primitive once — a lock, a
// semaphore, a read-write lock read or written — and nothing released or
// stored as a record; Evict takes the holds away, raises the fences and
// the holders are told at their next renewal.
func TestScanAndEvict(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 30*time.Second)
		ttl := core.WithTTL(300 * time.Millisecond)
		lock, err := c.TryLock(ctx, "ops:lock", ttl, core.WithMetadata("node-a"))
		if err != nil {
			t.Fatal(err)
		}
		var permits []*core.Lock
		for range 2 {
			p, err := c.Semaphore("ops:sem", 3).TryAcquire(ctx, ttl)
			if err != nil {
				t.Fatal(err)
			}
			permits = append(permits, p)
		}
		r1, _ := c.RWMutex("ops:read").TryRLock(ctx)
		r2, _ := c.RWMutex("ops:read").TryRLock(ctx)
		w, err := c.RWMutex("ops:write").TryLock(ctx)
		if err != nil || r1 == nil || r2 == nil {
			t.Fatal(err)
		}
		gone, _ := c.TryLock(ctx, "ops:gone")
		gone.Release(ctx)
		if err := c.Records().Set(ctx, "ops:record", "v", time.Minute); err != nil {
			t.Fatal(err)
		}
		defer r1.Release(ctx)
		defer r2.Release(ctx)
		defer w.Release(ctx)

		want := []string{"ops:lock lock node-a", "ops:read read 2", "ops:sem permit 2", "ops:write write 1"}
		if got := scanAll(t, c, "ops:*"); !slices.Equal(got, want) {
			t.Errorf("Scan:\n got  %q\n want %q", got, want)
		}
		if got := scanAll(t, c, "ops:s*"); !slices.Equal(got, want[2:3]) {
			t.Errorf("Scan(ops:s*): %q", got)
		}
		for _, err := range c.Scan(ctx, "[") {
			if !errors.Is(err, core.ErrInvalidOption) {
				t.Errorf("Scan with a bad pattern: %v", err)
			}
		}

		info, err := c.Evict(ctx, "ops:lock")
		if err != nil || !info.Held || info.Token != lock.Token() {
			t.Fatalf("Evict: %+v, %v", info, err)
		}
		if _, err := c.Evict(ctx, "ops:sem"); err != nil {
			t.Fatal(err)
		}
		for _, l := range append([]*core.Lock{lock}, permits...) {
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the evicted holder was not told", l.Key())
			}
		}
		next, err := c.TryLock(ctx, "ops:lock")
		if err != nil {
			t.Fatalf("the lock after its eviction: %v", err)
		}
		if next.Fence() <= lock.Fence()+1 {
			t.Errorf("fence %d after the eviction of fence %d: want it raised by the eviction too", next.Fence(), lock.Fence())
		}
		next.Release(ctx)
		if _, err := c.Evict(ctx, "ops:nothing"); !errors.Is(err, core.ErrNotHeld) {
			t.Errorf("Evict of a free key: %v, want ErrNotHeld", err)
		}
		if got := scanAll(t, c, "ops:*"); !slices.Equal(got, []string{"ops:read read 2", "ops:write write 1"}) {
			t.Errorf("Scan after the evictions: %q", got)
		}
	})
}

// TestScanPrefixes: a Client lists the keys of its own prefix only.
func TestScanPrefixes(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, rdb redis.UniversalClient) {
		if rdb == nil {
			t.Skip("one memory store per Client")
		}
		ctx := ctxFor(t, 10*time.Second)
		pa := redistest.Prefix(t, rdb)
		pb := pa + "*" // a glob character: matched literally
		t.Cleanup(func() { redistest.CleanPrefix(t, rdb, pb) })
		a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(pa)))
		b := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(pb)))
		defer a.Close()
		defer b.Close()
		la, _ := a.TryLock(ctx, "x")
		lb, _ := b.TryLock(ctx, "y")
		defer la.Release(ctx)
		defer lb.Release(ctx)
		if got := scanAll(t, a, ""); len(got) != 1 || !strings.HasPrefix(got[0], "x ") {
			t.Errorf("prefix a lists %q", got)
		}
		if got := scanAll(t, b, ""); len(got) != 1 || !strings.HasPrefix(got[0], "y ") {
			t.Errorf("prefix b lists %q", got)
		}
	})
}

// TestScanAndEvictRedlock: on Redlock a key held on every node is listed
// once, and Evict takes it from every node.
func TestScanAndEvictRedlock(t *testing.T) {
	var nodes []redis.UniversalClient
	for range 3 {
		_, rdb := redistest.Miniredis(t, true)
		nodes = append(nodes, rdb)
	}
	c := mustNew(core.NewRedlock(nodes))
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	// A TTL of 3 s: its first renewal comes a second in, after the checks
	// below. One that ran while Evict was under way could see the lease
	// gone from one node and still on a majority, and heal it there (as
	// after a node's restart), until its loss is found and the holder
	// releases it.
	l, err := c.TryLock(ctx, "rl", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, c, ""); !slices.Equal(got, []string{"rl lock "}) {
		t.Errorf("Scan: %q", got)
	}
	if _, err := c.Evict(ctx, "rl"); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if v, _ := n.Exists(ctx, "latchkey:{rl}").Result(); v != 0 {
			t.Errorf("node %d still holds the lease", i)
		}
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted holder was not told")
	}
}

// TestInspectWaitAges: Inspect tells how long the first queued waiter of a
// lock, a semaphore and a read-write lock has waited.
func TestInspectWaitAges(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c, w := newClient(), newClient()
		defer c.Close()
		defer w.Close()
		ctx := ctxFor(t, 20*time.Second)
		lock, err := c.TryLock(ctx, "age")
		if err != nil {
			t.Fatal(err)
		}
		permit, _ := c.Semaphore("age", 1).TryAcquire(ctx)
		reader, _ := c.RWMutex("age").TryRLock(ctx)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{}, 3)
		go func() { w.Lock(wctx, "age", core.WithFair()); done <- struct{}{} }()
		go func() { w.Semaphore("age", 1).Acquire(wctx, core.WithFair()); done <- struct{}{} }()
		go func() { w.RWMutex("age").Lock(wctx); done <- struct{}{} }()
		waitUntil(t, "three waiters queued", func() bool {
			info, err := c.Inspect(ctx, "age")
			return err == nil && info.Waiters == 1 && info.PermitWaiters == 1 && info.WritersWaiting == 1
		})
		time.Sleep(100 * time.Millisecond)
		info, err := c.Inspect(ctx, "age")
		if err != nil {
			t.Fatal(err)
		}
		for what, age := range map[string]time.Duration{
			"lock": info.OldestWait, "permit": info.PermitOldestWait, "writer": info.WriterOldestWait,
		} {
			if age < 100*time.Millisecond || age > 15*time.Second {
				t.Errorf("the %s waiter has waited %v by Inspect, want at least the 100 ms slept", what, age)
			}
		}
		var scanned int
		for i, err := range c.Scan(ctx, "age") {
			if err != nil {
				t.Fatal(err)
			}
			if i.OldestWait+i.PermitOldestWait+i.WriterOldestWait < 100*time.Millisecond {
				t.Errorf("Scan's entry has no wait age: %+v", i)
			}
			scanned++
		}
		if scanned != 3 {
			t.Errorf("Scan listed %d entries for the key, want 3 (lock, semaphore, read-write lock)", scanned)
		}
		stop()
		for range 3 {
			<-done
		}
		lock.Release(ctx)
		permit.Release(ctx)
		reader.Release(ctx)
		info, err = c.Inspect(ctx, "age")
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters+info.PermitWaiters+info.WritersWaiting != 0 || info.OldestWait+info.PermitOldestWait+info.WriterOldestWait != 0 {
			t.Errorf("after the waiters gave up: %+v", info)
		}
	})
}

// TestScanEveryKeyAndRecords: the default match lists keys with a '/'
// too, and Records.Scan lists the record keys under a prefix, nothing
// else (no leases, no other records).
func TestScanEveryKeyAndRecords(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 10*time.Second)
		lk, err := c.TryLock(ctx, "tenant/7:job", core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Release(ctx)
		for _, m := range []string{"", "*"} {
			if got := scanAll(t, c, m); !slices.Equal(got, []string{"tenant/7:job lock "}) {
				t.Errorf("Scan(%q) = %q, want the key with a slash", m, got)
			}
		}
		recs := c.Records()
		for _, k := range []string{"rs:a:last", "rs:b/c:last", "other:x"} {
			if err := recs.Set(ctx, k, "v", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := recs.SetIfNewer(ctx, "rs:d:last", "v", 5, time.Minute); err != nil {
			t.Fatal(err)
		}
		var got []string
		for k, err := range recs.Scan(ctx, "rs:") {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, k)
		}
		slices.Sort(got)
		if want := []string{"rs:a:last", "rs:b/c:last", "rs:d:last"}; !slices.Equal(got, want) {
			t.Errorf("Records.Scan(rs:) = %q, want %q", got, want)
		}
	})
}
