package cronlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// Node a fires the tick on time; its claim runs on Redis, the answer is
// lost, and go-redis sends the claim again (MaxRetries, 3 by default).
// The claim found a's own claim and said it was taken: a skipped, b
// (2 s behind, within the bound) found the claim taken too, and the tick
// ran on no node (review 15). A claim now knows its own id.
func TestLostClaimAnswerStillRuns(t *testing.T) {
	w, direct := newWorld(t)
	p := faultnet.Start(t, w.mr.Addr())
	rdbA := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis's default retries
	t.Cleanup(func() { rdbA.Close() })
	name := jobName(t)
	r := newRuns()
	la, _, logsA := newLocker(t, rdbA, "a", cronlock.WithClock(w.clock(0)))
	lb, _, logsB := newLocker(t, direct, "b", cronlock.WithClock(w.clock(-2*time.Second)))
	ja := mustJob(t, la, name, cron.Every(10*time.Second), r.fn("a"))
	jb := mustJob(t, lb, name, cron.Every(10*time.Second), r.fn("b"))

	// The claim script is loaded first: the armed call is the claim itself.
	mustJob(t, la, name+".warm", cron.Every(10*time.Second), func(context.Context) error { return nil }).Run()
	planned := base.Add(10 * time.Second)
	w.advanceTo(planned)
	lost := p.LoseAnswer([]byte("cron:" + name + ":" + strconv.FormatInt(planned.Unix(), 10)))
	ja.Run()
	w.advanceTo(planned.Add(2 * time.Second))
	jb.Run()
	if lost() != 1 {
		t.Fatal("no answer was lost: the case under test did not arise")
	}
	if got := r.snapshot(); len(got[planned]) != 1 {
		t.Fatalf("tick %v ran on %v, want exactly one node\nlogs a:\n%s\nlogs b:\n%s", planned, got[planned], logsA, logsB)
	}
}
