package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// A Call is one request that passed Guard.Begin: it replays a stored
// response, or it owns its key's lease until Finish or Abort. Its methods
// are called from the request's goroutine.
type Call struct {
	g      *Guard
	rec    *Record // replay
	lease  Lease   // owner; nil when replaying or failing open
	fp     string
	req    *http.Request
	cap    *capture
	cancel context.CancelCauseFunc
	done   chan struct{}
	ended  bool
	rep    reporter // an owner's decisions after Begin
}

// Replay writes the stored response — its status, headers and body byte
// for byte, plus Idempotent-Replayed: true — and reports true, if the Call
// is a replay; otherwise it writes nothing and reports false.
func (c *Call) Replay(w http.ResponseWriter) bool {
	if c.rec == nil {
		return false
	}
	writeRecord(w, c.rec)
	return true
}

// Request returns the request to hand to the handler: its body is readable
// again, and its context is cancelled — with a cause matching ErrLeaseLost
// — if the lease is lost while the handler runs.
func (c *Call) Request() *http.Request { return c.req }

// Capture returns w wrapped so the response is recorded as it is sent (up
// to MaxResponseBody; flushing or hijacking makes it unstorable). The
// wrapper supports http.NewResponseController through Unwrap.
func (c *Call) Capture(w http.ResponseWriter) http.ResponseWriter {
	if c.lease == nil {
		return w
	}
	c.cap = &capture{w: w, allow: c.g.cfg.StoreHeaders, max: c.g.cfg.MaxResponseBody}
	return c.cap
}

// watch cancels the request context when the lease is lost.
func (c *Call) watch() {
	select {
	case <-c.lease.Lost():
		c.cancel(c.lease.Err())
	case <-c.done:
	}
}

// end stops the watch; it reports false if the Call had already ended.
func (c *Call) end() bool {
	if c.lease == nil || c.ended {
		return false
	}
	c.ended = true
	close(c.done)
	c.cancel(context.Canceled)
	return true
}

// Finish stores the captured response (unless StoreStatus, its size or
// streaming forbid it) and releases the lease. The store runs without the
// request's cancellation, with a short timeout. Calls after the first, and
// calls on a replay, do nothing.
func (c *Call) Finish() {
	if !c.end() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.req.Context()), completeTimeout)
	defer cancel()
	var rec *Record
	ok := false
	if c.cap != nil {
		rec, ok = c.cap.record(c.fp)
	}
	if lost := c.lease.Err(); lost != nil {
		_ = c.lease.Release(ctx)
		c.rep.last(ctx, OutcomeLost, 0, lost)
		return
	}
	if !ok || !c.g.cfg.StoreStatus(rec.Status) {
		reason := errors.New("response not storable (streamed, hijacked or too large)")
		if ok {
			reason = fmt.Errorf("status %d not stored by policy", rec.Status)
		}
		if err := c.lease.Release(ctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			reason = errors.Join(reason, err)
		}
		c.rep.last(ctx, OutcomeNotStored, 0, reason)
		return
	}
	switch err := c.lease.Complete(ctx, rec, c.g.cfg.RecordTTL); {
	case errors.Is(err, ErrLeaseLost):
		c.rep.last(ctx, OutcomeLost, 0, err)
	case err != nil:
		c.rep.last(ctx, OutcomeStoreError, 0, err)
	default:
		c.rep.close(OutcomeFirst, 0, nil) // stored, as decided
	}
}

// Abort releases the lease without storing anything — for a handler that
// panicked — so a retry runs again. Calls after Finish or Abort do nothing.
func (c *Call) Abort() {
	if !c.end() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.req.Context()), completeTimeout)
	defer cancel()
	_ = c.lease.Release(ctx)
	c.rep.last(ctx, OutcomeNotStored, 0, errors.New("handler aborted"))
}

func itoa(n int) string     { return strconv.Itoa(n) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
