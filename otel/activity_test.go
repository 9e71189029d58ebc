package otel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/otel"
	"github.com/latchkey/latchkey/temporallock"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var _ temporallock.Observer = (*otel.Instrumentation)(nil)

// generateActivity makes one activity lock span per outcome kind: ran,
// busy, lost.
func generateActivity(t *testing.T, tel *telemetry) {
	t.Helper()
	ctx := context.Background()
	_, end := tel.inst.ActivityLockStart(ctx, "Charge")
	end(temporallock.OutcomeRan, 7, nil)
	_, end = tel.inst.ActivityLockStart(ctx, "Charge")
	end(temporallock.OutcomeBusy, 0, errors.New("lock held elsewhere"))
	_, end = tel.inst.ActivityLockStart(ctx, "Charge")
	end(temporallock.OutcomeLost, 8, core.ErrLost)
}

func TestActivityLock(t *testing.T) {
	tel := newTelemetry(t)
	generateActivity(t, tel)
	spans := tel.sr.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	for i, want := range []struct {
		outcome, errType string
		status           codes.Code
		fence            int64
	}{
		{"ran", "", codes.Unset, 7},
		{"busy", "", codes.Unset, 0},
		{"lost", "lost", codes.Error, 8},
	} {
		s := spans[i]
		a := attrs(s)
		if s.Name() != "latchkey.activity.lock" || a["latchkey.activity.type"].AsString() != "Charge" ||
			a["latchkey.outcome"].AsString() != want.outcome || s.Status().Code != want.status ||
			a["error.type"].AsString() != want.errType || a["latchkey.lock.fence"].AsInt64() != want.fence {
			t.Errorf("span %d: %s %v status %v", i, s.Name(), a, s.Status())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "latchkey.activity.locks" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				points++
				et, _ := dp.Attributes.Value("error.type")
				oc, _ := dp.Attributes.Value("latchkey.outcome")
				if (oc.AsString() == "lost") != (et.AsString() == "lost") {
					t.Errorf("series %v: error.type must match the span's", dp.Attributes.ToSlice())
				}
			}
		}
	}
	if points != 3 {
		t.Errorf("%d series of latchkey.activity.locks, want 3", points)
	}
}
