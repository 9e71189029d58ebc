package cronlock_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/cronlock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// wireHook holds back a node's Redis commands as a stalled link would:
// hold runs before each command (or pipeline) is sent and blocks as long as
// the link stalls; when it held, the command goes on without the caller's
// cancellation, as a command already on the wire reaches Redis whatever
// the caller does.
type wireHook struct {
	hold func(cmds []redis.Cmder) (held bool)
}

var _ redis.Hook = wireHook{}

func (h wireHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h wireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hold([]redis.Cmder{cmd}) {
			ctx = context.WithoutCancel(ctx)
		}
		return next(ctx, cmd)
	}
}

func (h wireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.hold(cmds) {
			ctx = context.WithoutCancel(ctx)
		}
		return next(ctx, cmds)
	}
}

// claimKeyRE matches the Redis key of a tick's claim.
var claimKeyRE = regexp.MustCompile(`\{cron:.*:[0-9]+(\.[0-9]+)?\}:rec$`)

// isClaim tells whether cmd claims a tick: a script call or a SET on a
// claim's key.
func isClaim(cmd redis.Cmder) bool {
	args := cmd.Args()
	var key any
	switch cmd.Name() {
	case "evalsha", "eval":
		if len(args) > 3 {
			key = args[3]
		}
	case "set":
		if len(args) > 1 {
			key = args[1]
		}
	}
	s, _ := key.(string)
	return claimKeyRE.MatchString(s)
}

// TestLateClaimSkipped: node a runs the tick; node b fires it 100 ms
// later, but b's claim is held on the wire for 25 s — past the claim's TTL
// (the interval plus the default min hold: 20 s) and past the tick's window
// (the next fire time). Redis refuses it as late, b skips with SkipLate,
// and the tick runs once. Before claims were judged by Redis's clock
// against the window, b's SET NX found a's claim expired and ran the tick
// again.
func TestLateClaimSkipped(t *testing.T) {
	w, rdbA := newWorld(t)
	name := jobName(t)
	got := newRuns()
	tick := base.Add(10 * time.Second)

	rdbB := redis.NewClient(&redis.Options{Addr: w.mr.Addr()})
	t.Cleanup(func() { rdbB.Close() })
	var once sync.Once
	rdbB.AddHook(wireHook{hold: func(cmds []redis.Cmder) (held bool) {
		if isClaim(cmds[0]) {
			once.Do(func() { w.advanceTo(tick.Add(25 * time.Second)); held = true })
		}
		return held
	}})

	la, _, _ := newLocker(t, rdbA, "a", cronlock.WithClock(w.clock(0)))
	obs := &tickObs{}
	lb, _, logsB := newLocker(t, rdbB, "b", cronlock.WithClock(w.clock(0)), cronlock.WithObserver(obs))
	ja, err := la.Job(name, cron.Every(10*time.Second), got.fn("a"))
	if err != nil {
		t.Fatal(err)
	}
	jb, err := lb.Job(name, cron.Every(10*time.Second), got.fn("b"))
	if err != nil {
		t.Fatal(err)
	}
	w.advanceTo(tick)
	ja.Run()
	w.advanceTo(tick.Add(100 * time.Millisecond))
	jb.Run() // plans tick; its claim reaches Redis at tick+25s

	if ran := got.snapshot()[tick]; !slices.Equal(ran, []string{"a"}) {
		t.Fatalf("tick ran on %v, want only on a\n%s", ran, logsB)
	}
	_, res := obs.only(t)
	if res.Outcome != cronlock.OutcomeSkipped || res.Skip != cronlock.SkipLate || res.Err != nil {
		t.Errorf("b's tick ended %v/%v/%v, want skipped/late/nil", res.Outcome, res.Skip, res.Err)
	}
	if skips := logsB.find("skip"); len(skips) != 1 || skips[0].err != nil {
		t.Errorf("b did not log one skip:\n%s", logsB)
	}
}

// TestLastRunNeverGoesBack: the run of one tick loses its running lease
// (Redis lost the key) and goes on; the next tick runs on another node and
// records; then the first run ends. Its final record must not replace the
// newer one: LastRun keeps reporting the later tick. Before records were
// ordered by planned time, LastRun went back to the older tick.
func TestLastRunNeverGoesBack(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	first, second := base.Add(10*time.Second), base.Add(20*time.Second)

	started, finish := make(chan struct{}), make(chan struct{})
	la, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
	lb, _, _ := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)))
	ja, err := la.Job(name, cron.Every(10*time.Second), func(context.Context) error {
		close(started)
		<-finish // a long run that ignores its context
		return errors.New("stale run")
	})
	if err != nil {
		t.Fatal(err)
	}
	jb, err := lb.Job(name, cron.Every(10*time.Second), func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}

	w.advanceTo(first)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ja.Run()
	}()
	<-started
	w.mr.Del("latchkey:{cron:" + name + ":running}") // a's lease is gone
	w.advanceTo(second)
	jb.Run()

	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		r, err := la.LastRun(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if !r.Planned.Equal(second) || r.Node != "b" || r.Running || r.Error != "" {
			t.Errorf("%s: LastRun = %+v, want b's finished run of %v", when, r, second.Format("15:04:05"))
		}
	}
	check("after b's run")
	close(finish)
	<-done
	check("after a's stale run ended")
}
