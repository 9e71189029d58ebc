package etcdlock_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A record ends by etcd's lease clock: its key is attached to an etcd
// lease of its TTL, and etcd deletes it when the lease runs out.
func TestRecordExpiresByEtcd(t *testing.T) {
	ep := startEtcd(t)
	cli := newCli(t, ep)
	r := newClient(t, cli).Records()
	ctx := ctxT(t)
	if err := r.Set(ctx, "onlease", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "{rec}latchkey:{onlease}:rec")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the record's key: %+v %v, want one key on an etcd lease", resp, err)
	}
	adaptertest.RecordExpires(t, r, "exp", time.Second, 5*time.Second)
}

// Eight Clients, each on a connection of its own, claim the same tick at
// once, for 20 ticks: exactly one claim of each succeeds (etcd's minimum
// lease TTL is too long to race for an expired claim every round).
func TestClaimRace(t *testing.T) {
	ep := startEtcd(t)
	var nodes []*core.Records
	for range 8 {
		nodes = append(nodes, newClient(t, newCli(t, ep)).Records())
	}
	adaptertest.ClaimRace(t, nodes, 0)
}

// The clock-skew bound (adaptertest.ClaimWithinSkew): etcd would have
// deleted a claim kept for just its window (a lease of etcd's minimum TTL)
// long before b's clock says the tick is late; the claim is kept the skew
// longer, so b never wins.
func TestClaimWithinSkew(t *testing.T) {
	const skew = 3 * time.Second
	ep := startEtcd(t)
	a := newClient(t, newCli(t, ep), etcdlock.WithClockSkew(skew)).Records()
	b := newClient(t, newCli(t, ep), etcdlock.WithClockSkew(skew),
		etcdlock.WithClock(func() time.Time { return time.Now().Add(-skew) })).Records()
	adaptertest.ClaimWithinSkew(t, a, b, skew)
}

// A claim that etcd committed but whose answer came back after the
// deadline (by the claimer's clock, read after the transaction) is late,
// and taken back: nothing is left, and a claim in time afterwards
// succeeds.
func TestClaimLateAfterCommit(t *testing.T) {
	ep := startEtcd(t)
	planned := time.Now()
	late := newClient(t, newCli(t, ep), etcdlock.WithClock(adaptertest.AnsweredLate(planned))).Records()
	adaptertest.ClaimLateTakenBack(t, late, newClient(t, newCli(t, ep)).Records(), planned)
}

// Records have keys of their own: a record and a lock of the same key do
// not see each other, Scan lists only the lock and Records.Scan only the
// record.
func TestRecordsApartFromLeases(t *testing.T) {
	ep := startEtcd(t)
	cli := newCli(t, ep)
	c := newClient(t, cli)
	ctx := ctxT(t)
	if ok, err := c.Records().Claim(ctx, "same", "rec", time.Minute); err != nil || !ok {
		t.Fatalf("Claim: %v %v", ok, err)
	}
	l, err := c.TryLock(ctx, "same")
	if err != nil {
		t.Fatalf("TryLock beside a record: %v", err)
	}
	defer l.Release(ctx)
	var leases, records []string
	for info, err := range c.Scan(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, info.Key)
	}
	for key, err := range c.Records().Scan(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, key)
	}
	if len(leases) != 1 || leases[0] != "same" || len(records) != 1 || records[0] != "same" {
		t.Fatalf("Scan: %q, Records.Scan: %q; want [same] each", leases, records)
	}
	// What the backend lists as leases (ListLeases reads under the
	// lease names' prefix) holds the lease's key alone.
	resp, err := cli.Get(ctx, "latchkey:{", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "latchkey:{same}" {
		t.Fatalf("keys under the leases' prefix: %v %v, want latchkey:{same} alone", resp.Kvs, err)
	}
}
