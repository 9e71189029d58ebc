package core_test

// An outage is not contention: an attempt that got no answer says nothing
// about who holds the key, and a wait bound covers the whole call.

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentAddr returns a loopback address that accepts connections and never
// answers (a hung server), closed when the test ends.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestOutageIsNotContention(t *testing.T) {
	addr := refusedAddr(t)
	for _, tc := range []struct {
		name    string
		opts    *redis.Options
		refused bool // the network error must show (go-redis gives it back when it does not retry past ctx)
	}{
		{"go-redis defaults", &redis.Options{Addr: addr}, false},
		{"as the README advises", &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 300 * time.Millisecond}, true},
	} {
		rdb := redis.NewClient(tc.opts)
		c := mustNew(core.NewRedis(rdb))
		for _, wait := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			var err error
			if wait {
				_, err = c.Lock(ctx, "k")
			} else {
				_, err = c.TryLock(ctx, "k")
			}
			cancel()
			if errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, core.ErrUnavailable) {
				t.Errorf("%s, wait=%v: an unreachable Redis must be ErrUnavailable, not contention: %v", tc.name, wait, err)
			}
			if tc.refused && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s, wait=%v: the network error is lost: %v", tc.name, wait, err)
			}
			if !tc.refused && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s, wait=%v: neither the deadline nor the network error: %v", tc.name, wait, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%s, wait=%v: error spans lines: %q", tc.name, wait, err)
			}
		}
		c.Close()
		rdb.Close()
	}
}

func TestCancelledBeforeAttemptIsNotContention(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.TryLock(ctx, "k")
	if errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock on a cancelled ctx: %v, want context.Canceled and not ErrNotAcquired", err)
	}
}

// WithWaitTimeout bounds the first attempt too: a hung server answers
// nothing, and the call returns at the bound, not at the client's read
// timeout.
func TestWaitTimeoutBoundsFirstAttempt(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	start := time.Now()
	_, err := c.Lock(context.Background(), "k", core.WithWaitTimeout(300*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("Lock against a hung server: %v, want DeadlineExceeded and not ErrNotAcquired", err)
	}
	if took > 3*time.Second { // the bound, not a benchmark: the read timeout is 5 s
		t.Errorf("Lock with WithWaitTimeout(300ms) took %v", took)
	}
}

// Errors print on one line, whatever they join.
func TestErrorsOneLine(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	err := c.Do(context.Background(), "k", func(ctx context.Context) error {
		info, _ := c.Inspect(ctx, "k")
		other, err := c.TryLock(context.Background(), "k", core.WithToken(info.Token))
		if err != nil {
			return err
		}
		other.Release(context.Background()) // frees the key: this lease is lost
		<-ctx.Done()
		return errors.New("callback failed")
	})
	if !errors.Is(err, core.ErrLost) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Do: %q, want ErrLost on one line", err)
	}
}
