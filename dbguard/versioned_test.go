package dbguard_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// versionedStores are the stores the Versioned tests run on: a SQL table on
// each database, miniredis, and the shared Redis.
func eachVersionStore(t *testing.T, fn func(t *testing.T, kv *dbguard.Versioned)) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(db, dbguard.WithTable(tableName(t, db))))))
		must(t, kv.Migrate(ctxFor(t, 10*time.Second)))
		fn(t, kv)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		fn(t, mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInRedis(rdb, "")))))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := redistest.Client(t), "dbguard-test-"+rand.Text()[:10]
		t.Cleanup(func() { deletePrefix(t, rdb, prefix) })
		kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInRedis(rdb, prefix))))
		must(t, kv.Migrate(ctxFor(t, 10*time.Second)))
		fn(t, kv)
	})
}

func TestVersionedPutGet(t *testing.T) {
	eachVersionStore(t, func(t *testing.T, kv *dbguard.Versioned) {
		ctx := ctxFor(t, 30*time.Second)
		if _, v, err := kv.Get(ctx, "cart:1"); !errors.Is(err, dbguard.ErrNotFound) || v != 0 {
			t.Fatalf("missing key: version %d, %v; want 0, ErrNotFound", v, err)
		}
		if err := kv.Put(ctx, "cart:1", []byte("a"), 1); !errors.Is(err, dbguard.ErrVersionConflict) {
			t.Fatalf("put version 1 of a missing key: %v", err)
		}
		must(t, kv.Put(ctx, "cart:1", []byte("a"), 0))
		if err := kv.Put(ctx, "cart:1", []byte("b"), 0); !errors.Is(err, dbguard.ErrVersionConflict) {
			t.Fatalf("create over an existing key: %v", err)
		}
		val, v, err := kv.Get(ctx, "cart:1")
		if err != nil || string(val) != "a" || v != 1 {
			t.Fatalf("got %q v%d %v, want a v1", val, v, err)
		}
		binary := []byte{0, 1, 0xff, '"', '\\', 0}
		must(t, kv.Put(ctx, "cart:1", binary, 1))
		// The Tair case: a writer that read version 1 is too late.
		if err := kv.Put(ctx, "cart:1", []byte("late"), 1); !errors.Is(err, dbguard.ErrVersionConflict) {
			t.Fatalf("stale put: %v", err)
		}
		val, v, err = kv.Get(ctx, "cart:1")
		if err != nil || !bytes.Equal(val, binary) || v != 2 {
			t.Fatalf("got %q v%d %v, want %q v2", val, v, err, binary)
		}
		must(t, kv.Put(ctx, "cart:1", nil, 2))
		if val, v, err = kv.Get(ctx, "cart:1"); err != nil || len(val) != 0 || v != 3 {
			t.Fatalf("empty value: got %q v%d %v", val, v, err)
		}
		for _, tc := range []struct {
			name string
			err  error
			want error
		}{
			{"get empty key", func() error { _, _, err := kv.Get(ctx, ""); return err }(), dbguard.ErrInvalidKey},
			{"put empty key", kv.Put(ctx, "", nil, 0), dbguard.ErrInvalidKey},
			{"put negative version", kv.Put(ctx, "k", nil, -1), dbguard.ErrInvalidVersion},
			{"put at the last version", kv.Put(ctx, "k", nil, math.MaxInt64), dbguard.ErrInvalidVersion},
			{"update nil func", kv.Update(ctx, "k", nil), dbguard.ErrInvalidOption},
		} {
			if !errors.Is(tc.err, tc.want) {
				t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
			}
		}
	})
}

// Concurrent read-modify-write cycles through Update lose no increment.
func TestVersionedUpdateLosesNothing(t *testing.T) {
	const workers, each = 12, 8
	eachVersionStore(t, func(t *testing.T, kv *dbguard.Versioned) {
		ctx := ctxFor(t, 60*time.Second)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					err := kv.Update(ctx, "counter", func(old []byte, found bool) ([]byte, error) {
						n := 0
						if found {
							var err error
							if n, err = strconv.Atoi(string(old)); err != nil {
								return nil, err
							}
						}
						return []byte(strconv.Itoa(n + 1)), nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		val, v, err := kv.Get(ctx, "counter")
		if err != nil || string(val) != strconv.Itoa(workers*each) || v != workers*each {
			t.Fatalf("counter %q at version %d (%v), want %d at %d", val, v, err, workers*each, workers*each)
		}
	})
}

func TestVersionedUpdateError(t *testing.T) {
	kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(openSQLite(t)))))
	ctx := ctxFor(t, 10*time.Second)
	must(t, kv.Migrate(ctx))
	boom := errors.New("boom")
	if err := kv.Update(ctx, "k", func([]byte, bool) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want fn's error", err)
	}
	if _, _, err := kv.Get(ctx, "k"); !errors.Is(err, dbguard.ErrNotFound) {
		t.Fatalf("a failed update wrote: %v", err)
	}
}

