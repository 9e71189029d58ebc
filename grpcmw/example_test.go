package grpcmw_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// inventory is the service of the examples: Deduct numbers its runs.
type inventory struct {
	testpb.UnimplementedStockServer
	runs atomic.Int64
}

func (s *inventory) Deduct(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
	_, fenced := core.FenceFromContext(ctx) // under Lock or Limit: the hold's fence, for fenced writes
	if fenced {
		fmt.Println("handler: deducting", req.GetSku(), "under a fenced lock")
	}
	return &testpb.DeductReply{Sku: req.GetSku(), Left: 100 - req.GetQty(), Run: s.runs.Add(1)}, nil
}

func (s *inventory) Watch(req *testpb.WatchRequest, ss grpc.ServerStreamingServer[testpb.Level]) error {
	return ss.Send(&testpb.Level{Sku: req.GetSku(), Qty: 100})
}

// start serves svc with opts on an in-memory listener and returns a
// client made with copts, and a func that stops both.
func start(svc testpb.StockServer, opts []grpc.ServerOption, copts ...grpc.DialOption) (testpb.StockClient, func()) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	testpb.RegisterStockServer(srv, svc)
	go srv.Serve(lis)
	copts = append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///inventory", copts...)
	if err != nil {
		log.Fatal(err)
	}
	return testpb.NewStockClient(conn), func() { conn.Close(); srv.Stop() }
}

// user is the examples' Principal: what authentication put in the
// metadata.
func user(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if u := md.Get("x-user"); len(u) == 1 {
		return u[0], nil
	}
	return "", status.Error(codes.Unauthenticated, "who are you?")
}

// This example makes a unary gRPC method idempotent on Redis (miniredis
// stands in for the server): a retry with the same key gets the stored
// reply, and the key reused for another request is refused.
func ExampleNewIdempotency() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store, err := httpidem.NewRedisStore(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	idem, err := grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: user})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(idem.UnaryServerInterceptor())})
	defer stop()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ann", grpcmw.MetadataKey, "order-7")
	for _, qty := range []int64{1, 1, 2} {
		var header metadata.MD
		r, err := client.Deduct(ctx, &testpb.DeductRequest{Sku: "sku-42", Qty: qty}, grpc.Header(&header))
		if err != nil {
			fmt.Println(status.Code(err), grpcmw.Reason(err))
			continue
		}
		fmt.Printf("run %d, %d left, replayed=%q\n", r.GetRun(), r.GetLeft(), header.Get(grpcmw.MetadataReplayed))
	}
	// Output:
	// run 1, 99 left, replayed=[]
	// run 1, 99 left, replayed=["true"]
	// InvalidArgument IDEMPOTENCY_KEY_REUSED
}

// This example runs the calls on one SKU one at a time across every
// server sharing the lock backend; a call that finds its SKU locked is
// answered Aborted, to be retried.
func ExampleNewLock() {
	locks, err := core.NewMemory() // core.NewRedis(rdb) across servers
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lock, err := grpcmw.NewLock(grpcmw.LockConfig{Locks: locks,
		Key: func(ctx context.Context, fullMethod string, req any) (string, error) {
			if r, ok := req.(*testpb.DeductRequest); ok {
				return r.GetSku(), nil
			}
			return "", nil // other calls run unlocked
		}})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(lock.UnaryServerInterceptor())})
	defer stop()

	ctx := context.Background()
	if _, err := client.Deduct(ctx, &testpb.DeductRequest{Sku: "sku-42", Qty: 1}); err != nil {
		log.Fatal(err)
	}
	other, err := locks.TryLock(ctx, "grpc|key=sku-42") // another server's call holds sku-42
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Deduct(ctx, &testpb.DeductRequest{Sku: "sku-42", Qty: 1})
	fmt.Println(status.Code(err), grpcmw.Reason(err))
	other.Release(ctx)
	// Output:
	// handler: deducting sku-42 under a fenced lock
	// Aborted RESOURCE_LOCKED
}

