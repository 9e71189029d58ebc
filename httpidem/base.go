package httpidem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/name"
)

// kv is what a store keeps beside the leases: records and daily claims.
type kv interface {
	get(ctx context.Context, key string) ([]byte, bool, error)
	// put stores data unless the record there has a higher fence.
	put(ctx context.Context, key string, fence int64, data []byte, ttl time.Duration) (bool, error)
	claim(ctx context.Context, k claimKeys, token, subject string, at time.Time, mode CountMode) (bool, error)
	unclaim(ctx context.Context, k claimKeys, token string, counted bool) error
	count(ctx context.Context, k claimKeys) (int64, error)
	// stat returns a record and its time left (-1: no expiry); del
	// deletes one (see lookup.go).
	stat(ctx context.Context, key string) ([]byte, time.Duration, bool, error)
	del(ctx context.Context, key string) (bool, error)
}

// claimKeys are the storage names of one (scope, day, object): they share
// a hash tag, so the count scripts run on one Redis Cluster slot.
type claimKeys struct {
	claim   string // "<prefix>:day:{<scope>:<day>:<object>}:s:<subject>"
	counter string // "<prefix>:day:{<scope>:<day>:<object>}:n"
	hll     string // "<prefix>:day:{<scope>:<day>:<object>}:h"
}

// base implements IdempotencyStore and ClaimCounter over a core.Client
// (leases) and a kv. RedisStore and MemoryStore embed it.
type base struct {
	prefix   string
	locks    *core.Client
	ownLocks bool
	kv       kv

	closeOnce sync.Once
}

// Limits of store arguments.
const (
	maxBeginKey   = 1000 // core.MaxKeyLen is 1024
	maxScopeLen   = 64
	maxObjectLen  = 256
	maxSubjectLen = 256
	maxTokenLen   = 64
)

