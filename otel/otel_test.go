package otel_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/otel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// telemetry is a fresh tracer and meter provider that keep what they get,
// and an Instrumentation on them.
type telemetry struct {
	sr     *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	inst   *otel.Instrumentation
}

func newTelemetry(t *testing.T, opts ...otel.Option) *telemetry {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	opts = append([]otel.Option{otel.WithTracerProvider(tp), otel.WithMeterProvider(mp)}, opts...)
	return &telemetry{sr: sr, tp: tp, reader: reader, mp: mp, inst: otel.New(opts...)}
}

// redisClient returns a core.Client on a fresh miniredis, observed by inst,
// with the go-redis client under it.
func redisClient(t *testing.T, inst *otel.Instrumentation, opts ...core.Option) (*core.Client, *redis.Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	c := mustNew(core.NewRedis(rdb, append([]core.Option{core.WithObserver(inst)}, opts...)...))
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c, rdb, mr
}

// spans returns the ended spans named name.
func (x *telemetry) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range x.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// span returns the one ended span named name.
func (x *telemetry) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := x.spans(name)
	if len(s) != 1 {
		t.Fatalf("%d spans %q, want 1; have %s", len(s), name, x.names())
	}
	return s[0]
}

func (x *telemetry) names() string {
	var n []string
	for _, s := range x.sr.Ended() {
		n = append(n, s.Name())
	}
	return strings.Join(n, ", ")
}

// collect returns the metrics of the Instrumentation's scope by name.
func (x *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otel.ScopeName || sm.Scope.Version != otel.Version {
			t.Errorf("scope %s %s, want %s %s", sm.Scope.Name, sm.Scope.Version, otel.ScopeName, otel.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point of any kind: its attributes and its value (a
// sum's value or a histogram's count).
type point struct {
	attrs attribute.Set
	value float64
}

func points(m metricdata.Metrics) []point {
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Value)})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Count)})
		}
	}
	return out
}

// value sums the points of metric name whose attributes include want.
func (x *telemetry) value(t *testing.T, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	var sum float64
	for _, p := range points(x.collect(t)[name]) {
		if hasAll(p.attrs, want) {
			sum += p.value
		}
	}
	return sum
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// attrs returns a span's attributes as a map.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// keyList returns the sorted, distinct keys of kvs, space-separated.
func keyList(kvs []attribute.KeyValue) string {
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	sort.Strings(out)
	return strings.Join(slices.Compact(out), " ")
}

// checkSpan checks a span's kind, parent, status and some attributes.
func checkSpan(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext, status codes.Code, want ...attribute.KeyValue) {
	t.Helper()
	if s.SpanKind() != trace.SpanKindInternal {
		t.Errorf("%s: kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().SpanID() != parent.SpanID() || parent.IsValid() && s.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("%s: parent %v, want %v", s.Name(), s.Parent().SpanID(), parent.SpanID())
	}
	if s.Status().Code != status {
		t.Errorf("%s: status %v %q, want %v", s.Name(), s.Status().Code, s.Status().Description, status)
	}
	got := attrs(s)
	for _, kv := range want {
		if got[kv.Key] != kv.Value {
			t.Errorf("%s: %s = %v, want %v", s.Name(), kv.Key, got[kv.Key].String(), kv.Value.String())
		}
	}
	if _, hasErr := got["error.type"]; hasErr != (status == codes.Error) {
		t.Errorf("%s: error.type present = %v with status %v", s.Name(), hasErr, status)
	}
	// The span current at an acquisition (a request, a cron run, a
	// ParamLock decision) gets a latchkey.lease.lost event when the lease
	// is lost; no span records an error as an event.
	if len(s.Events()) != 0 && s.Name() != "request" && s.Name() != "latchkey.cron.run" && s.Name() != "latchkey.paramlock" {
		t.Errorf("%s: events %v (errors are not recorded as events)", s.Name(), s.Events())
	}
}

// uniqueKey is a lock key unique to the test, with prefix as lock name.
func uniqueKey(t *testing.T, prefix string) string {
	return fmt.Sprintf("%s:%s", prefix, strings.ReplaceAll(t.Name(), "/", "."))
}
