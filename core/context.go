package core

import "context"

// bindKey finds the leases a context carries for one Client. It holds a
// single pointer, so using it as a context key does not allocate.
type bindKey struct{ c *Client }

// binding is an immutable list of leases carried by a context.
type binding struct {
	l    *lease
	next *binding
}

func (c *Client) bind(ctx context.Context, l *lease) context.Context {
	prev, _ := ctx.Value(bindKey{c}).(*binding)
	return context.WithValue(ctx, bindKey{c}, &binding{l: l, next: prev})
}

// reenter returns a new handle on the lease of key that ctx carries, if it
// is still held.
func (c *Client) reenter(ctx context.Context, key string) *Lock {
	b, _ := ctx.Value(bindKey{c}).(*binding)
	for ; b != nil; b = b.next {
		l := b.l
		if l.key != key {
			continue
		}
		l.mu.Lock()
		ok := !l.released && l.lostErr == nil
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
