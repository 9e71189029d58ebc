package otel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestHTTPCardinality: 10 000 distinct Idempotency-Keys from 10 000
// principals, and 10 000 distinct voters, make one series per outcome;
// no key, principal or subject reaches a metric.
func TestHTTPCardinality(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	inst := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(noop.NewTracerProvider()))
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	created := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	idem := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: userOf, Scope: "orders", Observer: inst})(created)
	vote := httpidem.Daily(httpidem.DailyConfig{Store: store, Scope: "vote", Subject: userOf, Observer: inst})(created)

	const n = 10_000
	for i := range n {
		user := "user-" + strconv.Itoa(i)
		for rep := 0; rep < 1+i%2; rep++ { // every other one twice: replayed, duplicate
			r := post("/orders", "key-"+strconv.Itoa(i), "{}", "X-User", user)
			idem.ServeHTTP(httptest.NewRecorder(), r)
			r = post("/vote", "", "", "X-User", user)
			vote.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		metricIdem:  {"first": n, "replayed": n / 2},
		metricDaily: {"first": n, "duplicate": n / 2},
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		w, ok := want[m.Name]
		if !ok {
			continue
		}
		delete(want, m.Name)
		ps := points(m)
		if len(ps) != len(w) {
			t.Errorf("%s: %d series, want %d", m.Name, len(ps), len(w))
		}
		for _, p := range ps {
			if keys := keyList(p.attrs.ToSlice()); keys != "latchkey.http.scope latchkey.outcome" {
				t.Errorf("%s: attributes %s", m.Name, keys)
			}
			o, _ := p.attrs.Value(outcomeKey)
			if p.value != w[o.AsString()] {
				t.Errorf("%s %s: %v, want %v", m.Name, o.AsString(), p.value, w[o.AsString()])
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("metrics missing: %v", want)
	}
}
