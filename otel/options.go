package otel

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures an Instrumentation. Options are sealed: only this
// package makes them. There is no Tracer or Meter option: give providers,
// as the OpenTelemetry contrib rules ask.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp         trace.TracerProvider
	mp         metric.MeterProvider
	lockName   func(key string) string
	keyMode    KeyMode
	attrs      []attribute.KeyValue
	renewSpans bool
	nameLimit  int
}

// WithTracerProvider sets where spans go (default, and for nil: the global
// provider, otel.GetTracerProvider, as it is when New runs — a global set
// later is still honoured, through the global's delegation).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets where metrics go (default, and for nil: the
// global provider, otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithLockName sets how a lock key maps to the low-cardinality lock name
// carried by spans and metrics as latchkey.lock.name: a configured name or
// a template ("sku" for "sku:42"), never something with a user or item ID
// in it — every distinct name is one more series of every lock metric (up
// to WithNameLimit names; later ones are recorded as "_OTHER"). An empty
// result becomes "_OTHER". The default, DefaultLockName, takes the
// part of the key before its first ':'. nil keeps the default.
func WithLockName(name func(key string) string) Option {
	return optionFunc(func(c *config) {
		if name != nil {
			c.lockName = name
		}
	})
}

// DefaultLockName is the lock name of key when no WithLockName is given:
// the part before the first ':' ("sku:42" → "sku", "cron:report:running"
// → "cron"), or "_OTHER" for a key without one (such a key may be an ID;
// it is never used as a name by default).
func DefaultLockName(key string) string {
	if i := strings.IndexByte(key, ':'); i > 0 {
		return key[:i]
	}
	return otherName
}

// otherName is the lock name and error type of what has no better one.
const otherName = "_OTHER"

// DefaultNameLimit is the number of distinct values of each capped
// attribute that reach metrics when WithNameLimit is not given.
const DefaultNameLimit = 100

// WithNameLimit caps the distinct values of each name attribute on metrics
// — latchkey.lock.name, latchkey.cron.job and latchkey.activity.type — at
// n per Instrumentation (default DefaultNameLimit; zero or less keeps the
// default). The first n distinct values of an attribute are recorded as
// they are, for the Instrumentation's life; any later one is recorded as
// "_OTHER", as OpenTelemetry's own instrumentations do, so a WithLockName
// function that lets IDs through, or job names and activity types chosen
// at run time, cannot grow the series without bound: each metric keeps at
// most n+1 values of each. Spans are not capped. Each admitted value costs
// a little memory for as long as the Instrumentation lives.
func WithNameLimit(n int) Option {
	return optionFunc(func(c *config) { c.nameLimit = n })
}

// A KeyMode says whether spans carry the lock key itself.
type KeyMode uint8

const (
	// KeyOmitted: spans carry only the lock name (the default).
	KeyOmitted KeyMode = iota
	// KeyHashed: spans also carry latchkey.lock.key_hash, the first 16 hex
	// digits of the key's SHA-256 — enough to tell keys apart and to find
	// the spans of one key, without the key's content (user IDs) leaving
	// the process.
	KeyHashed
	// KeyRaw: spans also carry latchkey.lock.key, the key as given. Keys
	// often hold user or order IDs: use it only where that is acceptable.
	KeyRaw
)

// WithKeyAttribute makes spans carry the lock key, hashed or raw (default
// KeyOmitted). Metrics never carry the key: it would make one series per
// key.
func WithKeyAttribute(mode KeyMode) Option {
	return optionFunc(func(c *config) { c.keyMode = mode })
}

// WithAttributes adds attributes to every span and every measurement
// (default none), such as the deployment's shard. Give only
// low-cardinality values: each distinct set is a new metric series.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attrs = append(c.attrs, attrs...) })
}

// WithRenewalSpans makes every watchdog renewal a latchkey.renew span
// (default false: renewals are measured by latchkey.lock.operation.duration
// but not traced, as a lock held for an hour would otherwise leave hundreds
// of spans). A renewal span is a child of its lease's latchkey.acquire span
// while that span's context is known (see LeaseLost), else a root span.
func WithRenewalSpans(on bool) Option {
	return optionFunc(func(c *config) { c.renewSpans = on })
}
