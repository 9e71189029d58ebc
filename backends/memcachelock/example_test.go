package memcachelock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
)

// A lock on memcached. (Not run as a test: it needs a memcached at
// 127.0.0.1:11211; the tests start their own.)
func ExampleNew() {
	mc := memcache.New("127.0.0.1:11211")
	mc.Timeout = time.Second
	mc.MaxIdleConns = 32 // above the calls made at once
	locks, err := memcachelock.New(mc, memcachelock.WithClientOptions(core.WithTTL(10*time.Second)))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx := context.Background()
	err = locks.Do(ctx, "nightly-report", func(ctx context.Context) error {
		fence, _ := core.FenceFromContext(ctx)
		fmt.Println("writing with fence", fence) // storage rejects writes below the highest fence it saw
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
