package otel

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/latchkey/latchkey/core"
	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instruments are the metric instruments of an Instrumentation.
type instruments struct {
	opDuration    metric.Float64Histogram
	waitDuration  metric.Float64Histogram
	heldDuration  metric.Float64Histogram
	heldCount     metric.Int64UpDownCounter
	waiters       metric.Int64UpDownCounter
	losses        metric.Int64Counter
	leaderChanges metric.Int64Counter
	cronRuns      metric.Int64Counter
	cronDuration  metric.Float64Histogram
	cronMissed    metric.Int64Counter
	idemRequests  metric.Int64Counter
	dailyClaims   metric.Int64Counter
	stockDeducts  metric.Int64Counter
	stockRetries  metric.Int64Counter
	activityLock  metric.Int64Counter
}

// newInstruments creates the instruments on m. An instrument that cannot
// be created is reported to the global error handler (otel.Handle) and
// left a no-op, as the OpenTelemetry contrib instrumentations do.
func newInstruments(m metric.Meter) instruments {
	var in instruments
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		handle(err)
		return h
	}
	in.opDuration = hist(metricOpDuration, "Duration of lock operations (acquire including its wait, release, extend, renew).")
	in.waitDuration = hist(metricWaitDuration, "Time an acquisition spent waiting for a held key, until it got the lock or gave up.")
	in.heldDuration = hist(metricHeldDuration, "Time a lease was held, from acquisition to release or loss.")
	in.cronDuration = hist(metricCronDuration, "Duration of cron job function runs.")
	var err error
	in.heldCount, err = m.Int64UpDownCounter(metricHeldCount, metric.WithUnit("{lock}"),
		metric.WithDescription("Leases held by this process now."))
	handle(err)
	in.waiters, err = m.Int64UpDownCounter(metricWaiters, metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquisitions of this process waiting for a held key now."))
	handle(err)
	in.leaderChanges, err = m.Int64Counter(metricLeaderChanges, metric.WithUnit("{change}"),
		metric.WithDescription("Leadership changes of this process (Campaign): elected, resigned, lost."))
	handle(err)
	in.losses, err = m.Int64Counter(metricLosses, metric.WithUnit("{lock}"),
		metric.WithDescription("Leases lost before their release: expired, taken over, or not renewable."))
	handle(err)
	in.cronRuns, err = m.Int64Counter(metricCronRuns, metric.WithUnit("{run}"),
		metric.WithDescription("Cron ticks handled by this node, by outcome."))
	handle(err)
	in.cronMissed, err = m.Int64Counter(metricCronMissed, metric.WithUnit("{tick}"),
		metric.WithDescription("Missed cron ticks found by this node's look-backs, by what the policy does with them: catch_up, skipped."))
	handle(err)
	in.idemRequests, err = m.Int64Counter(metricIdemRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Requests decided by the Idempotency-Key middleware, by last outcome."))
	handle(err)
	in.dailyClaims, err = m.Int64Counter(metricDailyClaims, metric.WithUnit("{claim}"),
		metric.WithDescription("Requests decided by the once-per-day middleware, by scope and last outcome."))
	handle(err)
	in.stockDeducts, err = m.Int64Counter(metricStockDeducts, metric.WithUnit("{deduction}"),
		metric.WithDescription("Stock deductions (dbguard), by the strategy that decided and outcome."))
	handle(err)
	in.stockRetries, err = m.Int64Counter(metricStockRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Optimistic deduction attempts lost to concurrent writers and retried or given up."))
	handle(err)
	in.activityLock, err = m.Int64Counter(metricActivityLock, metric.WithUnit("{execution}"),
		metric.WithDescription("Keyed Temporal activity executions (temporallock), by activity type and outcome."))
	handle(err)
	return in
}

// handle reports an error to the global OpenTelemetry error handler.
func handle(err error) {
	if err != nil {
		otelapi.Handle(err)
	}
}

// A series is one attribute set with its measurement options built once,
// so recording into it allocates nothing here.
type series struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

func newSeries(attrs ...attribute.KeyValue) *series {
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return &series{rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
}

// seriesKey identifies a series: the lock name or cron job, the operation
// (or skip reason), the outcome and the error type.
type seriesKey struct {
	metric  uint8
	name    string
	kind    core.Kind // lock metrics: what the lease holds
	op      string
	outcome string
	errType string
	catchUp bool // cron metrics: a catch-up run
}

// maxCachedSeries bounds the series cache. Names are capped (see
// WithNameLimit), so it is rarely reached; beyond it series are built per
// measurement: slower, but memory stays bounded.
const maxCachedSeries = 4096

// seriesCache keeps the series of the attribute sets seen so far, and the
// names each capped attribute has admitted.
type seriesCache struct {
	mu sync.RWMutex
	m  map[seriesKey]*series

	names [nameKinds]nameSet
}

// The attributes whose values are capped (WithNameLimit), each with its
// own set of admitted values.
const (
	nameLock         uint8 = iota // latchkey.lock.name
	nameCronJob                   // latchkey.cron.job
	nameActivityType              // latchkey.activity.type
	nameKinds
)

// capName returns v if it is one of the first distinct values of the
// attribute kind this Instrumentation's metrics have seen, up to the
// limit of WithNameLimit, and otherName for any value past it. A value
// once admitted stays admitted, so every measurement of one value — an
// up-down counter's +1 and its -1 included — lands in one series. Spans
// are not capped: they carry the value itself. Safe for concurrent use;
// O(1).
func (in *Instrumentation) capName(kind uint8, v string) string {
	limit := in.cfg.nameLimit
	if limit <= 0 {
		limit = DefaultNameLimit
	}
	return in.series.names[kind].admit(v, limit)
}

// A nameSet is the set of values one capped attribute has admitted.
type nameSet struct {
	seen sync.Map    // string → struct{}: read without a lock
	full atomic.Bool // set once n reached the limit
	mu   sync.Mutex  // serialises admissions
	n    int         // values admitted, guarded by mu
}

// admit returns v if it is admitted, admitting it while fewer than limit
// values are, else otherName (which is always itself, and never counts).
func (s *nameSet) admit(v string, limit int) string {
	if v == otherName {
		return v
	}
	if _, ok := s.seen.Load(v); ok {
		return v
	}
	if s.full.Load() {
		return otherName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen.Load(v); ok {
		return v
	}
	if s.n >= limit {
		s.full.Store(true)
		return otherName
	}
	s.seen.Store(strings.Clone(v), struct{}{}) // v may be a slice of a long key
	s.n++
	return v
}

// get returns the series of k, building its attributes with build when it
// is not cached.
func (c *seriesCache) get(k seriesKey, build func(seriesKey) []attribute.KeyValue) *series {
	c.mu.RLock()
	s := c.m[k]
	c.mu.RUnlock()
	if s != nil {
		return s
	}
	s = newSeries(build(k)...)
	c.mu.Lock()
	if len(c.m) < maxCachedSeries {
		if c.m == nil {
			c.m = make(map[seriesKey]*series)
		}
		if old := c.m[k]; old != nil {
			s = old
		} else {
			c.m[k] = s
		}
	}
	c.mu.Unlock()
	return s
}

// Which metric a series belongs to (its attribute keys differ).
const (
	seriesOp uint8 = iota + 1
	seriesWait
	seriesHeld
	seriesHeldCount
	seriesLosses
	seriesCronRuns
	seriesCronDuration
	seriesIdemRequests
	seriesDailyClaims
	seriesStockDeducts
	seriesStockRetries
	seriesActivityLock
	seriesWaiters
	seriesLeader
	seriesCronMissed
)

// lockAttrs builds the attributes of a lock metric series.
func (in *Instrumentation) lockAttrs(k seriesKey) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+4)
	attrs = append(attrs, in.cfg.attrs...)
	attrs = append(attrs, keyLockName.String(k.name), keyLockKind.String(string(k.kind)))
	switch k.metric {
	case seriesOp:
		attrs = append(attrs, keyOperation.String(k.op), keyOutcome.String(k.outcome))
	case seriesWait, seriesHeld, seriesLeader:
		attrs = append(attrs, keyOutcome.String(k.outcome))
	}
	if k.errType != "" {
		attrs = append(attrs, keyErrorType.String(k.errType))
	}
	return attrs
}

// cronAttrs builds the attributes of a cron metric series.
func (in *Instrumentation) cronAttrs(k seriesKey) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+4)
	attrs = append(attrs, in.cfg.attrs...)
	attrs = append(attrs, keyCronJob.String(k.name), keyOutcome.String(k.outcome))
	if k.op != "" {
		attrs = append(attrs, keyCronSkip.String(k.op))
	}
	if k.catchUp {
		attrs = append(attrs, keyCronCatchUp.Bool(true))
	}
	if k.errType != "" {
		attrs = append(attrs, keyErrorType.String(k.errType))
	}
	return attrs
}

