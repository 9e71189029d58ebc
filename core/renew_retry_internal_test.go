package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// failingExtend fails every renewal with fail while fail is set, and
// records the size of each renewal call it failed.
type failingExtend struct {
	backend
	aa allAcquirer

	mu    sync.Mutex
	fail  error
	calls []int
}

func (b *failingExtend) canAcquireAll(ns []names) bool { return b.aa.canAcquireAll(ns) }

func (b *failingExtend) acquireAll(ctx context.Context, ns []names, values []string, ttl time.Duration) (allResult, error) {
	return b.aa.acquireAll(ctx, ns, values, ttl)
}

func (b *failingExtend) extend(ctx context.Context, reqs []extendReq) {
	b.mu.Lock()
	fail := b.fail
	if fail != nil {
		b.calls = append(b.calls, len(reqs))
	}
	b.mu.Unlock()
	if fail == nil {
		b.backend.extend(ctx, reqs)
		return
	}
	for i := range reqs {
		reqs[i].set(0, fail)
	}
}

func (b *failingExtend) setFail(err error) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = err
	calls := b.calls
	b.calls = nil
	return calls
}

// errorReply is a server's error reply, as go-redis's redis.Error is.
type errorReply string

func (e errorReply) Error() string { return string(e) }
func (errorReply) RedisError()     {}

// Leases whose renewals got no answer retry together, in batches, not one
// call per lease (which would multiply the calls on a server too slow to
// answer); leases whose renewals the server refused retry alone, since the
// reply does not say which of a batch was at fault. Either way no lease is
// lost once renewals succeed again before its deadline.
func TestRenewalRetriesBatchedUnlessRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		batched bool
	}{
		{"no answer", fmt.Errorf("i/o: %w", context.DeadlineExceeded), true},
		{"error reply", fmt.Errorf("wrapped: %w", errorReply("ERR something")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(NewMemory())
			defer c.Close()
			fb := &failingExtend{backend: c.be, aa: c.be.(allAcquirer)}
			c.be = fb
			ctx := context.Background()
			const n, ttl = 40, 3 * time.Second
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			// One call takes all: their renewals fall due together.
			g, err := c.TryLockAll(ctx, keys, WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Release(ctx)
			fb.setFail(tc.err)
			// The first renewal (at ttl/3) and three or four retries
			// (retryDelay: ttl/10) fail; the next succeeds, well before
			// the deadline (ttl).
			time.Sleep(ttl/3 + 2*ttl/10 + ttl/6)
			calls := fb.setFail(nil)
			ones := 0
			for _, k := range calls {
				if k == 1 {
					ones++
				}
			}
			t.Logf("%d renewal calls while failing, %d of them of one lease", len(calls), ones)
			if len(calls) < 2 {
				t.Fatalf("%d renewal calls while failing: want the first and a retry", len(calls))
			}
			if tc.batched && ones >= n {
				t.Errorf("%d calls of one lease after no answer: want the retries batched", ones)
			}
			if !tc.batched && ones < n {
				t.Errorf("%d calls of one lease after an error reply: want each lease to retry alone (%d)", ones, n)
			}
			time.Sleep(ttl / 3)
			for _, l := range g.Locks() {
				if err := l.Err(); err != nil {
					t.Fatalf("%s lost, though renewals succeeded again before its deadline: %v", l.Key(), err)
				}
			}
		})
	}
}
