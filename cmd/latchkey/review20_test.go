package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// Review 20. release --force published the eviction with the command's
// own Client, which never uses sharded pub/sub: waiters of a
// WithShardedNotify fleet (SSUBSCRIBE) did not hear it and took the freed
// key only at their timers. An eviction now publishes both ways. Measured
// against the same eviction from a sharded Client.
func TestR20ReleaseForceShardedWaiters(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	url := "redis://" + rdb.Options().Addr + "/0"
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer c.Close()
	ctx := context.Background()
	wake := func(name string, evict func()) time.Duration {
		stuck := mustNew(c.TryLock(ctx, name, core.WithTTL(60*time.Second)))
		defer stuck.Release(ctx)
		got := make(chan *core.Lock)
		go func() {
			l, _ := c.Lock(ctx, name, core.WithWaitTimeout(20*time.Second))
			got <- l
		}()
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		evict()
		w := <-got
		d := time.Since(start)
		if w == nil {
			t.Fatal("the waiter never got the key")
		}
		w.Release(ctx)
		return d
	}
	viaCore := wake("s/core", func() { mustNew(c.Evict(ctx, "s/core")) })
	viaCmd := wake("s/cmd", func() {
		if r := runCmd(t, "", "release", "--force", "--yes", "--redis", url, "--prefix", prefix, "s/cmd"); r.code != 0 {
			t.Fatalf("release: %d %s", r.code, r.stderr)
		}
	})
	t.Logf("waiter took the evicted key after %v (sharded Client's Evict), %v (latchkey release --force)", viaCore, viaCmd)
	if viaCmd > viaCore+time.Second {
		t.Fatalf("after latchkey release --force the waiter took the free key only %v later (a sharded Client's Evict: %v)", viaCmd, viaCore)
	}
}

// Review 20. On a Cluster with --keyspace on, watch subscribes on every
// master from the callback of ClusterClient.ForEachMaster, which go-redis
// runs in a goroutine per master: subscribe appended to the shared slice
// subs with no lock (a data race under -race), and a PubSub whose append
// was lost was never closed.
func TestR20WatchClusterKeyspaceRace(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	addrs := cl.Addrs()
	_, _ = watching(t, "--redis", "redis+cluster://"+addrs[0]+"?addr="+addrs[1], "--keyspace", "on")
	time.Sleep(200 * time.Millisecond)
}

// Review 20. A password that holds '/' (or '?', '#') unescaped — common
// in generated secrets — makes url.Parse fail; the error message quotes
// the URL, and redact (its regexp stopped at the first '/') hid nothing.
func TestR20PasswordWithSlashLeaks(t *testing.T) {
	for _, pw := range []string{"s3cr/et9", "s3cr?et9", "s3cr#et9"} {
		r := runCmd(t, "", "locks", "--redis", "redis://:"+pw+"@127.0.0.1:1/0")
		if strings.Contains(r.stderr, pw) || strings.Contains(r.stderr, "et9") {
			t.Errorf("password %q shows (exit %d): %s", pw, r.code, r.stderr)
		}
	}
	t.Setenv("REDIS_URL", "redis://:s3cr/et9@127.0.0.1:1/0")
	if r := runCmd(t, "", "locks"); strings.Contains(r.stderr, "et9") {
		t.Errorf("password from REDIS_URL shows (exit %d): %s", r.code, r.stderr)
	}
}
