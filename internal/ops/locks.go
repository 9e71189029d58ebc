package ops

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/latchkey/latchkey/core"
)

// The primitive types a key can hold, as Primitive.Type names them.
const (
	TypeLock      = "lock"      // a mutex: TryLock, Lock, Do, LockAll, Campaign
	TypeSemaphore = "semaphore" // permits of a Semaphore
	TypeRWMutex   = "rwmutex"   // read or write holds of an RWMutex
)

// A Hold is one holder of a primitive.
type Hold struct {
	Kind     core.Kind `json:"kind"`               // lock, permit, read or write
	Holder   string    `json:"holder"`             // the token, shortened for a table (ShortToken)
	Token    string    `json:"token"`              // the holder's full token
	Metadata string    `json:"metadata,omitempty"` // the holder's WithMetadata (a Campaign's value)
	Fence    int64     `json:"fence"`              // the hold's fencing token
	TTLMs    int64     `json:"ttl_ms"`             // time left in milliseconds (-1: no expiry)
}

// TTL returns the hold's time left (-1: no expiry).
func (h Hold) TTL() time.Duration {
	if h.TTLMs < 0 {
		return -1
	}
	return time.Duration(h.TTLMs) * time.Millisecond
}

// A Primitive is one held primitive of a key, as `latchkey locks` and the
// admin page list it: a key used as a lock and as a semaphore is two.
type Primitive struct {
	Key   string `json:"key"`
	Type  string `json:"type"` // TypeLock, TypeSemaphore or TypeRWMutex
	Holds []Hold `json:"holds"`
	// Waiters is how many waiters are queued for it: a lock's fair queue
	// (WithFair, and waiters that waited 50 ms), a semaphore's permit
	// queue, an RWMutex's waiting writers.
	Waiters int `json:"waiters"`
	// OldestWaitMs is how long the first of them has waited, in ms (0:
	// nobody waits).
	OldestWaitMs int64 `json:"oldest_wait_ms"`
}

// ShortToken shortens a token for a table: its first 8 characters and an
// ellipsis; enough to tell holders apart and to find the full one in the
// JSON output.
func ShortToken(tok string) string {
	if len(tok) <= 10 {
		return tok
	}
	return tok[:8] + "…"
}

func hold(kind core.Kind, tok, meta string, fence int64, ttl time.Duration) Hold {
	ms := ttl.Milliseconds()
	if ttl < 0 {
		ms = -1
	}
	return Hold{Kind: kind, Holder: ShortToken(tok), Token: tok, Metadata: meta, Fence: fence, TTLMs: ms}
}

func holds(hs []core.Hold) []Hold {
	out := make([]Hold, 0, len(hs))
	for _, h := range hs {
		out = append(out, hold(h.Kind, h.Token, h.Metadata, h.Fence, h.TTL))
	}
	return out
}

// FromInfo is the Primitive of one Info that core.Client.Scan yields.
func FromInfo(info core.Info) Primitive {
	switch {
	case info.Held:
		return Primitive{Key: info.Key, Type: TypeLock, Waiters: info.Waiters, OldestWaitMs: info.OldestWait.Milliseconds(),
			Holds: []Hold{hold(core.KindLock, info.Token, info.Metadata, info.Fence, info.TTL)}}
	case len(info.Holds) > 0 && info.Holds[0].Kind == core.KindPermit:
		return Primitive{Key: info.Key, Type: TypeSemaphore, Holds: holds(info.Holds),
			Waiters: info.PermitWaiters, OldestWaitMs: info.PermitOldestWait.Milliseconds()}
	}
	return Primitive{Key: info.Key, Type: TypeRWMutex, Holds: holds(info.Holds),
		Waiters: info.WritersWaiting, OldestWaitMs: info.WriterOldestWait.Milliseconds()}
}

// Locks yields the held primitives of c's keys that match (a path.Match
// pattern; "" or "*": all), one at a time as core's Scan finds them, so
// memory stays flat. An invalid pattern is an error matching
// core.ErrInvalidOption; a backend failure matches core.ErrUnavailable
// and ends the listing.
func Locks(ctx context.Context, c *core.Client, match string) iter.Seq2[Primitive, error] {
	return func(yield func(Primitive, error) bool) {
		for info, err := range c.Scan(ctx, match) {
			if err != nil {
				yield(Primitive{}, err)
				return
			}
			if !yield(FromInfo(info), nil) {
				return
			}
		}
	}
}

