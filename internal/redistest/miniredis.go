package redistest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
)

// Miniredis starts an embedded miniredis and a client on it, both closed
// in t.Cleanup. With clock set, its keys age in real time (miniredis ages
// keys only when told to; see internal/mrclock).
func Miniredis(t testing.TB, clock bool) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	stop := func() {}
	if clock {
		stop = mrclock.Run(mr)
	}
	t.Cleanup(func() {
		stop()
		rdb.Close()
	})
	return mr, rdb
}
