package core

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/internal/records"
)

func init() {
	records.Of = func(client any) records.Store {
		c, ok := client.(*Client)
		if !ok || c == nil {
			return nil
		}
		return recordStore{c}
	}
}

// recordStore adapts a Client's backend to records.Store.
type recordStore struct{ c *Client }

func (r recordStore) check(key string) error {
	if r.c.cfg.err != nil {
		return r.c.cfg.err
	}
	return validKey(key)
}

func (r recordStore) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if err := r.check(key); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	return r.c.be.setRecord(ctx, r.c.names(key).lease+":rec", value, ttl)
}

func (r recordStore) Get(ctx context.Context, key string) (string, bool, error) {
	if err := r.check(key); err != nil {
		return "", false, err
	}
	return r.c.be.getRecord(ctx, r.c.names(key).lease+":rec")
}

func (r recordStore) Claim(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := r.check(key); err != nil {
		return false, err
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	return r.c.be.claimRecord(ctx, r.c.names(key).lease+":rec", value, ttl)
}

// ClaimWithin implements records.Store: a claim refused when it arrives
// after planned + window by the store's clock.
func (r recordStore) ClaimWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (records.Verdict, error) {
	if err := r.check(key); err != nil {
		return 0, err
	}
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	if window < 0 {
		return 0, fmt.Errorf("%w: negative claim window %v", ErrInvalidTTL, window)
	}
	return r.c.be.claimRecordWithin(ctx, r.c.names(key).lease+":rec", value, ttl, planned.UnixMilli(), window.Milliseconds())
}

// SetIfNewer implements records.Store: the record's order is kept in a
// sibling key ("<record>:ord"; same hash tag, same TTL), compared and
// written with the record in one atomic step.
func (r recordStore) SetIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	if err := r.check(key); err != nil {
		return false, err
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	rec := r.c.names(key).lease + ":rec"
	return r.c.be.setRecordNewer(ctx, rec, rec+":ord", value, order, ttl)
}

// claimLife is how long a claim made at nowMs (unix ms) for ttl with the
// deadline dlMs must live: ttl, or until just past the deadline, whichever
// ends later — so no claim that arrives by the deadline finds the key
// expired. The memory backend uses it; claim_within.lua does the same.
func claimLife(nowMs, dlMs int64, ttl time.Duration) time.Duration {
	return max(ttl, time.Duration(dlMs-nowMs+1)*time.Millisecond)
}

// verdict is records.Verdict, named here so that the backends need not
// import internal/records.
type verdict = records.Verdict

// The verdicts of claimRecordWithin.
const (
	verdictClaimed = records.Claimed
	verdictTaken   = records.Taken
	verdictLate    = records.Late
)
