// Command inventory runs the seeds' flash sale — 500 buyers, one product,
// 100 in stock — once per dbguard strategy, then once more with the naive
// read-then-write that every strategy replaces, and prints what was sold.
// Every strategy sells exactly 100; the naive path oversells.
//
//	cd examples && go run ./inventory                                # embedded SQLite + miniredis
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./inventory
//	cd examples && DATABASE_URL=mysql://root@127.0.0.1:3306/test go run ./inventory
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/examples/internal/demo"
)

const (
	buyers = 500
	stock  = 100
	sku    = "limited-edition-kettle"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	db, where, closeDB, err := openDB()
	if err != nil {
		log.Fatal(err)
	}
	defer closeDB()
	rdb, redisWhere, closeRedis, err := demo.Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	locks, err := core.NewRedis(rdb, core.WithKeyPrefix("inventory-demo"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	fmt.Println("database:", where)
	fmt.Println("locks:   ", redisWhere)
	fmt.Printf("flash sale: %d buyers want one %s each, %d in stock\n\n", buyers, sku, stock)
	fmt.Printf("%-22s %5s %5s %8s %7s %10s %9s\n", "strategy", "sold", "left", "refused", "errors", "conflicts", "time")

	run := id()
	for _, s := range []dbguard.Strategy{dbguard.Atomic, dbguard.RowLock, dbguard.Optimistic, dbguard.Locked, dbguard.Auto} {
		table := "inventory_" + strings.ToLower(s.String()) + "_" + run
		opts := []dbguard.Option{dbguard.WithTable(table), dbguard.WithStrategy(s)}
		switch s {
		case dbguard.Locked, dbguard.Auto:
			opts = append(opts, dbguard.WithLocks(locks), dbguard.WithWaitTimeout(20*time.Second))
		case dbguard.Optimistic:
			opts = append(opts, dbguard.WithRetryBudget(999)) // one hot row: let every buyer get an answer
		}
		defer drop(db, table) // deferred first, so it runs after Close
		g, err := dbguard.New(db, opts...)
		if err != nil {
			log.Fatal(err)
		}
		defer g.Close()
		if err := g.Migrate(ctx); err != nil {
			log.Fatal(err)
		}
		if err := g.Restock(ctx, sku, stock); err != nil {
			log.Fatal(err)
		}
		start := time.Now()
		var sold, refused, failed atomic.Int64
		var firstErr atomic.Value
		sale(func() {
			switch err := g.Deduct(ctx, sku, 1); {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, dbguard.ErrInsufficientStock):
				refused.Add(1)
			default:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
		took := time.Since(start)
		left, err := g.Stock(ctx, sku)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-22s %5d %5d %8d %7d %10d %9v\n", s, sold.Load(), left, refused.Load(), failed.Load(),
			g.Stats().Conflicts, took.Round(time.Millisecond))
		if err, ok := firstErr.Load().(error); ok {
			fmt.Println("  first error:", err)
		}
	}

	// The seeds' starting point: read the stock, then write back the number
	// computed from that read ("update stock set num = $num"). Buyers think
	// for a millisecond in between, as any real service does.
	table := "inventory_naive_" + run
	g, err := dbguard.New(db, dbguard.WithTable(table))
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	defer drop(db, table)
	if err := g.Restock(ctx, sku, stock); err != nil {
		log.Fatal(err)
	}
	ph := placeholders(db)
	start := time.Now()
	var told atomic.Int64
	sale(func() {
		var have int64
		if err := db.QueryRowContext(ctx, "SELECT qty FROM "+table+" WHERE sku = "+ph[0], sku).Scan(&have); err != nil || have < 1 {
			return
		}
		time.Sleep(time.Millisecond)
		if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET qty = "+ph[0]+" WHERE sku = "+ph[1], have-1, sku); err == nil {
			told.Add(1)
		}
	})
	took := time.Since(start)
	left, _ := g.Stock(ctx, sku)
	fmt.Printf("%-22s %5d %5d %8d %7s %10s %9v\n", "naive read-then-write", told.Load(), left, buyers-told.Load(), "-", "-", took.Round(time.Millisecond))
	fmt.Printf("\nnaive: %d buyers were told they bought a kettle, but only %d left the shelf: %d sold that did not exist\n",
		told.Load(), stock-left, told.Load()-(stock-left))
}

// sale runs buy once per buyer, all at once.
func sale(buy func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			buy()
		}()
	}
	close(start)
	wg.Wait()
}

// openDB opens the demo's database (demo.SQL): $DATABASE_URL, or an
// embedded SQLite file, whose one writer is queued for in Go.
func openDB() (*sql.DB, string, func(), error) {
	db, what, closeDB, err := demo.SQL()
	if err != nil {
		return nil, "", nil, err
	}
	if os.Getenv("DATABASE_URL") == "" {
		db.SetMaxOpenConns(1) // SQLite has one writer: queue for it in Go
	} else {
		db.SetMaxOpenConns(16)
	}
	return db, what, closeDB, nil
}

// placeholders returns the first two bind parameters of db's dialect.
func placeholders(db *sql.DB) [2]string {
	if g, err := dbguard.New(db); err == nil && g.Dialect() == dbguard.Postgres {
		return [2]string{"$1", "$2"}
	}
	return [2]string{"?", "?"}
}

// drop removes a demo table.
func drop(db *sql.DB, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
}

// id names this run's tables, so that runs against a shared server never
// collide.
func id() string { return strings.ToLower(rand.Text()[:8]) }
