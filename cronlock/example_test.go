package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// This example gives three nodes the same job for the 03:00 tick. Their
// clocks disagree by seconds and the job takes no time, yet it runs once:
// the first node to reach the tick claims it until after the next fire.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	tick := time.Date(2031, 5, 6, 3, 0, 0, 0, time.UTC)
	daily, _ := cron.ParseStandard("0 3 * * *")
	for _, n := range []struct {
		node string
		skew time.Duration
	}{{"node-a", 2 * time.Second}, {"node-b", 0}, {"node-c", -3 * time.Second}} {
		client, err := core.NewRedis(rdb) // one per process
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		l, err := cronlock.New(client, cronlock.WithNodeID(n.node), cronlock.WithLocation(time.UTC),
			cronlock.WithClock(func() time.Time { return tick.Add(n.skew + 5*time.Second) }))
		if err != nil {
			log.Fatal(err)
		}
		job, _ := l.Job("report:daily", daily, func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			fmt.Printf("%s builds the report of %s\n", t.Node, t.Planned.Format("2006-01-02 15:04"))
			return nil
		})
		job.Run() // what the node's cron does at 03:00 by its own clock
	}
	// Output:
	// node-a builds the report of 2031-05-06 03:00
}

// This example runs three cron.Cron instances, one Locker each, with the
// same "@every 1s" job until two ticks have passed: each tick ran on
// exactly one node.
func ExampleLocker_AddFunc() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	defer mrclock.Run(mr)() // let miniredis age keys in real time
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	var mu sync.Mutex
	ran := map[time.Time][]string{}
	two := make(chan struct{})
	var crons []*cron.Cron
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		client, err := core.NewRedis(rdb)
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		l, err := cronlock.New(client, cronlock.WithNodeID(node))
		if err != nil {
			log.Fatal(err)
		}
		c := cron.New()
		_, err = l.AddFunc(c, "@every 1s", "cleanup", func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			ran[t.Planned] = append(ran[t.Planned], t.Node)
			if len(ran) == 2 {
				close(two)
			}
			return nil
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		crons = append(crons, c)
		c.Start()
	}
	<-two
	for _, c := range crons {
		<-c.Stop().Done()
	}

	mu.Lock()
	defer mu.Unlock()
	var ticks []time.Time
	for t := range ran {
		ticks = append(ticks, t)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i, t := range ticks[:2] {
		fmt.Printf("tick %d ran on %d node(s)\n", i+1, len(ran[t]))
	}
	// Output:
	// tick 1 ran on 1 node(s)
	// tick 2 ran on 1 node(s)
}

// This example makes the cron.Job by hand and schedules it with an aligned
// schedule — what AddFunc does — then runs one tick as the cron would.
func ExampleLocker_Job() {
	client, err := core.NewMemory() // a single process; core.NewRedis for a fleet
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 7, 10, 0, 300_000_000, time.UTC)
	l, err := cronlock.New(client, cronlock.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}

	every := cron.Every(10 * time.Minute)
	job, err := l.Job("settle", every, func(ctx context.Context) error {
		t, _ := cronlock.TickFromContext(ctx)
		fmt.Println("settling the tick of", t.Planned.UTC().Format("15:04:05"))
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := cron.New()
	c.Schedule(cronlock.Aligned(every), job)

	job.Run() // the cron would call this at 07:10:00
	job.Run() // a second call for the same tick is skipped
	_, err = l.Job("bad\nname", every, nil)
	fmt.Println(errors.Is(err, cronlock.ErrInvalidName))
	// Output:
	// settling the tick of 07:10:00
	// true
}

// This example reads the record of a job's last run, written by whichever
// node ran it.
func ExampleLocker_LastRun() {
	client, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 3, 0, 1, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithNodeID("node-b"), cronlock.WithLogger(cron.DiscardLogger),
		cronlock.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	_, err = l.LastRun(ctx, "export")
	fmt.Println(errors.Is(err, cronlock.ErrNoRun))

	job, _ := l.Job("export", cron.Every(time.Hour), func(context.Context) error {
		return errors.New("bucket not found")
	})
	job.Run()
	run, _ := l.LastRun(ctx, "export")
	fmt.Println(run.Node, run.Planned.UTC().Format(time.RFC3339), run.Error)
	// Output:
	// true
	// node-b 2031-05-06T03:00:00Z bucket not found
}

// This example lists the last run of every job the fleet runs, as an
// operator's tool would.
func ExampleLocker_LastRuns() {
	client, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 3, 0, 1, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithNodeID("node-a"), cronlock.WithLogger(cron.DiscardLogger),
		cronlock.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}
	job, _ := l.Job("backup", cron.Every(time.Hour), func(context.Context) error { return nil })
	job.Run()

	for run, err := range l.LastRuns(context.Background()) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(run.Name, run.Node, run.Planned.UTC().Format(time.RFC3339), run.Error == "")
	}
	// Output:
	// backup node-a 2031-05-06T03:00:00Z true
}

