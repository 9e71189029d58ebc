// Package storetest is the conformance suite of httpidem's stores: a store
// that passes it keeps the promises the middlewares rely on — one lease
// per key, a completed response replayed byte for byte, one first claim
// per subject, object and day, a claim given back only by its own token,
// and counts that follow the claims. httpidem's MemoryStore and RedisStore
// pass it, and its SQLStore on SQLite, PostgreSQL and MariaDB (in the
// httpidem/sqltest module); a third-party store runs it from its own
// tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store { return newMyStore(t) })
//	}
//
// Each subtest asks newStore for a fresh store (empty, or with keys no
// other subtest uses) and releases it through t.Cleanup.
package storetest

import (
	"testing"

	"github.com/latchkey/latchkey/httpidem"
)

// A Store implements both of httpidem's store protocols.
type Store interface {
	httpidem.IdempotencyStore
	httpidem.ClaimStore
}

// Run runs the whole suite on the stores newStore makes: RunIdempotency
// and RunClaims.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	t.Run("idempotency", func(t *testing.T) {
		RunIdempotency(t, func(t *testing.T) httpidem.IdempotencyStore { return newStore(t) })
	})
	t.Run("claims", func(t *testing.T) {
		RunClaims(t, func(t *testing.T) httpidem.ClaimStore { return newStore(t) })
	})
}
