package zklock_test

import (
	"testing"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/core"
)

// The adapters on ZooKeeper, unchanged (backends/adaptertest). temporallock
// is not among them: its module brings the Temporal SDK and gRPC, which
// would nearly double this module's graph for a check of one constructor;
// without core.CapPrimitives its WithLimit is refused, as etcdlock's
// adapters_test.go checks.

// dbguard's Locked strategy with its SKU locks in ZooKeeper (three
// processes, each on a session of its own) and its stock in SQLite.
func TestDbguardLocked(t *testing.T) {
	server(t)
	adaptertest.DbguardLocked(t, adaptertest.SQLiteFile(t), func(testing.TB) *core.Client {
		return newClient(t)
	})
}

func TestEchoParamLock(t *testing.T) {
	adaptertest.EchoParamLock(t, newClient(t))
}

// cronlock on three nodes, each on a session of its own: every tick runs
// once.
func TestCronlock(t *testing.T) {
	server(t)
	adaptertest.Cronlock(t, func(testing.TB) *core.Client { return newClient(t) })
}
