package core

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// review23: a Redlock node's release that carries both a nonce and a fence
// — redlockBackend.undo of a given-token acquisition calls
// releaseNonce(ctx, n, token, nonce, r.acq.fence) — keeps KEYS[7] = n.rel,
// the fence-mark sorted set "<lease>:rel" (redis.go: the nonce key only
// when fence == 0), but release.lua's Redlock fast path SET KEYS[7] to a
// string (c4962cf). The sorted set was clobbered, and the same call sent
// again (go-redis resends after a lost answer) ran rel_seen -> rel_has ->
// ZSCORE on a string: WRONGTYPE, instead of "released". A release with a
// nonce now always has its own mark key.
func TestReview23RedlockUndoReleaseMarkType(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := redistest.Miniredis(t, false)
		review23UndoMark(t, rdb, "r23")
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		p := redistest.Prefix(t, rdb)
		review23UndoMark(t, rdb, p)
	})
}

func review23UndoMark(t *testing.T, rdb redis.UniversalClient, prefix string) {
	c, err := NewRedis(rdb, WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, ok := c.be.(*redisBackend)
	if !ok {
		t.Fatalf("backend %T", c.be)
	}
	ctx := context.Background()
	n := c.names("k")
	res, err := b.acquire(ctx, n, "tokA", "tokA", 10*time.Second, false, false)
	if err != nil || !res.acquired {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	const nonce = "nonce-undo-1"
	ok1, err1 := b.releaseNonce(ctx, n, "tokA", nonce, res.fence) // undo's call
	typ := rdb.Type(ctx, n.rel).Val()
	// Another token takes the key before go-redis sends the call again.
	if r2, err := b.acquire(ctx, n, "tokC", "tokC", 10*time.Second, false, false); err != nil || !r2.acquired {
		t.Fatalf("acquire C: %+v %v", r2, err)
	}
	ok2, err2 := b.releaseNonce(ctx, n, "tokA", nonce, res.fence) // the same call, sent again
	t.Logf("first: %v %v; %s is a %s; again: %v %v", ok1, err1, n.rel, typ, ok2, err2)
	if typ != "none" && typ != "zset" {
		t.Errorf("the fence-mark key %s was overwritten with a %s", n.rel, typ)
	}
	if !ok1 || err1 != nil {
		t.Errorf("first release: %v %v", ok1, err1)
	}
	if !ok2 || err2 != nil {
		t.Errorf("the release sent again answered %v, %v; want released (its first run released)", ok2, err2)
	}
}
