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

// A lease under a caller's token (WithToken) may be shared by processes:
// what one of them undoes — a failed acquisition, a Close — must leave
// what another holds. These tests hold a key under a token in one Client,
// fail or close a second Client's acquisition under the same token, and
// check that a third cannot take the key while the holder's lock lives.

// A Redlock re-entry whose nodes all answer after the node timeout fails
// with a QuorumError. Its clean-up used to delete the token's lease on
// every node (by token, after the late scripts ran): the holder's lease,
// on all of them. Found by the review of 2026-11-28 (medium).
func TestRedlockFailedReentrySparesHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection, 2 s: make ci runs it")
	}
	rdbs, _, pxs := redlockNodes(t, 3, true)
	opt := core.WithKeyPrefix("fre")
	holder := mustNew(core.NewRedlock(rdbs, opt))
	defer holder.Close()
	other := mustNew(core.NewRedlock(rdbs, opt))
	defer other.Close()
	rival := mustNew(core.NewRedlock(rdbs, opt))
	defer rival.Close()
	bg := context.Background()
	for _, c := range []*core.Client{holder, other, rival} { // dialled, scripts loaded
		if w, err := c.TryLock(bg, "warm"); err != nil {
			t.Fatal(err)
		} else if err := w.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	token := core.WithToken("job-7")
	l, err := holder.TryLock(bg, "k", token, core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	var undo []func()
	for _, px := range pxs { // well past the node timeout of a 2 s TTL (200 ms)
		undo = append(undo, px.Delay(faultnet.Up, 400*time.Millisecond, 0))
	}
	_, err = other.TryLock(bg, "k", token, core.WithTTL(2*time.Second))
	var qe *core.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("the re-entry whose nodes answered late: %v, want a QuorumError", err)
	}
	time.Sleep(1500 * time.Millisecond) // the late scripts, and any clean-up, land
	for _, u := range undo {
		u()
	}
	keptOrTold(t, rival, "k", l)
	if err := l.Release(bg); err != nil {
		t.Errorf("the holder's Release: %v", err)
	}
}

// A Redlock acquisition under a caller's token that loses the vote still
// takes back the leases it set (the nodes that answered with a fresh
// grant): the key is not left taken until their TTL.
func TestRedlockFailedGivenTokenUndoesItsGrants(t *testing.T) {
	rdbs, direct, _ := redlockNodes(t, 3, false)
	opt := core.WithKeyPrefix("freu")
	c := mustNew(core.NewRedlock(rdbs, opt))
	defer c.Close()
	bg := context.Background()
	names := core.StorageNames("freu", "k")
	for i := range 2 { // another holder on two nodes of three
		s := mustNew(core.NewRedis(direct[i], opt))
		defer s.Close()
		h, err := s.TryLock(bg, "k", core.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(bg)
	}
	_, err := c.TryLock(bg, "k", core.WithToken("job-8"), core.WithTTL(30*time.Second))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryLock against a majority held: %v, want ErrNotAcquired", err)
	}
	c.Close() // waits for the clean-up's deletes
	if n, _ := direct[2].Exists(bg, names[0]).Result(); n != 0 {
		v, _ := direct[2].Get(bg, names[0]).Result()
		t.Errorf("node 2 keeps the failed acquisition's lease %q until its TTL", v)
	}
}

// On a single server, an acquisition that waits for replicas (WithReplicaAck)
// and gets too few acknowledgements is given back; a re-entry given back
// by token deleted the holder's lease.
func TestAckedFailedReentrySparesHolder(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	cs := redisClients(t, rdb, "fra", 2)
	holder, rival := cs[0], cs[1]
	acked := redisClients(t, rdb, "fra", 1, core.WithReplicaAck(1, 50*time.Millisecond))[0] // no replica answers
	bg := context.Background()
	token := core.WithToken("job-9")
	l, err := holder.TryLock(bg, "k", token, core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	if _, err := acked.TryLock(bg, "k", token); !errors.Is(err, core.ErrReplicaAck) {
		t.Fatalf("the re-entry without a replica: %v, want ErrReplicaAck", err)
	}
	keptOrTold(t, rival, "k", l)
	// A fresh acquisition under a caller's token is given back as before.
	if _, err := acked.TryLock(bg, "k2", token); !errors.Is(err, core.ErrReplicaAck) {
		t.Fatalf("without a replica: %v, want ErrReplicaAck", err)
	}
	names := core.StorageNames("fra", "k2")
	if n, _ := rdb.Exists(bg, names[0]).Result(); n != 0 {
		t.Errorf("the failed acquisition of k2 left its lease")
	}
}

// Close gives up the leases of a Client it was renewing, fenced like a
// Release: a lease another process re-entered under the token since is
// that process's now, and stays. Close used to delete it by token.
func TestCloseSparesReentryByAnotherProcess(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	bg := context.Background()
	for _, kind := range []string{"mutex", "write"} {
		t.Run(kind, func(t *testing.T) {
			take := func(c *core.Client, opts ...core.LockOption) (*core.Lock, error) {
				if kind == "write" {
					return c.RWMutex("k").TryLock(bg, opts...)
				}
				return c.TryLock(bg, "k", opts...)
			}
			cs := redisClients(t, rdb, "frc", 3)
			first, later, rival := cs[0], cs[1], cs[2]
			token := core.WithToken("job-" + kind)
			if _, err := take(first, token, core.WithTTL(30*time.Second)); err != nil {
				t.Fatal(err)
			}
			l, err := take(later, token, core.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(bg)
			first.Close()
			keptOrToldBy(t, func(ctx context.Context) (*core.Lock, error) {
				if kind == "write" {
					return rival.RWMutex("k").TryRLock(ctx, core.WithTTL(time.Minute))
				}
				return rival.TryLock(ctx, "k", core.WithTTL(time.Minute))
			}, "k", l)
		})
	}
}

// redisClients returns n Clients on rdb under prefix (and opts), each
// closed when the test ends.
func redisClients(t *testing.T, rdb redis.UniversalClient, prefix string, n int, opts ...core.Option) []*core.Client {
	t.Helper()
	var cs []*core.Client
	for range n {
		c := mustNew(core.NewRedis(rdb, append([]core.Option{core.WithKeyPrefix(prefix)}, opts...)...))
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}
