package core_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMemoryConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client { return mustNew(core.NewMemory()) })
}

// startMiniredis starts a miniredis whose keys age in real time.
func startMiniredis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	return redistest.Miniredis(t, true)
}

func TestMiniredisConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client {
		_, rdb := startMiniredis(t)
		return mustNew(core.NewRedis(rdb))
	})
}
