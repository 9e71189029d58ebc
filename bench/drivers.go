package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Driver is one lock implementation under test. A driver instance may be used
// by many goroutines at once.
type Driver interface {
	// TryAcquire makes one attempt; it returns errBusy if the lock is held.
	TryAcquire(ctx context.Context, key string) (Held, error)
	// Acquire waits for the lock in the library's own way, bounded by ctx.
	Acquire(ctx context.Context, key string) (Held, error)
	// Close releases the driver's clients.
	Close() error
}

// Held is an acquired lock.
type Held interface {
	Release(ctx context.Context) error
}

// Fenced is implemented by held locks that carry a fencing token. The
// contended scenario checks that tokens increase from holder to holder.
type Fenced interface {
	Fence() int64
}

// errBusy is what TryAcquire returns when someone else holds the lock.
var errBusy = errors.New("lock is held")

// openArgs is what a driver constructor gets.
type openArgs struct {
	addrs   []string      // Redis servers; a driver uses the first spec.nodes
	ttl     time.Duration // lock TTL (10 s in every standard run)
	retry   time.Duration // waiting interval override; 0 = the driver's default
	counter *Counter      // must be installed on every client the driver opens
}

// driverSpec describes one driver. Adding a driver, including a multi-node
// one such as "redsync5" or "latchkey-redlock", is one register call: set
// nodes to the number of servers it needs and the matrix will start that many.
type driverSpec struct {
	name  string
	order int  // position in tables
	nodes int  // Redis servers needed
	retry bool // honours -retry
	// fastRetry adds "-retry 1ms" runs of the contended scenarios to the
	// matrix, for drivers whose default wait is slow.
	fastRetry bool
	optional  bool // left out of the matrix unless named in -drivers
	// primitive marks a latchkey primitive other than the mutex (semaphore,
	// read-write lock, LockAll, Campaign): left out of the lock matrix and
	// of the lock drivers' targets, run by the -primitives section.
	primitive bool
	// capacity is how many holders the lock lets in at once: 0 or 1 for a
	// mutex, n for a semaphore of n permits, -1 for holds that all share
	// it (read holds). The contended scenario counts an overlap only above
	// it, and checks fences and handoffs only when it is 1.
	capacity int
	about    string
	open     func(a openArgs) (Driver, error)
}

var registry = map[string]driverSpec{}

func register(s driverSpec) {
	if _, dup := registry[s.name]; dup {
		panic("duplicate driver " + s.name)
	}
	if s.nodes == 0 {
		s.nodes = 1
	}
	registry[s.name] = s
}

// holdersAtOnce is how many of workers goroutines driver lets hold its
// lock at the same time.
func holdersAtOnce(driver string, workers int) int {
	switch c := registry[driver].capacity; {
	case c < 0:
		return max(workers, 1)
	case c == 0:
		return 1
	default:
		return c
	}
}

// driverNames lists the registered drivers in table order.
func driverNames() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := registry[names[i]], registry[names[j]]
		if a.order != b.order {
			return a.order < b.order
		}
		return a.name < b.name
	})
	return names
}

func lookupDriver(name string) (driverSpec, error) {
	s, ok := registry[name]
	if !ok {
		return s, fmt.Errorf("unknown driver %q (have: %s)", name, strings.Join(driverNames(), ", "))
	}
	return s, nil
}

// openDriver checks the arguments against the spec and opens the driver.
func openDriver(name string, a openArgs) (Driver, error) {
	s, err := lookupDriver(name)
	if err != nil {
		return nil, err
	}
	if len(a.addrs) < s.nodes {
		return nil, fmt.Errorf("driver %s needs %d Redis servers, have %d", name, s.nodes, len(a.addrs))
	}
	if a.retry != 0 && !s.retry {
		return nil, fmt.Errorf("driver %s has no -retry setting", name)
	}
	a.addrs = a.addrs[:s.nodes]
	return s.open(a)
}

// newClient opens a go-redis client on addr with the counter installed.
// poolSize is -pool: the PoolSize of every client a driver opens (0: the
// go-redis default).
var poolSize int

func newClient(addr string, c *Counter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	if c != nil {
		c.Instrument(rdb)
	}
	return rdb
}

// closeAll closes clients, returning the first error.
func closeAll(clients ...*redis.Client) error {
	var first error
	for _, c := range clients {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
