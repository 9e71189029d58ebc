package etcdlock_test

import (
	"errors"
	"testing"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
)

// The adapters on etcd, unchanged (backends/adaptertest), and
// temporallock.

// dbguard's Locked strategy with its SKU locks in etcd (three processes,
// each on a connection of its own) and its stock in SQLite.
func TestDbguardLocked(t *testing.T) {
	ep := startEtcd(t)
	adaptertest.DbguardLocked(t, adaptertest.SQLiteFile(t), func(testing.TB) *core.Client {
		return newClient(t, newCli(t, ep))
	})
}

func TestEchoParamLock(t *testing.T) {
	adaptertest.EchoParamLock(t, newClient(t, newCli(t, startEtcd(t))))
}

// cronlock on three nodes, each on a connection of its own: every tick
// runs once.
func TestCronlock(t *testing.T) {
	ep := startEtcd(t)
	adaptertest.Cronlock(t, func(testing.TB) *core.Client {
		return newClient(t, newCli(t, ep))
	})
}

// temporallock's WithLimit runs up to n executions per key on a semaphore
// (core.CapPrimitives), which etcdlock does not offer: NewInterceptor
// refuses it at start-up. Without WithLimit (one execution per key, a
// plain lock) the interceptor is made on this Client.
func TestTemporallock(t *testing.T) {
	ep := startEtcd(t)
	c := newClient(t, newCli(t, ep))
	if c.Capabilities()&core.CapPrimitives != 0 {
		t.Fatal("etcdlock declares core.CapPrimitives: WithLimit should be accepted")
	}
	key := temporallock.WithKey(temporallock.KeyByWorkflowID("Charge"))
	ic, err := temporallock.NewInterceptor(c, key, temporallock.WithLimit(3))
	if ic != nil || !errors.Is(err, core.ErrUnsupported) || !errors.Is(err, temporallock.ErrInvalidOption) {
		t.Fatalf("NewInterceptor with WithLimit(3): %v, %v; want ErrUnsupported and ErrInvalidOption", ic, err)
	}
	ic, err = temporallock.NewInterceptor(c, key)
	if err != nil || ic == nil {
		t.Fatalf("NewInterceptor without WithLimit: %v", err)
	}
}
