package httpidem_test

import (
	"testing"

	"github.com/latchkey/latchkey/httpidem/storetest"
)

// TestStoreConformance runs package storetest on every store: MemoryStore,
// RedisStore on miniredis and RedisStore on the real Redis (unique key
// prefix, keys deleted after).
func TestStoreConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Store { return b.new(t) })
		})
	}
}