// This example lets each tenant run at most one call at a time across the
// fleet; a second one is answered ResourceExhausted.
func ExampleNewLimit() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	limit, err := grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 1, Name: "tenants",
		Key: func(ctx context.Context, fullMethod string, req any) (string, error) { return user(ctx) }})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(limit.UnaryServerInterceptor())})
	defer stop()

	ctx := context.Background()
	busy, err := locks.Semaphore("tenants|acme", 1).TryAcquire(ctx) // acme's call in flight elsewhere
	if err != nil {
		log.Fatal(err)
	}
	defer busy.Release(ctx)
	for _, tenant := range []string{"acme", "globex"} {
		_, err := client.Deduct(metadata.AppendToOutgoingContext(ctx, "x-user", tenant), &testpb.DeductRequest{Sku: "sku-1"})
		fmt.Println(tenant+":", status.Code(err), grpcmw.Reason(err))
	}
	// Output:
	// acme: ResourceExhausted LIMIT_REACHED
	// handler: deducting sku-1 under a fenced lock
	// globex: OK
}

// This example gives every logical call a key of its own, kept across the
// retries of a retrying interceptor chained after it: the first attempt
// ran on the server but its answer was lost, and the retry gets the
// stored reply instead of deducting again.
func ExampleUnaryClientInterceptor() {
	store, err := httpidem.NewMemoryStore()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	idem, err := grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: user})
	if err != nil {
		log.Fatal(err)
	}
	var answers atomic.Int64
	loseFirstAnswer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if answers.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	}
	// retry stands for go-grpc-middleware's retry.UnaryClientInterceptor.
	retry := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		for attempt := 2; attempt <= 3 && status.Code(err) == codes.Unavailable; attempt++ {
			err = invoker(ctx, method, req, reply, cc, opts...)
		}
		return err
	}
	svc := &inventory{}
	client, stop := start(svc,
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(loseFirstAnswer, idem.UnaryServerInterceptor())},
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(), retry)) // the key first: outside the retries
	defer stop()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ann")
	var header metadata.MD
	r, err := client.Deduct(ctx, &testpb.DeductRequest{Sku: "sku-42", Qty: 1}, grpc.Header(&header))
	fmt.Println(r.GetLeft(), err, header.Get(grpcmw.MetadataReplayed), "handler runs:", svc.runs.Load())
	// Output:
	// 99 <nil> [true] handler runs: 1
}

// This example sends a key the caller keeps itself — with a job, say — so
// that running the job again repeats nothing.
func ExampleNewKeyContext() {
	store, err := httpidem.NewMemoryStore()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	idem, err := grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: user, Require: true})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(idem.UnaryServerInterceptor())},
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor()))
	defer stop()

	job := struct{ ID, Key string }{"nightly-restock", "job-2031-0042"}
	for range 2 { // the job runs twice: a crash and a restart, say
		ctx := grpcmw.NewKeyContext(metadata.AppendToOutgoingContext(context.Background(), "x-user", "batch"), job.Key)
		r, err := client.Deduct(ctx, &testpb.DeductRequest{Sku: "sku-1", Qty: 5})
		fmt.Println(job.ID, "run", r.GetRun(), err)
	}
	// Output:
	// nightly-restock run 1 <nil>
	// nightly-restock run 1 <nil>
}

// This example reads the reason and the retry delay of an answer.
func ExampleReason() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lock, err := grpcmw.NewLock(grpcmw.LockConfig{Locks: locks,
		Key: func(context.Context, string, any) (string, error) { return "warehouse", nil }})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(lock.UnaryServerInterceptor())})
	defer stop()
	ctx := context.Background()
	held, err := locks.TryLock(ctx, "grpc|key=warehouse")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(ctx)

	_, err = client.Deduct(ctx, &testpb.DeductRequest{})
	switch grpcmw.Reason(err) {
	case grpcmw.ReasonLocked, grpcmw.ReasonInFlight, grpcmw.ReasonLimited:
		d, _ := grpcmw.RetryDelay(err)
		fmt.Println("busy; retry in", d)
	}
	// Output:
	// busy; retry in 1s
}

// This example shows which results Idempotency stores by default.
func ExampleDefaultStoreCode() {
	for _, c := range []codes.Code{codes.OK, codes.NotFound, codes.FailedPrecondition, codes.Unavailable, codes.DeadlineExceeded, codes.Aborted} {
		fmt.Printf("%-18v stored: %v\n", c, grpcmw.DefaultStoreCode(c))
	}
	// Output:
	// OK                 stored: true
	// NotFound           stored: true
	// FailedPrecondition stored: true
	// Unavailable        stored: false
	// DeadlineExceeded   stored: false
	// Aborted            stored: false
}

