package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// This example takes a lock on a Redis server, runs the critical section
// and releases it. miniredis stands in for the server.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locks, err := core.NewRedis(rdb, core.WithKeyPrefix("shop"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	err = locks.Do(ctx, "sku:42", func(ctx context.Context) error {
		// Only one process runs this at a time. ctx is cancelled if the
		// lock is lost.
		fmt.Println("deducting stock for sku:42")
		return nil
	}, core.WithTTL(10*time.Second), core.WithWaitTimeout(2*time.Second))
	fmt.Println("err:", err)
	// Output:
	// deducting stock for sku:42
	// err: <nil>
}

// This example shows TryLock failing on a held key, and the fence rising.
func ExampleClient_TryLock() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	first, _ := locks.TryLock(ctx, "report:daily")
	_, err = locks.TryLock(ctx, "report:daily")
	fmt.Println("second attempt:", errors.Is(err, core.ErrNotAcquired))
	first.Release(ctx)

	again, _ := locks.TryLock(ctx, "report:daily")
	fmt.Println("fence rose:", again.Fence() > first.Fence())
	again.Release(ctx)
	// Output:
	// second attempt: true
	// fence rose: true
}

// This example waits for a held key, bounded by a wait timeout; the error
// carries both the contention and its cause.
func ExampleClient_Lock() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	holder, _ := locks.TryLock(ctx, "invoice:7")
	defer holder.Release(ctx)

	_, err = locks.Lock(ctx, "invoice:7", core.WithWaitTimeout(50*time.Millisecond))
	fmt.Println(errors.Is(err, core.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

// This example runs a callback under the lock; a nested lock call of the
// same key with the callback's context re-enters the lease.
func ExampleClient_Do() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	err = locks.Do(context.Background(), "account:9", func(ctx context.Context) error {
		inner, err := locks.TryLock(ctx, "account:9") // re-enters, no deadlock
		if err != nil {
			return err
		}
		defer inner.Release(ctx)
		fmt.Println("nested hold, fence", inner.Fence())
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// nested hold, fence 1
	// err: <nil>
}

// This example passes the fence with a write so the store can reject a
// writer whose lease expired while it paused.
func ExampleLock_Fence() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	var lastFence int64 // kept by the store, next to the data
	write := func(fence int64, v string) error {
		if fence <= lastFence {
			return fmt.Errorf("stale write %q rejected (fence %d <= %d)", v, fence, lastFence)
		}
		lastFence = fence
		return nil
	}

	slow, _ := locks.TryLock(ctx, "doc:1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	<-slow.Lost()                       // the holder paused past its TTL
	fast, _ := locks.Lock(ctx, "doc:1") // free once the server's expiry passes
	fmt.Println(write(fast.Fence(), "new"))
	fmt.Println(write(slow.Fence(), "old"))
	fast.Release(ctx)
	// Output:
	// <nil>
	// stale write "old" rejected (fence 1 <= 2)
}

// This example watches for the loss of a lease.
func ExampleLock_Lost() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	l, _ := locks.TryLock(ctx, "job:1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	select {
	case <-l.Lost():
		fmt.Println(errors.Is(l.Err(), core.ErrLost))
	case <-time.After(time.Second):
		fmt.Println("still held")
	}
	// Output: true
}

// This example extends a lease by hand.
func ExampleLock_Extend() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	l, _ := locks.TryLock(ctx, "batch:3", core.WithTTL(time.Second), core.WithAutoRenew(false))
	fmt.Println(l.Extend(ctx, time.Minute))
	l.Release(ctx)
	fmt.Println(errors.Is(l.Extend(ctx, time.Minute), core.ErrNotHeld))
	// Output:
	// <nil>
	// true
}

// This example shows who holds a key.
func ExampleClient_Inspect() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	l, _ := locks.TryLock(ctx, "settlement", core.WithMetadata("node-a/pid-4242"))
	defer l.Release(ctx)
	info, _ := locks.Inspect(ctx, "settlement")
	fmt.Println(info.Held, info.Metadata, info.Fence)
	// Output: true node-a/pid-4242 1
}

