package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/servertest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// newEtcd is a lock store of etcdlock on a private one-member etcd,
// started for the test and killed when it ends: every Client gets an etcd
// client of its own, as a process would.
func newEtcd(t *testing.T) lockStore {
	t.Helper()
	endpoint := servertest.StartEtcd(t)
	dial := func(t *testing.T) *clientv3.Client {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() }) // after the Client's Close, registered later
		return cli
	}
	admin := dial(t)
	return lockStore{name: "etcd",
		client: func(t *testing.T) *core.Client {
			c := mustNew(etcdlock.New(dial(t)))
			t.Cleanup(func() { c.Close() })
			return c
		},
		steal: func(t *testing.T, lockKey string) {
			// The lease is the etcd key the Client names it (etcdlock's
			// doc: "How it works"); deleting it ends the holder's lease at
			// its next renewal, which finds the key gone.
			name := core.DefaultKeyPrefix + ":{" + lockKey + "}"
			resp, err := admin.Delete(context.Background(), name)
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("steal %q: %v keys deleted (%v), want 1", name, deleted(resp), err)
			}
		},
	}
}

func deleted(resp *clientv3.DeleteResponse) int64 {
	if resp == nil {
		return 0
	}
	return resp.Deleted
}
