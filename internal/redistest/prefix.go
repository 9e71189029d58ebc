package redistest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Prefix returns a key prefix unique to this call ("lktest-" and ten random
// characters) and deletes every key under it from rdb when the test ends, so
// that a test leaves a shared server as it found it. Use it as the
// core.WithKeyPrefix (or the adapter's prefix) of everything the test
// writes.
func Prefix(t testing.TB, rdb redis.UniversalClient) string {
	t.Helper()
	p := "lktest-" + rand.Text()[:10]
	t.Cleanup(func() { CleanPrefix(t, rdb, p) })
	return p
}

// CleanPrefix deletes every key "<prefix>:*" from rdb (every master of a
// Cluster), bounded to 10 s; a failure is logged, not fatal.
func CleanPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *redis.Client:
		err = del(ctx, c)
	}
	if err != nil {
		t.Logf("redistest: cleaning %s:*: %v", prefix, err)
	}
}
