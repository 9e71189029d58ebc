package etcdlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lock on etcd: connect to the cluster, then lock as on Redis. The fence
// is an etcd revision; hand it to the store the critical section writes to.
// (Compiled, not run: it needs an etcd at 127.0.0.1:2379.)
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close() // after the Client: it does not close cli

	locks, err := etcdlock.New(cli, etcdlock.WithClientOptions(core.WithTTL(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	err = locks.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		fence, _ := core.FenceFromContext(ctx)
		fmt.Println("writing the report with fence", fence)
		return nil // ctx is cancelled if the lease is lost meanwhile
	})
	if err != nil {
		log.Fatal(err)
	}
}
