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
