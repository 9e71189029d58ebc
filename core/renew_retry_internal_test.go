package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// slowExtend fails every renewal at once, as with no answer, in mode 1,
// and answers each renewal call delay late (or when its ctx ends, with
// its error) in mode 2.
type slowExtend struct {
	backend
	mode  atomic.Int32
	delay time.Duration
}

func (b *slowExtend) extend(ctx context.Context, reqs []extendReq) {
	switch b.mode.Load() {
	case 1:
		for i := range reqs {
			reqs[i].set(0, fmt.Errorf("i/o: %w", context.DeadlineExceeded))
		}
		return
	case 2:
		select {
		case <-time.After(b.delay):
		case <-ctx.Done():
			for i := range reqs {
				reqs[i].set(0, ctx.Err())
			}
			return
		}
	}
	b.backend.extend(ctx, reqs)
}

// Each lease of a batch of retries is given up on at a third of its own
// time left, not of the batch's most pressed member's: after an outage the
// retries due together are of leases with very different times left, and
// a batch bounded by the shortest of them gave up on all of them while the
// server was merely slow, until each was lost (found by a review of
// 5cd5310: 156 of 158 such leases lost). A lease with the time for its
// retries to get an answer keeps its key.
func TestRetryBatchGivesUpOnEachLeaseInItsOwnTime(t *testing.T) {
	c := mustNew(NewMemory())
	defer c.Close()
	sb := &slowExtend{backend: c.be, delay: 120 * time.Millisecond}
	c.be = sb
	ctx := context.Background()
	const n, ttl = 200, 2 * time.Second
	locks := make([]*Lock, 0, n)
	for i := range n { // spread over the TTL: their deadlines differ
		h, err := c.TryLock(ctx, fmt.Sprintf("spread%d", i), WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, h)
		time.Sleep(ttl / n)
	}
	defer func() {
		sb.mode.Store(0)
		for _, h := range locks {
			_ = h.Release(ctx)
		}
	}()
	sb.mode.Store(1)
	time.Sleep(ttl / 2)
	// From now on the server answers, 120 ms late. A lease whose retry
	// (one due within retryDelay) leaves it a third of its time above that
	// delay, with room to spare, must be renewed.
	need := 3*sb.delay + retryDelay(ttl) + 100*time.Millisecond
	var savable []*Lock
	for _, h := range locks {
		h.l.mu.Lock()
		left := time.Until(h.l.deadline)
		h.l.mu.Unlock()
		if h.Err() == nil && left > need {
			savable = append(savable, h)
		}
	}
	sb.mode.Store(2)
	time.Sleep(5 * ttl / 4)
	lost := 0
	for _, h := range savable {
		if h.Err() != nil {
			lost++
		}
	}
	t.Logf("%d of %d leases with more than %v left when the server came back were lost", lost, len(savable), need)
	if len(savable) < n/10 {
		t.Skipf("only %d leases had %v left when the server came back (a machine this slow proves nothing here)", len(savable), need)
	}
	if lost > 0 {
		t.Errorf("%d of %d leases lost that had more than %v left when the server came back", lost, len(savable), need)
	}
}

// A server's error reply about the call makes the lease retry alone; one
// about the server's own state, or no answer, lets it retry in a batch.
func TestRefusedClassifiesReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errorReply("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{errorReply("CROSSSLOT Keys in request don't hash to the same slot"), true},
		{errorReply("ERR unknown command"), true},
		{fmt.Errorf("node 2: %w", errorReply("MOVED 3999 127.0.0.1:6381")), true},
		{errorReply("LOADING Redis is loading the dataset in memory"), false},
		{errorReply("BUSY Redis is busy running a script"), false},
		{errorReply("OOM command not allowed when used memory > 'maxmemory'"), false},
		{errorReply("READONLY You can't write against a read only replica."), false},
		{errorReply("CLUSTERDOWN The cluster is down"), false},
		{errorReply("ERR max number of clients reached"), false},
		{errorReply("NOAUTH Authentication required."), false},
		{context.DeadlineExceeded, false},
		{errNoAnswer, false},
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := refused(tc.err); got != tc.want {
			t.Errorf("refused(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
