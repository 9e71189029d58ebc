package core_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
)

type reviewMark string

// reviewHook panics on a script whose ctx carries "boom" (single or, when
// the pipeline's ctx carries it, piped), and holds a script whose ctx
// carries "gate" until gate closes.
type reviewHook struct{ gate chan struct{} }

func (h *reviewHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *reviewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			if ctx.Value(reviewMark("boom")) != nil {
				panic("hook bug")
			}
			if ctx.Value(reviewMark("gate")) != nil {
				<-h.gate
			}
		}
		return next(ctx, cmd)
	}
}
func (h *reviewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(reviewMark("boom")) != nil {
			panic("hook bug (pipeline)")
		}
		return next(ctx, cmds)
	}
}

func reviewClient(t *testing.T) (*core.Client, *redis.Client, *reviewHook) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &reviewHook{gate: make(chan struct{})}
	rdb.AddHook(h)
	c, err := core.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb, h
}

func recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// A go-redis hook that panics (a bug, recovered by e.g. an HTTP server's
// per-request recovery) must not take the Client down: with the direct
// path each panic costs one call. With the coalescer each panic leaks a
// lane (busy++ with no deferred pass), and after three every later
// acquisition and release queues until its ctx ends.
func TestReviewHookPanicLeaksLane(t *testing.T) {
	c, _, _ := reviewClient(t)
	boom := context.WithValue(context.Background(), reviewMark("boom"), true)
	for i := range 3 {
		if p := recovered(func() { _, _ = c.TryLock(boom, "rv:boom:"+strconv.Itoa(i)) }); p == nil {
			t.Fatal("the hook did not panic")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.TryLock(ctx, "rv:after")
	if err != nil {
		t.Fatalf("a plain TryLock after three recovered hook panics: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// A pipeline hook's panic (on the leader's goroutine) leaves the batch's
// followers waiting on their turn forever, past their own ctx: they were
// taken, so they wait for an answer that never comes.
func TestReviewPipelineHookPanicStrandsFollowers(t *testing.T) {
	c, _, h := reviewClient(t)
	gate := context.WithValue(context.Background(), reviewMark("gate"), true)
	var wg sync.WaitGroup
	for i := range 3 { // fill the lanes
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.TryLock(gate, "rv:gate:"+strconv.Itoa(i)); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	boom := context.WithValue(context.Background(), reviewMark("boom"), true)
	wg.Add(1)
	go func() { // the leader of the next batch
		defer wg.Done()
		_ = recovered(func() { _, _ = c.TryLock(boom, "rv:leader") })
	}()
	time.Sleep(100 * time.Millisecond)
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { // a follower with a deadline
		l, err := c.TryLock(fctx, "rv:follower")
		if err == nil {
			_ = l.Release(context.Background())
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	close(h.gate)
	select {
	case err := <-done:
		t.Logf("follower returned: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("a follower with a 1s ctx has not returned 3s past its deadline (stranded on its turn)")
	}
	wg.Wait()
}
