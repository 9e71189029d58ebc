package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// gateHook holds every single command whose first argument is "echo"
// until open is closed, and records what reached the server, single or in
// a pipeline.
type gateHook struct {
	open     chan struct{}
	slowPipe time.Duration // each pipeline waits this long first

	mu     sync.Mutex
	single []string
	piped  [][]string
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "echo" {
			<-h.open
		}
		if !probed(cmd) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.single = append(h.single, argString(cmd))
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var p []string
		for _, c := range cmds {
			if probed(c) {
				p = append(p, argString(c))
			}
		}
		if p == nil {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.piped = append(h.piped, p)
		h.mu.Unlock()
		time.Sleep(h.slowPipe)
		return next(ctx, cmds)
	}
}

// probed: the tests' own commands, not the connection's set-up.
func probed(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "echo", "get", "set":
		return true
	}
	return false
}

func argString(cmd redis.Cmder) string {
	a := cmd.Args()
	return cmd.Name() + " " + toString(a[len(a)-1])
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	}
	return "?"
}

func newGated(t *testing.T, lanes int) (*coalescer, *gateHook) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &gateHook{open: make(chan struct{})}
	rdb.AddHook(h)
	return &coalescer{rdb: rdb, lanes: lanes}, h
}

// waitQueued waits until n commands queue in c.
func waitQueued(t *testing.T, c *coalescer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.queue)
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commands queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitBusy waits until one caller holds c's lane.
func waitBusy(t *testing.T, c *coalescer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		b := c.busy
		c.mu.Unlock()
		if b == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no caller holds the lane")
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller with a lane free sends its command alone and at once; callers
// beyond the lanes go out in one pipeline when a lane frees, and each gets
// its own answer.
func TestCoalescerPipelinesWhatQueues(t *testing.T) {
	c, h := newGated(t, 1)
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { held <- c.Process(ctx, redis.NewStringCmd(ctx, "echo", "first")) }()
	waitQueued(t, c, 0)
	waitBusy(t, c) // the first holds the only lane, at the gate
	const n = 8
	cmds := make([]*redis.StringCmd, n)
	var wg sync.WaitGroup
	for i := range cmds {
		cmds[i] = redis.NewStringCmd(ctx, "get", "k"+strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Process(ctx, cmds[i])
		}()
	}
	waitQueued(t, c, n)
	close(h.open)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, cmd := range cmds {
		if !errors.Is(cmd.Err(), redis.Nil) {
			t.Errorf("command %d: err %v, want redis.Nil", i, cmd.Err())
		}
	}
	if len(h.single) != 1 || h.single[0] != "echo first" {
		t.Errorf("single commands %q, want only the first", h.single)
	}
	if len(h.piped) != 1 || len(h.piped[0]) != n {
		t.Errorf("pipelines %q, want one of %d", h.piped, n)
	}
	c.mu.Lock()
	if c.busy != 0 || len(c.queue) != 0 {
		t.Errorf("busy %d, queued %d after all answered", c.busy, len(c.queue))
	}
	c.mu.Unlock()
}

// A queued caller whose ctx ends before its command was taken leaves the
// queue with ctx's cause, its command never sent.
func TestCoalescerQueuedCallerLeaves(t *testing.T) {
	c, h := newGated(t, 1)
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { held <- c.Process(ctx, redis.NewStringCmd(ctx, "echo", "first")) }()
	waitBusy(t, c)
	cause := errors.New("caller gave up")
	lctx, cancel := context.WithCancelCause(ctx)
	left := make(chan error, 1)
	go func() { left <- c.Process(lctx, redis.NewStringCmd(lctx, "set", "gone", "x")) }()
	stay := redis.NewStringCmd(ctx, "set", "kept", "y")
	stayed := make(chan error, 1)
	waitQueued(t, c, 1)
	go func() { stayed <- c.Process(ctx, stay) }()
	waitQueued(t, c, 2)
	cancel(cause)
	if err := <-left; !errors.Is(err, cause) {
		t.Fatalf("the leaving caller got %v, want its ctx's cause", err)
	}
	close(h.open)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-stayed; err != nil {
		t.Fatal(err)
	}
	for _, s := range h.single {
		if s == "set x" {
			t.Fatalf("the leaving caller's command was sent: %q", h.single)
		}
	}
	for _, p := range h.piped {
		for _, s := range p {
			if s == "set x" {
				t.Fatalf("the leaving caller's command was sent: %q", h.piped)
			}
		}
	}
	if v, err := c.rdb.Exists(ctx, "gone").Result(); err != nil || v != 0 {
		t.Errorf("EXISTS gone = %d, %v; want 0", v, err)
	}
	if v, err := c.rdb.Get(ctx, "kept").Result(); err != nil || v != "y" {
		t.Errorf("GET kept = %q, %v; want y", v, err)
	}
}

// A caller whose command a pipeline took waits for its answer even when
// its ctx ends meanwhile: it must know what the command did. The
// pipeline lasts until the latest deadline among its callers'.
func TestCoalescerTakenCallerWaits(t *testing.T) {
	c, h := newGated(t, 1)
	h.slowPipe = 400 * time.Millisecond
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- c.Process(ctx, redis.NewStringCmd(ctx, "echo", "first")) }()
	waitBusy(t, c)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	short := redis.NewStatusCmd(sctx, "set", "b", "2")
	long := redis.NewStatusCmd(lctx, "set", "c", "3")
	errs := make(chan error, 2)
	go func() { errs <- c.Process(lctx, long) }() // it leads the pipeline
	waitQueued(t, c, 1)
	go func() { errs <- c.Process(sctx, short) }()
	waitQueued(t, c, 2)
	close(h.open) // taken at once; the pipeline answers after short's deadline
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("%v (short: %v, long: %v)", err, short.Err(), long.Err())
		}
	}
	if sctx.Err() == nil {
		t.Fatal("the pipeline answered before the short deadline: the test proves nothing")
	}
	if short.Val() != "OK" || long.Val() != "OK" {
		t.Errorf("replies %q, %q; want OK, OK", short.Val(), long.Val())
	}
}

