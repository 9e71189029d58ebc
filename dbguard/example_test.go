package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/redis/go-redis/v9"
)

// exampleDB opens a fresh SQLite file, as in the package documentation.
func exampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "dbguard-example")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// This example is the quick start: a Guard with a Redis lock (Auto: Locked,
// Optimistic while Redis is down) on an embedded SQLite.
func Example() {
	db, done := exampleDB()
	defer done()
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks, err := core.NewRedis(rdb, core.WithKeyPrefix("shop"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	g, err := dbguard.New(db, dbguard.WithLocks(locks))
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_ = g.Restock(ctx, "sku-42", 2)
	for buyer := 1; buyer <= 3; buyer++ {
		err := g.Deduct(ctx, "sku-42", 1)
		switch {
		case errors.Is(err, dbguard.ErrInsufficientStock):
			fmt.Printf("buyer %d: sold out\n", buyer)
		case err != nil:
			fmt.Printf("buyer %d: %v\n", buyer, err)
		default:
			fmt.Printf("buyer %d: bought one\n", buyer)
		}
	}
	left, _ := g.Stock(ctx, "sku-42")
	fmt.Println("strategy:", g.Strategy(), "left:", left, "under the lock:", g.Stats().Locked)
	// Output:
	// buyer 1: bought one
	// buyer 2: bought one
	// buyer 3: sold out
	// strategy: Auto left: 0 under the lock: 2
}

// This example deducts with the default strategy of a Guard without a
// locker — Atomic, one conditional UPDATE — and shows the typed errors.
func ExampleNew() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()

	g, err := dbguard.New(db, dbguard.WithTable("stock"))
	if err != nil {
		log.Fatal(err)
	}
	_ = g.Migrate(ctx)
	_ = g.Restock(ctx, "mug", 5)

	fmt.Println(g.Strategy(), g.Dialect())
	fmt.Println(g.Deduct(ctx, "mug", 3))
	fmt.Println(errors.Is(g.Deduct(ctx, "mug", 3), dbguard.ErrInsufficientStock))
	fmt.Println(errors.Is(g.Deduct(ctx, "cup", 1), dbguard.ErrUnknownSKU))
	fmt.Println(errors.Is(g.Deduct(ctx, "mug", 0), dbguard.ErrInvalidQty))
	_, err = dbguard.New(nil)
	fmt.Println(errors.Is(err, dbguard.ErrNilDB))
	// Output:
	// Atomic sqlite
	// <nil>
	// true
	// true
	// true
	// true
}

// This example takes an order of several SKUs: all lines or none.
func ExampleGuard_DeductMany() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	g, err := dbguard.New(db, dbguard.WithStrategy(dbguard.RowLock))
	if err != nil {
		log.Fatal(err)
	}
	_ = g.Migrate(ctx)
	_ = g.Restock(ctx, "tea", 2)
	_ = g.Restock(ctx, "pot", 1)

	err = g.DeductMany(ctx, map[string]int64{"tea": 1, "pot": 2})
	fmt.Println("short order:", errors.Is(err, dbguard.ErrInsufficientStock))
	tea, _ := g.Stock(ctx, "tea")
	fmt.Println("tea left:", tea)

	fmt.Println("order:", g.DeductMany(ctx, map[string]int64{"tea": 2, "pot": 1}))
	tea, _ = g.Stock(ctx, "tea")
	pot, _ := g.Stock(ctx, "pot")
	fmt.Println("left:", tea, pot)
	// Output:
	// short order: true
	// tea left: 2
	// order: <nil>
	// left: 0 0
}

// This example restocks: Restock adds, and creates the SKU if it is new.
func ExampleGuard_Restock() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	g, err := dbguard.New(db)
	if err != nil {
		log.Fatal(err)
	}
	_ = g.Migrate(ctx)

	_, err = g.Stock(ctx, "lamp")
	fmt.Println(errors.Is(err, dbguard.ErrUnknownSKU))
	_ = g.Restock(ctx, "lamp", 3)
	_ = g.Restock(ctx, "lamp", 4)
	n, _ := g.Stock(ctx, "lamp")
	fmt.Println(n)
	// Output:
	// true
	// 7
}

