package demo

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/latchkey/latchkey/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry is the demo's OpenTelemetry setup: with -trace, every span is
// printed as one JSON line by the stdout exporter when it ends, and a
// summary of the metrics is printed at the end.
type Telemetry struct {
	Inst   *otel.Instrumentation // nil without -trace
	Tracer trace.Tracer          // the program's own spans; no-op without -trace
	Report func()                // prints the metrics summary and flushes
}

// SetupTelemetry returns the setup; on is the program's -trace flag.
func SetupTelemetry(service string, on bool) (*Telemetry, error) {
	if !on {
		return &Telemetry{Tracer: noop.NewTracerProvider().Tracer(service), Report: func() {}}, nil
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader), metric.WithResource(res))
	return &Telemetry{
		Inst:   otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp)),
		Tracer: tp.Tracer(service),
		Report: func() {
			ctx := context.Background()
			printMetrics(ctx, reader)
			_ = tp.Shutdown(ctx)
			_ = mp.Shutdown(ctx)
		},
	}, nil
}

// printMetrics prints one line per series: a counter's or gauge's value,
// a histogram's count and mean.
func printMetrics(ctx context.Context, reader metric.Reader) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println("metrics:", err)
		return
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, labels(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d mean=%.4fs", m.Name, labels(p.Attributes), p.Count, p.Sum/float64(p.Count)))
				}
			}
		}
	}
	sort.Strings(lines)
	fmt.Println("metrics:")
	for _, l := range lines {
		fmt.Println("  " + l)
	}
}

func labels(s attribute.Set) string {
	var out []string
	for _, kv := range s.ToSlice() {
		out = append(out, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(out, ",")
}
