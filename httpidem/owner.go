package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/latchkey/latchkey/internal/errjoin"
)

// owner runs an Idempotency request that owns its key's lease: it records
// the response, stores it on Finish and releases the lease.
type owner struct {
	g      *IdempotencyGuard
	lease  Lease
	fp     string
	ctx    context.Context // the request's, cancelled when the lease is lost
	cap    *capture
	cancel context.CancelCauseFunc
	done   chan struct{}
	rep    reporter // the decisions after Begin
}

// watch cancels the request context when the lease is lost.
func (o *owner) watch() {
	select {
	case <-o.lease.Lost():
		o.cancel(o.lease.Err())
	case <-o.done:
	}
}

// stop ends the watch.
func (o *owner) stop() {
	close(o.done)
	o.cancel(context.Canceled)
}

func (o *owner) writer(w http.ResponseWriter) http.ResponseWriter {
	o.cap = &capture{w: w, allow: o.g.cfg.StoreHeaders, max: o.g.cfg.MaxResponseBody}
	return o.cap
}

// finish stores the captured response unless StoreStatus, its size or
// streaming forbid it, and releases the lease. The status an adapter
// passes is not needed: the capture saw what went out.
func (o *owner) finish(int) *Problem {
	o.stop()
	ctx, cancel := finishContext(o.ctx)
	defer cancel()
	var rec *Record
	ok := false
	if o.cap != nil {
		rec, ok = o.cap.record(o.fp)
	}
	if lost := o.lease.Err(); lost != nil {
		_ = o.lease.Release(ctx)
		o.rep.last(ctx, OutcomeLost, 0, lost)
		return nil
	}
	if !ok || !o.g.cfg.StoreStatus(rec.Status) {
		reason := errors.New("response not storable (streamed, hijacked or too large)")
		if ok {
			reason = fmt.Errorf("status %d not stored by policy", rec.Status)
		}
		if err := o.lease.Release(ctx); err != nil && !errors.Is(err, ErrLost) {
			reason = errjoin.Join(reason, err)
		}
		o.rep.last(ctx, OutcomeNotStored, 0, reason)
		return nil
	}
	switch err := o.lease.Complete(ctx, rec, o.g.cfg.RecordTTL); {
	case errors.Is(err, ErrLost):
		o.rep.last(ctx, OutcomeLost, 0, err)
	case err != nil:
		o.rep.last(ctx, OutcomeStoreError, 0, err)
	default:
		o.rep.close(OutcomeFirst, 0, nil) // stored, as decided
	}
	return nil
}

// abort releases the lease without storing anything.
func (o *owner) abort() {
	o.stop()
	ctx, cancel := finishContext(o.ctx)
	defer cancel()
	_ = o.lease.Release(ctx)
	o.rep.last(ctx, OutcomeNotStored, 0, errors.New("handler aborted"))
}
