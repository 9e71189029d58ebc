package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// A voided acquisition must not take down a registered twin's lease. h3
// (WithToken T) is sent before h1's release of T and lands on the server
// after h2 (also WithToken T, sent after the release ended) took the key
// afresh: h3 re-enters h2's lease with a higher fence, and the Client
// voids h3 (a release of T ended while it was under way). A review found
// that dropping what h3 got, by h3's fence (7f10951, reverted), deleted
// the lease h2 holds in the same Client without telling it.
func TestReviewHDropVoidedDeletesLiveTwin(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	kf := newKeyFault(t, rdb)
	const prefix = "hrevv"
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb2.Close()
	rival := mustNew(core.NewRedis(rdb2, core.WithKeyPrefix(prefix)))
	defer rival.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h1, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tok := h1.Token()
	lease := core.StorageNames(prefix, "k")[0]
	held := kf.add(&faultRule{key: lease, delay: 400 * time.Millisecond, onWire: true, times: 1})
	type res struct {
		l   *core.Lock
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := c.TryLock(ctx, "k", core.WithToken(tok), core.WithTTL(10*time.Second))
		got <- res{l, err}
	}()
	waitHit(t, held, 5*time.Second)
	if err := h1.Release(ctx); err != nil {
		t.Fatalf("release h1: %v", err)
	}
	h2, err := c.TryLock(ctx, "k", core.WithToken(tok), core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("h2: %v", err)
	}
	defer h2.Release(ctx)
	r := <-got
	t.Logf("h2 fence %d; h3: err=%v", h2.Fence(), r.err)
	if r.err == nil {
		defer r.l.Release(ctx)
	}
	time.Sleep(300 * time.Millisecond) // what the Client does of a voided acquisition, it has done
	keptOrTold(t, rival, "k", h2)
}
