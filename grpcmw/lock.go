package grpcmw

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultLockName is the name of a Lock's locks when LockConfig.Name is
// empty.
const DefaultLockName = "grpc"

// LockConfig configures NewLock. Locks and Key are required; the fields
// shared with httpidem.ParamLockConfig mean what they mean there, with the
// same defaults.
type LockConfig struct {
	// Locks takes the locks: one core.Client per backend, shared. Required.
	Locks *core.Client

	// Key returns the key a call is locked under: the SKU or order it
	// works on, read from req (nil for a stream: its key comes from ctx
	// and the method, since its messages are the handler's to read). ""
	// runs the call unlocked, so one interceptor can lock some methods
	// only. An error answers InvalidArgument (an error carrying a gRPC
	// status answers that status) and is not observed. Keys are 1 to
	// MaxKeyLength bytes of UTF-8 without control characters; another
	// answers InvalidArgument (REQUEST_INVALID). Required.
	Key func(ctx context.Context, fullMethod string, req any) (string, error)

	// Name names the locks, to which the key is added: the lock key is
	// "<Name>|key=<key>" (see httpidem.ParamLockGuard.LockKey), so calls
	// of every method whose Key returns the same key exclude each other;
	// give Locks another Name to keep them apart. A fixed name, never an
	// ID: it is the decision's scope in telemetry. Package otel's default
	// lock name (the key up to its first ':') is "_OTHER" for a Name
	// without ':'; otel.WithLockName can cut at the first '|' instead.
	// "": DefaultLockName.
	Name string

	TTL          time.Duration // 0: core.DefaultTTL (30s), renewed every TTL/3 while the handler runs
	WaitTimeout  time.Duration // 0: no wait — Aborted (RESOURCE_LOCKED) with retry-after at once
	RetryAfter   time.Duration // retry-after of that Aborted; 0: one second
	MaxKeyLength int           // 0: httpidem.DefaultMaxValueLength (128), at most 256

	// OnDecision, if set, is called with every decision (Kind
	// httpidem.KindParamLock, Scope the Name).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces the decisions (httpidem.Observer): its span
	// covers the acquisition, the handler and the release, so the Locks'
	// own spans (when the core.Client is observed too) nest under it. nil:
	// none.
	Observer httpidem.Observer
}

// Lock runs the calls whose key is the same strictly one at a time across
// every server sharing its Locks' backend: see the package doc. Make one
// with NewLock; it is safe for concurrent use.
type Lock struct {
	g   *httpidem.ParamLockGuard
	key func(ctx context.Context, fullMethod string, req any) (string, error)
}

// NewLock validates cfg, fills its zero fields and returns its
// interceptors' maker. The error matches httpidem.ErrInvalidConfig.
func NewLock(cfg LockConfig) (*Lock, error) {
	if cfg.Key == nil {
		return nil, fmt.Errorf("%w: nil Key", httpidem.ErrInvalidConfig)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultLockName
	}
	g, err := httpidem.NewParamLockGuard(httpidem.ParamLockConfig{
		Locks: cfg.Locks, Name: cfg.Name, TTL: cfg.TTL, WaitTimeout: cfg.WaitTimeout, RetryAfter: cfg.RetryAfter,
		MaxValueLength: cfg.MaxKeyLength, OnDecision: cfg.OnDecision, Observer: cfg.Observer,
	})
	if err != nil {
		return nil, err
	}
	return &Lock{g: g, key: cfg.Key}, nil
}

// begin decides a call: nil when it runs unlocked, else the guard's Call.
func (l *Lock) begin(ctx context.Context, method string, req any) (*httpidem.Call, error) {
	key, err := l.key(ctx, method, req)
	switch {
	case err != nil:
		return nil, keyError(err, codes.InvalidArgument)
	case key == "":
		return nil, nil
	}
	return l.g.Begin(newRequest(ctx, method, nil, nil), "", []httpidem.Param{{Name: "key", Value: key}}), nil
}

// keyError is the answer to a Key function's error: its own status, or c.
func keyError(err error, c codes.Code) error {
	if st, ok := grpcStatus(err); ok {
		return st.Err()
	}
	return status.Errorf(c, "grpcmw: the call's key: %v", err)
}

// UnaryServerInterceptor returns the interceptor for unary calls: a call
// runs once it holds the lock of its key.
func (l *Lock) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call, err := l.begin(ctx, info.FullMethod, req)
		switch {
		case err != nil:
			return nil, err
		case call == nil:
			return handler(ctx, req)
		case call.Action() != httpidem.ActionRun:
			return nil, answerUnary(ctx, call.Problem())
		}
		return runUnary(call, req, handler)
	}
}

// StreamServerInterceptor returns the interceptor for streams: a stream
// runs once it holds the lock of its key (Key is given a nil request) and
// keeps it until its handler returns.
func (l *Lock) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		call, err := l.begin(ss.Context(), info.FullMethod, nil)
		switch {
		case err != nil:
			return err
		case call == nil:
			return handler(srv, ss)
		case call.Action() != httpidem.ActionRun:
			return answerStream(ss, call.Problem())
		}
		return runStream(srv, ss, call, handler)
	}
}
