package main

import (
	"context"
	"net/http"

	"github.com/latchkey/latchkey/otel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// telemetry is latchkey's instrumentation with its metrics exposed to
// Prometheus.
type telemetry struct {
	Inst     *otel.Instrumentation // for core, cronlock, httpidem and dbguard
	Handler  http.Handler          // serves the exposition: mount it on /metrics
	Shutdown func()
}

// newTelemetry wires otel.New to a MeterProvider whose reader is the
// OpenTelemetry Prometheus exporter, registered on a registry of its own
// (not prometheus.DefaultRegisterer, so nothing else shares the page).
//
// The translation strategy is set explicitly, so that the names the
// dashboard queries do not move if the exporter's default does:
// UnderscoreEscapingWithSuffixes turns latchkey.lock.wait.duration (unit
// s) into latchkey_lock_wait_duration_seconds{_bucket,_sum,_count},
// latchkey.cron.runs into latchkey_cron_runs_total, and attribute keys
// such as latchkey.lock.name into labels such as latchkey_lock_name.
// Annotation units ("{lock}", "{run}") add no suffix.
func newTelemetry(service string) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exp),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	return &telemetry{
		Inst:     otel.New(otel.WithMeterProvider(mp)),
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Shutdown: func() { _ = mp.Shutdown(context.Background()) },
	}, nil
}
