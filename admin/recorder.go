package admin

import (
	"context"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A Loss is a lease that ended while its holder relied on it.
type Loss struct {
	At     time.Time `json:"at"`
	Key    string    `json:"key"`
	Kind   core.Kind `json:"kind"`
	Fence  int64     `json:"fence"`
	HeldMs int64     `json:"held_ms,omitempty"` // how long it had been held (0: unknown)
	Cause  string    `json:"cause"`
	// Source is "lost" for a loss a Recorder saw in this process, and
	// "evicted" for a force release done through the admin handler.
	Source string `json:"source"`
}

// The sources of a Loss.
const (
	SourceLost    = "lost"
	SourceEvicted = "evicted"
)

// A Recorder is a core.Observer that keeps the last losses of the leases
// of the Client it is installed on, for the admin page's "recent losses".
// Install it on the host's Client and give it to Handler:
//
//	rec := admin.NewRecorder(100, nil)
//	locks, err := core.NewRedis(rdb, core.WithObserver(rec))
//	mux.Handle("/debug/latchkey/", auth(admin.Handler(locks, admin.WithRecorder(rec))))
//
// A Client has one Observer: to keep another (package otel's), pass it as
// next and the Recorder hands every call on to it. A Recorder is safe for
// concurrent use and never blocks a lease's holder: it records with a
// short lock and no I/O.
type Recorder struct {
	next core.Observer

	mu     sync.Mutex
	losses []Loss // a ring of keep entries
	n      int    // losses ever recorded
}

var _ core.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder that keeps the last keep losses (keep < 1:
// 100) and hands every observation on to next (nil: none).
func NewRecorder(keep int, next core.Observer) *Recorder {
	if keep < 1 {
		keep = 100
	}
	return &Recorder{next: next, losses: make([]Loss, keep)}
}

// OpStart implements core.Observer: it hands the call on to next.
func (r *Recorder) OpStart(ctx context.Context, op core.Op, key string, kind core.Kind) (context.Context, func(core.OpResult)) {
	if r.next != nil {
		return r.next.OpStart(ctx, op, key, kind)
	}
	return ctx, func(core.OpResult) {}
}

// LeaseLost implements core.Observer: it records the loss, then hands the
// call on to next.
func (r *Recorder) LeaseLost(ctx context.Context, key string, kind core.Kind, fence int64, held time.Duration, cause error) {
	l := Loss{At: time.Now(), Key: key, Kind: kind, Fence: fence, HeldMs: held.Milliseconds(), Source: SourceLost}
	if cause != nil {
		l.Cause = cause.Error()
	}
	r.add(l)
	if r.next != nil {
		r.next.LeaseLost(ctx, key, kind, fence, held, cause)
	}
}

func (r *Recorder) add(l Loss) {
	r.mu.Lock()
	r.losses[r.n%len(r.losses)] = l
	r.n++
	r.mu.Unlock()
}

// Losses returns the losses kept, the latest first.
func (r *Recorder) Losses() []Loss {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(r.n, len(r.losses))
	out := make([]Loss, 0, k)
	for i := 1; i <= k; i++ {
		out = append(out, r.losses[(r.n-i)%len(r.losses)])
	}
	return out
}
