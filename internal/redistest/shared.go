package redistest

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultAddr is the address of the shared Redis when $REDIS_ADDR is unset.
const DefaultAddr = "127.0.0.1:6379"

// sharedPingTimeout bounds the PING with which Addr checks the shared Redis.
const sharedPingTimeout = time.Second

// Addr returns the address of the shared Redis: $REDIS_ADDR, or
// 127.0.0.1:6379 when it is unset. It PINGs the server (1 s timeout) and
// calls [Unavailable] if it does not answer.
//
// The shared server is shared with other tests and other packages (go test
// runs packages in parallel): use keys of your own and do not FLUSHALL.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = DefaultAddr
	}
	if _, err := command(addr, sharedPingTimeout, "PING"); err != nil {
		Unavailable(t, "no Redis answers PING at %s (set REDIS_ADDR): %v", addr, err)
	}
	return addr
}

// Client returns a *redis.Client on [Addr](t), closed in t.Cleanup.
//
// The client is created with ContextTimeoutEnabled, so context deadlines
// bound its commands; other options are go-redis defaults.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, Addr(t))
}

// newClient returns a client on addr, closed in t.Cleanup.
func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
