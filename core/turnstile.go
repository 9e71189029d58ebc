package core

import (
	"context"
	"sync"
	"time"
)

// A turnstile lets one goroutine of a Client at a time try for a key on
// the backend — its attempts and its wait between them — and queues the
// Client's other callers for that key in arrival order.
//
// Redlock needs it: two goroutines of one Client asking five nodes at once
// split their votes (each gets two or three nodes, often neither a
// majority), and both undo and retry. Behind a turnstile only the Client's
// first caller asks; the next one enters when it has the lock or gives up.
// A goroutine that releases the key and asks again at once queues behind
// the siblings already waiting, as a handoff to them, instead of racing
// the one its release woke.
type turnstiles struct {
	mu   sync.Mutex
	keys map[string]*turnstile
}

// turnstile is one key's: a goroutine is inside while it exists; queue
// holds the callers waiting to enter, first first; held is the lease the
// last caller to leave took, for the next one (see pass.held).
type turnstile struct {
	queue []chan struct{}
	held  *lease
}

// A pass is a caller's way through a key's turnstile.
type pass struct {
	t      *turnstiles
	key    string
	queued bool // it waited to enter
	// held is the lease the caller let in before this one took, if it
	// took one: while that lease lives, this Client holds the key, and an
	// attempt could only fail.
	held *lease
}

// enter returns once the caller is inside the key's turnstile. It fails
// with ctx's cause or, when done closes, with ErrClosed. The caller leaves
// with pass.leave.
func (t *turnstiles) enter(ctx context.Context, done <-chan struct{}, key string) (*pass, error) {
	t.mu.Lock()
	ts := t.keys[key]
	if ts == nil {
		if t.keys == nil {
			t.keys = make(map[string]*turnstile)
		}
		t.keys[key] = &turnstile{}
		t.mu.Unlock()
		return &pass{t: t, key: key}, nil
	}
	in := make(chan struct{})
	ts.queue = append(ts.queue, in)
	t.mu.Unlock()
	var err error
	select {
	case <-in:
		t.mu.Lock()
		p := &pass{t: t, key: key, queued: true, held: ts.held}
		ts.held = nil
		t.mu.Unlock()
		return p, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-done:
		err = ErrClosed
	}
	t.mu.Lock()
	for i, c := range ts.queue {
		if c == in { // still queued: out of the line
			ts.queue = append(ts.queue[:i], ts.queue[i+1:]...)
			t.mu.Unlock()
			return nil, err
		}
	}
	held := ts.held // let in meanwhile: pass it on
	ts.held = nil
	t.mu.Unlock()
	t.leave(key, held)
	return nil, err
}

// leave lets the next caller in; took is the lease the caller took, if any.
func (p *pass) leave(took *lease) { p.t.leave(p.key, took) }

// leave lets the next queued caller of key in, handing it held, or
// removes the key's turnstile when nobody waits.
func (t *turnstiles) leave(key string, held *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.keys[key]
	if len(ts.queue) == 0 {
		delete(t.keys, key)
		return
	}
	next := ts.queue[0]
	ts.queue[0] = nil
	ts.queue = ts.queue[1:]
	ts.held = held
	close(next)
}

// heldFor reports whether l is held by this Client's reckoning — not
// released, not lost, its deadline ahead — and for how long yet.
func (l *lease) heldFor() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := time.Until(l.deadline)
	if l.released || l.lostErr != nil || left <= 0 {
		return 0, false
	}
	return left, true
}