// This example shows the tick a job function serves, with the fence to
// pass along with its writes.
func ExampleTickFromContext() {
	client, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 0, 0, 30, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithNodeID("node-a"),
		cronlock.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}
	job, _ := l.Job("rollup", cron.Every(time.Minute), func(ctx context.Context) error {
		t, ok := cronlock.TickFromContext(ctx)
		fmt.Println(ok, t.Name, t.Node, t.Planned.UTC().Format("15:04:05"), t.Locked, t.Fence > 0)
		return nil
	})
	job.Run()
	// Output: true rollup node-a 00:00:00 true true
}

// This example compares robfig's "@every 10m", which counts from the
// moment it is asked, with the aligned one every node shares.
func ExampleAligned() {
	every := cron.Every(10 * time.Minute)
	started := time.Date(2031, 5, 6, 7, 3, 17, 0, time.UTC) // when a node's cron started
	fmt.Println("robfig: ", every.Next(started).Format("15:04:05"))
	fmt.Println("aligned:", cronlock.Aligned(every).Next(started).Format("15:04:05"))
	// Output:
	// robfig:  07:13:17
	// aligned: 07:10:00
}

// tickPrinter is an Observer that prints how each tick ended.
type tickPrinter struct{}

func (tickPrinter) TickStart(ctx context.Context, t cronlock.Tick) (context.Context, func(cronlock.TickResult)) {
	return ctx, func(r cronlock.TickResult) {
		fmt.Println(t.Name, t.Planned.UTC().Format("15:04"), t.Node, r.Outcome)
		if r.Outcome == cronlock.OutcomeSkipped {
			fmt.Println("  because:", r.Skip)
		}
	}
}

// This example installs an Observer — package otel provides one that
// traces and measures ticks — and runs the same tick twice: it runs, then
// is skipped because it is already claimed.
func ExampleWithObserver() {
	client, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 4, 0, 9, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithNodeID("node-a"), cronlock.WithObserver(tickPrinter{}),
		cronlock.WithClock(func() time.Time { return at }), cronlock.WithLogger(cron.DiscardLogger))
	if err != nil {
		log.Fatal(err)
	}
	job, _ := l.Job("rollup", cron.Every(time.Minute), func(context.Context) error { return nil })
	job.Run()
	job.Run()
	// Output:
	// rollup 04:00 node-a ran
	// rollup 04:00 node-a skipped
	//   because: claimed
}

// This example runs two nodes in leader mode: the node that leads runs
// the tick and the other skips it, without asking Redis. When the leader
// closes, it resigns, and the other node leads at once — under a higher
// fence — and runs the next tick.
func ExampleWithLeader() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	var mu sync.Mutex
	at := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	var fences []int64
	var lockers []*cronlock.Locker
	var jobs []cron.Job
	for _, node := range []string{"node-a", "node-b"} {
		client, err := core.NewRedis(rdb) // one per process
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		l, err := cronlock.New(client, cronlock.WithNodeID(node), cronlock.WithLeader("billing"),
			cronlock.WithObserver(tickPrinter{}), cronlock.WithClock(clock), cronlock.WithLogger(cron.DiscardLogger))
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close(context.Background()) // resigns; before the client's Close
		job, _ := l.Job("rollup", cron.Every(time.Minute), func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			fences = append(fences, t.Fence)
			return nil
		})
		lockers, jobs = append(lockers, l), append(jobs, job)
	}
	a, b := lockers[0], lockers[1]
	waitLeading := func(l *cronlock.Locker) {
		for !l.Leading() {
			time.Sleep(time.Millisecond)
		}
	}

	a.Start() // node-a campaigns first and leads
	waitLeading(a)
	b.Start()
	jobs[0].Run() // what each node's cron does at 07:00
	jobs[1].Run()

	if err := a.Close(context.Background()); err != nil { // after <-c.Stop().Done()
		fmt.Println(err)
	}
	waitLeading(b)
	mu.Lock()
	at = at.Add(time.Minute)
	mu.Unlock()
	jobs[0].Run()
	jobs[1].Run()

	fmt.Println("fence rose:", fences[1] > fences[0])
	// Output:
	// rollup 07:00 node-a ran
	// rollup 07:00 node-b skipped
	//   because: not_leader
	// rollup 07:01 node-a skipped
	//   because: closed
	// rollup 07:01 node-b ran
	// fence rose: true
}