// This example hands a lease to another process, which re-enters it with
// the token.
func ExampleWithToken() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	l, _ := locks.TryLock(ctx, "migration")
	token := l.Token() // sent to the other process

	same, err := locks.TryLock(ctx, "migration", core.WithToken(token))
	fmt.Println(err, same.Fence() == l.Fence())
	same.Release(ctx) // frees the shared lease
	// Output: <nil> true
}

// This example reads the fence inside Do, to send with the writes the
// callback makes.
func ExampleFenceFromContext() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	locks.Do(context.Background(), "ledger:7", func(ctx context.Context) error {
		fence, ok := core.FenceFromContext(ctx)
		fmt.Println(fence, ok)
		return nil // e.g. UPDATE ... SET fence = $fence WHERE fence < $fence
	})
	_, ok := core.FenceFromContext(context.Background())
	fmt.Println(ok)
	// Output:
	// 1 true
	// false
}

// This example claims one tick of a scheduled job: the first claim of the
// tick wins, any later one is told it was taken, and a claim that arrives
// after the tick's window is refused as late.
func ExampleClient_Records() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	recs := locks.Records()

	planned := time.Now().Truncate(time.Minute)
	v1, _ := recs.ClaimWithin(ctx, "report:"+planned.Format("15:04"), "node-a", time.Minute, planned, time.Minute)
	v2, _ := recs.ClaimWithin(ctx, "report:"+planned.Format("15:04"), "node-b", time.Minute, planned, time.Minute)
	old := planned.Add(-time.Hour)
	v3, _ := recs.ClaimWithin(ctx, "report:"+old.Format("15:04"), "node-c", time.Minute, old, time.Minute)
	fmt.Println(v1, v2, v3)
	// Output: claimed taken late
}

// This example limits a report export to two at a time across every
// process that shares the Redis: a third caller waits for a permit.
func ExampleClient_Semaphore() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	client, err := core.NewRedis(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	exports := client.Semaphore("exports", 2)
	ctx := context.Background()
	a, _ := exports.TryAcquire(ctx)
	b, _ := exports.TryAcquire(ctx)
	_, err = exports.TryAcquire(ctx)
	fmt.Println("third while two run:", errors.Is(err, core.ErrNotAcquired))

	go func() {
		time.Sleep(10 * time.Millisecond)
		a.Release(ctx) // wakes the waiter below
	}()
	err = exports.Do(ctx, func(ctx context.Context) error {
		fence, _ := core.FenceFromContext(ctx)
		fmt.Println("third runs, fence above the first two:", fence > b.Fence())
		return nil
	}, core.WithWaitTimeout(3*time.Second))
	fmt.Println("err:", err)
	b.Release(ctx)
	// Output:
	// third while two run: true
	// third runs, fence above the first two: true
	// err: <nil>
}

// This example elects a leader among two nodes: the first campaigner
// leads, an observer sees it and its announcement, and when it resigns the
// second takes over.
func ExampleClient_Campaign() {
	client, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	leaders := client.Observe(ctx, "scheduler")
	fmt.Println("leader at start:", (<-leaders).Held)

	a, _ := client.Campaign(ctx, "scheduler", "node-a:8080")
	info := <-leaders
	fmt.Println("leader:", info.Metadata)

	next := make(chan *core.Lock)
	go func() {
		b, _ := client.Campaign(ctx, "scheduler", "node-b:8080") // waits for a's term to end
		next <- b
	}()
	time.Sleep(10 * time.Millisecond)
	a.Release(ctx) // resign
	b := <-next
	for info = <-leaders; !info.Held; info = <-leaders {
	}
	fmt.Println("leader:", info.Metadata, "term after a's:", b.Fence() > a.Fence())
	b.Release(ctx)
	// Output:
	// leader at start: false
	// leader: node-a:8080
	// leader: node-b:8080 term after a's: true
}

