package httpidem

import (
	"context"
	"database/sql"
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
	client context.Context // the request's own: done when the client went away
	req    *http.Request   // the request the handler gets
	cap    *capture
	cancel context.CancelCauseFunc
	done   chan struct{}
	rep    reporter // the decisions after Begin

	// A request in a transaction (a txLease): its response is held until
	// the transaction that stores it commits.
	txl      txLease
	tx       *sql.Tx
	txCancel context.CancelCauseFunc // rolls tx back (database/sql does on cancel)
}

// watch cancels the request context when the lease is lost, and rolls
// back the request's transaction.
func (o *owner) watch() {
	select {
	case <-o.lease.Lost():
		if o.txCancel != nil {
			o.txCancel(o.lease.Err())
		}
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
	o.cap = &capture{w: w, allow: o.g.cfg.StoreHeaders, max: o.g.cfg.MaxResponseBody, hold: o.tx != nil}
	return o.cap
}

// finish stores the captured response unless StoreStatus, its size or
// streaming forbid it, and releases the lease. The status an adapter
// passes is not needed: the capture saw what went out.
func (o *owner) finish(int) *Problem {
	o.stop()
	ctx, cancel := finishContext(o.ctx)
	defer cancel()
	if o.tx != nil {
		o.finishTx(ctx)
		return nil
	}
	var rec *Record
	ok := false
	if o.cap != nil {
		// A handler that wrote nothing answered 200, and it is stored,
		// even when its client had gone: it may have done its work, and a
		// retry must not do it again. One that gives up on its context
		// answers an error (a 5xx is not stored). In a handler transaction
		// its writes can be undone instead (finishTx).
		rec, ok = o.cap.record(o.fp)
	}
	if lost := o.lease.Err(); lost != nil {
		_ = o.lease.Release(ctx)
		o.rep.last(ctx, OutcomeLost, 0, lost)
		return nil
	}
	if !ok || !o.g.cfg.StoreStatus(rec.Status) {
		reason := errors.New("response not storable (streamed, hijacked, too large, not sent whole, or nothing written after the client went away)")
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

// gaveUp reports whether the handler wrote nothing and its client went
// away: it may have given up (it saw its context done), and its implicit
// empty 200 is not known to be its answer. In a handler transaction its
// writes are then rolled back and nothing stored, so that the retry does
// the work, once (finishTx); outside one nothing can be undone, and the
// 200 is stored (finish).
func (o *owner) gaveUp() bool {
	return o.cap != nil && o.cap.status == 0 && o.client != nil && o.client.Err() != nil
}

// abort releases the lease without storing anything, and rolls back the
// request's transaction.
func (o *owner) abort() {
	o.stop()
	ctx, cancel := finishContext(o.ctx)
	defer cancel()
	if o.tx != nil {
		_ = o.txl.abortTx(ctx, o.tx)
		o.txCancel(nil)
		o.rep.last(ctx, OutcomeNotStored, 0, errors.New("handler aborted; transaction rolled back"))
		return
	}
	_ = o.lease.Release(ctx)
	o.rep.last(ctx, OutcomeNotStored, 0, errors.New("handler aborted"))
}

// finishTx ends a request in a transaction. A response the policy stores
// is stored in the transaction, which is committed, and then sent. A
// response it does not store (5xx, 429) is sent after the transaction is
// rolled back and the key given up. When the response cannot be stored
// and sent as it is — the lease was lost, the response streamed or too
// large, the commit failed — the transaction is rolled back and the
// client gets a problem instead (503, or 500 for an unstorable response),
// so it never hears of writes that were not committed.
func (o *owner) finishTx(ctx context.Context) {
	defer o.txCancel(nil)
	var rec *Record
	ok := false
	if o.cap != nil {
		rec, ok = o.cap.record(o.fp)
	}
	answer := func(o2 Outcome, p *Problem) {
		if o.cap != nil {
			problemWriter(o.g.cfg.ProblemWriter)(o.cap.w, o.req, p)
		}
		o.rep.last(ctx, o2, p.Status, p.Err)
	}
	lostProblem := func(err error) *Problem {
		p := newProblem(http.StatusServiceUnavailable, CodeLockLost,
			"the request lost its Idempotency-Key lease while it ran; its writes were rolled back: retry with the same key", err)
		p.RetryAfter = o.g.cfg.RetryAfter
		return p
	}
	if lost := o.lease.Err(); lost != nil {
		_ = o.txl.abortTx(ctx, o.tx)
		answer(OutcomeLost, lostProblem(lost))
		return
	}
	if ok && o.gaveUp() {
		_ = o.txl.abortTx(ctx, o.tx)
		err := fmt.Errorf("%w: the handler wrote nothing once its client had gone; transaction rolled back", ErrNotStorable)
		answer(OutcomeNotStored, newProblem(http.StatusInternalServerError, CodeNotStorable,
			"the handler gave no answer, so the request's writes were rolled back", err))
		return
	}
	if !ok {
		_ = o.txl.abortTx(ctx, o.tx)
		err := fmt.Errorf("%w: over MaxResponseBody (%d bytes) or hijacked; transaction rolled back", ErrNotStorable, o.g.cfg.MaxResponseBody)
		answer(OutcomeNotStored, newProblem(http.StatusInternalServerError, CodeNotStorable,
			"the response could not be stored, so the request's writes were rolled back", err))
		return
	}
	if !o.g.cfg.StoreStatus(rec.Status) {
		reason := fmt.Errorf("status %d not stored by policy; transaction rolled back", rec.Status)
		if err := o.txl.abortTx(ctx, o.tx); err != nil && !errors.Is(err, ErrLost) {
			reason = errjoin.Join(reason, err)
		}
		o.cap.send()
		o.rep.last(ctx, OutcomeNotStored, 0, reason)
		return
	}
	switch err := o.txl.completeTx(ctx, o.tx, rec, o.g.cfg.RecordTTL); {
	case err == nil:
		o.cap.send()
		o.rep.close(OutcomeFirst, 0, nil) // stored and committed, as decided
	case errors.Is(err, ErrLost):
		answer(OutcomeLost, lostProblem(err))
	default:
		p := newProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"the request's writes and response could not be committed; retry with the same Idempotency-Key", err)
		p.RetryAfter = o.g.cfg.RetryAfter
		if errors.Is(err, errCommitUnknown) {
			p.RetryAfter = o.g.cfg.LeaseTTL // the key is in flight until then
		}
		answer(OutcomeStoreError, p)
	}
}
