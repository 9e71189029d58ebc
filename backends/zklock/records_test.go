package zklock_test

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
)

// recordNode is the znode of a record of key (default key prefix).
func recordNode(key string) string { return testRoot + "/.records/latchkey:{" + key + "}:rec" }

// A record is there for its TTL and gone after it, by the time the server
// stamps on writes; it is a persistent znode, so it outlives the session
// that wrote it (a claim must outlive its node's crash).
func TestRecordExpiresByServerClock(t *testing.T) {
	c := newClient(t)
	r := c.Records()
	adaptertest.RecordExpires(t, r, "exp", 500*time.Millisecond, 3*time.Second)
	ctx := ctxT(t)

	conn := connect(t, server(t).addr, sessionTimeout)
	w, err := zklock.New(conn, zklock.WithSessionTimeout(sessionTimeout), zklock.WithRoot(testRoot))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Records().Claim(ctx, "survives", "w", time.Minute); err != nil || !ok {
		t.Fatalf("Claim: %v %v", ok, err)
	}
	w.Close()
	conn.Close() // the writer's session ends
	if v, ok, err := r.Get(ctx, "survives"); err != nil || !ok || v != "w" {
		t.Fatalf("a claim after its writer's session ended: %q %v %v", v, ok, err)
	}
}

// Eight Clients, each on a session of its own, claim the same tick at
// once, for 20 ticks — on a fresh key, and on a key whose earlier claim
// has just expired (the znode is rewritten, conditional on the version
// judged expired): exactly one claim of each succeeds.
func TestClaimRace(t *testing.T) {
	var nodes []*core.Records
	for range 8 {
		nodes = append(nodes, newClient(t).Records())
	}
	adaptertest.ClaimRace(t, nodes, 40*time.Millisecond)
}

// Expired records are deleted: a record write starts a sweep (here at
// every write) that deletes the znodes of the expired ones, and leaves the
// live ones.
func TestSweep(t *testing.T) {
	c := newClient(t, zklock.WithSweepEvery(0))
	conn := connect(t, server(t).addr, sessionTimeout)
	ctx := ctxT(t)
	key := "sweep-" + rand.Text()[:8]
	if err := c.Records().Set(ctx, key, "v", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := conn.Exists(recordNode(key)); err != nil || !ok {
		t.Fatalf("the record's znode: %v %v", ok, err)
	}
	time.Sleep(100 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := c.Records().Set(ctx, key+"-live", "v", time.Minute); err != nil {
			t.Fatal(err)
		}
		ok, _, err := conn.Exists(recordNode(key))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the znode of an expired record is still there after 5s of sweeps")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ok, _, err := conn.Exists(recordNode(key + "-live")); err != nil || !ok {
		t.Fatalf("a live record was swept: %v %v", ok, err)
	}
}