// This example prints the table a Guard expects, for your own migrations.
func ExampleGuard_DDL() {
	db, done := exampleDB()
	defer done()
	g, err := dbguard.New(db, dbguard.WithDialect(dbguard.Postgres), dbguard.WithTable("shop.stock"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.DDL())
	// Output:
	// CREATE TABLE IF NOT EXISTS shop.stock (
	// 	sku VARCHAR(255) NOT NULL PRIMARY KEY,
	// 	qty BIGINT NOT NULL CHECK (qty >= 0),
	// 	version BIGINT NOT NULL DEFAULT 0,
	// 	fence BIGINT NOT NULL DEFAULT 0
	// )
}

// This example reads the counters of a Guard.
func ExampleGuard_Stats() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	g, err := dbguard.New(db, dbguard.WithStrategy(dbguard.Optimistic))
	if err != nil {
		log.Fatal(err)
	}
	_ = g.Migrate(ctx)
	_ = g.Restock(ctx, "pen", 1)
	_ = g.Deduct(ctx, "pen", 1)
	_ = g.Deduct(ctx, "pen", 1)
	st := g.Stats()
	fmt.Println(st.Deductions, st.Optimistic, st.Insufficient, st.Conflicts)
	// Output: 1 1 1 0
}

// This example is Tair's versioned put on a SQL table: a write based on a
// version that moved fails and changes nothing.
func ExampleNewVersioned() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	store, err := dbguard.VersionsInSQL(db)
	if err != nil {
		log.Fatal(err)
	}
	kv, err := dbguard.NewVersioned(store)
	if err != nil {
		log.Fatal(err)
	}
	_ = kv.Migrate(ctx)

	_ = kv.Put(ctx, "profile:7", []byte("alice"), 0) // 0: create
	val, ver, _ := kv.Get(ctx, "profile:7")
	fmt.Println(string(val), ver)

	fmt.Println(kv.Put(ctx, "profile:7", []byte("alice v2"), ver))
	err = kv.Put(ctx, "profile:7", []byte("stale"), ver) // based on version 1 too
	fmt.Println(errors.Is(err, dbguard.ErrVersionConflict))
	val, ver, _ = kv.Get(ctx, "profile:7")
	fmt.Println(string(val), ver)
	// Output:
	// alice 1
	// <nil>
	// true
	// alice v2 2
}

// This example keeps versioned values on Redis, where Put is one Lua
// compare-and-set.
func ExampleVersionsInRedis() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	store, err := dbguard.VersionsInRedis(rdb, "shop")
	if err != nil {
		log.Fatal(err)
	}
	kv, err := dbguard.NewVersioned(store)
	if err != nil {
		log.Fatal(err)
	}

	_, ver, err := kv.Get(ctx, "cart:9")
	fmt.Println(ver, errors.Is(err, dbguard.ErrNotFound))
	fmt.Println(kv.Put(ctx, "cart:9", []byte("[]"), ver))
	fmt.Println(errors.Is(kv.Put(ctx, "cart:9", []byte("[1]"), ver), dbguard.ErrVersionConflict))
	// Output:
	// 0 true
	// <nil>
	// true
}

// This example runs a read-modify-write cycle that retries when another
// writer went first.
func ExampleVersioned_Update() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	store, err := dbguard.VersionsInSQL(db, dbguard.WithTable("counters"))
	if err != nil {
		log.Fatal(err)
	}
	kv, err := dbguard.NewVersioned(store)
	if err != nil {
		log.Fatal(err)
	}
	_ = kv.Migrate(ctx)

	incr := func(old []byte, found bool) ([]byte, error) {
		n := 0
		if found {
			n, _ = strconv.Atoi(string(old))
		}
		return []byte(strconv.Itoa(n + 1)), nil
	}
	for range 3 {
		_ = kv.Update(ctx, "visits", incr)
	}
	val, ver, _ := kv.Get(ctx, "visits")
	fmt.Println(string(val), ver)
	// Output: 3 3
}
