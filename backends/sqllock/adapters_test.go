package sqllock_test

import (
	"testing"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/core"
)

// dbguard's Locked strategy on PostgreSQL alone: the SKU locks are rows of
// the same database as the stock, three processes each with a pool of
// their own (backends/adaptertest).
func TestDbguardLockedOnPostgres(t *testing.T) {
	db := databases[1].open(t)
	opt := table(t, db)
	adaptertest.DbguardLocked(t, databases[1].open, func(testing.TB) *core.Client {
		return newClient(t, databases[1].open(t), opt)
	})
}

// echomw's ParamLock with its locks in SQLite.
func TestEchoParamLockOnSQLite(t *testing.T) {
	db := databases[0].open(t)
	adaptertest.EchoParamLock(t, newClient(t, db, table(t, db)))
}
