package grpcmw_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// obsKey marks the context an Observer returned.
type obsKey struct{}

// recObserver records observations: each DecisionStart marks its context
// with "kind/scope", and each end func records "kind/scope outcome", once.
type recObserver struct {
	t    *testing.T
	mu   sync.Mutex
	ends []string
}

func (o *recObserver) DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(httpidem.Decision)) {
	called := false
	return context.WithValue(ctx, obsKey{}, kind+"/"+scope), func(d httpidem.Decision) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if called {
			o.t.Errorf("end called twice: %v", d.Outcome)
		}
		called = true
		o.ends = append(o.ends, d.Kind+"/"+d.Scope+" "+string(d.Outcome))
	}
}

func (o *recObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.ends
	o.ends = nil
	return e
}

// TestObserver chains the three interceptors with one Observer: each
// decision is observed once, under its kind and scope, and the handler
// runs in the context of the innermost one (so its spans nest under it).
func TestObserver(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	locks := must(core.NewMemory())
	t.Cleanup(func() { store.Close(); locks.Close() })
	obs := &recObserver{t: t}
	idem := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: tenant, Observer: obs, Scope: "orders"}))
	limit := must(grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 1, Key: tenantKey, Name: "tenants", Observer: obs}))
	lock := must(grpcmw.NewLock(grpcmw.LockConfig{Locks: locks, Key: skuKey, Name: "stock", Observer: obs}))
	var mu sync.Mutex
	var marks []any
	client := serve(t, &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		mu.Lock()
		defer mu.Unlock()
		marks = append(marks, ctx.Value(obsKey{}))
		return &testpb.DeductReply{}, nil
	}}, unary(idem.UnaryServerInterceptor(), limit.UnaryServerInterceptor(), lock.UnaryServerInterceptor()))

	for range 2 {
		if _, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: "sku-1"}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := locks.TryLock(context.Background(), "stock|key=sku-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Deduct(as(t, "A", "k2"), &testpb.DeductRequest{Sku: "sku-1"})
	held.Release(context.Background())
	isStatus(t, err, codes.Aborted, grpcmw.ReasonLocked)

	want := []string{
		"paramlock/stock acquired", "limit/tenants acquired", "idempotency/orders first", // inner ends first
		"idempotency/orders replayed",
		"paramlock/stock locked", "limit/tenants acquired", "idempotency/orders not_stored", // Aborted is not stored
	}
	if got := obs.take(); !slices.Equal(got, want) {
		t.Errorf("observed\n%q\nwant\n%q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(marks) != 1 || marks[0] != "paramlock/stock" {
		t.Errorf("handler contexts marked %v, want the lock's observation", marks)
	}
}

// TestObserverStream: a stream's handler runs in the observation's context.
func TestObserverStream(t *testing.T) {
	locks := must(core.NewMemory())
	t.Cleanup(func() { locks.Close() })
	obs := &recObserver{t: t}
	lock := must(grpcmw.NewLock(grpcmw.LockConfig{Locks: locks, Key: skuKey, Observer: obs}))
	client := serve(t, &stock{watch: func(req *testpb.WatchRequest, ss grpc.ServerStreamingServer[testpb.Level]) error {
		if got := ss.Context().Value(obsKey{}); got != "paramlock/grpc" {
			t.Errorf("stream context marked %v", got)
		}
		return nil
	}}, []grpc.ServerOption{grpc.ChainStreamInterceptor(lock.StreamServerInterceptor())})
	s, err := client.Watch(outgoing(as(t, "", ""), "x-sku", "sku-1"), &testpb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err == nil {
		t.Fatal("a message from an empty stream")
	}
	if got := obs.take(); !slices.Equal(got, []string{"paramlock/grpc acquired"}) {
		t.Errorf("observed %q", got)
	}
}
