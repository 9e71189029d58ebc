package cronlock_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// This example brings a node back after an outage: the daily report ran
// for May 5, then the fleet was down until May 9 at 10:00. The look-back
// that AddFunc schedules when the cron starts — here Locker.CatchUp, for a
// job made with Job — finds the reports of May 6 to 9 missed, and
// MissedRunAll(3) runs the latest three, oldest first, each with the day
// it is for and CatchUp set. May 6 stays missed.
func ExampleWithMissed() {
	client, err := core.NewMemory() // a single process; core.NewRedis for a fleet
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 5, 3, 0, 2, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithNodeID("node-a"), cronlock.WithLocation(time.UTC),
		cronlock.WithMissed(cronlock.MissedRunAll(3)), cronlock.WithObserver(missedPrinter{}),
		cronlock.WithClock(func() time.Time { return at }), cronlock.WithLogger(cron.DiscardLogger))
	if err != nil {
		log.Fatal(err)
	}
	daily, _ := cron.ParseStandard("0 3 * * *")
	job, _ := l.Job("report:daily", daily, func(ctx context.Context) error {
		t, _ := cronlock.TickFromContext(ctx)
		fmt.Println("report of", t.Planned.Format("Jan 2"), "catch-up:", t.CatchUp)
		return nil
	})
	job.Run() // the cron, at 03:00 on May 5

	at = time.Date(2031, 5, 9, 10, 0, 0, 0, time.UTC) // back, and the cron starts
	if err := l.CatchUp(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// report of May 5 catch-up: false
	// missed 4 ticks of report:daily (May 6 to May 9), catching up 3
	// report of May 7 catch-up: true
	// report of May 8 catch-up: true
	// report of May 9 catch-up: true
}

// missedPrinter is an Observer that prints the missed ticks it is told of.
type missedPrinter struct{}

func (missedPrinter) TickStart(ctx context.Context, _ cronlock.Tick) (context.Context, func(cronlock.TickResult)) {
	return ctx, func(cronlock.TickResult) {}
}

func (missedPrinter) TicksMissed(_ context.Context, m cronlock.MissedTicks) {
	fmt.Printf("missed %d ticks of %s (%s to %s), catching up %d\n", m.Count, m.Name,
		m.First.Format("Jan 2"), m.Last.Format("Jan 2"), m.CatchUp)
}

// This example runs the same tick on three nodes at once, six times: the
// node that ran the job least recently claims first (WithSpread, the
// default), so after the first two ticks the runs go round the nodes, and
// each runs two of the six.
func ExampleWithSpread() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	var mu sync.Mutex
	at := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	runs := map[string]int{}
	var jobs []cron.Job
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		client, err := core.NewRedis(rdb) // one per process
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		l, err := cronlock.New(client, cronlock.WithNodeID(node), cronlock.WithClock(clock), cronlock.WithLogger(cron.DiscardLogger))
		if err != nil {
			log.Fatal(err)
		}
		job, _ := l.Job("rollup", cron.Every(time.Minute), func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			runs[t.Node]++
			return nil
		})
		jobs = append(jobs, job)
	}
	for range 6 { // what the three crons do at each minute
		var wg sync.WaitGroup
		for _, job := range jobs {
			wg.Go(job.Run)
		}
		wg.Wait()
		mu.Lock()
		at = at.Add(time.Minute)
		mu.Unlock()
	}
	fmt.Println(runs)
	// Output: map[node-a:2 node-b:2 node-c:2]
}