// httpAttrs builds the attributes of an HTTP decision metric series.
func (in *Instrumentation) httpAttrs(k seriesKey) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+3)
	attrs = append(attrs, in.cfg.attrs...)
	if k.name != "" {
		attrs = append(attrs, keyHTTPScope.String(k.name))
	}
	attrs = append(attrs, keyOutcome.String(k.outcome))
	if k.errType != "" {
		attrs = append(attrs, keyErrorType.String(k.errType))
	}
	return attrs
}

func (in *Instrumentation) httpSeries(metric uint8, scope, outcome, errType string) *series {
	return in.series.get(seriesKey{metric: metric, name: scope, outcome: outcome, errType: errType}, in.httpAttrs)
}

// lockSeries returns the series of a lock metric; the lock name is capped.
func (in *Instrumentation) lockSeries(metric uint8, name string, kind core.Kind, op, outcome, errType string) *series {
	return in.series.get(seriesKey{metric: metric, name: in.capName(nameLock, name), kind: kind, op: op, outcome: outcome, errType: errType}, in.lockAttrs)
}

// cronSeries returns the series of a cron metric; the job name is capped.
func (in *Instrumentation) cronSeries(metric uint8, job, skip, outcome, errType string, catchUp bool) *series {
	return in.series.get(seriesKey{metric: metric, name: in.capName(nameCronJob, job), op: skip, outcome: outcome,
		errType: errType, catchUp: catchUp}, in.cronAttrs)
}

// activitySeries returns the series of the activity lock metric; the
// activity type is capped.
func (in *Instrumentation) activitySeries(activityType, outcome, errType string) *series {
	return in.series.get(seriesKey{metric: seriesActivityLock, name: in.capName(nameActivityType, activityType),
		outcome: outcome, errType: errType}, in.activityAttrs)
}
