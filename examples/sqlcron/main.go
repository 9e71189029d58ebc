// Command sqlcron runs latchkey on a SQL database alone, no Redis: three
// nodes — each with its own core.Client from backends/sqllock and its own
// cronlock.Locker, as three processes would have — run the same job, and
// every tick runs on exactly one of them. Then one node holds a lock and
// the others see who holds it, with its fence.
//
//	cd examples && go run ./sqlcron                                                  # embedded SQLite
//	cd examples && DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./sqlcron
//	cd examples && DATABASE_URL=mysql://root@127.0.0.1:3306/test go run ./sqlcron
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/robfig/cron/v3"
)

const ticks = 4

func main() {
	db, what, cleanup, err := demo.SQL()
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	ctx := context.Background()
	fmt.Println("locks on", what)

	// Tables of this run only, dropped at the end (a shared server is left
	// as it was found).
	table := sqllock.WithTable("latchkey_demo_" + strings.ToLower(rand.Text()[:8]))
	if err := sqllock.Migrate(ctx, db, table); err != nil {
		log.Fatal(err)
	}
	defer func() {
		for _, t := range []string{"_records", ""} {
			if _, err := db.ExecContext(ctx, "DROP TABLE "+tableName(table)+t); err != nil {
				log.Print(err)
			}
		}
	}()

	var mu sync.Mutex
	ran := make(chan cronlock.Tick, 16)
	var crons []*cron.Cron
	var clients []*core.Client
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		locks, err := sqllock.New(db, table)
		if err != nil {
			log.Fatal(err)
		}
		defer locks.Close()
		clients = append(clients, locks)
		l, err := cronlock.New(locks, cronlock.WithNodeID(node), cronlock.WithSeconds())
		if err != nil {
			log.Fatal(err)
		}
		c := cron.New(cron.WithSeconds())
		if _, err := l.AddFunc(c, "@every 1s", "report", func(ctx context.Context) error {
			t, _ := cronlock.TickFromContext(ctx)
			mu.Lock()
			fmt.Printf("%s  report ran on %s\n", t.Planned.Format("15:04:05"), t.Node)
			mu.Unlock()
			ran <- t
			return nil
		}); err != nil {
			log.Fatal(err)
		}
		crons = append(crons, c)
	}
	fmt.Printf("three nodes run \"report\" @every 1s; each tick runs once (%s)\n", clients[0].Capabilities())
	for _, c := range crons {
		c.Start()
	}
	seen := map[time.Time]int{}
	for len(seen) < ticks {
		t := <-ran
		seen[t.Planned]++
	}
	for _, c := range crons {
		<-c.Stop().Done()
	}
	for tick, n := range seen {
		if n != 1 {
			log.Fatalf("tick %v ran %d times", tick, n)
		}
	}

	held, err := clients[0].TryLock(ctx, "nightly-export", core.WithMetadata("node-a"))
	if err != nil {
		log.Fatal(err)
	}
	info, err := clients[1].Inspect(ctx, "nightly-export")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("node-b sees nightly-export held by %s, fence %d, %v left\n", info.Metadata, info.Fence, info.TTL.Round(time.Second))
	if _, err := clients[2].TryLock(ctx, "nightly-export"); err != nil {
		fmt.Println("node-c:", err)
	}
	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// tableName reads the table name an option sets, for the cleanup.
func tableName(opt sqllock.Option) string {
	stmts, err := sqllock.DDL(sqllock.SQLite, opt)
	if err != nil {
		log.Fatal(err)
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(stmts[0], "CREATE TABLE IF NOT EXISTS "), " ")
	return name
}
