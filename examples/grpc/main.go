// Command grpc shows package grpcmw on a small gRPC shop served on a
// loopback port: orders are idempotent (a retry whose first answer was
// lost gets the stored result; a key reused for another order is refused;
// a duplicate of an order still running is told to retry), run one at a
// time per SKU under a fenced lock, and each user may watch one stock
// stream at a time — then a scripted client exercises each behaviour.
//
// The client attaches a fresh idempotency key to every logical call with
// grpcmw.UnaryClientInterceptor, chained before (outside) its retrying
// interceptor, so every attempt of a call carries the same key.
//
// With -trace, the interceptors and the locks are instrumented by package
// otel: each call is a server span with the decisions inside
// (latchkey.idempotency, latchkey.paramlock for the SKU lock,
// latchkey.limit for the streams, and the locks' latchkey.acquire and
// latchkey.release under them), printed as JSON lines by OpenTelemetry's
// stdout exporter, and the metrics are summed up at the end.
//
//	cd examples && go run ./grpc                      # embedded miniredis
//	cd examples && go run ./grpc -trace               # ... printing spans and metrics
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./grpc
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/examples/grpc/shoppb"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/httpidem"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func main() {
	env := demo.Start("examples/grpc")
	defer env.Close()
	tel, rdb := env.Tel, env.Redis
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A fresh prefix per run, so a real Redis shows the same story twice;
	// its keys are deleted at the end.
	prefix := fmt.Sprintf("demo:grpc:%d", time.Now().UnixNano())
	defer deleteKeys(rdb, prefix)
	lockOpts := []core.Option{core.WithKeyPrefix(prefix)}
	var obs httpidem.Observer // stays a nil interface without -trace
	if tel.Inst != nil {
		obs = tel.Inst
		lockOpts = append(lockOpts, core.WithObserver(tel.Inst))
	}
	locks, err := core.NewRedis(rdb, lockOpts...)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store, err := httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix), httpidem.WithLocks(locks))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	s := newShop()
	srv, err := s.server(store, locks, obs, tel.Tracer)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	c := &client{}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(
			grpcmw.UnaryClientInterceptor(), // first: one key per logical call
			c.retry,                         // then: every attempt resends that key
		))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	c.shop = shoppb.NewShopClient(conn)

	ok := c.script(ctx, s)
	s.printDecisions()
	if !ok {
		os.Exit(1)
	}
}

// shop is the demo service: stock per SKU, written with the fence of the
// SKU's lock.
type shop struct {
	shoppb.UnimplementedShopServer

	mu        sync.Mutex
	stock     map[string]int64
	fences    map[string]int64 // the highest fence each SKU was written with
	orders    int
	decided   map[string]int
	loseNext  atomic.Bool   // the network drops the next answer, after the work is done
	slowStart chan struct{} // a value when a slow order starts (for the script)
}

func newShop() *shop {
	return &shop{
		stock:     map[string]int64{"sku-42": 10, "sku-7": 5},
		fences:    map[string]int64{},
		decided:   map[string]int{},
		slowStart: make(chan struct{}, 1),
	}
}

// user plays the part of authentication: the caller's ID.
func user(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if u := md.Get("x-user"); len(u) == 1 && u[0] != "" {
		return u[0], nil
	}
	return "", status.Error(codes.Unauthenticated, "not logged in")
}

// server builds the gRPC server: spans, the network that may lose an
// answer, then idempotency outside the SKU lock (a replay takes no lock),
// and a limit of one stock stream per user.
func (s *shop) server(store httpidem.IdempotencyStore, locks *core.Client, obs httpidem.Observer, tracer trace.Tracer) (*grpc.Server, error) {
	idem, err := grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{
		Store: store, Principal: user, Require: true, Methods: []string{shoppb.Shop_Order_FullMethodName},
		Scope: "orders", OnDecision: s.decide, Observer: obs,
	})
	if err != nil {
		return nil, err
	}
	lock, err := grpcmw.NewLock(grpcmw.LockConfig{
		Locks: locks, Name: "sku", OnDecision: s.decide, Observer: obs,
		Key: func(_ context.Context, _ string, req any) (string, error) {
			if r, ok := req.(*shoppb.OrderRequest); ok {
				return r.GetSku(), nil
			}
			return "", nil
		},
	})
	if err != nil {
		return nil, err
	}
	watchers, err := grpcmw.NewLimit(grpcmw.LimitConfig{
		Locks: locks, Limit: 1, Name: "watchers", OnDecision: s.decide, Observer: obs,
		Key: func(ctx context.Context, _ string, _ any) (string, error) { return user(ctx) },
	})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(
		grpc.WaitForHandlers(true), // Stop waits for the handlers, and so for their releases
		grpc.ChainUnaryInterceptor(serverSpans(tracer), s.network, idem.UnaryServerInterceptor(), lock.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(watchers.StreamServerInterceptor()),
	)
	shoppb.RegisterShopServer(srv, s)
	return srv, nil
}

// serverSpans starts a server span per call, named by its method — in
// short, what otelgrpc's stats handler does. Without -trace the tracer is
// a no-op.
func serverSpans(tracer trace.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, span := tracer.Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		return handler(ctx, req)
	}
}

// network plays a flaky network: when loseNext is set, the call runs but
// its answer never reaches the client, which sees Unavailable.
func (s *shop) network(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if s.loseNext.CompareAndSwap(true, false) {
		return nil, status.Error(codes.Unavailable, "connection reset (the demo lost this answer)")
	}
	return resp, err
}

func (s *shop) decide(_ context.Context, d httpidem.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decided[d.Kind+" "+string(d.Outcome)]++
}

// Order deducts stock under the SKU's lock, writing with its fence: a
// write with a fence lower than the SKU's last one is refused, as a
// database row with a fence column would refuse it.
func (s *shop) Order(ctx context.Context, req *shoppb.OrderRequest) (*shoppb.OrderReply, error) {
	fence, ok := core.FenceFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "order outside its SKU's lock")
	}
	if req.GetWorkMs() > 0 {
		s.slowStart <- struct{}{}
		select {
		case <-time.After(time.Duration(req.GetWorkMs()) * time.Millisecond):
		case <-ctx.Done(): // the caller gave up, or the lock was lost
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case fence <= s.fences[req.GetSku()]:
		return nil, status.Errorf(codes.Aborted, "stale fence %d", fence)
	case s.stock[req.GetSku()] < req.GetQty():
		return nil, status.Errorf(codes.FailedPrecondition, "only %d of %s left", s.stock[req.GetSku()], req.GetSku())
	}
	s.fences[req.GetSku()] = fence
	s.stock[req.GetSku()] -= req.GetQty()
	s.orders++
	return &shoppb.OrderReply{OrderId: fmt.Sprintf("order-%d", s.orders), Sku: req.GetSku(),
		Left: s.stock[req.GetSku()], Fence: fence}, nil
}

// Watch sends the level of a SKU, then holds the stream open until the
// client leaves.
func (s *shop) Watch(req *shoppb.WatchRequest, ss grpc.ServerStreamingServer[shoppb.Level]) error {
	s.mu.Lock()
	qty := s.stock[req.GetSku()]
	s.mu.Unlock()
	if err := ss.Send(&shoppb.Level{Sku: req.GetSku(), Qty: qty}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return nil
}

func (s *shop) printDecisions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for k, n := range s.decided {
		lines = append(lines, fmt.Sprintf("  %-28s %d", k, n))
	}
	sort.Strings(lines)
	fmt.Println("\ndecisions (OnDecision):")
	fmt.Println(strings.Join(lines, "\n"))
}