// A Key is everything known about one key: its lock, its semaphore's
// permits and its RWMutex's holds, and who waits for each.
type Key struct {
	Key string `json:"key"`
	// Held is true when anything holds the key.
	Held bool `json:"held"`
	// Lock is the mutex's holder; nil when it is free.
	Lock *Hold `json:"lock"`
	// Fence is the mutex's holder's fence, or the last fence issued for
	// the key when it is free (0: none in the last five minutes).
	Fence int64 `json:"fence"`
	// FairQueue is how many waiters are queued for the mutex, and
	// FairQueueOldestMs how long the first of them has waited (ms).
	FairQueue         int   `json:"fair_queue"`
	FairQueueOldestMs int64 `json:"fair_queue_oldest_ms"`
	// Permits are the semaphore's permits, the earliest to expire first.
	Permits []Hold `json:"permits"`
	// PermitQueue is how many waiters are queued for a permit, and
	// PermitQueueOldestMs how long the first of them has waited (ms).
	PermitQueue         int   `json:"permit_queue"`
	PermitQueueOldestMs int64 `json:"permit_queue_oldest_ms"`
	// RW are the RWMutex's holds: one write, or reads.
	RW []Hold `json:"rw"`
	// WritersWaiting is how many writers wait for the RWMutex, and
	// WritersOldestMs how long the first of them has waited (ms).
	WritersWaiting  int   `json:"writers_waiting"`
	WritersOldestMs int64 `json:"writers_oldest_ms"`
}

// Inspect returns everything core knows about key. An invalid key is an
// error matching core.ErrInvalidKey, and nothing is read.
func Inspect(ctx context.Context, c *core.Client, key string) (Key, error) {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return Key{}, err
	}
	return keyOf(info), nil
}

func keyOf(info core.Info) Key {
	k := Key{Key: info.Key, Fence: info.Fence, FairQueue: info.Waiters, FairQueueOldestMs: info.OldestWait.Milliseconds(),
		PermitQueue: info.PermitWaiters, PermitQueueOldestMs: info.PermitOldestWait.Milliseconds(),
		WritersWaiting: info.WritersWaiting, WritersOldestMs: info.WriterOldestWait.Milliseconds(),
		Permits: []Hold{}, RW: []Hold{}}
	if info.Held {
		h := hold(core.KindLock, info.Token, info.Metadata, info.Fence, info.TTL)
		k.Lock = &h
	}
	for _, h := range holds(info.Holds) {
		if h.Kind == core.KindPermit {
			k.Permits = append(k.Permits, h)
		} else {
			k.RW = append(k.RW, h)
		}
	}
	k.Held = k.Lock != nil || len(k.Permits) > 0 || len(k.RW) > 0
	return k
}

// Holds returns every hold of k: its lock, permits and RWMutex holds.
func (k Key) Holds() []Hold {
	var out []Hold
	if k.Lock != nil {
		out = append(out, *k.Lock)
	}
	out = append(out, k.Permits...)
	return append(out, k.RW...)
}

// An Eviction is what a force release did.
type Eviction struct {
	Key string `json:"key"`
	// Evicted are the holds taken away, as they were just before.
	Evicted []Hold `json:"evicted"`
	// Fence is the key's lock fence after the eviction, when the lock was
	// evicted: higher than the evicted holder's, so storage that checks
	// fences rejects its late writes. 0 when only a semaphore or an
	// RWMutex was evicted (their fences were raised too, but core does
	// not report a free semaphore's or RWMutex's fence).
	Fence int64 `json:"fence,omitempty"`
	// At is when the eviction was done.
	At time.Time `json:"at"`
}

// ErrNotHeld is core.ErrNotHeld: Evict found nothing holding the key.
var ErrNotHeld = core.ErrNotHeld

// Evict takes every hold of key away (core.Client.Evict): the holders
// are told at their next renewal (within a third of their TTL), and the
// fences are raised. A key nothing holds is an error matching
// core.ErrNotHeld, and nothing changes; an invalid key matches
// core.ErrInvalidKey. Given tokens (the holders an operator confirmed),
// only their holds are taken.
func Evict(ctx context.Context, c *core.Client, key string, tokens ...string) (Eviction, error) {
	info, err := c.Evict(ctx, key, tokens...)
	if err != nil {
		return Eviction{}, err
	}
	ev := Eviction{Key: key, Evicted: keyOf(info).Holds(), At: time.Now()}
	if info.Held {
		// Free, the last fence issued: the raised one. Taken again
		// meanwhile, the new holder's, which is higher still.
		after, err := c.Inspect(ctx, key)
		if err != nil {
			return ev, fmt.Errorf("evicted, but reading the new fence failed: %w", err)
		}
		ev.Fence = after.Fence
	}
	return ev, nil
}

// NotFound reports whether err means "nothing there": nothing held
// (core.ErrNotHeld), no run recorded, no response stored.
func NotFound(err error) bool {
	return errors.Is(err, core.ErrNotHeld) || errors.Is(err, ErrNotFound)
}

// ErrNotFound: the thing asked about is not there (a job without a
// recorded run, an Idempotency-Key without a stored response).
var ErrNotFound = errors.New("not found")
