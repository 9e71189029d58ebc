package core_test

import (
	"context"
	"errors"
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
// nodes above 1 the Clients are Redlock's over that many servers, every
// node's writes held up alike. With write set, the leases are write holds
// of the read-write lock k (and the rival a reader).
func lateRelease(t *testing.T, opts *redis.Options, blip time.Duration, nodes int, write bool) {
	if testing.Short() {
		t.Skip("fault injection, 4 s: make ci runs it")
	}
	var pxs []*faultnet.Proxy
	var mine, theirs []redis.UniversalClient
	for range nodes {
		srv := redistest.StartServer(t)
		px := faultnet.Start(t, srv.Addr())
		o := *opts
		o.Addr = px.Addr()
		rdb := redis.NewClient(&o)
		defer rdb.Close()
		rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb2.Close()
		pxs, mine, theirs = append(pxs, px), append(mine, rdb), append(theirs, rdb2)
	}
	open := func(rdbs []redis.UniversalClient) *core.Client {
		if nodes == 1 {
			return mustNew(core.NewRedis(rdbs[0], core.WithKeyPrefix("late")))
		}
		return mustNew(core.NewRedlock(rdbs, core.WithKeyPrefix("late")))
	}
	c := open(mine)
	defer c.Close()
	other := open(theirs)
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
	var undelays []func()
	for _, px := range pxs {
		undelays = append(undelays, px.Delay(faultnet.Up, 2500*time.Millisecond, 0))
	}
	undelay := func() {
		for _, u := range undelays {
			u()
		}
	}
	if blip > 0 {
		go func() { time.Sleep(blip); undelay() }()
	}
	start := time.Now()
	err = l1.Release(bg)
	t.Logf("Release: %v after %v", err, time.Since(start).Round(time.Millisecond))
	undelay()
	// The job, retried under its token. On Redlock the acquisition waits
	// for the release's calls to each node, which go on after Release gave
	// up (until their read timeout): it is tried again until then.
	l2, err := take(c, "k", token...)
	for nodes > 1 && errors.Is(err, core.ErrUnavailable) && time.Since(start) < 2*time.Second {
		l2, err = take(c, "k", token...)
	}
	if err != nil {
		t.Fatalf("TryLock after Release returned: %v", err)
	}
	if held := time.Since(start); held > 2200*time.Millisecond {
		t.Fatalf("the lease was taken again %v after the release was sent: the release may have landed first", held)
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
	lateRelease(t, &redis.Options{ReadTimeout: time.Second, MaxRetries: -1}, 0, 1, false)
}

// With go-redis's retries, Release returns nil — its second send, on
// another connection, deleted the lease — while the first send is still
// on its way; it must leave the lease the job then takes under its token
// be.
func TestRetriedReleaseSparesNextLease(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second}, 300*time.Millisecond, 1, false)
}

// The same for a read-write lock's write hold: re-entry takes a new fence,
// and no reader can raise the counter while a writer holds, so the write
// release names its fence too.
func TestLateWriteReleaseSparesReentry(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second, MaxRetries: -1}, 0, 1, true)
}

func TestRetriedWriteReleaseSparesNextHold(t *testing.T) {
	lateRelease(t, &redis.Options{ReadTimeout: time.Second}, 300*time.Millisecond, 1, true)
}
