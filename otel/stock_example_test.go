package otel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// ExampleInstrumentation_DeductStart traces and counts dbguard deductions:
// the lock client and the Guard share one Instrumentation, so the lock's
// latchkey.acquire span nests under latchkey.stock.deduct.
func ExampleInstrumentation_DeductStart() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))

	db, _ := sql.Open("sqlite", "file::memory:")
	defer db.Close()
	db.SetMaxOpenConns(1)
	locks, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	g, err := dbguard.New(db, dbguard.WithLocks(locks), dbguard.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_ = g.Migrate(ctx)
	_ = g.Restock(ctx, "mug", 1)

	fmt.Println(g.Deduct(ctx, "mug", 1))
	_ = g.Deduct(ctx, "mug", 1)
	printSpans(sr)
	printCounters(reader, "latchkey.stock.deductions")
	// Output:
	// <nil>
	// latchkey.acquire latchkey.lock.name=dbguard latchkey.outcome=acquired (in latchkey.stock.deduct)
	// latchkey.release latchkey.lock.name=dbguard latchkey.outcome=released (in latchkey.stock.deduct)
	// latchkey.stock.deduct latchkey.outcome=deducted
	// latchkey.stock.deduct latchkey.outcome=insufficient
	// latchkey.stock.deductions{latchkey.outcome=deducted,latchkey.stock.strategy=locked} 1
	// latchkey.stock.deductions{latchkey.outcome=insufficient,latchkey.stock.strategy=locked} 1
}
