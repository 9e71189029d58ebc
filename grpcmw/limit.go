package grpcmw

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
)

// LimitConfig configures NewLimit: at most Limit calls of one key (a
// tenant, a user, a SKU) in flight at once, across every server whose
// Locks share a backend. Locks, Limit and Key are required; the fields
// shared with httpidem.LimitConfig mean what they mean there, with the
// same defaults.
type LimitConfig struct {
	// Locks hands out the permits (core.Client.Semaphore): one core.Client
	// per backend, shared. Required.
	Locks *core.Client

	// Limit is how many calls of one key may run at once: 1 to
	// core.MaxSemaphoreLimit. Required.
	Limit int

	// Key returns the key a call is limited under, from ctx (the caller)
	// or req (nil for a stream). "" runs the call unlimited. An error
	// answers Unauthenticated — the caller could not be identified — or,
	// if it carries a gRPC status, that status. Keys are 1 to 256 bytes of
	// UTF-8 without control characters; another answers InvalidArgument
	// (REQUEST_INVALID). Required.
	Key func(ctx context.Context, fullMethod string, req any) (string, error)

	Name        string        // names the limit in storage keys and decisions; "": "limit"
	TTL         time.Duration // 0: core.DefaultTTL (30s), renewed every TTL/3 while the handler runs
	WaitTimeout time.Duration // 0: no wait — ResourceExhausted (LIMIT_REACHED) with retry-after at once
	RetryAfter  time.Duration // retry-after of that ResourceExhausted; 0: one second

	// OnDecision, if set, is called with every decision (Kind
	// httpidem.KindLimit, Scope the Name).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces the decisions (httpidem.Observer): its span
	// covers the acquisition, the handler and the release. nil: none.
	Observer httpidem.Observer
}

// Limit runs at most LimitConfig.Limit calls of one key at once: each
// running call holds a permit of a core.Semaphore, renewed while its
// handler runs and given back when it returns or panics. Make one with
// NewLimit; it is safe for concurrent use.
type Limit struct {
	g   *httpidem.LimitGuard
	key func(ctx context.Context, fullMethod string, req any) (string, error)
}

// limitKey carries a call's key (or the Key function's error) to the
// guard's Key.
type limitKey struct {
	key string
	err error
}

type limitKeyCtx struct{}

// NewLimit validates cfg, fills its zero fields and returns its
// interceptors' maker. The error matches httpidem.ErrInvalidConfig.
func NewLimit(cfg LimitConfig) (*Limit, error) {
	if cfg.Key == nil {
		return nil, fmt.Errorf("%w: nil Key", httpidem.ErrInvalidConfig)
	}
	g, err := httpidem.NewLimitGuard(httpidem.LimitConfig{
		Locks: cfg.Locks, Limit: cfg.Limit, Name: cfg.Name, TTL: cfg.TTL, WaitTimeout: cfg.WaitTimeout,
		RetryAfter: cfg.RetryAfter, OnDecision: cfg.OnDecision, Observer: cfg.Observer,
		Key: func(r *http.Request) (string, error) {
			k, _ := r.Context().Value(limitKeyCtx{}).(limitKey)
			return k.key, k.err
		},
	})
	if err != nil {
		return nil, err
	}
	return &Limit{g: g, key: cfg.Key}, nil
}

// begin decides a call: nil when it runs unlimited, else the guard's Call.
func (l *Limit) begin(ctx context.Context, method string, req any) *httpidem.Call {
	key, err := l.key(ctx, method, req)
	if err == nil && key == "" {
		return nil
	}
	ctx = context.WithValue(ctx, limitKeyCtx{}, limitKey{key, err})
	return l.g.Begin(newRequest(ctx, method, nil, nil))
}

// UnaryServerInterceptor returns the interceptor for unary calls: a call
// runs once it holds a permit of its key.
func (l *Limit) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call := l.begin(ctx, info.FullMethod, req)
		switch {
		case call == nil:
			return handler(ctx, req)
		case call.Action() != httpidem.ActionRun:
			return nil, answerUnary(ctx, call.Problem())
		}
		return runUnary(call, req, handler)
	}
}

// StreamServerInterceptor returns the interceptor for streams: a stream
// runs once it holds a permit of its key (Key is given a nil request) and
// keeps it until its handler returns.
func (l *Limit) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		call := l.begin(ss.Context(), info.FullMethod, nil)
		switch {
		case call == nil:
			return handler(srv, ss)
		case call.Action() != httpidem.ActionRun:
			return answerStream(ss, call.Problem())
		}
		return runStream(srv, ss, call, handler)
	}
}
