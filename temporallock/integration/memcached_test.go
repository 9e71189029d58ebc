package integration_test

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/servertest"
)

// newMemcached is a lock store of memcachelock on a private memcached,
// started for the test and killed when it ends: every Client gets a
// memcache client (and its connections) of its own, as a process would.
func newMemcached(t *testing.T) lockStore {
	t.Helper()
	addr := servertest.StartMemcached(t)
	dial := func(t *testing.T) *memcache.Client {
		mc := memcache.New(addr)
		mc.Timeout = 2 * time.Second // a two-core machine that also runs the Temporal server
		mc.MaxIdleConns = 16
		t.Cleanup(func() { mc.Close() }) // after the Client's Close, registered later
		return mc
	}
	admin := dial(t)
	return lockStore{name: "memcached",
		client: func(t *testing.T) *core.Client {
			c := mustNew(memcachelock.New(dial(t)))
			t.Cleanup(func() { c.Close() })
			return c
		},
		steal: func(t *testing.T, lockKey string) {
			// The lease is an item named by the namespace and the SHA-256
			// of the lease name in unpadded base64url, then ":l"
			// (memcachelock's doc: "How it works"); deleting it ends the
			// holder's lease at its next renewal, which finds it gone.
			name := core.DefaultKeyPrefix + ":{" + lockKey + "}"
			sum := sha256.Sum256([]byte(name))
			item := memcachelock.DefaultNamespace + base64.RawURLEncoding.EncodeToString(sum[:]) + ":l"
			if err := admin.Delete(item); err != nil { // memcache.ErrCacheMiss: nothing deleted
				t.Fatalf("steal %q (item %s): %v, want the lease deleted", name, item, err)
			}
		},
	}
}