func storeErr(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

func (b *base) recordKey(key string) string { return b.prefix + ":{" + key + "}:resp" }

// checkBegin returns the ErrInvalidArgument of bad BeginArgs, or nil.
func checkBegin(a BeginArgs) error {
	switch {
	case a.Key == "" || len(a.Key) > maxBeginKey:
		return fmt.Errorf("%w: key of %d bytes (want 1 to %d)", ErrInvalidArgument, len(a.Key), maxBeginKey)
	case len(a.Fingerprint) > maxFingerprintLen || strings.ContainsAny(a.Fingerprint, "\r\n"):
		return fmt.Errorf("%w: fingerprint", ErrInvalidArgument)
	case a.LeaseTTL < time.Millisecond:
		return fmt.Errorf("%w: lease ttl %v", ErrInvalidArgument, a.LeaseTTL)
	}
	return nil
}

// Begin implements IdempotencyStore.
func (b *base) Begin(ctx context.Context, a BeginArgs) (Begun, error) {
	if err := checkBegin(a); err != nil {
		return Begun{}, err
	}
	recKey := b.recordKey(a.Key)
	opts := []core.LockOption{core.WithTTL(a.LeaseTTL), core.WithMetadata(a.Fingerprint)}
	// A few rounds: the holder seen busy may be gone by the time we look.
	for range 3 {
		lk, err := b.locks.TryLock(ctx, a.Key, opts...)
		if err == nil {
			return b.owned(ctx, lk, recKey)
		}
		if !errors.Is(err, core.ErrNotAcquired) {
			return Begun{}, storeErr("acquire lease", err)
		}
		// Held. By a request that already completed (replaying, say)?
		if rec, ok, err := b.record(ctx, recKey); err != nil || ok {
			return Begun{Record: rec}, err
		}
		info, err := b.locks.Inspect(ctx, a.Key)
		if err != nil {
			return Begun{}, storeErr("inspect lease", err)
		}
		if !info.Held {
			continue
		}
		if a.Wait > 0 && info.Metadata == a.Fingerprint {
			// Wait for the holder to finish (a release wakes us), then
			// find its record — or run, if it gave up.
			lk, err := b.locks.Lock(ctx, a.Key, append(opts, core.WithWaitTimeout(a.Wait))...)
			if err == nil {
				return b.owned(ctx, lk, recKey)
			}
			if !errors.Is(err, core.ErrNotAcquired) {
				return Begun{}, storeErr("wait for lease", err)
			}
			info.TTL = -1
		}
		return Begun{InFlight: &InFlight{Fingerprint: info.Metadata, TTL: info.TTL}}, nil
	}
	return Begun{InFlight: &InFlight{Fingerprint: a.Fingerprint, TTL: -1}}, nil
}

// owned looks for a record now that lk is held: a request that completed
// just before we took the lease must be replayed, not run again.
func (b *base) owned(ctx context.Context, lk *core.Lock, recKey string) (Begun, error) {
	rec, ok, err := b.record(ctx, recKey)
	if err != nil || ok {
		_ = lk.Release(ctx)
		return Begun{Record: rec}, err
	}
	return Begun{Lease: &coreLease{b: b, lk: lk, recKey: recKey}}, nil
}

func (b *base) record(ctx context.Context, recKey string) (*Record, bool, error) {
	data, ok, err := b.kv.get(ctx, recKey)
	if err != nil {
		return nil, false, storeErr("read record", err)
	}
	if !ok {
		return nil, false, nil
	}
	rec, err := decodeRecord(data)
	if err != nil {
		return nil, false, storeErr("decode record", err)
	}
	return rec, true, nil
}

// coreLease is a Lease on a core lock.
type coreLease struct {
	b      *base
	lk     *core.Lock
	recKey string
}

func (l *coreLease) Lost() <-chan struct{} { return l.lk.Lost() }

func (l *coreLease) Err() error {
	if err := l.lk.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return nil
}

func (l *coreLease) Complete(ctx context.Context, rec *Record, ttl time.Duration) error {
	if ttl < time.Millisecond {
		_ = l.lk.Release(ctx)
		return fmt.Errorf("%w: record ttl %v", ErrInvalidArgument, ttl)
	}
	if err := l.Err(); err != nil {
		_ = l.lk.Release(ctx)
		return err
	}
	fence := l.lk.Fence()
	stored, err := l.b.kv.put(ctx, l.recKey, fence, encodeRecord(rec, fence), ttl)
	relErr := l.Release(ctx)
	switch {
	case err != nil:
		return storeErr("store record", err)
	case !stored:
		return fmt.Errorf("%w: a later request stored its response first", ErrLost)
	}
	return relErr
}

func (l *coreLease) Release(ctx context.Context) error {
	err := l.lk.Release(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, core.ErrNotHeld):
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return storeErr("release lease", err)
}

// checkDay returns the ErrInvalidArgument of a bad scope, object or day.
func checkDay(scope, object string, day Day) error {
	switch {
	case name.Check(scope, maxScopeLen) != "":
		return fmt.Errorf("%w: scope %q: %s", ErrInvalidArgument, scope, name.Check(scope, maxScopeLen))
	case len(object) > maxObjectLen:
		return fmt.Errorf("%w: object of %d bytes, over %d", ErrInvalidArgument, len(object), maxObjectLen)
	case day.IsZero():
		return fmt.Errorf("%w: zero day", ErrInvalidArgument)
	}
	return nil
}

// checkClaim returns the ErrInvalidArgument of bad ClaimArgs, or nil.
func checkClaim(a ClaimArgs) error {
	if err := checkDay(a.Scope, a.Object, a.Day); err != nil {
		return err
	}
	switch {
	case a.Subject == "" || len(a.Subject) > maxSubjectLen:
		return fmt.Errorf("%w: subject of %d bytes (want 1 to %d)", ErrInvalidArgument, len(a.Subject), maxSubjectLen)
	case a.Count != CountApprox && (a.Token == "" || len(a.Token) > maxTokenLen):
		return fmt.Errorf("%w: token of %d bytes (want 1 to %d)", ErrInvalidArgument, len(a.Token), maxTokenLen)
	case a.ExpireAt.IsZero():
		return fmt.Errorf("%w: zero expiry", ErrInvalidArgument)
	case a.Count > CountApprox:
		return fmt.Errorf("%w: count mode %d", ErrInvalidArgument, a.Count)
	}
	return nil
}

func (b *base) dayKeys(scope, object string, day Day) (claimKeys, error) {
	if err := checkDay(scope, object, day); err != nil {
		return claimKeys{}, err
	}
	tag := b.prefix + ":day:{" + escape(scope) + ":" + day.String() + ":" + escape(object) + "}:"
	return claimKeys{counter: tag + "n", hll: tag + "h", claim: tag + "s:"}, nil
}

func (b *base) claimArgs(a ClaimArgs) (claimKeys, error) {
	if err := checkClaim(a); err != nil {
		return claimKeys{}, err
	}
	k, err := b.dayKeys(a.Scope, a.Object, a.Day)
	if err != nil {
		return k, err
	}
	k.claim += escape(a.Subject)
	return k, nil
}

// Claim implements ClaimStore.
func (b *base) Claim(ctx context.Context, a ClaimArgs) (bool, error) {
	k, err := b.claimArgs(a)
	if err != nil {
		return false, err
	}
	first, err := b.kv.claim(ctx, k, a.Token, a.Subject, a.ExpireAt, a.Count)
	if err != nil {
		return false, storeErr("claim", err)
	}
	return first, nil
}

// Unclaim implements ClaimStore.
func (b *base) Unclaim(ctx context.Context, a ClaimArgs) error {
	k, err := b.claimArgs(a)
	if err != nil {
		return err
	}
	if a.Count == CountApprox {
		return nil // nothing to give back
	}
	if err := b.kv.unclaim(ctx, k, a.Token, a.Count == CountExact); err != nil {
		return storeErr("unclaim", err)
	}
	return nil
}

// Count implements ClaimCounter.
func (b *base) Count(ctx context.Context, scope, object string, day Day) (int64, error) {
	k, err := b.dayKeys(scope, object, day)
	if err != nil {
		return 0, err
	}
	n, err := b.kv.count(ctx, k)
	if err != nil {
		return 0, storeErr("count", err)
	}
	return n, nil
}

// Close closes the core.Client the store created (releasing the leases it
// still holds); a Client given with WithLocks stays open, and a Redis
// client is never closed. Calling it again does nothing.
func (b *base) Close() error {
	b.closeOnce.Do(func() {
		if b.ownLocks && b.locks != nil {
			_ = b.locks.Close()
		}
	})
	return nil
}
