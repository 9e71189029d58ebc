package httpidem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operator's view of Idempotency's records: what a store keeps for one
// principal's key, and forgetting it. For tools (cmd/latchkey idem, an
// admin page), not for the middleware's request path.

// A StoredResponse is what a store keeps for one Idempotency-Key of one
// principal: its completed response, if any, and the request running
// with it now, if any.
type StoredResponse struct {
	// Record is the stored response (status, allow-listed headers, body);
	// nil when none is stored.
	Record *Record
	// TTL is the time the stored response has left (-1: no expiry; 0 when
	// Record is nil).
	TTL time.Duration
	// InFlight describes the request holding the key now; nil when none.
	InFlight *InFlight
}

// LookupResponse returns what the store keeps for the Idempotency-Key key
// sent by principal — the principal as IdempotencyConfig.Principal
// returns it, since keys are scoped by it. found is false when there is
// neither a stored response nor a request in flight. It changes nothing.
// An empty principal or key, or one too long, is ErrInvalidArgument; a
// store failure matches ErrUnavailable.
func (b *base) LookupResponse(ctx context.Context, principal, key string) (resp StoredResponse, found bool, err error) {
	scoped, err := lookupKey(principal, key)
	if err != nil {
		return StoredResponse{}, false, err
	}
	data, ttl, ok, err := b.kv.stat(ctx, b.recordKey(scoped))
	if err != nil {
		return StoredResponse{}, false, storeErr("read record", err)
	}
	if ok {
		if resp.Record, err = decodeRecord(data); err != nil {
			return StoredResponse{}, false, storeErr("decode record", err)
		}
		resp.TTL = ttl
	}
	info, err := b.locks.Inspect(ctx, scoped)
	if err != nil {
		return StoredResponse{}, false, storeErr("inspect lease", err)
	}
	if info.Held {
		resp.InFlight = &InFlight{Fingerprint: info.Metadata, TTL: info.TTL}
	}
	return resp, resp.Record != nil || resp.InFlight != nil, nil
}

// DeleteResponse deletes the stored response of the Idempotency-Key key
// sent by principal, so that the next request with the key runs again
// instead of being replayed; it reports whether there was one. A request
// in flight with the key is not stopped, and stores its response when it
// completes. Errors as LookupResponse's.
func (b *base) DeleteResponse(ctx context.Context, principal, key string) (deleted bool, err error) {
	scoped, err := lookupKey(principal, key)
	if err != nil {
		return false, err
	}
	deleted, err = b.kv.del(ctx, b.recordKey(scoped))
	if err != nil {
		return false, storeErr("delete record", err)
	}
	return deleted, nil
}

// lookupKey is the store key of principal's key, checked.
func lookupKey(principal, key string) (string, error) {
	switch {
	case principal == "":
		return "", fmt.Errorf("%w: empty principal", ErrInvalidArgument)
	case key == "":
		return "", fmt.Errorf("%w: empty idempotency key", ErrInvalidArgument)
	}
	scoped := scopedKey(principal, key)
	if len(scoped) > maxBeginKey {
		return "", fmt.Errorf("%w: idempotency key of %d bytes is too long", ErrInvalidArgument, len(key))
	}
	return scoped, nil
}

func (r redisKV) stat(ctx context.Context, key string) ([]byte, time.Duration, bool, error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	ttl := pttl.Val()
	if ttl < 0 {
		ttl = -1
	}
	data, _ := get.Bytes()
	return data, ttl, true, nil
}

func (r redisKV) del(ctx context.Context, key string) (bool, error) {
	n, err := r.rdb.Del(ctx, key).Result()
	return n > 0, err
}

func (m *memKV) stat(_ context.Context, key string) ([]byte, time.Duration, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, ok := m.live(key, now)
	if !ok {
		return nil, 0, false, nil
	}
	return append([]byte(nil), e.data...), e.expires.Sub(now), true, nil
}

func (m *memKV) del(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.live(key, m.now())
	delete(m.entries, key)
	return ok, nil
}
