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
	op   core.Op
	key  string
	kind core.Kind
	res  core.OpResult
}

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu     sync.Mutex
	events []event
	lost   []error
	kinds  []core.Kind // of the leases lost
}

type ctxMark struct{}

func (r *recorder) OpStart(ctx context.Context, op core.Op, key string, kind core.Kind) (context.Context, func(core.OpResult)) {
	return context.WithValue(ctx, ctxMark{}, op), func(res core.OpResult) {
		r.mu.Lock()
		r.events = append(r.events, event{op, key, kind, res})
		r.mu.Unlock()
	}
}

func (r *recorder) LeaseLost(_ context.Context, key string, kind core.Kind, fence int64, held time.Duration, cause error) {
	r.mu.Lock()
	r.lost = append(r.lost, cause)
	r.kinds = append(r.kinds, kind)
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

	waits := rec.find(core.OpWait)
	if len(waits) != 1 || waits[0].Err != nil || waits[0].Wait <= 0 || waits[0].Attempts < 2 {
		t.Errorf("waits: %+v (want the one of the Lock that waited)", waits)
	}
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
	// a's release may be recorded after b's nested one: a's goroutine
	// records it once the release returns, and b, woken by it, may run on
	// first. So: one re-entered release, and b's, the last, held > 0.
	rel := rec.find(core.OpRelease)
	reentered := 0
	for _, r := range rel {
		if r.Reentered {
			reentered++
		}
	}
	if len(rel) != 3 || reentered != 1 || rel[2].Reentered || rel[2].Held <= 0 {
		t.Errorf("releases: %+v (want a's, the nested one re-entered, b's)", rel)
	}
	if renew := rec.find(core.OpRenew); len(renew) == 0 {
		t.Errorf("no renewal observed (a's 60 ms lease is renewed every 20 ms)")
	}
	if ext := rec.find(core.OpExtend); len(ext) != 1 || ext[0].Err != nil {
		t.Errorf("extend: %+v", ext)
	}

	lost, _ := c.TryLock(ctx, "gone", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
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

// TestObserverKinds: every operation names the kind of lease it is on,
// and a loss names its lease's.
func TestObserverKinds(t *testing.T) {
	rec := &recorder{}
	c := mustNew(core.NewMemory(core.WithObserver(rec)))
	defer c.Close()
	ctx := context.Background()

	cases := []struct {
		want core.Kind
		take func() (*core.Lock, error)
	}{
		{core.KindLock, func() (*core.Lock, error) { return c.TryLock(ctx, "m") }},
		{core.KindPermit, func() (*core.Lock, error) { return c.Semaphore("s", 2).TryAcquire(ctx) }},
		{core.KindRead, func() (*core.Lock, error) { return c.RWMutex("rw").TryRLock(ctx) }},
		{core.KindWrite, func() (*core.Lock, error) { return c.RWMutex("rw2").TryLock(ctx) }},
		{core.KindLeader, func() (*core.Lock, error) { return c.Campaign(ctx, "e", "node-1") }},
	}
	for _, tc := range cases {
		rec.mu.Lock()
		rec.events = nil
		rec.mu.Unlock()
		l, err := tc.take()
		if err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		rec.mu.Lock()
		if len(rec.events) != 3 {
			t.Errorf("%s: %d events, want acquire, extend, release", tc.want, len(rec.events))
		}
		for _, e := range rec.events {
			if e.kind != tc.want {
				t.Errorf("%s: %v reported as kind %q", tc.want, e.op, e.kind)
			}
		}
		rec.mu.Unlock()
	}

	p, err := c.Semaphore("s2", 1).TryAcquire(ctx, core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Lost()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		rec.mu.Lock()
		n := len(rec.kinds)
		rec.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.kinds) != 1 || rec.kinds[0] != core.KindPermit {
		t.Errorf("lost kinds %v, want [permit]", rec.kinds)
	}
}

// slowLoss is an Observer whose LeaseLost takes a while, as if the
// goroutine that found the loss were descheduled between telling the
// holder and telling the Observer.
type slowLoss struct {
	mu       sync.Mutex
	reported int
	releases []core.OpResult
	order    []string
}

func (o *slowLoss) OpStart(ctx context.Context, op core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	return ctx, func(r core.OpResult) {
		if op != core.OpRelease {
			return
		}
		o.mu.Lock()
		o.releases = append(o.releases, r)
		o.order = append(o.order, "release")
		o.mu.Unlock()
	}
}

func (o *slowLoss) LeaseLost(context.Context, string, core.Kind, int64, time.Duration, error) {
	time.Sleep(200 * time.Millisecond)
	o.mu.Lock()
	o.reported++
	o.order = append(o.order, "lost")
	o.mu.Unlock()
}

// TestLossReportedBeforeReleaseEnds: the holder is told of a loss before
// the Observer is, but the release of the lost lease (Do's, or Release's)
// ends only after LeaseLost returned — so whoever is back from Do or
// Release finds the loss recorded, and an Observer sees the loss before
// the release that reports Lost.
func TestLossReportedBeforeReleaseEnds(t *testing.T) {
	for _, via := range []string{"Do", "Release"} {
		t.Run(via, func(t *testing.T) {
			obs := &slowLoss{}
			c := mustNew(core.NewMemory(core.WithObserver(obs)))
			defer c.Close()
			ctx := context.Background()
			opts := []core.LockOption{core.WithTTL(50 * time.Millisecond), core.WithAutoRenew(false)}
			var err error
			if via == "Do" {
				err = c.Do(ctx, "k", func(ctx context.Context) error {
					<-ctx.Done()
					return context.Cause(ctx)
				}, opts...)
			} else {
				var l *core.Lock
				if l, err = c.TryLock(ctx, "k", opts...); err != nil {
					t.Fatal(err)
				}
				<-l.Lost()
				// The server's lease may outlive the local deadline by the
				// drift margin, so this release may still delete it: its
				// error is not the point.
				_ = l.Release(ctx)
			}
			if via == "Do" && !errors.Is(err, core.ErrLost) {
				t.Fatalf("Do: %v, want ErrLost", err)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.reported != 1 {
				t.Fatalf("%s returned before LeaseLost: %d losses reported", via, obs.reported)
			}
			if len(obs.releases) != 1 || !obs.releases[0].Lost {
				t.Fatalf("releases %+v, want one marked Lost", obs.releases)
			}
			if obs.order[0] != "lost" || obs.order[1] != "release" {
				t.Fatalf("observer saw %v, want the loss before the release", obs.order)
			}
		})
	}
}
