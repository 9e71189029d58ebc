package grpcmw_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Review 19: Limit's permit release is unfenced on Redis; when go-redis
// sent it again after a lost answer, it answered "not held" for a permit
// held throughout (before permits left release marks). runUnary then replaces the handler's own (storable)
// error by Aborted LOCK_LOST, so Idempotency stores nothing and the
// client's retry under the same key runs the handler again.
func TestR19LimitReleaseLostAnswerRerunsHandler(t *testing.T) {
	srv := redistest.StartServer(t)
	px := faultnet.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr()}) // default MaxRetries: resends
	t.Cleanup(func() { rdb.Close() })
	locks := must(core.NewRedis(rdb, core.WithKeyPrefix("r19")))
	t.Cleanup(func() { locks.Close() })
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })

	x := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: tenant}))
	lim := must(grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 2, Key: func(ctx context.Context, _ string, _ any) (string, error) {
		return tenant(ctx)
	}}))
	var runs atomic.Int64
	var lost func() int
	client := serve(t, &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		runs.Add(1)
		if req.GetSku() == "lose" && lost == nil {
			lost = px.LoseAnswer([]byte("limit|T19")) // the next command on the permit: its release
		}
		return nil, status.Error(codes.FailedPrecondition, "out of stock") // stored by DefaultStoreCode
	}}, unary(x.UnaryServerInterceptor(), lim.UnaryServerInterceptor()))

	// Warm up: loads the scripts, so the armed command is an EVALSHA.
	if _, err := client.Deduct(as(t, "T19", "k-warm"), &testpb.DeductRequest{Sku: "warm"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("warm-up: %v", err)
	}
	runs.Store(0)
	_, err := client.Deduct(as(t, "T19", "k-lose"), &testpb.DeductRequest{Sku: "lose"})
	t.Logf("first call: %v (reason %q); answers lost %d", err, grpcmw.Reason(err), lost())
	if lost() != 1 {
		t.Fatal("no answer lost: the case under test did not arise")
	}
	_, err2 := client.Deduct(as(t, "T19", "k-lose"), &testpb.DeductRequest{Sku: "lose"})
	t.Logf("retry: %v (reason %q); handler runs %d", err2, grpcmw.Reason(err2), runs.Load())
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("first call answered %v, want the handler's FailedPrecondition (its permit was held throughout)", err)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times for one idempotency key, want 1", runs.Load())
	}
}

// Review 19: the Lock interceptor's mutex release is fenced, but a
// release sent again after a lost answer said "not held" when a waiter
// (here on another server) took the key in between, before mutex releases
// that wake a waiter left release marks; the holder's
// own storable error is then replaced by Aborted LOCK_LOST, and under
// Idempotency its retry runs the handler again.
func TestR19LockReleaseLostAnswerWithWaiter(t *testing.T) {
	srv := redistest.StartServer(t)
	px := faultnet.Start(t, srv.Addr())
	rdb1 := redis.NewClient(&redis.Options{Addr: px.Addr()}) // server 1: through the proxy, default retries
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb1.Close(); rdb2.Close() })
	locks1 := must(core.NewRedis(rdb1, core.WithKeyPrefix("r19")))
	locks2 := must(core.NewRedis(rdb2, core.WithKeyPrefix("r19")))
	t.Cleanup(func() { locks1.Close(); locks2.Close() })
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	key := func(_ context.Context, _ string, req any) (string, error) {
		return req.(*testpb.DeductRequest).GetSku(), nil
	}
	x := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: tenant}))
	l1 := must(grpcmw.NewLock(grpcmw.LockConfig{Locks: locks1, Key: key, WaitTimeout: 10 * time.Second}))
	l2 := must(grpcmw.NewLock(grpcmw.LockConfig{Locks: locks2, Key: key, WaitTimeout: 10 * time.Second}))
	var runs atomic.Int64
	var lost func() int
	waiting := make(chan struct{})
	svc := &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		n := runs.Add(1)
		if req.GetQty() == 1 && lost == nil {
			<-waiting
			time.Sleep(100 * time.Millisecond) // the waiter is queued on the lock
			lost = px.LoseAnswer([]byte("sku19"))
		}
		if req.GetQty() == 2 {
			return &testpb.DeductReply{Run: n}, nil
		}
		return nil, status.Error(codes.FailedPrecondition, "out of stock")
	}}
	c1 := serve(t, svc, unary(x.UnaryServerInterceptor(), l1.UnaryServerInterceptor()))
	c2 := serve(t, svc, unary(l2.UnaryServerInterceptor()))
	// Warm up server 1's scripts.
	_, _ = c1.Deduct(as(t, "A", "k-warm"), &testpb.DeductRequest{Sku: "warm19"})
	runs.Store(0)
	done := make(chan error, 1)
	go func() {
		_, err := c1.Deduct(as(t, "A", "k-lock"), &testpb.DeductRequest{Sku: "sku19", Qty: 1})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	go func() { time.Sleep(50 * time.Millisecond); close(waiting) }()
	if _, err := c2.Deduct(as(t, "B", ""), &testpb.DeductRequest{Sku: "sku19", Qty: 2}); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	err := <-done
	t.Logf("holder: %v (reason %q); answers lost %d", err, grpcmw.Reason(err), lost())
	if lost() != 1 {
		t.Fatal("no answer lost: the case under test did not arise")
	}
	runs.Store(0)
	_, err2 := c1.Deduct(as(t, "A", "k-lock"), &testpb.DeductRequest{Sku: "sku19", Qty: 1})
	t.Logf("retry: %v; runs %d", err2, runs.Load())
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("holder answered %v, want its handler's FailedPrecondition (it held the lock throughout)", err)
	}
	if runs.Load() != 0 {
		t.Errorf("the retry under the same idempotency key ran the handler again")
	}
}
