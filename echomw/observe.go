package echomw

import (
	"context"

	"github.com/latchkey/latchkey/httpidem"
)

// A reporter tells one request's decisions to OnDecision as they are taken
// and its last decision to the Observer (see httpidem.Observer).
type reporter struct {
	on   func(context.Context, httpidem.Decision)
	end  func(httpidem.Decision) // nil without an Observer, or once called
	base httpidem.Decision       // Kind and Scope
}

// startReport starts observing a request's decisions of kind and scope.
// It returns the context to use from then on: ctx, or the Observer's.
func startReport(ctx context.Context, obs httpidem.Observer, on func(context.Context, httpidem.Decision), kind, scope string) (context.Context, reporter) {
	r := reporter{on: on, base: httpidem.Decision{Kind: kind, Scope: scope}}
	if obs != nil {
		octx, end := obs.DecisionStart(ctx, kind, scope)
		if octx != nil {
			ctx = octx
		}
		r.end = end
	}
	return ctx, r
}

func (r *reporter) decision(o httpidem.Outcome, status int, err error) httpidem.Decision {
	d := r.base
	d.Outcome, d.Status, d.Err = o, status, err
	return d
}

// decided reports a decision to OnDecision; more may follow.
func (r *reporter) decided(ctx context.Context, o httpidem.Outcome, status int, err error) {
	if r.on != nil {
		r.on(ctx, r.decision(o, status, err))
	}
}

// last reports the request's last decision to OnDecision, then to the
// Observer.
func (r *reporter) last(ctx context.Context, o httpidem.Outcome, status int, err error) {
	r.decided(ctx, o, status, err)
	r.close(o, status, err)
}

// close ends the observation with a decision already reported to
// OnDecision. Calls after the first do nothing.
func (r *reporter) close(o httpidem.Outcome, status int, err error) {
	if end := r.end; end != nil {
		r.end = nil
		end(r.decision(o, status, err))
	}
}