// This example waits as long as the server asks before retrying a call
// answered ResourceExhausted.
func ExampleRetryDelay() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	limit, err := grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 1, RetryAfter: 3 * time.Second,
		Key: func(context.Context, string, any) (string, error) { return "exports", nil }})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(limit.UnaryServerInterceptor())})
	defer stop()
	ctx := context.Background()
	busy, err := locks.Semaphore("limit|exports", 1).TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer busy.Release(ctx)

	var header metadata.MD
	_, err = client.Deduct(ctx, &testpb.DeductRequest{}, grpc.Header(&header))
	if d, ok := grpcmw.RetryDelay(err); ok {
		fmt.Println(status.Code(err), "retry in", d, "- retry-after:", header.Get(grpcmw.MetadataRetryAfter))
	}
	// Output:
	// ResourceExhausted retry in 3s - retry-after: [3]
}

// This example shows the default Principal: a hash of the call's
// authorization metadata, so that one caller's keys never replay for
// another.
func ExampleAuthorizationPrincipal() {
	ann := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer ann"))
	bob := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer bob"))
	a, _ := grpcmw.AuthorizationPrincipal(ann)
	b, _ := grpcmw.AuthorizationPrincipal(bob)
	fmt.Println(a[:6], len(a), a != b)
	_, err := grpcmw.AuthorizationPrincipal(context.Background())
	fmt.Println(err)
	// Output:
	// authz: 38 true
	// no authorization metadata (set IdempotencyConfig.Principal to identify callers another way)
}

// This example locks streams. A stream's key comes from its context — here
// the x-sku metadata — since its messages are its handler's to read.
func ExampleLock_StreamServerInterceptor() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lock, err := grpcmw.NewLock(grpcmw.LockConfig{Locks: locks,
		Key: func(ctx context.Context, fullMethod string, req any) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if sku := md.Get("x-sku"); len(sku) == 1 {
				return sku[0], nil
			}
			return "", status.Error(codes.InvalidArgument, "x-sku metadata required")
		}})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainStreamInterceptor(lock.StreamServerInterceptor())})
	defer stop()

	ctx := context.Background()
	watch := func() {
		s, err := client.Watch(metadata.AppendToOutgoingContext(ctx, "x-sku", "sku-42"), &testpb.WatchRequest{Sku: "sku-42"})
		if err != nil {
			log.Fatal(err)
		}
		lvl, err := s.Recv()
		fmt.Println(lvl.GetQty(), status.Code(err), grpcmw.Reason(err))
	}
	held, err := locks.TryLock(ctx, "grpc|key=sku-42") // a restock holds sku-42
	if err != nil {
		log.Fatal(err)
	}
	watch()
	held.Release(ctx)
	watch()
	// Output:
	// 0 Aborted RESOURCE_LOCKED
	// 100 OK
}

// This example lets each user hold one stream at a time.
func ExampleLimit_StreamServerInterceptor() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	limit, err := grpcmw.NewLimit(grpcmw.LimitConfig{Locks: locks, Limit: 1, Name: "streams",
		Key: func(ctx context.Context, fullMethod string, req any) (string, error) { return user(ctx) }})
	if err != nil {
		log.Fatal(err)
	}
	client, stop := start(&inventory{}, []grpc.ServerOption{grpc.ChainStreamInterceptor(limit.StreamServerInterceptor())})
	defer stop()

	ctx := context.Background()
	open, err := locks.Semaphore("streams|ann", 1).TryAcquire(ctx) // ann's stream open elsewhere
	if err != nil {
		log.Fatal(err)
	}
	defer open.Release(ctx)
	for _, who := range []string{"ann", "bob"} {
		s, err := client.Watch(metadata.AppendToOutgoingContext(ctx, "x-user", who), &testpb.WatchRequest{Sku: "sku-1"})
		if err != nil {
			log.Fatal(err)
		}
		_, err = s.Recv()
		fmt.Println(who+":", status.Code(err), grpcmw.Reason(err))
	}
	// Output:
	// ann: ResourceExhausted LIMIT_REACHED
	// bob: OK
}
