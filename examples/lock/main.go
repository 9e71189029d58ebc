// Command lock shows the core lock: three nodes contend for one key and
// run one after another, each woken by the previous holder's release
// notification (the timestamps show it), and a fenced store rejects the
// write of a holder whose lease expired while it paused.
//
// With -trace, the locks are instrumented by package otel: every span is
// printed as a JSON line (OpenTelemetry's stdout exporter) as it ends, and
// the metrics are summed up at the end.
//
//	cd examples && go run ./lock                      # embedded miniredis
//	cd examples && go run ./lock -trace               # ... printing spans and metrics
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./lock
package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/examples/internal/demo"
)

func main() {
	env := demo.Start("examples/lock")
	defer env.Close()
	tel, rdb := env.Tel, env.Redis
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Three nodes, each with its own Client, as three processes would have.
	opts := []core.Option{core.WithKeyPrefix("demo")}
	if tel.Inst != nil {
		opts = append(opts, core.WithObserver(tel.Inst)) // one Instrumentation for all
	}
	var nodes []*core.Client
	for i := 0; i < 3; i++ {
		c, err := core.NewRedis(rdb, opts...)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		nodes = append(nodes, c)
	}

	// 1. Mutual exclusion with push wake-up: three nodes want to rebuild the
	// same search index at once. One runs; the others wait — asleep, not
	// polling — and each is woken by the previous holder's release
	// notification, so the runs follow each other back to back.
	start := time.Now()
	since := func() string { return fmt.Sprintf("+%3dms", time.Since(start).Milliseconds()) }
	var wg sync.WaitGroup
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(since()+" "+format+"\n", args...)
	}
	for i, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, span := tel.Tracer.Start(ctx, fmt.Sprintf("node %d: rebuild index", i))
			defer span.End()
			say("node %d asks for index:rebuild", i)
			err := c.Do(ctx, "index:rebuild", func(ctx context.Context) error {
				fence, _ := core.FenceFromContext(ctx)
				say("node %d holds index:rebuild (fence %d), rebuilding for 50ms", i, fence)
				time.Sleep(50 * time.Millisecond) // the work
				say("node %d done, releasing", i)
				return nil
			}, core.WithWaitTimeout(5*time.Second))
			if err != nil {
				say("node %d: %v", i, err)
			}
		}()
		time.Sleep(5 * time.Millisecond) // let the first one win, for a readable story
	}
	wg.Wait()
	fmt.Println("three rebuilds, never two at once; each waiter woke at the previous release")

	// 2. A holder pauses past its TTL; the fence stops its late write.
	ctx, span := tel.Tracer.Start(ctx, "fenced writes")
	defer span.End()
	store := &fencedStore{}
	slow, err := nodes[0].TryLock(ctx, "doc:1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		log.Fatal(err)
	}
	<-slow.Lost() // a GC pause, a swap storm: the lease is gone
	fmt.Println("node 0 lost doc:1:", slow.Err())
	fast, err := nodes[1].Lock(ctx, "doc:1", core.WithWaitTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node 1 writes:", store.write(fast.Fence(), "v2"))
	fmt.Println("node 0 writes late:", store.write(slow.Fence(), "v1"))
	fast.Release(ctx)

	info, _ := nodes[2].Inspect(ctx, "doc:1")
	fmt.Printf("doc:1 now: held=%v last fence=%d, store holds %q\n", info.Held, info.Fence, store.value)
}

// fencedStore accepts a write only with a fence above the last one.
type fencedStore struct {
	mu    sync.Mutex
	fence int64
	value string
}

func (s *fencedStore) write(fence int64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.fence {
		return fmt.Errorf("rejected: fence %d is not above %d", fence, s.fence)
	}
	s.fence, s.value = fence, v
	return nil
}