// pipeCount counts the commands that went out in pipelines.
type pipeCount struct{ piped atomic.Int64 }

func (h *pipeCount) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				h.piped.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// Many goroutines of one Client taking and releasing a few keys share
// pipelines, and the locks keep their promises: one holder per key at a
// time, fences strictly rising per key.
func TestCoalescedLocksExclude(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	h := &pipeCount{}
	rdb.AddHook(h)
	c, err := NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.be.(*redisBackend).hot.(*coalescer); !ok {
		t.Fatal("a Client on a *redis.Client does not coalesce")
	}
	const keys, workers, cycles = 4, 16, 60
	var holders [keys]atomic.Int32
	var fences [keys]struct {
		sync.Mutex
		last int64
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cycles {
				k := (w + i) % keys
				l, err := c.Lock(ctx, "k"+strconv.Itoa(k), WithWaitTimeout(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
				if n := holders[k].Add(1); n != 1 {
					errs <- fmt.Errorf("key %d: %d holders at once", k, n)
				}
				fences[k].Lock()
				if l.Fence() <= fences[k].last {
					errs <- fmt.Errorf("key %d: fence %d after %d", k, l.Fence(), fences[k].last)
				}
				fences[k].last = l.Fence()
				fences[k].Unlock()
				holders[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if h.piped.Load() == 0 {
		t.Error("no script went out in a pipeline: the test did not exercise the coalescer")
	}
	t.Logf("%d scripts pipelined", h.piped.Load())
}

// lapsing is a context whose deadline has passed though it does not say
// so yet (its Err is nil): the moment between a caller's check of its
// context and the command's write.
type lapsing struct{ context.Context }

func (lapsing) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A batch's command whose caller's context ended before it went out is
// not sent and says so (unsentError: a release then goes out on its own);
// one whose deadline lapses as it goes out is sent all the same — never
// failed before it was written, which would leave it neither sent nor
// unsent, and a release dropped. From the review of the coalescer.
func TestCoalescerSendsOrMarksUnsent(t *testing.T) {
	mr := miniredis.RunT(t)
	// The calls' deadlines bound their reads and writes.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	bg := context.Background()
	// A connection dialled already: a lapsing command has sendGrace (20
	// ms) to go out and be answered, which a dial on a loaded machine
	// (the race detector, other packages' tests) can eat up. It failed so
	// once in a full run.
	if err := rdb.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(bg)
	cancel()
	for _, tc := range []struct {
		name string
		ctxs []context.Context
	}{
		{"alone, lapsing", []context.Context{lapsing{bg}}},
		{"leader ended", []context.Context{ended, lapsing{bg}}},
		{"follower ended", []context.Context{lapsing{bg}, ended, lapsing{bg}}},
		{"all ended", []context.Context{ended, ended}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr.FlushAll()
			c := &coalescer{rdb: rdb, lanes: 1, busy: 1} // the lane the batch's leader took
			var batch []*queued
			for i, ctx := range tc.ctxs {
				batch = append(batch, &queued{ctx: ctx, cmd: redis.NewStatusCmd(ctx, "set", fmt.Sprint("k", i), "1"), turn: make(chan []*queued, 1)})
			}
			c.send(batch)
			for i, q := range batch {
				reached, err := mr.Exists(fmt.Sprint("k", i)), q.cmd.Err()
				if q.ctx == ended {
					if !unsent(err) || reached {
						t.Errorf("command %d, its context ended before it went out: %v, reached the server %v; want unsent, not reached", i, err, reached)
					}
					continue
				}
				if err != nil || !reached {
					t.Errorf("command %d, its deadline lapsing as it went out: %v, reached the server %v; want sent", i, err, reached)
				}
			}
			if c.busy != 0 {
				t.Errorf("lanes busy after the batch: %d", c.busy)
			}
		})
	}
}

// A batch that mixes callers with and without a deadline sends them as
// two pipelines: the leader, which has a deadline, sends the first and
// returns; the second, unbounded, goes to the first caller without one,
// with the lane.
func TestCoalescerSplitsUnboundedCallers(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	bg := context.Background()
	bounded, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	c := &coalescer{rdb: rdb, lanes: 1, busy: 1}
	mk := func(ctx context.Context, key string) *queued {
		return &queued{ctx: ctx, cmd: redis.NewStatusCmd(ctx, "set", key, "1"), turn: make(chan []*queued, 1)}
	}
	batch := []*queued{mk(bounded, "a"), mk(bg, "b"), mk(bounded, "c"), mk(bg, "d")}
	c.send(batch)
	if !mr.Exists("a") || !mr.Exists("c") || mr.Exists("b") || mr.Exists("d") {
		t.Fatalf("after the leader's pipeline: a %v, b %v, c %v, d %v; want a and c only", mr.Exists("a"), mr.Exists("b"), mr.Exists("c"), mr.Exists("d"))
	}
	if got := <-batch[2].turn; got != nil {
		t.Fatalf("the bounded follower got a batch to lead: %d commands", len(got))
	}
	var second []*queued
	select {
	case second = <-batch[1].turn:
	default:
		t.Fatal("the first caller without a deadline was not handed the second pipeline")
	}
	if len(second) != 2 || second[0] != batch[1] || second[1] != batch[3] {
		t.Fatalf("the second pipeline: %d commands, want b and d", len(second))
	}
	if c.busy != 1 {
		t.Fatalf("lanes busy %d before the second pipeline, want 1 (it goes with it)", c.busy)
	}
	c.send(second)
	if !mr.Exists("b") || !mr.Exists("d") || c.busy != 0 {
		t.Fatalf("after the second pipeline: b %v, d %v, lanes busy %d", mr.Exists("b"), mr.Exists("d"), c.busy)
	}
	if got := <-batch[3].turn; got != nil {
		t.Fatal("the second pipeline's follower got a batch to lead")
	}
	for i, q := range batch {
		if err := q.cmd.Err(); err != nil {
			t.Errorf("command %d: %v", i, err)
		}
	}
}
