// Package integration_test runs temporallock against a real Temporal
// server, started in-process by go.temporal.io/server/temporaltest
// (SQLite in memory, loopback ports only), with two workers — each with its
// own Temporal client and core.Client, as two processes would have —
// polling one task queue. The locks live in Redis, in SQLite or
// PostgreSQL through backends/sqllock, or in etcd, ZooKeeper or memcached
// through their backends, on private servers internal/servertest starts.
// It lives in its own module so that the library's go.mod does not inherit
// the server's dependency tree.
package integration_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/dbtest"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// quiet is the Temporal client logger of the tests.
var quiet = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// startServer starts an in-process Temporal server for the test, or skips
// it (fails with LATCHKEY_REQUIRE_SERVERS=1) with the reason when it cannot
// start: no loopback listener, or the server's own start-up failing.
func startServer(t *testing.T) *temporaltest.TestServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		redistest.Unavailable(t, "temporal: cannot listen on loopback: %v", err)
	}
	ln.Close()
	var ts *temporaltest.TestServer
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%v", p)
			}
		}()
		// Without WithT, NewServer panics instead of calling t.Fatal, so a
		// server that cannot start becomes a skip with its reason.
		ts = temporaltest.NewServer()
	}()
	if err != nil {
		redistest.Unavailable(t, "temporal: in-process server did not start: %v", err)
	}
	t.Logf("temporaltest server at %s started in %v", ts.GetFrontendHostPort(), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		defer func() { _ = recover() }() // Stop logs through a nil *testing.T if the server errs
		ts.Stop()
	})
	return ts
}

// lockStore gives each worker of a subtest its own core.Client on one
// lock store.
type lockStore struct {
	name   string
	client func(t *testing.T) *core.Client
	// steal takes the lease of lockKey (a key of the core.Client) from its
	// holder behind the Client's back, as an operator, or another holder
	// after an expiry the holder missed, would.
	steal func(t *testing.T, lockKey string)
}

// lockStores are the stores the scenarios run on: Redis (miniredis and a
// real server), through core.NewRedis, and the open backends, given to
// core.New — SQL databases through backends/sqllock, etcd, ZooKeeper and
// memcached through backends/etcdlock, zklock and memcachelock — unchanged.
func lockStores() []struct {
	name string
	make func(t *testing.T) lockStore
} {
	newRedis := func(t *testing.T, name string, dial func(t *testing.T) *redis.Client) lockStore {
		admin := dial(t)
		t.Cleanup(func() { forgetKeys(t, admin) })
		return lockStore{name: name,
			client: func(t *testing.T) *core.Client {
				c := mustNew(core.NewRedis(dial(t)))
				t.Cleanup(func() { c.Close() })
				return c
			},
			steal: func(t *testing.T, lockKey string) {
				name := core.DefaultKeyPrefix + ":{" + lockKey + "}"
				if n, err := admin.Del(context.Background(), name).Result(); err != nil || n != 1 {
					t.Fatalf("steal %q: %d keys deleted (%v), want 1", name, n, err)
				}
			},
		}
	}
	return []struct {
		name string
		make func(t *testing.T) lockStore
	}{
		{"miniredis", func(t *testing.T) lockStore {
			mr := miniredis.RunT(t)
			t.Cleanup(mrclock.Run(mr))
			return newRedis(t, "miniredis", func(t *testing.T) *redis.Client {
				rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
				t.Cleanup(func() { rdb.Close() })
				return rdb
			})
		}},
		{"redis", func(t *testing.T) lockStore {
			return newRedis(t, "redis", func(t *testing.T) *redis.Client { return redistest.Client(t) })
		}},
		{"sqlite", func(t *testing.T) lockStore {
			path := filepath.Join(t.TempDir(), "locks.db")
			return newSQL(t, "sqlite", sqllock.SQLite, func(t *testing.T) *sql.DB {
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
				if err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(2)
				t.Cleanup(func() { db.Close() })
				return db
			})
		}},
		{"postgres", func(t *testing.T) lockStore {
			return newSQL(t, "postgres", sqllock.Postgres, func(t *testing.T) *sql.DB {
				return dbtest.Open(t, "pgx", dbtest.PostgresURL(), "PostgreSQL (set DATABASE_URL)", 4)
			})
		}},
		{"etcd", newEtcd},
		{"zookeeper", newZooKeeper},
		{"memcached", newMemcached},
	}
}

