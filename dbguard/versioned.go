package dbguard

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/latchkey/latchkey/internal/nilness"
)

// Versioned is a versioned key-value store — Tair's get/put(key, value,
// version) — on a SQL table (VersionsInSQL) or on Redis (VersionsInRedis),
// for state other than stock: a cart, a reservation, a profile. Every
// value carries a version, and a write names the version it was based on:
// if the stored version has moved, the write fails with ErrVersionConflict
// and changes nothing, so concurrent read-modify-write cycles never lose
// an update. It is safe for concurrent use.
type Versioned struct {
	s VersionStore
}

// A VersionStore is where a Versioned keeps its values: VersionsInSQL or
// VersionsInRedis. It is sealed: only this package makes them.
type VersionStore interface {
	get(ctx context.Context, key string) (value []byte, version int64, found bool, err error)
	put(ctx context.Context, key string, value []byte, version int64) (ok bool, err error)
	migrate(ctx context.Context) error
}

// NewVersioned returns a Versioned on store. It does no I/O. A nil store
// is ErrInvalidOption.
func NewVersioned(store VersionStore) (*Versioned, error) {
	if nilness.IsNil(store) {
		return nil, fmt.Errorf("%w: nil version store", ErrInvalidOption)
	}
	return &Versioned{s: store}, nil
}

// Migrate creates the store's table if it does not exist (SQL); on Redis it
// does nothing.
func (v *Versioned) Migrate(ctx context.Context) error {
	return v.s.migrate(ctx)
}

// Get returns key's value and version. Versions start at 1 and grow by one
// with every Put. A key never written returns ErrNotFound with version 0 —
// the version to Put to create it.
func (v *Versioned) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if err := validName(key, ErrInvalidKey, "key"); err != nil {
		return nil, 0, err
	}
	val, ver, found, err := v.s.get(ctx, key)
	if errors.Is(err, ErrInvalidVersion) { // names the key already
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("dbguard: get %q: %w", key, err)
	}
	if !found {
		return nil, 0, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return val, ver, nil
}

// Put stores value under key if key's version is still version, and the
// stored version becomes version+1. Version 0 means "create": it succeeds
// only if the key does not exist yet. Otherwise — another writer went
// first — it changes nothing and returns ErrVersionConflict: Get again,
// redo the change, Put again (or let Update do that). Versions are exact
// over the whole int64 range, on every store; a negative version, or
// math.MaxInt64 (which has no next version), returns ErrInvalidVersion
// and writes nothing. A nil value is stored as an empty one.
//
// A Put sent whose answer was lost (a connection reset or killed, ctx
// ending while it was in flight) returns an error matching
// ErrOutcomeUnknown: it may have been written. Every other error means
// nothing was. Do not redo the change blindly after ErrOutcomeUnknown: Get
// shows the value and version now, whoever wrote them. On Redis a put that
// go-redis sends again after a lost answer (MaxRetries) recognises its own
// write and succeeds.
func (v *Versioned) Put(ctx context.Context, key string, value []byte, version int64) error {
	if err := validName(key, ErrInvalidKey, "key"); err != nil {
		return err
	}
	if version < 0 || version == math.MaxInt64 {
		return fmt.Errorf("%w: %d", ErrInvalidVersion, version)
	}
	if value == nil {
		value = []byte{}
	}
	ok, err := v.s.put(ctx, key, value, version)
	if errors.Is(err, ErrOutcomeUnknown) { // names the key already
		return err
	}
	if err != nil {
		return fmt.Errorf("dbguard: put %q: %w", key, err)
	}
	if !ok {
		return fmt.Errorf("%w: %q is no longer at version %d", ErrVersionConflict, key, version)
	}
	return nil
}

// Update runs the read-modify-write cycle: it gets key (found is false, and
// old nil, for a key never written), calls fn, and puts fn's result at the
// version it read. When another writer went first it starts over, after a
// jittered backoff, at most DefaultRetryBudget+1 times in all; then it returns ErrBusy
// (matching ErrVersionConflict too). An error from fn ends it at once,
// with nothing written; so does an error of Put, ErrOutcomeUnknown
// included (the change may have been written once: never twice). fn may
// run several times: keep it free of side effects.
func (v *Versioned) Update(ctx context.Context, key string, fn func(old []byte, found bool) ([]byte, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: nil update func", ErrInvalidOption)
	}
	for attempt := 0; ; attempt++ {
		old, ver, err := v.Get(ctx, key)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		val, err := fn(old, found)
		if err != nil {
			return err
		}
		err = v.Put(ctx, key, val, ver)
		if !errors.Is(err, ErrVersionConflict) {
			return err
		}
		if attempt+1 >= DefaultRetryBudget+1 {
			return fmt.Errorf("%w: %q: %d attempts: %w", ErrBusy, key, attempt+1, err)
		}
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return fmt.Errorf("dbguard: update %q: %w", key, serr)
		}
	}
}
