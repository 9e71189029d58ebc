package httpidem

import (
	"fmt"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
)

// DefaultKeyPrefix is the key prefix of a store when WithKeyPrefix is not given.
const DefaultKeyPrefix = "latchkey:http"

// A StoreOption configures NewRedisStore or NewMemoryStore. Options are
// sealed: only this package makes them.
type StoreOption interface {
	applyStore(*storeConfig)
}

type storeConfig struct {
	prefix string
	locks  *core.Client
	now    func() time.Time
	err    error // the first invalid option
}

type storeOption func(*storeConfig)

func (f storeOption) applyStore(c *storeConfig) { f(c) }

// WithKeyPrefix sets the prefix of every key the store writes (default
// DefaultKeyPrefix): records "<prefix>:{idem:...}:resp", claims
// "<prefix>:day:{<scope>:<day>:<object>}:s:<subject>". The prefix must be
// 1 to 128 bytes without braces or control characters. The leases the
// store creates itself use the same prefix.
func WithKeyPrefix(prefix string) StoreOption {
	return storeOption(func(c *storeConfig) {
		if prefix == "" || len(prefix) > 128 || strings.ContainsAny(prefix, "{}") || hasControl(prefix) {
			c.fail("prefix %q: want 1 to 128 bytes without braces or control characters", prefix)
			return
		}
		c.prefix = prefix
	})
}

// WithLocks makes the store take its in-flight leases from locks instead of
// a core.Client of its own (default: NewRedisStore makes
// core.NewRedis(rdb, core.WithKeyPrefix(prefix)) and NewMemoryStore
// core.NewMemory(...), and Close closes it). The store never closes a
// Client given here. A nil Client is an error.
func WithLocks(locks *core.Client) StoreOption {
	return storeOption(func(c *storeConfig) {
		if locks == nil {
			c.fail("nil lock client")
			return
		}
		c.locks = locks
	})
}

// WithClock sets the clock by which a MemoryStore expires records and
// claims (default time.Now), so tests can move days forward. A RedisStore
// ignores it: Redis expires keys by its own clock.
func WithClock(now func() time.Time) StoreOption {
	return storeOption(func(c *storeConfig) {
		if now == nil {
			c.fail("nil clock")
			return
		}
		c.now = now
	})
}

func (c *storeConfig) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
}

func newStoreConfig(opts []StoreOption) (storeConfig, error) {
	c := storeConfig{prefix: DefaultKeyPrefix, now: time.Now}
	for _, o := range opts {
		if o != nil {
			o.applyStore(&c)
		}
	}
	return c, c.err
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}