// newSQL is a lock store of sqllock on the database open reaches: every
// Client gets a pool of its own, as a process would, on a pair of tables
// made for this test and dropped when it ends.
func newSQL(t *testing.T, name string, d sqllock.Dialect, open func(t *testing.T) *sql.DB) lockStore {
	t.Helper()
	admin := open(t)
	table := "lkt_temporal_" + strings.ToLower(rand.Text()[:10])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { dropTables(t, admin, table) })
	if err := sqllock.Migrate(ctx, admin, sqllock.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	del := "DELETE FROM " + table + " WHERE name = ?"
	if d == sqllock.Postgres {
		del = "DELETE FROM " + table + " WHERE name = $1"
	}
	return lockStore{name: name,
		client: func(t *testing.T) *core.Client {
			c := mustNew(sqllock.New(open(t), sqllock.WithTable(table)))
			t.Cleanup(func() { c.Close() })
			return c
		},
		steal: func(t *testing.T, lockKey string) {
			name := core.DefaultKeyPrefix + ":{" + lockKey + "}"
			var arg any = name
			if d == sqllock.Postgres {
				arg = []byte(name) // a BYTEA column
			}
			res, err := admin.ExecContext(context.Background(), del, arg)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				t.Fatalf("steal %q: %d rows deleted (%v), want 1", name, n, err)
			}
		},
	}
}

// dropTables drops the tables sqllock.Migrate made under the name table.
func dropTables(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tb := range []string{table, table + "_records"} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb); err != nil {
			t.Errorf("drop %s: %v", tb, err)
		}
	}
}

// startWorkers starts two workers on queue, each with its own Temporal
// client and core.Client from store and the interceptor made by opts, all
// serving the activities of tr and the workflows of this file. They stop
// at cleanup, before the server.
func startWorkers(t *testing.T, ts *temporaltest.TestServer, store lockStore, queue string, tr *tracker, opts ...temporallock.Option) client.Client {
	t.Helper()
	var first client.Client
	for i := range 2 {
		tc := ts.NewClientWithOptions(client.Options{Logger: quiet, Identity: fmt.Sprintf("worker-%d", i)})
		ic, err := temporallock.NewInterceptor(store.client(t), append([]temporallock.Option{temporallock.WithKey(keys)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		w := worker.New(tc, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
		registerAll(w, &acts{tr: tr, worker: fmt.Sprintf("worker-%d", i)})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		if first == nil {
			first = tc
		}
	}
	return first
}

// uniqueID names what one subtest uses in the shared stores.
func uniqueID(t *testing.T) string { return fmt.Sprintf("%s-%s", t.Name(), rand.Text()[:8]) }

// tracker records the executions the activities see.
type tracker struct {
	mu       sync.Mutex
	inFlight map[string]int
	maxIn    map[string]int
	byWorker map[string]int
	attempts map[string][]int32 // attempts that entered, by key, in order
	fences   map[string][]int64 // their FenceFromContext, in the same order
	started  chan string        // lock keys of Block executions once inside
	events   []string
	start    time.Time
}

func newTracker() *tracker {
	return &tracker{inFlight: map[string]int{}, maxIn: map[string]int{}, byWorker: map[string]int{},
		attempts: map[string][]int32{}, fences: map[string][]int64{}, started: make(chan string, 16), start: time.Now()}
}

func (tr *tracker) enter(ctx context.Context, key, worker string) {
	info := activity.GetInfo(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.inFlight[key]++
	tr.maxIn[key] = max(tr.maxIn[key], tr.inFlight[key])
	tr.byWorker[worker]++
	tr.attempts[key] = append(tr.attempts[key], info.Attempt)
	fence, _ := temporallock.FenceFromContext(ctx)
	tr.fences[key] = append(tr.fences[key], fence)
	tr.events = append(tr.events, fmt.Sprintf("%.2fs %s enters %s attempt %d on %s",
		time.Since(tr.start).Seconds(), info.ActivityType.Name, key, info.Attempt, worker))
}

func (tr *tracker) leave(ctx context.Context, key, worker string) {
	info := activity.GetInfo(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.inFlight[key]--
	tr.events = append(tr.events, fmt.Sprintf("%.2fs %s leaves %s attempt %d on %s",
		time.Since(tr.start).Seconds(), info.ActivityType.Name, key, info.Attempt, worker))
}

func (tr *tracker) snapshot(key string) (maxIn int, attempts []int32, byWorker map[string]int, events []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	byWorker = map[string]int{}
	for k, v := range tr.byWorker {
		byWorker[k] = v
	}
	return tr.maxIn[key], append([]int32(nil), tr.attempts[key]...), byWorker, append([]string(nil), tr.events...)
}

// fenceList returns the fences the executions of key saw, in the order
// they entered.
func (tr *tracker) fenceList(key string) []int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]int64(nil), tr.fences[key]...)
}

// forgetKeys deletes the leases and fence counters that t and its subtests
// left in rdb (their keys carry t's name), so that the shared Redis is left
// as it was found.
func forgetKeys(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	glob := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(t.Name())
	iter := rdb.Scan(ctx, 0, core.DefaultKeyPrefix+":{"+temporallock.KeyPrefix+"*"+glob+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("forget %q: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("forget the keys of %s: %v", t.Name(), err)
	}
}
