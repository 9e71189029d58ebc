package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// The lease table: how a lost lease is tied to its trace.
//
// core reports a loss through Observer.LeaseLost(key, fence, …), long
// after the latchkey.acquire span ended and without a context. To put the
// loss in the right trace, the acquisition of every traced lease records
// two things here, keyed by the lock key:
//
//   - the acquire span's context, which becomes the parent of the
//     latchkey.lost span (and of latchkey.renew spans), so the loss shows
//     in the trace that took the lock;
//   - the span that was current when the lock was taken (the caller's
//     span: an HTTP request, a cron run), which gets a latchkey.lease.lost
//     event if it is still recording — the case of Client.Do, whose caller
//     is still waiting for the callback the loss cancels.
//
// The entry is removed by the lease's release or its loss (for a lost
// lease, always by LeaseLost, which core may call after the release),
// matched by fence so a late release of an old lease never removes
// its successor's entry. A lease is always released or lost (Client.Close
// reports the leases it drops as lost), so entries do not pile up; the
// table is bounded anyway (maxLeases) — past that, losses are reported as
// root spans. Only leases whose acquire span is recording are recorded, so
// with sampling off or no-op providers the table stays empty.
//
// Keys are unique per backend, not per process: two Clients on different
// backends (or key prefixes) holding the same key at once share one entry,
// and the loss of one may then be filed under the other's trace. That
// costs a trace link, never a measurement.

// maxLeases bounds the lease table.
const maxLeases = 1 << 16

type leaseEntry struct {
	fence        int64
	acquire      trace.SpanContext
	caller       trace.Span
	callerIsTick bool // caller is a latchkey.cron.run span (see TickStart)
}

type leaseTable struct {
	mu sync.Mutex
	m  map[string]leaseEntry
}

func (t *leaseTable) put(key string, e leaseEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]leaseEntry)
	}
	if _, ok := t.m[key]; ok || len(t.m) < maxLeases {
		t.m[key] = e
	}
}

// take removes and returns the entry of key's lease with fence.
func (t *leaseTable) take(key string, fence int64) (leaseEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok || e.fence != fence {
		return leaseEntry{}, false
	}
	delete(t.m, key)
	return e, true
}

// parent returns ctx with key's acquire span as its parent span, if the
// lease is in the table.
func (t *leaseTable) parent(ctx context.Context, key string) context.Context {
	t.mu.Lock()
	e, ok := t.m[key]
	t.mu.Unlock()
	if !ok {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, e.acquire)
}

// len returns the number of entries (for tests, through export_test.go).
func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
