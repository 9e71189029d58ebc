package sqltest_test

import (
	"testing"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/httpidem/storetest"
)

// TestConformance runs package storetest on a SQLStore on every database,
// plain and made WithHandlerTx (whose leases also store by Complete).
func TestConformance(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db := d.open(t)
		t.Run("plain", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t, db) })
		})
		t.Run("handlertx", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t, db, httpidem.WithHandlerTx(nil)) })
		})
	})
}
