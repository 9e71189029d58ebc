package otel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkTryLockRelease measures one TryLock and Release on the
// in-memory backend (so that the observer's cost is not lost in network
// time): without an observer, with no-op providers, and with the SDK
// (every span sampled and recording, no exporter; metrics aggregated for
// a manual reader).
func BenchmarkTryLockRelease(b *testing.B) {
	sdk := func() *otel.Instrumentation {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
		return otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
	}
	cases := []struct {
		name string
		opts func() []core.Option
	}{
		{"no-observer", func() []core.Option { return nil }},
		{"noop-providers", func() []core.Option {
			return []core.Option{core.WithObserver(otel.New(
				otel.WithTracerProvider(noop.NewTracerProvider()), otel.WithMeterProvider(metricnoop.NewMeterProvider())))}
		}},
		{"sdk", func() []core.Option { return []core.Option{core.WithObserver(sdk())} }},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			c := mustNew(core.NewMemory(bc.opts()...))
			defer c.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				h, err := c.TryLock(ctx, "sku:42")
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdempotencyReplay measures one replayed Idempotency-Key request
// through the middleware on a memory store (its lease taken and given back,
// its record read and written out), with and without the Instrumentation
// as the middleware's Observer (the store's lock client is not observed).
func BenchmarkIdempotencyReplay(b *testing.B) {
	cases := []struct {
		name string
		obs  func() httpidem.Observer
	}{
		{"no-observer", func() httpidem.Observer { return nil }},
		{"noop-providers", func() httpidem.Observer {
			return otel.New(otel.WithTracerProvider(noop.NewTracerProvider()), otel.WithMeterProvider(metricnoop.NewMeterProvider()))
		}},
		{"sdk", func() httpidem.Observer {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
			return otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			store := must(httpidem.NewMemoryStore())
			defer store.Close()
			h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Scope: "orders", Observer: bc.obs(),
				Principal: func(*http.Request) (string, error) { return "ann", nil }})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
			r := httptest.NewRequest("POST", "/orders", nil)
			r.Header.Set("Idempotency-Key", "k-1")
			h.ServeHTTP(httptest.NewRecorder(), r) // first: stored
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Header().Get(httpidem.HeaderReplayed) != "true" {
					b.Fatal("not replayed")
				}
			}
		})
	}
}
