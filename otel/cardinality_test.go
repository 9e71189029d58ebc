package otel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/otel"
	"github.com/latchkey/latchkey/temporallock"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// hostileCount is how many distinct hostile names each hook is fed.
const hostileCount = 10_000

// hostile returns the i-th of hostileCount distinct names a client or a
// workflow could choose: IDs, long strings, look-alikes of "_OTHER".
func hostile(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("user-%d", i)
	case 1:
		return fmt.Sprintf("%d-%s", i, strings.Repeat("x", 200))
	case 2:
		return fmt.Sprintf("_OTHER%d", i)
	}
	return fmt.Sprintf("ünïcode/%d/😀", i)
}

// TestNameCardinality is the contract that metric series stay bounded:
// hostileCount distinct lock names (a WithLockName that lets IDs through),
// cron job names and Temporal activity types, fed concurrently through the
// hooks, leave each metric at most limit+1 values of its name attribute
// for every combination of its other attributes (the first limit values,
// and "_OTHER"), and lose no measurement — with the default limit and an
// explicit one.
func TestNameCardinality(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []otel.Option
		limit int
	}{
		{"default", nil, otel.DefaultNameLimit},
		{"WithNameLimit(7)", []otel.Option{otel.WithNameLimit(7)}, 7},
		{"WithNameLimit(0) keeps the default", []otel.Option{otel.WithNameLimit(0)}, otel.DefaultNameLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { mp.Shutdown(context.Background()) })
			opts := append([]otel.Option{otel.WithMeterProvider(mp), otel.WithTracerProvider(noop.NewTracerProvider()),
				otel.WithLockName(func(key string) string { return key })}, tc.opts...)
			inst := otel.New(opts...)
			feedHostile(t, inst)

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			// The capped attribute of each metric, and how many measurements
			// it must have (a sum's total or a histogram's count).
			want := map[string]struct {
				key   attribute.Key
				total float64
			}{
				"latchkey.lock.operation.duration": {"latchkey.lock.name", 2 * hostileCount}, // acquire, release
				"latchkey.lock.wait.duration":      {"latchkey.lock.name", hostileCount},
				"latchkey.lock.held.duration":      {"latchkey.lock.name", hostileCount},
				"latchkey.lock.held.count":         {"latchkey.lock.name", 0}, // every +1 met its -1
				"latchkey.cron.runs":               {"latchkey.cron.job", hostileCount},
				"latchkey.cron.run.duration":       {"latchkey.cron.job", hostileCount - hostileCount/3}, // all but the skipped
				"latchkey.activity.locks":          {"latchkey.activity.type", hostileCount},
			}
			for _, m := range rm.ScopeMetrics[0].Metrics {
				w, ok := want[m.Name]
				if !ok {
					continue
				}
				delete(want, m.Name)
				checkCapped(t, m, w.key, tc.limit, w.total)
			}
			if len(want) != 0 {
				t.Errorf("metrics missing: %v", want)
			}
		})
	}
}

// feedHostile sends hostileCount distinct names through each hook that
// carries a name attribute, from several goroutines at once.
func feedHostile(t *testing.T, inst *otel.Instrumentation) {
	t.Helper()
	c := mustNew(core.NewMemory(core.WithObserver(inst)))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < hostileCount; i += workers {
				name := hostile(i)
				// Core lock hooks: acquire, held count, release.
				h, err := c.TryLock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
				// cronlock hooks: ran, failed, skipped in turn.
				_, end := inst.TickStart(ctx, cronlock.Tick{Name: name, Planned: time.Unix(int64(i), 0), Node: "n1"})
				switch i % 3 {
				case 0:
					end(cronlock.TickResult{Outcome: cronlock.OutcomeRan, Locked: true, Fence: 1, Duration: time.Millisecond})
				case 1:
					end(cronlock.TickResult{Outcome: cronlock.OutcomeFailed, Locked: true, Fence: 1, Duration: time.Millisecond, Err: errors.New("job failed")})
				default:
					end(cronlock.TickResult{Outcome: cronlock.OutcomeSkipped, Skip: cronlock.SkipClaimed})
				}
				// temporallock hooks: ran, busy, lost in turn.
				_, done := inst.ActivityLockStart(ctx, name)
				switch i % 3 {
				case 0:
					done(temporallock.OutcomeRan, 1, nil)
				case 1:
					done(temporallock.OutcomeBusy, 0, temporallock.ErrBusy)
				default:
					done(temporallock.OutcomeLost, 1, temporallock.ErrLost)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkCapped checks that metric m has at most limit+1 values of key in
// all, and for each combination of its other attributes, "_OTHER" among
// them, and that its points add up to total.
func checkCapped(t *testing.T, m metricdata.Metrics, key attribute.Key, limit int, total float64) {
	t.Helper()
	all := map[string]bool{}
	byRest := map[string]map[string]bool{} // other attributes → values of key
	var sum float64
	for _, p := range points(m) {
		v, ok := p.attrs.Value(key)
		if !ok {
			t.Errorf("%s: a point without %s: %v", m.Name, key, p.attrs.ToSlice())
			continue
		}
		all[v.AsString()] = true
		rest, _ := p.attrs.Filter(func(kv attribute.KeyValue) bool { return kv.Key != key })
		r := rest.Encoded(attribute.DefaultEncoder())
		if byRest[r] == nil {
			byRest[r] = map[string]bool{}
		}
		byRest[r][v.AsString()] = true
		if m.Name == "latchkey.lock.held.count" && p.value != 0 {
			t.Errorf("%s %s=%q: %v held after every lease was released", m.Name, key, v.AsString(), p.value)
		}
		if m.Name != "latchkey.lock.held.count" {
			sum += p.value
		}
	}
	if len(all) > limit+1 || !all["_OTHER"] {
		t.Errorf("%s: %d values of %s (_OTHER among them: %v), want at most %d including _OTHER", m.Name, len(all), key, all["_OTHER"], limit+1)
	}
	for r, vals := range byRest {
		if len(vals) > limit+1 {
			t.Errorf("%s {%s}: %d series, want at most %d", m.Name, r, len(vals), limit+1)
		}
	}
	if n := len(points(m)); n > (limit+1)*len(byRest) {
		t.Errorf("%s: %d series, want at most %d", m.Name, n, (limit+1)*len(byRest))
	}
	if sum != total {
		t.Errorf("%s: %v measurements, want %v (none dropped)", m.Name, sum, total)
	}
}

// TestNameLimitSpans: capping is for metrics only; spans carry the name
// itself, and a value admitted before the limit was reached stays
// admitted.
func TestNameLimitSpans(t *testing.T) {
	tel := newTelemetry(t, otel.WithNameLimit(1))
	ctx := context.Background()
	for _, typ := range []string{"Charge", "Refund", "Charge"} {
		_, end := tel.inst.ActivityLockStart(ctx, typ)
		end(temporallock.OutcomeRan, 1, nil)
	}
	var types []string
	for _, s := range tel.spans("latchkey.activity.lock") {
		types = append(types, attrs(s)["latchkey.activity.type"].AsString())
	}
	if strings.Join(types, " ") != "Charge Refund Charge" {
		t.Errorf("span activity types %v, want Charge Refund Charge", types)
	}
	key := attribute.Key("latchkey.activity.type")
	if got := tel.value(t, "latchkey.activity.locks", key.String("Charge")); got != 2 {
		t.Errorf("Charge executions %v, want 2", got)
	}
	if got := tel.value(t, "latchkey.activity.locks", key.String("_OTHER")); got != 1 {
		t.Errorf("_OTHER executions %v, want 1 (Refund, past the limit)", got)
	}
}
