package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/latchkey/latchkey/examples/grpc/shoppb"
	"github.com/latchkey/latchkey/grpcmw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// client is the scripted client: it checks every answer and remembers a
// surprise.
type client struct {
	shop shoppb.ShopClient

	mu     sync.Mutex
	failed bool
}

// attemptsKey carries a counter of a call's attempts to retry.
type attemptsKey struct{}

// retry retries a call answered Unavailable, up to three attempts — what
// go-grpc-middleware's retry.UnaryClientInterceptor does, in short. It is
// chained after grpcmw.UnaryClientInterceptor, so it resends the call's
// key.
func (c *client) retry(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	n, _ := ctx.Value(attemptsKey{}).(*int)
	if n == nil {
		n = new(int)
	}
	for *n = 1; ; *n++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable || *n == 3 {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// as returns ctx for calls of user, with key as the call's own
// idempotency key ("": the client interceptor makes one).
func as(ctx context.Context, user, key string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	if key != "" {
		ctx = grpcmw.NewKeyContext(ctx, key)
	}
	return ctx
}

// order sends an order and prints what came back; want is the code it
// must end with and reason, if not "", the reason of its error.
func (c *client) order(ctx context.Context, what string, req *shoppb.OrderRequest, want codes.Code, reason string) (*shoppb.OrderReply, metadata.MD) {
	var header metadata.MD
	attempts := new(int)
	r, err := c.shop.Order(context.WithValue(ctx, attemptsKey{}, attempts), req, grpc.Header(&header))
	got := fmt.Sprintf("%s, %d left", r.GetOrderId(), r.GetLeft())
	if err != nil {
		got = fmt.Sprintf("%v %s", status.Code(err), grpcmw.Reason(err))
		if grpcmw.Reason(err) == "" {
			got += fmt.Sprintf("(%q)", status.Convert(err).Message())
		}
		if d, ok := grpcmw.RetryDelay(err); ok {
			got += fmt.Sprintf(" (retry in %v)", d)
		}
	}
	if v := header.Get(grpcmw.MetadataReplayed); len(v) > 0 {
		got += ", replayed"
	}
	if *attempts > 1 {
		got += fmt.Sprintf(", after %d attempts", *attempts)
	}
	c.report(what, got, status.Code(err) == want && grpcmw.Reason(err) == reason, want, reason)
	return r, header
}

func (c *client) expect(what string, ok bool) {
	mark := "ok"
	if !ok {
		mark = "UNEXPECTED"
		c.mu.Lock()
		c.failed = true
		c.mu.Unlock()
	}
	fmt.Printf("  %-52s   [%s]\n", what, mark)
}

// script runs the story and reports whether every answer was the expected
// one.
func (c *client) script(ctx context.Context, s *shop) bool {
	fmt.Println("\nidempotent orders (the client interceptor gives each call one key, kept across retries):")
	s.loseNext.Store(true)
	first, hdr := c.order(as(ctx, "ann", ""), "ann orders 2 × sku-42; its answer is lost, it retries", &shoppb.OrderRequest{Sku: "sku-42", Qty: 2}, codes.OK, "")
	c.expect("  deducted once; the retry got the stored reply", first.GetLeft() == 8 && len(hdr.Get(grpcmw.MetadataReplayed)) == 1)
	c.order(as(ctx, "ann", ""), "ann orders 2 × sku-42 again: a new call, a new key", &shoppb.OrderRequest{Sku: "sku-42", Qty: 2}, codes.OK, "")

	job := as(ctx, "batch", "restock-job-7") // a key the caller keeps: its job's ID
	a, _ := c.order(job, "a job with its own key orders 1 × sku-7", &shoppb.OrderRequest{Sku: "sku-7", Qty: 1}, codes.OK, "")
	b, _ := c.order(job, "the job runs again after a crash: the same key", &shoppb.OrderRequest{Sku: "sku-7", Qty: 1}, codes.OK, "")
	c.expect("  the same order, not a second one", a.GetOrderId() == b.GetOrderId() && b.GetLeft() == 4)
	c.order(job, "the same key for another quantity", &shoppb.OrderRequest{Sku: "sku-7", Qty: 3}, codes.InvalidArgument, grpcmw.ReasonKeyReused)
	c.order(as(ctx, "bob", "restock-job-7"), "bob's key of the same name is his own", &shoppb.OrderRequest{Sku: "sku-7", Qty: 3}, codes.OK, "")
	c.order(ctx, "a call without a user", &shoppb.OrderRequest{Sku: "sku-7", Qty: 1}, codes.Unauthenticated, "")

	fmt.Println("\nwhile an order runs (300 ms of work on sku-42):")
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.order(as(ctx, "ann", "slow-1"), "ann's slow order", &shoppb.OrderRequest{Sku: "sku-42", Qty: 1, WorkMs: 300}, codes.OK, "")
	}()
	<-s.slowStart
	c.order(as(ctx, "ann", "slow-1"), "its duplicate", &shoppb.OrderRequest{Sku: "sku-42", Qty: 1, WorkMs: 300}, codes.Aborted, grpcmw.ReasonInFlight)
	c.order(as(ctx, "bob", "bob-9"), "bob orders sku-42 meanwhile: its lock is held", &shoppb.OrderRequest{Sku: "sku-42", Qty: 1}, codes.Aborted, grpcmw.ReasonLocked)
	c.order(as(ctx, "bob", "bob-10"), "bob orders sku-7: another lock", &shoppb.OrderRequest{Sku: "sku-7", Qty: 1}, codes.OK, "")
	<-done
	c.order(as(ctx, "bob", "bob-9"), "bob retries his sku-42 order once it is done", &shoppb.OrderRequest{Sku: "sku-42", Qty: 1}, codes.OK, "")

	fmt.Println("\nstock streams (one per user at a time):")
	watchCtx, stopWatch := context.WithCancel(as(ctx, "ann", ""))
	defer stopWatch()
	held, err := c.shop.Watch(watchCtx, &shoppb.WatchRequest{Sku: "sku-42"})
	if err == nil {
		var lvl *shoppb.Level
		lvl, err = held.Recv()
		c.expect(fmt.Sprintf("ann watches sku-42: %d left", lvl.GetQty()), err == nil && lvl.GetQty() == 4)
	}
	c.watch(as(ctx, "ann", ""), "ann opens a second stream", codes.ResourceExhausted, grpcmw.ReasonLimited)
	c.watch(as(ctx, "bob", ""), "bob opens one", codes.OK, "")
	stopWatch()
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.failed
}

// watch opens a stream, reads its first level and closes it.
func (c *client) watch(ctx context.Context, what string, want codes.Code, reason string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.shop.Watch(ctx, &shoppb.WatchRequest{Sku: "sku-42"})
	got := ""
	if err == nil {
		var lvl *shoppb.Level
		if lvl, err = s.Recv(); err == nil {
			got = fmt.Sprintf("%d left", lvl.GetQty())
		}
	}
	if err != nil {
		got = fmt.Sprintf("%v %s", status.Code(err), grpcmw.Reason(err))
	}
	c.report(what, got, status.Code(err) == want && grpcmw.Reason(err) == reason, want, reason)
}

// report prints one answer and remembers a surprise.
func (c *client) report(what, got string, ok bool, want codes.Code, reason string) {
	mark := "ok"
	if !ok {
		mark = fmt.Sprintf("UNEXPECTED (want %v %s)", want, reason)
		c.mu.Lock()
		c.failed = true
		c.mu.Unlock()
	}
	fmt.Printf("  %-52s → %s  [%s]\n", what, got, mark)
}
