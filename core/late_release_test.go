package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
)

// lateRelease holds k under a token on a Client whose writes a proxy can
// hold up, releases it while they are held up for 2.5 s (blip: how long
// new writes are held up), takes k again under the token once Release
// returned, and checks, after the late release has landed, that another
// Client cannot take k while the second lease believes it holds. With
// write set, the leases are write holds of the read-write lock k (and the
// rival a reader).
func lateRelease(t *testing.T, opts *redis.Options, blip time.Duration, write bool) {
	if testing.Short() {
		t.Skip("fault injection, 4 s: make ci runs it")
	}
	srv := redistest.StartServer(t)
	px := faultnet.Start(t, srv.Addr())
	opts.Addr = px.Addr()
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("late")))
	defer c.Close()
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb2.Close()
	other := mustNew(core.NewRedis(rdb2, core.WithKeyPrefix("late")))
	defer other.Close()
	bg := context.Background()
	take := func(c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
		if write {
			return c.RWMutex(key).TryLock(bg, opts...)
		}
		return c.TryLock(bg, key, opts...)
	}
	// The scripts loaded: a late EVALSHA must not meet NOSCRIPT.
	if w, err := take(c, "warm", core.WithToken("warm-1")); err != nil {
		t.Fatal(err)
	} else if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	token := []core.LockOption{core.WithToken("job-9"), core.WithTTL(30 * time.Second)}
	l1, err := take(c, "k", token...)
	if err != nil {
		t.Fatal(err)
	}
	undelay := px.Delay(faultnet.Up, 2500*time.Millisecond, 0)
	if blip > 0 {
		go func() { time.Sleep(blip); undelay() }()
	}
	start := time.Now()
	err = l1.Release(bg)
	t.Logf("Release: %v after %v", err, time.Since(start).Round(time.Millisecond))
	undelay()
	l2, err := take(c, "k", token...) // the job, retried under its token
	if err != nil {
		t.Fatalf("TryLock after Release returned: %v", err)
	}
	defer l2.Release(bg)
	time.Sleep(2 * time.Second) // the late release lands meanwhile
	if write {
		keptOrToldBy(t, func(ctx context.Context) (*core.Lock, error) {
			return other.RWMutex("k").TryRLock(ctx, core.WithTTL(time.Minute))
		}, "k", l2)
		return
	}
	keptOrTold(t, other, "k", l2)
}

// A Release that timed out, its bytes held up in the network, is not over
// when it returns; a job retried under its token re-enters the lease, and
// the late release must leave that re-entry be. From the review of the
// release path.
func TestLateReleaseSparesReentry(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second, MaxRetries: -1}, 0, false)
}

// With go-redis's retries, Release returns nil — its second send, on
// another connection, deleted the lease — while the first send is still
// on its way; it must leave the lease the job then takes under its token
// be.
func TestRetriedReleaseSparesNextLease(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second}, 300*time.Millisecond, false)
}

// The same for a read-write lock's write hold: re-entry takes a new fence,
// and no reader can raise the counter while a writer holds, so the write
// release names its fence too.
func TestLateWriteReleaseSparesReentry(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second, MaxRetries: -1}, 0, true)
}

func TestRetriedWriteReleaseSparesNextHold(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second}, 300*time.Millisecond, true)
}
