package otel

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/nilness"
	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span and metric: the
// import path of this package.
const ScopeName = "github.com/latchkey/latchkey/otel"

// Version is the version of this instrumentation, given with ScopeName.
const Version = "0.1.0"

// An Instrumentation traces and measures latchkey. One value serves every
// package: it is a core.Observer (install it with core.WithObserver), a
// cronlock.Observer (cronlock.WithObserver; and a cronlock.MissedObserver)
// and an httpidem.Observer (the
// Observer field of the httpidem and echomw configs), a dbguard.Observer
// (dbguard.WithObserver), and so on for each
// adapter that has a hook. It is safe for concurrent use; create one per
// process and share it.
type Instrumentation struct {
	cfg    config
	tracer trace.Tracer
	m      instruments
	series seriesCache

	startOpts []trace.SpanStartOption
}

// The hooks an Instrumentation implements.
var (
	_ core.Observer           = (*Instrumentation)(nil)
	_ cronlock.Observer       = (*Instrumentation)(nil)
	_ cronlock.MissedObserver = (*Instrumentation)(nil)
	_ httpidem.Observer       = (*Instrumentation)(nil)
	_ dbguard.Observer        = (*Instrumentation)(nil)
)

// New returns an Instrumentation. With no options, spans go to the global
// TracerProvider and metrics to the global MeterProvider; lock names come
// from DefaultLockName; spans carry no key. New does no I/O.
func New(opts ...Option) *Instrumentation {
	in := &Instrumentation{cfg: config{lockName: DefaultLockName}}
	for _, o := range opts {
		if o != nil {
			o.apply(&in.cfg)
		}
	}
	if nilness.IsNil(in.cfg.tp) { // a typed nil too: an SDK provider left unset
		in.cfg.tp = otelapi.GetTracerProvider()
	}
	if nilness.IsNil(in.cfg.mp) {
		in.cfg.mp = otelapi.GetMeterProvider()
	}
	in.tracer = in.cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	in.m = newInstruments(in.cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version)))
	in.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	return in
}

// lockName maps key to its lock name.
func (in *Instrumentation) lockName(key string) string {
	if n := in.cfg.lockName(key); n != "" {
		return n
	}
	return otherName
}

// spanKeyAttrs appends the key attribute WithKeyAttribute asks for.
func (in *Instrumentation) spanKeyAttrs(attrs []attribute.KeyValue, key string) []attribute.KeyValue {
	switch in.cfg.keyMode {
	case KeyHashed:
		sum := sha256.Sum256([]byte(key))
		return append(attrs, keyKeyHash.String(hex.EncodeToString(sum[:8])))
	case KeyRaw:
		return append(attrs, keyKeyRaw.String(key))
	}
	return attrs
}
