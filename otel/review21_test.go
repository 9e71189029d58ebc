package otel_test

// Review 21: typed-nil providers and a typed-nil Instrumentation, which
// panicked before New and core.WithObserver treated them as nil.

import (
	"context"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func r21NoPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
		}
	}()
	f()
}

// WithTracerProvider and WithMeterProvider say nil means the global
// provider; a typed nil (a *sdktrace.TracerProvider left unset) panics in
// New instead. NewRedis treats a typed-nil Redis client as nil
// (ErrNilClient).
func TestR21TypedNilProviders(t *testing.T) {
	var tp *sdktrace.TracerProvider
	var mp *sdkmetric.MeterProvider
	r21NoPanic(t, "New(WithTracerProvider(typed nil))", func() { otel.New(otel.WithTracerProvider(tp)) })
	r21NoPanic(t, "New(WithMeterProvider(typed nil))", func() { otel.New(otel.WithMeterProvider(mp)) })
}

// A typed-nil *Instrumentation given to core.WithObserver (tracing
// switched off by leaving it nil) passes core's `observer != nil` checks
// and panics on the first lock operation.
func TestR21TypedNilObserver(t *testing.T) {
	var inst *otel.Instrumentation
	c, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		t.Logf("NewMemory refused it: %v", err)
		return
	}
	defer c.Close()
	r21NoPanic(t, "TryLock", func() {
		l, err := c.TryLock(context.Background(), "r21:k")
		if err == nil {
			l.Release(context.Background())
		}
	})
}
