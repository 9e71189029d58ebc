package core

import "context"

// An RWMutex is a read-write lock on a key: any number of readers share
// it, a writer excludes readers and other writers. Get one with
// Client.RWMutex; it is a small value, safe for concurrent use, and making
// one does no I/O. Every hold is a *Lock with a lock's guarantees — a
// random token, watchdog renewal, the loss signal, bounded waits woken by
// release notifications — and a dead holder's hold ends at its TTL.
//
// A writer that waits is recorded in Redis (for a few seconds, refreshed
// while it keeps waiting), and new readers queue behind it: a stream of
// readers cannot starve a writer, which gets in once the readers already
// inside leave. Waiting writers get the lock in the order they came: a
// release wakes the first of them by name, and no writer (TryLock
// included) takes the lock ahead of one that waits. When no writer waits,
// a release wakes one waiter per Client, and a reader that gets in wakes
// the next, so waiting readers get in together. A writer that gives up
// (its wait bound, its context) leaves the line at once; one that crashed
// stops holding others back within those seconds.
//
// Fences: a write hold raises the key's fence, as a Lock does; so does
// the first read hold of a read term (taken while no reader is inside),
// and the read holds that join it carry the same fence. Storage that
// checks fences then accepts the writes of the current term's readers and
// rejects those of a writer deposed by them (one that paused past its
// TTL), and of every earlier term. The holds live under the key's hash tag in their own keys
// ("<prefix>:{<key>}:rw…"), apart from the key's mutex and semaphore. The
// backend is NewRedis (server, Sentinel, Cluster) or NewMemory; on
// NewRedlock every call fails with ErrInvalidOption, and so does WithFair.
// Holds are never re-entered through a context; WithToken re-enters the
// hold of that token and kind. There is no upgrade or downgrade: a holder
// that asks for the other kind of hold of the same key waits for itself,
// until its wait bound — release one before taking the other.
type RWMutex struct {
	c   *Client
	key string
}

// RWMutex returns the read-write lock of key. An invalid key is reported
// by its calls.
func (c *Client) RWMutex(key string) *RWMutex { return &RWMutex{c: c, key: key} }

// Key returns the lock's key.
func (m *RWMutex) Key() string { return m.key }

// RLock takes a read hold, waiting while a writer holds the lock or waits
// for it, with the bounds and errors of Client.Lock.
func (m *RWMutex) RLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.c.acquire(ctx, m.key, rwRead, opts, true)
}

// TryRLock takes a read hold if no writer holds the lock or waits for it;
// otherwise ErrNotAcquired, as Client.TryLock.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.c.acquire(ctx, m.key, rwRead, opts, false)
}

// Lock takes the write hold, waiting (recorded as a waiting writer) while
// readers or another writer hold the lock, with the bounds and errors of
// Client.Lock.
func (m *RWMutex) Lock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.c.acquire(ctx, m.key, rwWrite, opts, true)
}

// TryLock takes the write hold if nobody holds the lock and no writer
// waits for it; otherwise ErrNotAcquired, as Client.TryLock. It does not
// hold readers back.
func (m *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.c.acquire(ctx, m.key, rwWrite, opts, false)
}
