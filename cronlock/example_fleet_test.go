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
