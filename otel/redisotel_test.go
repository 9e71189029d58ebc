package otel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// TestRedisCommandSpansNest: with go-redis's own OpenTelemetry hook
// installed, the Redis commands of an acquisition (its attempts while it
// waits included) and of a release are children of latchkey.acquire and
// latchkey.release, which are children of the caller's span.
func TestRedisCommandSpansNest(t *testing.T) {
	tel := newTelemetry(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tel.tp)); err != nil {
		t.Fatal(err)
	}
	c := core.NewRedis(rdb, core.WithObserver(tel.inst))
	t.Cleanup(func() { c.Close() })
	holder := core.NewRedis(rdb) // not observed
	t.Cleanup(func() { holder.Close() })
	key := uniqueKey(t, "sku")
	held, err := holder.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { held.Release(context.Background()) })

	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	h, err := c.Lock(ctx, key, core.WithWaitTimeout(5*time.Second)) // waits for the holder
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	parent.End()

	acq, rel := tel.span(t, "latchkey.acquire"), tel.span(t, "latchkey.release")
	for _, s := range []trace.SpanContext{acq.Parent(), rel.Parent()} {
		if s.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("lock span parent %v, want the request", s.SpanID())
		}
	}
	if n := attrs(acq)["latchkey.lock.attempts"].AsInt64(); n < 2 {
		t.Errorf("the acquisition did not wait: %d attempts", n)
	}
	under := map[trace.SpanID]int{}
	for _, s := range tel.sr.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		if !strings.HasPrefix(s.Name(), "eval") { // the lock scripts
			continue
		}
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			continue // the holder's commands
		}
		under[s.Parent().SpanID()]++
	}
	if under[acq.SpanContext().SpanID()] < 2 || under[rel.SpanContext().SpanID()] < 1 || len(under) != 2 {
		t.Errorf("script spans by parent: %v (acquire %v, release %v)", under, acq.SpanContext().SpanID(), rel.SpanContext().SpanID())
	}
}
