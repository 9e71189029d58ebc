package dbguard_test

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func inc(old []byte, _ bool) ([]byte, error) {
	n, _ := strconv.Atoi(string(old))
	return []byte(strconv.Itoa(n + 1)), nil
}

// A Redis put whose answer is lost after the script ran. go-redis sends it
// again (MaxRetries, 3 by default); the script found the version it had
// just bumped and answered 0, so Put said ErrVersionConflict ("changes
// nothing") for a write that happened, and Update redid its change on top
// of its own write: one Update(+1) moved a counter by two (review 13). A
// put now knows its own write by its id. Without resends, Put says
// ErrOutcomeUnknown.
func TestVersionedRedisPutLostAnswer(t *testing.T) {
	script, err := os.ReadFile("scripts/versioned_put.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(script) // EVALSHA <the put script's sha>: the Put, not the Get
	match := []byte(hex.EncodeToString(sum[:]))
	run := func(t *testing.T, up string) {
		p := faultnet.Start(t, up)
		ctx := ctxFor(t, 20*time.Second)
		prefix := "dbguard-test-" + rand.Text()[:10]
		direct := redis.NewClient(&redis.Options{Addr: up})
		t.Cleanup(func() { deletePrefix(t, direct, prefix); direct.Close() })
		for _, retries := range []int{0, -1} { // go-redis's default (3), none
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: retries})
			t.Cleanup(func() { rdb.Close() })
			kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInRedis(rdb, prefix))))
			key := "cart" + strconv.Itoa(retries)
			must(t, kv.Put(ctx, key, []byte("0"), 0))
			lost := p.LoseAnswer(match)
			err := kv.Update(ctx, key, inc)
			val, ver, gerr := kv.Get(ctx, key)
			t.Logf("MaxRetries %d: Update(+1): %v (answers lost: %d); now %q v%d %v", retries, err, lost(), val, ver, gerr)
			if lost() != 1 {
				t.Fatal("no answer was lost: the case under test did not arise")
			}
			if string(val) != "1" || ver != 2 {
				t.Fatalf("one Update(+1) left %q at version %d, want \"1\" at 2", val, ver)
			}
			switch {
			case retries == 0 && err != nil:
				t.Fatalf("Update, sent again after its answer was lost: %v, want nil (it was written once)", err)
			case retries < 0 && !errors.Is(err, dbguard.ErrOutcomeUnknown):
				t.Fatalf("Update, its answer lost: %v, want ErrOutcomeUnknown", err)
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) { run(t, miniredis.RunT(t).Addr()) })
	t.Run("redis", func(t *testing.T) { redistest.Client(t); run(t, redistest.Addr(t)) })
}

// A SQL put whose statement committed and whose answer was lost returned
// the driver's error as it was, nothing saying the write may have happened:
// a caller retrying Update applied its change twice (review 13). It is
// ErrOutcomeUnknown now.
func TestVersionedSQLPutLostAnswer(t *testing.T) {
	db, l := openLossySQLite(t)
	kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(db))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, kv.Migrate(ctx))
	for _, tc := range []struct{ key, stmt string }{{"counter", "UPDATE"}, {"fresh", "INSERT"}} {
		if tc.stmt == "UPDATE" {
			must(t, kv.Put(ctx, tc.key, []byte("0"), 0))
		}
		l.arm(tc.stmt, true) // run the statement, lose its answer
		err := kv.Update(ctx, tc.key, inc)
		val, ver, gerr := kv.Get(ctx, tc.key)
		t.Logf("%s: Update(+1): %v; now %q v%d %v", tc.stmt, err, val, ver, gerr)
		if !errors.Is(err, dbguard.ErrOutcomeUnknown) {
			t.Fatalf("%s committed, its answer lost: Update returned %v, want ErrOutcomeUnknown", tc.stmt, err)
		}
	}
}