// This example moves money between two accounts under both accounts'
// locks: a transfer the other way, asking for the keys in the opposite
// order, waits instead of deadlocking.
func ExampleClient_LockAll() {
	client, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	g, err := client.LockAll(ctx, []string{"account:7", "account:3"}, core.WithWaitTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range g.Locks() {
		fmt.Println("holding", l.Key())
	}
	_, err = client.TryLockAll(ctx, []string{"account:3", "account:9"})
	fmt.Println("other transfer now:", errors.Is(err, core.ErrNotAcquired))
	g.Release(ctx)
	g2, err := client.TryLockAll(ctx, []string{"account:3", "account:9"})
	fmt.Println("after release:", err)
	g2.Release(ctx)
	// Output:
	// holding account:3
	// holding account:7
	// other transfer now: true
	// after release: <nil>
}

// This example shares a configuration between readers and one writer:
// readers hold the lock together; the writer waits for them, and readers
// that come while it waits queue behind it.
func ExampleClient_RWMutex() {
	client, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	cfg := client.RWMutex("config")

	r1, _ := cfg.RLock(ctx)
	r2, _ := cfg.RLock(ctx)
	fmt.Println("two readers share it")
	_, err = cfg.TryLock(ctx)
	fmt.Println("writer while read:", errors.Is(err, core.ErrNotAcquired))

	go func() {
		time.Sleep(10 * time.Millisecond)
		r1.Release(ctx)
		r2.Release(ctx)
	}()
	w, err := cfg.Lock(ctx, core.WithWaitTimeout(3*time.Second))
	fmt.Println("writer in after the readers:", err == nil, "fence raised:", w.Fence() > r1.Fence())
	w.Release(ctx)
	// Output:
	// two readers share it
	// writer while read: true
	// writer in after the readers: true fence raised: true
}

// This example lists what is held, as an operator's tool does, and evicts
// a stuck holder: it is told at its next renewal, and its fence is below
// every later holder's.
func ExampleClient_Scan() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	stuck, _ := locks.TryLock(ctx, "billing:close-day", core.WithMetadata("node-a"), core.WithTTL(300*time.Millisecond))
	permit, _ := locks.Semaphore("exports", 4).TryAcquire(ctx, core.WithMetadata("node-b"))
	defer permit.Release(ctx)

	for info, err := range locks.Scan(ctx, "*") {
		if err != nil {
			log.Fatal(err)
		}
		if info.Held {
			fmt.Println(info.Key, "lock held by", info.Metadata)
		}
		for _, h := range info.Holds {
			fmt.Println(info.Key, h.Kind, "held by", h.Metadata)
		}
	}

	if _, err := locks.Evict(ctx, "billing:close-day"); err != nil {
		log.Fatal(err)
	}
	<-stuck.Lost() // at its next renewal
	fmt.Println("evicted:", errors.Is(stuck.Err(), core.ErrLost))
	// Unordered output:
	// billing:close-day lock held by node-a
	// exports permit held by node-b
	// evicted: true
}

// This example turns sharded pub/sub on for a Client (every Client sharing
// keys must do the same). The server here, miniredis, has no sharded
// pub/sub, as Redis before 7: the Client falls back to classic pub/sub by
// itself. The queued waiter (WithFair) is woken by the grant the release
// sends it, well before its periodic check (10 s) would find it.
func ExampleWithShardedNotify() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locks, err := core.NewRedis(rdb, core.WithShardedNotify(true))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	held, err := locks.TryLock(ctx, "report", core.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = held.Release(ctx)
	}()
	l, err := locks.Lock(ctx, "report", core.WithFair(), core.WithWaitTimeout(5*time.Second))
	fmt.Println("granted:", err == nil)
	if err == nil {
		_ = l.Release(ctx)
	}
	// Output: granted: true
}
