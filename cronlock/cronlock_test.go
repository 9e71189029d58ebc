package cronlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// world is the true time of a test: the nodes' clocks are offsets from it,
// and the miniredis clock moves with it, so claim TTLs run out in step.
type world struct {
	mr *miniredis.Miniredis

	mu  sync.Mutex
	now time.Time
}

// base is the start of simulated time: a whole minute, so ticks of every
// schedule in the tests fall on known instants.
var base = time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)

func newWorld(t *testing.T) (*world, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(base)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return &world{mr: mr, now: base}, rdb
}

func (w *world) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// advanceTo moves true time (and the Redis clock) forward to t.
func (w *world) advanceTo(t time.Time) {
	w.mu.Lock()
	d := t.Sub(w.now)
	if d > 0 {
		w.now = t
	}
	w.mu.Unlock()
	if d > 0 {
		w.mr.FastForward(d)
		w.mr.SetTime(t)
	}
}

// clock is a node clock offset from true time.
func (w *world) clock(offset time.Duration) func() time.Time {
	return func() time.Time { return w.Now().Add(offset) }
}

// newLocker returns a Locker on its own core.Client over rdb, closed at
// cleanup, logging into a recorder.
func newLocker(t *testing.T, rdb redis.UniversalClient, node string, opts ...cronlock.Option) (*cronlock.Locker, *core.Client, *logRec) {
	t.Helper()
	client := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() { client.Close() })
	logs := &logRec{}
	opts = append([]cronlock.Option{cronlock.WithNodeID(node), cronlock.WithLogger(logs)}, opts...)
	return mustNew(cronlock.New(client, opts...)), client, logs
}

// jobName is a name unique to the test.
func jobName(t *testing.T) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// logRec is a cron.Logger that keeps what it is told.
type logRec struct {
	mu      sync.Mutex
	entries []logEntry
}

type logEntry struct {
	err error
	msg string
	kv  []any
}

func (r *logRec) Info(msg string, kv ...any) { r.add(logEntry{msg: msg, kv: kv}) }
func (r *logRec) Error(err error, msg string, kv ...any) {
	r.add(logEntry{err: err, msg: msg, kv: kv})
}

func (r *logRec) add(e logEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

// find returns the entries whose message contains msg.
func (r *logRec) find(msg string) []logEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logEntry
	for _, e := range r.entries {
		if strings.Contains(e.msg, msg) {
			out = append(out, e)
		}
	}
	return out
}

func (r *logRec) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.entries {
		fmt.Fprintf(&b, "%s err=%v %v\n", e.msg, e.err, e.kv)
	}
	return b.String()
}

// value returns the value after key in e's key/value pairs.
func (e logEntry) value(key string) any {
	for i := 0; i+1 < len(e.kv); i += 2 {
		if e.kv[i] == key {
			return e.kv[i+1]
		}
	}
	return nil
}

// runs collects which node ran which tick.
type runs struct {
	mu sync.Mutex
	by map[time.Time][]string
}

func newRuns() *runs { return &runs{by: make(map[time.Time][]string)} }

// fn returns a job function that records the tick on node.
func (r *runs) fn(node string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tick, ok := cronlock.TickFromContext(ctx)
		if !ok {
			return fmt.Errorf("no tick in context")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.by[tick.Planned.UTC()] = append(r.by[tick.Planned.UTC()], node)
		return nil
	}
}

func (r *runs) snapshot() map[time.Time][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[time.Time][]string, len(r.by))
	for k, v := range r.by {
		out[k] = slices.Clone(v)
	}
	return out
}

// waitFor polls cond until it holds or the generous bound passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
