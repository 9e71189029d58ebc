// Command cron shows cronlock: three nodes — each with its own cron.Cron,
// core.Client and cronlock.Locker, as three processes would have — run the
// same two jobs. Every tick of "report" runs on exactly one of them, and
// the ticks go round the nodes (WithSpread); the slow "settle" job keeps
// its running lease past the next tick, so that tick is skipped instead of
// overlapping. Then the whole fleet goes down for a few ticks, and when
// one node comes back its cron's start looks back and catches up the
// ticks of "report" that no node ran (WithMissed).
//
// With -trace, ticks and locks are instrumented by package otel: every
// span (latchkey.cron.run, with the running lease's latchkey.acquire and
// latchkey.release inside) is printed as a JSON line by OpenTelemetry's
// stdout exporter as it ends, and the metrics are summed up at the end.
//
//	cd examples && go run ./cron                      # embedded miniredis
//	cd examples && go run ./cron -trace               # ... printing spans and metrics
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./cron
package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/robfig/cron/v3"
)

const ticks = 4 // how many ticks of "report" to watch

func main() {
	env := demo.Start("examples/cron")
	defer env.Close()
	tel, rdb := env.Tel, env.Redis
	fmt.Println(`three nodes run "report" (@every 1s, instant) and "settle" (@every 1s, takes 1.5s)`)

	var mu sync.Mutex // one printer for all nodes
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	reported := make(chan cronlock.Tick, 16)
	report := func(ctx context.Context) error {
		t, _ := cronlock.TickFromContext(ctx)
		if t.CatchUp {
			say("%s  report  ran on %s (catch-up: no node ran it on time)", t.Planned.Format("15:04:05"), t.Node)
		} else {
			say("%s  report  ran on %s", t.Planned.Format("15:04:05"), t.Node)
		}
		reported <- t
		return nil
	}

	var crons []*cron.Cron
	var lockers []*cronlock.Locker
	coreOpts := []core.Option{core.WithKeyPrefix("demo")}
	lockOpts := []cronlock.Option{cronlock.WithLogger(skipPrinter{say}), cronlock.WithMissed(cronlock.MissedRunAll(5))}
	if tel.Inst != nil { // one Instrumentation for every client and locker
		coreOpts = append(coreOpts, core.WithObserver(tel.Inst))
		lockOpts = append(lockOpts, cronlock.WithObserver(tel.Inst))
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		client, err := core.NewRedis(rdb, coreOpts...)
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		l, err := cronlock.New(client, append(lockOpts, cronlock.WithNodeID(node))...)
		if err != nil {
			log.Fatal(err)
		}
		c := cron.New(cron.WithLocation(time.UTC))
		_, err = l.AddFunc(c, "@every 1s", "report", report)
		if err != nil {
			log.Fatal(err)
		}
		_, err = l.AddFunc(c, "@every 1s", "settle", func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			say("%s  settle  ran on %s, takes 1.5s", t.Planned.Format("15:04:05"), t.Node)
			select {
			case <-time.After(1500 * time.Millisecond):
				return nil
			case <-ctx.Done(): // the running lease was lost, or the client closed
				return context.Cause(ctx)
			}
		})
		if err != nil {
			log.Fatal(err)
		}
		crons = append(crons, c)
		lockers = append(lockers, l)
	}
	for _, c := range crons {
		c.Start()
	}

	timeout := time.After(ticks*time.Second + 3*time.Second)
	for seen := 0; seen < ticks; seen++ {
		select {
		case <-reported:
		case <-timeout:
			log.Fatalf("only %d ticks of report in %v", seen, ticks*time.Second+3*time.Second)
		}
	}
	for _, c := range crons {
		<-c.Stop().Done() // waits for a settle run still going
	}

	ctx := context.Background()
	for _, name := range []string{"report", "settle"} {
		run, err := lockers[0].LastRun(ctx, name) // any node reads the shared record
		if err != nil {
			log.Fatal(err)
		}
		say("last run of %-6s: tick %s on %s, took %v, error %q", name,
			run.Planned.UTC().Format("15:04:05"), run.Node, round(run.Duration), run.Error)
	}

	// The whole fleet is down for a few ticks; then node-a starts again, as
	// a new process: its cron's start looks back and runs the missed ticks
	// of report (MissedRunAll(5)), before its next tick comes on time.
	say("the fleet is down for %v; then node-a starts again", down)
	time.Sleep(down)
	client, err := core.NewRedis(rdb, coreOpts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := cronlock.New(client, append(lockOpts, cronlock.WithNodeID("node-a"))...)
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New(cron.WithLocation(time.UTC))
	if _, err := l.AddFunc(c, "@every 1s", "report", report); err != nil {
		log.Fatal(err)
	}
	c.Start()
	timeout = time.After(5 * time.Second)
	for onTime := false; !onTime; {
		select {
		case t := <-reported:
			onTime = !t.CatchUp
		case <-timeout:
			log.Fatal("node-a ran no tick of report on time within 5s of its start")
		}
	}
	<-c.Stop().Done()
}

// down is how long the whole fleet is down.
const down = 2500 * time.Millisecond

// round shortens a duration for printing.
func round(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// skipPrinter is a cron.Logger that prints the skips worth seeing (a tick
// whose previous run still runs), the missed ticks found, and every error.
type skipPrinter struct{ say func(string, ...any) }

func (p skipPrinter) Info(msg string, kv ...any) {
	f := fields(kv)
	switch {
	case msg == "skip" && f["reason"] == "previous run still running":
		p.say("%s  %s  skipped by %s: the previous run still holds cron:%s:running",
			f["planned"].(time.Time).UTC().Format("15:04:05"), f["job"], f["node"], f["job"])
	case msg == "missed":
		p.say("%s found %d missed tick(s) of %s, %s to %s; catching up %d (policy %s)", f["node"], f["count"], f["job"],
			f["first"].(time.Time).UTC().Format("15:04:05"), f["last"].(time.Time).UTC().Format("15:04:05"), f["catch_up"], f["policy"])
	}
}

func (p skipPrinter) Error(err error, msg string, kv ...any) {
	p.say("error: %s: %v %v", msg, err, kv)
}

func fields(kv []any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			m[k] = kv[i+1]
		}
	}
	return m
}
