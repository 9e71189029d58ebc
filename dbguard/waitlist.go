package dbguard

import (
	"context"
	"errors"
	"sync"
)

// errSoldOut cancels a Locked deduction's wait for its locks: a deduction
// of the same Guard found the SKU with fewer units than this one wants.
var errSoldOut = errors.New("dbguard: sold out while waiting")

// A waitlist lets a Locked deduction that finds a SKU short tell, at once,
// the deductions of the same Guard that queue for that SKU's lock wanting
// more than is left. They re-read the stock instead of waiting for the
// lock one hand-off at a time only to be refused: when a flash sale sells
// out, hundreds of queued buyers hear it in one round trip, not hundreds.
type waitlist struct {
	mu sync.Mutex
	m  map[string]map[*waiter]struct{}
}

type waiter struct {
	qty    int64
	cancel context.CancelCauseFunc
}

// add registers a deduction waiting for sku's lock.
func (w *waitlist) add(sku string, qty int64, cancel context.CancelCauseFunc) *waiter {
	e := &waiter{qty: qty, cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]map[*waiter]struct{})
	}
	set := w.m[sku]
	if set == nil {
		set = make(map[*waiter]struct{})
		w.m[sku] = set
	}
	set[e] = struct{}{}
	return e
}

// remove unregisters e.
func (w *waitlist) remove(sku string, e *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.m[sku]
	delete(set, e)
	if len(set) == 0 {
		delete(w.m, sku)
	}
}

// short tells the waiters of sku that want more than have units to stop
// waiting. have may be stale (a restock may follow); a waiter told wrongly
// re-reads the stock and queues again.
func (w *waitlist) short(sku string, have int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for e := range w.m[sku] {
		if e.qty > have {
			e.cancel(errSoldOut)
			delete(w.m[sku], e)
		}
	}
}
