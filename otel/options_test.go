package otel_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/otel"
	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestCardinality: 10 000 distinct keys of one kind make one series per
// metric and operation, and no key reaches a metric.
func TestCardinality(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	inst := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(noop.NewTracerProvider()))
	c := mustNew(core.NewMemory(core.WithObserver(inst)))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for i := range 10_000 {
		h, err := c.TryLock(ctx, fmt.Sprintf("sku:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"latchkey.lock.operation.duration": 2, // acquire, release
		"latchkey.lock.wait.duration":      1,
		"latchkey.lock.held.duration":      1,
		"latchkey.lock.held.count":         1,
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		ps := points(m)
		if len(ps) != want[m.Name] {
			t.Errorf("%s: %d series, want %d", m.Name, len(ps), want[m.Name])
		}
		for _, p := range ps {
			if v, _ := p.attrs.Value(name); v.AsString() != "sku" {
				t.Errorf("%s: lock name %q", m.Name, v.String())
			}
		}
	}
}

// TestKeyAttribute: spans carry no key by default, a 16-hex-digit hash
// with KeyHashed, the key with KeyRaw; metrics never do.
func TestKeyAttribute(t *testing.T) {
	tests := []struct {
		mode    otel.KeyMode
		wantKey string // the attribute's key, "" for none
		match   string
	}{
		{otel.KeyOmitted, "", ""},
		{otel.KeyHashed, "latchkey.lock.key_hash", `^[0-9a-f]{16}$`},
		{otel.KeyRaw, "latchkey.lock.key", `^user:42$`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode), func(t *testing.T) {
			tel := newTelemetry(t, otel.WithKeyAttribute(tt.mode))
			c := mustNew(core.NewMemory(core.WithObserver(tel.inst)))
			t.Cleanup(func() { c.Close() })
			h, _ := c.TryLock(context.Background(), "user:42")
			h.Release(context.Background())
			for _, s := range tel.sr.Ended() {
				a := attrs(s)
				_, hash := a["latchkey.lock.key_hash"]
				_, raw := a["latchkey.lock.key"]
				if tt.wantKey == "" && (hash || raw) || tt.wantKey != "" && !regexp.MustCompile(tt.match).MatchString(a[attribute.Key(tt.wantKey)].AsString()) {
					t.Errorf("%s: %v", s.Name(), s.Attributes())
				}
			}
			for mname, m := range tel.collect(t) {
				for _, p := range points(m) {
					if _, ok := p.attrs.Value("latchkey.lock.key_hash"); ok {
						t.Errorf("%s carries a key hash", mname)
					}
					if _, ok := p.attrs.Value("latchkey.lock.key"); ok {
						t.Errorf("%s carries the key", mname)
					}
				}
			}
		})
	}
}

// TestLockNameAndAttributes: WithLockName names locks; an empty name
// becomes _OTHER; WithAttributes reaches spans and measurements.
func TestLockNameAndAttributes(t *testing.T) {
	tel := newTelemetry(t, otel.WithLockName(func(key string) string {
		if key == "nameless" {
			return ""
		}
		return "report"
	}), otel.WithAttributes(attribute.String("shard", "eu")))
	c := mustNew(core.NewMemory(core.WithObserver(tel.inst)))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, key := range []string{"daily-report-2031-05-06", "nameless"} {
		h, _ := c.TryLock(ctx, key)
		h.Release(ctx)
	}
	if got := tel.value(t, "latchkey.lock.operation.duration", name.String("report"), attribute.String("shard", "eu")); got != 2 {
		t.Errorf("report operations %v, want 2", got)
	}
	if got := tel.value(t, "latchkey.lock.operation.duration", name.String("_OTHER")); got != 2 {
		t.Errorf("_OTHER operations %v, want 2", got)
	}
	if a := attrs(tel.spans("latchkey.acquire")[0]); a["shard"].AsString() != "eu" {
		t.Errorf("span attributes %v", a)
	}
}

// TestNoopProviders: with no-op providers everything works and no lease
// is tracked.
func TestNoopProviders(t *testing.T) {
	inst := otel.New(otel.WithTracerProvider(noop.NewTracerProvider()), otel.WithMeterProvider(metricnoop.NewMeterProvider()))
	c := mustNew(core.NewMemory(core.WithObserver(inst)))
	defer c.Close()
	if err := c.Do(context.Background(), "a:1", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestGlobalProviders: with no provider options (or nil ones) the global
// providers are used. It sets the globals for the rest of the test binary;
// other tests give their providers explicitly.
func TestGlobalProviders(t *testing.T) {
	tel := newTelemetry(t)
	otelapi.SetTracerProvider(tel.tp)
	otelapi.SetMeterProvider(tel.mp)
	for _, inst := range []*otel.Instrumentation{otel.New(), otel.New(otel.WithTracerProvider(nil), otel.WithMeterProvider(nil))} {
		c := mustNew(core.NewMemory(core.WithObserver(inst)))
		h, _ := c.TryLock(context.Background(), "global:1")
		h.Release(context.Background())
		c.Close()
	}
	if n := len(tel.spans("latchkey.acquire")); n != 2 {
		t.Errorf("%d acquire spans on the global provider, want 2", n)
	}
	if got := tel.value(t, "latchkey.lock.operation.duration", op.String("acquire")); got != 2 {
		t.Errorf("%v acquisitions measured on the global provider, want 2", got)
	}
}
