package core

import (
	"context"
	"slices"
	"time"
)

// bindKey finds the leases a context carries (Do, Lock.WithContext).
type bindKey struct{}

// binding is an immutable list of the leases a context carries, innermost
// first.
type binding struct {
	l    *lease
	next *binding
}

func (c *Client) bind(ctx context.Context, l *lease) context.Context {
	prev, _ := ctx.Value(bindKey{}).(*binding)
	return context.WithValue(ctx, bindKey{}, &binding{l: l, next: prev})
}

// reenter returns a new handle on the lease of key from this Client that
// ctx carries, if it is still held.
func (c *Client) reenter(ctx context.Context, key string) *Lock {
	b, _ := ctx.Value(bindKey{}).(*binding)
	for ; b != nil; b = b.next {
		l := b.l
		if l.c != c || l.key != key || l.n.limit != 0 { // permits and read-write holds are never re-entered
			continue
		}
		l.mu.Lock()
		l.lapsed() // a lease past its deadline is not re-entered, its timer run or not
		l.mu.Lock()
		ok := !l.released && l.lostErr == nil && time.Now().Before(l.deadline)
		if ok {
			l.holds++
		}
		l.mu.Unlock()
		if ok {
			return &Lock{l: l}
		}
	}
	return nil
}

// carriesAny reports whether ctx carries a lease of this Client of any of
// keys (which a lock call would re-enter).
func (c *Client) carriesAny(ctx context.Context, keys []string) bool {
	b, _ := ctx.Value(bindKey{}).(*binding)
	for ; b != nil; b = b.next {
		if b.l.c == c && b.l.n.limit == 0 && slices.Contains(keys, b.l.key) {
			return true
		}
	}
	return false
}

// FenceFromContext returns the fence of the innermost lease ctx carries —
// the one Do runs its callback under, or one placed with Lock.WithContext —
// and whether there is one that is still held. Pass it with the writes the
// callback makes, so that storage can reject them once a later holder
// wrote.
func FenceFromContext(ctx context.Context) (int64, bool) {
	b, _ := ctx.Value(bindKey{}).(*binding)
	if b == nil {
		return 0, false
	}
	l := b.l
	l.mu.Lock()
	if l.lapsed() {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.lostErr != nil {
		return 0, false
	}
	return l.fence, true
}
