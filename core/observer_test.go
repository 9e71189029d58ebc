package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

type event struct {
	op  core.Op
	key string
	res core.OpResult
}

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu     sync.Mutex
	events []event
	lost   []error
}

type ctxMark struct{}

func (r *recorder) OpStart(ctx context.Context, op core.Op, key string) (context.Context, func(core.OpResult)) {
	return context.WithValue(ctx, ctxMark{}, op), func(res core.OpResult) {
		r.mu.Lock()
		r.events = append(r.events, event{op, key, res})
		r.mu.Unlock()
	}
}

func (r *recorder) LeaseLost(_ context.Context, key string, fence int64, held time.Duration, cause error) {
	r.mu.Lock()
	r.lost = append(r.lost, cause)
	r.mu.Unlock()
}

func (r *recorder) find(op core.Op) []core.OpResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []core.OpResult
	for _, e := range r.events {
		if e.op == op {
			out = append(out, e.res)
		}
	}
	return out
}

func TestObserver(t *testing.T) {
	rec := &recorder{}
	c := mustNew(core.NewMemory(core.WithObserver(rec)))
	defer c.Close()
	ctx := context.Background()

	a, err := c.TryLock(ctx, "k", core.WithTTL(60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatal(err)
	}
	go func() { time.Sleep(30 * time.Millisecond); a.Release(ctx) }()
	b, err := c.Lock(ctx, "k", core.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nested, _ := c.TryLock(b.WithContext(ctx), "k")
	nested.Release(ctx)
	time.Sleep(100 * time.Millisecond)
	if err := b.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	b.Release(ctx)

	acq := rec.find(core.OpAcquire)
	if len(acq) != 4 {
		t.Fatalf("%d acquisitions observed, want 4: %+v", len(acq), acq)
	}
	if acq[0].Err != nil || acq[0].Attempts != 1 || acq[0].Fence != a.Fence() {
		t.Errorf("first acquire: %+v", acq[0])
	}
	if !errors.Is(acq[1].Err, core.ErrNotAcquired) {
		t.Errorf("contended TryLock: %+v", acq[1])
	}
	if acq[2].Err != nil || acq[2].Attempts < 2 || acq[2].Wait <= 0 {
		t.Errorf("waited Lock: %+v", acq[2])
	}
	if !acq[3].Reentered {
		t.Errorf("nested acquire not marked re-entered: %+v", acq[3])
	}
	rel := rec.find(core.OpRelease)
	if len(rel) != 3 || !rel[1].Reentered || rel[2].Reentered || rel[2].Held <= 0 {
		t.Errorf("releases: %+v", rel)
	}
	if renew := rec.find(core.OpRenew); len(renew) == 0 {
		t.Errorf("no renewal observed (a's 60 ms lease is renewed every 20 ms)")
	}
	if ext := rec.find(core.OpExtend); len(ext) != 1 || ext[0].Err != nil {
		t.Errorf("extend: %+v", ext)
	}

	lost, _ := c.TryLock(ctx, "gone", core.WithTTL(10*time.Millisecond), core.WithAutoRenew(false))
	<-lost.Lost()
	lost.Release(ctx)
	// The observer hears of a loss right after the holder is told.
	var nLost int
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		rec.mu.Lock()
		nLost = len(rec.lost)
		rec.mu.Unlock()
		if nLost > 0 || time.Now().After(deadline) {
			break
		}
	}
	if nLost != 1 || !errors.Is(rec.lost[0], core.ErrLost) {
		t.Errorf("lost: %v", rec.lost)
	}
	if rel := rec.find(core.OpRelease); !rel[len(rel)-1].Lost {
		t.Errorf("release of a lost lease not marked: %+v", rel[len(rel)-1])
	}
}
