package core_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMemoryConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client { return core.NewMemory() })
}

// startMiniredis starts a miniredis whose clock runs: miniredis only ages
// keys when told to, so a goroutine moves it forward with real time.
func startMiniredis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	stop := mrclock.Run(mr)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() {
		stop()
		rdb.Close()
	})
	return mr, rdb
}

func TestMiniredisConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client {
		_, rdb := startMiniredis(t)
		return core.NewRedis(rdb)
	})
}