func TestBadVersioned(t *testing.T) {
	db := openSQLite(t)
	var nilRedis *redis.Client
	unused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { unused.Close() })
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil store", errOf(dbguard.NewVersioned(nil)), dbguard.ErrInvalidOption},
		{"nil db", errOf(dbguard.VersionsInSQL(nil)), dbguard.ErrNilDB},
		{"guard option", errOf(dbguard.VersionsInSQL(db, dbguard.WithRetryBudget(2))), dbguard.ErrInvalidOption},
		{"bad table", errOf(dbguard.VersionsInSQL(db, dbguard.WithTable("x-y"))), dbguard.ErrInvalidOption},
		{"nil redis", errOf(dbguard.VersionsInRedis(nilRedis, "")), dbguard.ErrInvalidOption},
		{"braces in prefix", errOf(dbguard.VersionsInRedis(unused, "a{b}")), dbguard.ErrInvalidOption},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// TestVersionedRedisInt64Edges: on Redis, versions stay exact decimal
// int64s at the edges of what a double holds and of int64 itself: no
// version goes through a Lua number. The one version with no next,
// math.MaxInt64, is refused, and a stored version that is not an integer
// (as older scripts wrote from 1e14 up: "1e+14") is reported, not parsed.
func TestVersionedRedisInt64Edges(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, prefix string) {
		kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInRedis(rdb, prefix))))
		ctx := ctxFor(t, 30*time.Second)
		hash := func(key string) string { return prefix + ":{" + key + "}" }
		for _, v := range []int64{1e14 - 1, 1e14, 1<<53 - 1, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1} {
			key := "edge:" + strconv.FormatInt(v, 10)
			must(t, rdb.HSet(ctx, hash(key), "v", "old", "ver", strconv.FormatInt(v, 10)).Err())
			if _, got, err := kv.Get(ctx, key); err != nil || got != v {
				t.Fatalf("Get at %d: version %d, %v", v, got, err)
			}
			must(t, kv.Put(ctx, key, []byte("new"), v))
			if err := kv.Put(ctx, key, []byte("late"), v); !errors.Is(err, dbguard.ErrVersionConflict) {
				t.Fatalf("stale Put at %d: %v", v, err)
			}
			val, got, err := kv.Get(ctx, key)
			if err != nil || got != v+1 || string(val) != "new" {
				t.Fatalf("after Put at %d: %q at version %d (%v), want \"new\" at %d", v, val, got, err, v+1)
			}
			if raw := rdb.HGet(ctx, hash(key), "ver").Val(); raw != strconv.FormatInt(v+1, 10) {
				t.Fatalf("after Put at %d: Redis holds version %q", v, raw)
			}
		}
		// math.MaxInt64 has no next version: refused, nothing written.
		key := "edge:max"
		must(t, rdb.HSet(ctx, hash(key), "v", "old", "ver", strconv.FormatInt(math.MaxInt64, 10)).Err())
		if _, got, err := kv.Get(ctx, key); err != nil || got != math.MaxInt64 {
			t.Fatalf("Get at MaxInt64: version %d, %v", got, err)
		}
		if err := kv.Put(ctx, key, []byte("new"), math.MaxInt64); !errors.Is(err, dbguard.ErrInvalidVersion) {
			t.Fatalf("Put at MaxInt64: %v, want ErrInvalidVersion", err)
		}
		if val, got, err := kv.Get(ctx, key); err != nil || got != math.MaxInt64 || string(val) != "old" {
			t.Fatalf("after the refused Put: %q at %d (%v)", val, got, err)
		}
		// A version an older script stored as a double.
		must(t, rdb.HSet(ctx, hash("edge:float"), "v", "x", "ver", "1e+14").Err())
		if _, _, err := kv.Get(ctx, "edge:float"); !errors.Is(err, dbguard.ErrInvalidVersion) {
			t.Fatalf("Get of version \"1e+14\": %v, want ErrInvalidVersion", err)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		run(t, rdb, "dbguard")
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := redistest.Client(t), "dbguard-test-"+rand.Text()[:10]
		t.Cleanup(func() { deletePrefix(t, rdb, prefix) })
		run(t, rdb, prefix)
	})
}
