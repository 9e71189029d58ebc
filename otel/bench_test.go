package otel_test

import (
	"context"
	"testing"

	"github.com/latchkey/latchkey/core"
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
			c := core.NewMemory(bc.opts()...)
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
