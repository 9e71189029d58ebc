package httpidem

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/nilness"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/put_record.lua
	putRecordLua string
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/claim_hll.lua
	claimHLLLua string
	//go:embed scripts/unclaim.lua
	unclaimLua string
	//go:embed scripts/count.lua
	countLua string

	putRecordScript = redis.NewScript(putRecordLua)
	claimScript     = redis.NewScript(claimLua)
	claimHLLScript  = redis.NewScript(claimHLLLua)
	unclaimScript   = redis.NewScript(unclaimLua)
	countScript     = redis.NewScript(countLua)
)

// A RedisStore is an IdempotencyStore and a ClaimCounter on Redis: a
// server, a Sentinel group or a Cluster (every multi-key script touches
// keys of one hash tag). Records and claims are plain keys under the
// prefix; in-flight leases are core locks. Scripts run with EVALSHA.
// Requires Redis 6.2 or later (SET PXAT/EXAT).
type RedisStore struct {
	*base
}

var (
	_ IdempotencyStore = (*RedisStore)(nil)
	_ ClaimCounter     = (*RedisStore)(nil)
)

// NewRedisStore returns a store on rdb. It does no I/O. Unless WithLocks
// gives one, it creates its own core.Client (core.NewRedis(rdb,
// core.WithKeyPrefix(prefix))), which Close closes; rdb itself is never
// closed by the store. A nil rdb or an invalid option is an error
// matching ErrInvalidConfig.
func NewRedisStore(rdb redis.UniversalClient, opts ...StoreOption) (*RedisStore, error) {
	cfg, err := newStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	if nilness.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidConfig)
	}
	s := &RedisStore{&base{prefix: cfg.prefix, kv: redisKV{rdb: rdb}, locks: cfg.locks}}
	if s.locks == nil {
		if s.locks, err = core.NewRedis(rdb, core.WithKeyPrefix(cfg.prefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		s.ownLocks = true
	}
	return s, nil
}

// redisKV keeps records and claims on Redis.
type redisKV struct {
	rdb redis.UniversalClient
}

func (r redisKV) get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := r.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (r redisKV) put(ctx context.Context, key string, fence int64, data []byte, ttl time.Duration) (bool, error) {
	n, err := putRecordScript.Run(ctx, r.rdb, []string{key}, fenceString(fence), data, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// expiry rounds at up to a whole second, for EXAT.
func expiry(at time.Time) time.Time {
	if t := at.Truncate(time.Second); t.Before(at) {
		return t.Add(time.Second)
	}
	return at
}

func (r redisKV) claim(ctx context.Context, k claimKeys, token, subject string, at time.Time, mode CountMode) (bool, error) {
	at = expiry(at)
	keys := []string{k.claim}
	switch mode {
	case CountExact:
		keys = append(keys, k.counter)
	case CountApprox:
		n, err := claimHLLScript.Run(ctx, r.rdb, []string{k.hll}, subject, at.UnixMilli()).Int64()
		return n == 1, err
	}
	// The gate: one atomic set-if-absent that knows its own token.
	n, err := claimScript.Run(ctx, r.rdb, keys, token, at.UnixMilli()).Int64()
	return n == 1, err
}

func (r redisKV) unclaim(ctx context.Context, k claimKeys, token string, counted bool) error {
	keys := []string{k.claim}
	if counted {
		keys = append(keys, k.counter)
	}
	return unclaimScript.Run(ctx, r.rdb, keys, token).Err()
}

func (r redisKV) count(ctx context.Context, k claimKeys) (int64, error) {
	return countScript.Run(ctx, r.rdb, []string{k.counter, k.hll}).Int64()
}
