package otel_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/httpidem"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcMethod is the one method of the gRPC test service: a request
// naming a SKU, a reply counting the handler's runs.
const grpcMethod = "/latchkey.otel.test.Stock/Deduct"

// grpcCalls serves a service of grpcMethod, registered by hand with
// well-known types (grpcmw's generated test service is internal to its
// module), behind a server span — as otelgrpc's stats handler starts one
// — and ics. handler runs the calls. It returns a func that calls it as
// user with idempotency key key ("": none) and returns the call's server
// span and error.
func grpcCalls(t *testing.T, tel *telemetry, handler func(ctx context.Context, sku string) error,
	ics ...grpc.UnaryServerInterceptor) func(user, key, sku string) (trace.SpanContext, error) {
	t.Helper()
	var mu sync.Mutex
	var last trace.SpanContext
	serverSpan := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, span := tel.tp.Tracer("test").Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		mu.Lock()
		last = span.SpanContext()
		mu.Unlock()
		return h(ctx, req)
	}
	var runs int64
	deduct := func(ctx context.Context, req any) (any, error) {
		if err := handler(ctx, req.(*wrapperspb.StringValue).GetValue()); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		runs++
		return wrapperspb.Int64(runs), nil
	}
	desc := &grpc.ServiceDesc{
		ServiceName: "latchkey.otel.test.Stock",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Deduct",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: grpcMethod}, deduct)
			}}},
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{serverSpan}, ics...)...))
	srv.RegisterService(desc, struct{}{})
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-served
	})
	return func(user, key, sku string) (trace.SpanContext, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
		if key != "" {
			ctx = grpcmw.NewKeyContext(ctx, key)
		}
		err := conn.Invoke(ctx, grpcMethod, wrapperspb.String(sku), new(wrapperspb.Int64Value))
		mu.Lock()
		defer mu.Unlock()
		return last, err
	}
}

func grpcUser(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if u := md.Get("x-user"); len(u) == 1 && u[0] != "" {
		return u[0], nil
	}
	return "", errors.New("no x-user")
}

// TestGRPCIdempotencySpans: a grpcmw Idempotency decision is the
// latchkey.idempotency span of the HTTP middlewares, a child of the call's
// server span and the parent of the handler's, counted in
// latchkey.idempotency.requests; its outcomes are the same.
func TestGRPCIdempotencySpans(t *testing.T) {
	tel := newTelemetry(t)
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	idem := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: grpcUser, Scope: "orders", Observer: tel.inst}))
	call := grpcCalls(t, tel, func(ctx context.Context, sku string) error {
		_, span := tel.tp.Tracer("test").Start(ctx, "deduct")
		span.End()
		return nil
	}, idem.UnaryServerInterceptor())

	for _, st := range []struct {
		key, sku, outcome string
		code              codes.Code
	}{
		{"k-1", "sku-1", "first", codes.OK},
		{"k-1", "sku-1", "replayed", codes.OK},
		{"k-1", "sku-2", "mismatch", codes.InvalidArgument},
	} {
		sc, err := call("ann", st.key, st.sku)
		if status.Code(err) != st.code {
			t.Fatalf("%s: %v", st.outcome, err)
		}
		checkDecision(t, tel, sc, "latchkey.idempotency", metricIdem, "orders", step{outcome: st.outcome})
		if st.outcome == "first" {
			tel.childOf(t, tel.childOf(t, sc, "latchkey.idempotency").SpanContext(), "deduct")
		}
	}
}

// TestGRPCLockAndLimitSpans: a grpcmw Lock decision is a latchkey.paramlock
// span, under which the observed core.Client's acquire and release spans
// nest; a lost lock is an error (lost); a Limit decision is a
// latchkey.limit span. Neither has a metric of its own: core measures
// their locks and permits.
func TestGRPCLockAndLimitSpans(t *testing.T) {
	tel := newTelemetry(t)
	locks, _, mr := redisClient(t, tel.inst)
	entered := make(chan struct{}, 1)
	hold := func(ctx context.Context, sku string) error {
		if sku != "lose" {
			return nil
		}
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	}
	key := func(_ context.Context, _ string, req any) (string, error) {
		return req.(*wrapperspb.StringValue).GetValue(), nil
	}
	lock := must(grpcmw.NewLock(grpcmw.LockConfig{Locks: locks, Key: key, Name: "sku", TTL: 300 * time.Millisecond, Observer: tel.inst}))
	locked := grpcCalls(t, tel, hold, lock.UnaryServerInterceptor())

	sc, err := locked("ann", "", "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, tel, sc, "latchkey.paramlock", "", "sku", step{outcome: "acquired"})
	pl := tel.childOf(t, sc, "latchkey.paramlock").SpanContext()
	tel.childOf(t, pl, "latchkey.acquire")
	tel.childOf(t, pl, "latchkey.release")

	held, err := locks.TryLock(context.Background(), "sku|key=sku-1")
	if err != nil {
		t.Fatal(err)
	}
	sc, err = locked("ann", "", "sku-1")
	held.Release(context.Background())
	if status.Code(err) != codes.Aborted {
		t.Fatalf("a held lock: %v", err)
	}
	checkDecision(t, tel, sc, "latchkey.paramlock", "", "sku", step{outcome: "locked"})

	type result struct {
		sc  trace.SpanContext
		err error
	}
	lost := make(chan result, 1)
	go func() {
		sc, err := locked("ann", "", "lose")
		lost <- result{sc, err}
	}()
	<-entered
	for _, k := range mr.Keys() {
		if strings.HasSuffix(k, "key=lose}") {
			mr.Del(k)
		}
	}
	r := <-lost
	if status.Code(r.err) != codes.Aborted || grpcmw.Reason(r.err) != grpcmw.ReasonLockLost {
		t.Fatalf("a lost lock: %v", r.err)
	}
	checkDecision(t, tel, r.sc, "latchkey.paramlock", "", "sku", step{outcome: "lock_lost", errType: "lost"})

	limit := must(grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 1, Name: "tenants", Observer: tel.inst,
		Key: func(ctx context.Context, _ string, _ any) (string, error) { return grpcUser(ctx) }}))
	limited := grpcCalls(t, tel, hold, limit.UnaryServerInterceptor())
	sc, err = limited("ann", "", "x")
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, tel, sc, "latchkey.limit", "", "tenants", step{outcome: "acquired"})
	permit, err := locks.Semaphore("tenants|ann", 1).TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sc, err = limited("ann", "", "x")
	permit.Release(context.Background())
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v", err)
	}
	checkDecision(t, tel, sc, "latchkey.limit", "", "tenants", step{outcome: "limited"})
	for _, name := range []string{"latchkey.paramlock", "latchkey.limit"} {
		if _, ok := tel.collect(t)[name]; ok {
			t.Errorf("a %s metric", name)
		}
	}
}
