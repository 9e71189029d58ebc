package httpidem

import "context"

// An Observer traces and measures what the middlewares decide; package
// otel's Instrumentation is one. Set it in a config's Observer field.
//
// OnDecision hears each decision once it is taken. An Observer is called
// earlier, when the middleware starts deciding and before its first store
// call. So the span an Observer starts is the parent of the store's own
// spans (the Redis command spans of go-redis's OpenTelemetry hook, the
// lock spans of an observed core.Client given with WithLocks). It then
// hears the request's last decision, once.
type Observer interface {
	// DecisionStart is called when a middleware starts deciding a request,
	// before any store call. It gets the request's context, the kind
	// (KindIdempotency, KindDaily or KindParamLock) and
	// the scope (Decision.Scope: the Daily scope, IdempotencyConfig.Scope,
	// or the ParamLock name).
	//
	// It returns the context the middleware uses from then on, for its
	// store calls and, when the request runs, for the handler and the
	// completion after it (storing the response, giving back a lease or
	// a claim). A nil context leaves the request's own in place.
	//
	// The middleware calls the returned func exactly once, with the
	// request's last Decision (nil: nothing to call):
	//
	//   - at once when the middleware answers or stops deciding: replayed,
	//     in_flight, mismatch, invalid, store_error, duplicate. A store_error
	//     with FailOpen ends the observation before the unprotected handler
	//     runs;
	//   - after the handler and the completion when the request ran: first
	//     (an Idempotency response stored, or a Daily claim kept), or what
	//     the completion reported instead (lease_lost, not_stored,
	//     store_error; released). For ParamLock: acquired, or lock_lost, or
	//     store_error if the release failed.
	//
	// A request without an Idempotency-Key that needs none, a request the
	// Skipper skips, and a Count-mode request whose handler did not answer
	// 2xx are never observed. In Count mode the observation covers the
	// claim taken after the handler, not the handler.
	DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(Decision))
}

// A reporter tells one request's decisions to OnDecision as they are taken
// and its last decision to the Observer.
type reporter struct {
	on   func(context.Context, Decision)
	end  func(Decision) // nil without an Observer, or once called
	base Decision       // Kind and Scope
}

// startReport starts observing a request's decisions of kind and scope.
// It returns the context to use from then on: ctx, or the Observer's.
func startReport(ctx context.Context, obs Observer, on func(context.Context, Decision), kind, scope string) (context.Context, reporter) {
	r := reporter{on: on, base: Decision{Kind: kind, Scope: scope}}
	if obs != nil {
		octx, end := obs.DecisionStart(ctx, kind, scope)
		if octx != nil {
			ctx = octx
		}
		r.end = end
	}
	return ctx, r
}

func (r *reporter) decision(o Outcome, status int, err error) Decision {
	d := r.base
	d.Outcome, d.Status, d.Err = o, status, err
	return d
}

// decided reports a decision to OnDecision; more may follow.
func (r *reporter) decided(ctx context.Context, o Outcome, status int, err error) {
	if r.on != nil {
		r.on(ctx, r.decision(o, status, err))
	}
}

// last reports the request's last decision to OnDecision, then to the
// Observer.
func (r *reporter) last(ctx context.Context, o Outcome, status int, err error) {
	r.decided(ctx, o, status, err)
	r.close(o, status, err)
}

// close ends the observation with a decision already reported to
// OnDecision (a first request that completed as decided). Calls after the
// first do nothing.
func (r *reporter) close(o Outcome, status int, err error) {
	if end := r.end; end != nil {
		r.end = nil
		end(r.decision(o, status, err))
	}
}
