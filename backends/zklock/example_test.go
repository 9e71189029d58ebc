package zklock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
)

// A lock on ZooKeeper: connect, declare the session timeout, lock as on
// Redis. (servers is the ensemble; here, the server the tests started.)
func ExampleNew() {
	servers := []string{srv.addr}
	const sessionTimeout = 15 * time.Second
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogInfo(false))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	locks, err := zklock.New(conn,
		zklock.WithSessionTimeout(sessionTimeout),
		zklock.WithRoot(testRoot+"/example"),
		zklock.WithClientOptions(core.WithTTL(5*time.Second)))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.TryLock(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	_, err = locks.TryLock(ctx, "nightly-report")
	fmt.Println(err)
	fmt.Println(l.Fence() > 0, l.Release(ctx))
	// Output:
	// core: lock not acquired: "nightly-report"
	// true <nil>
}
