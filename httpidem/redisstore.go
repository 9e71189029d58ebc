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
	//go:embed scripts/claim_count.lua
	claimCountLua string
	//go:embed scripts/claim_hll.lua
	claimHLLLua string
	//go:embed scripts/unclaim.lua
	unclaimLua string
	//go:embed scripts/count.lua
	countLua string

	putRecordScript  = redis.NewScript(putRecordLua)
	claimCountScript = redis.NewScript(claimCountLua)
	claimHLLScript   = redis.NewScript(claimHLLLua)
	unclaimScript    = redis.NewScript(unclaimLua)
	countScript      = redis.NewScript(countLua)
)

// A RedisStore is a Store on Redis: a server, a Sentinel group or a Cluster
// (every multi-key script touches keys of one hash tag). Records and claims
// are plain keys under the prefix; in-flight leases are core locks.
// Scripts run with EVALSHA. Requires Redis 6.2 or later (SET PXAT/EXAT).
type RedisStore struct {
	b base
}

// NewRedisStore returns a Store on rdb. It does no I/O. Unless WithLocks
// gives one, it creates its own core.Client (core.NewRedis(rdb,
// core.WithKeyPrefix(prefix))), which Close closes; rdb itself is never
// closed by the store. A nil rdb or an invalid option makes every call
// fail with the error Err returns.
func NewRedisStore(rdb redis.UniversalClient, opts ...StoreOption) *RedisStore {
	cfg := newStoreConfig(opts)
	s := &RedisStore{b: base{prefix: cfg.prefix, err: cfg.err}}
	if nilness.IsNil(rdb) && s.b.err == nil {
		s.b.err = fmt.Errorf("%w: nil redis client", ErrInvalidConfig)
	}
	if s.b.err != nil {
		return s
	}
	s.b.locks = cfg.locks
	if s.b.locks == nil {
		s.b.locks = core.NewRedis(rdb, core.WithKeyPrefix(cfg.prefix))
		s.b.ownLocks = true
	}
	s.b.kv = redisKV{rdb: rdb}
	return s
}

// Err returns the configuration error every call fails with, or nil.
func (s *RedisStore) Err() error { return s.b.err }

// Begin implements Store.
func (s *RedisStore) Begin(ctx context.Context, a BeginArgs) (Begun, error) { return s.b.begin(ctx, a) }

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, a ClaimArgs) (bool, error) { return s.b.claim(ctx, a) }

// Unclaim implements Store.
func (s *RedisStore) Unclaim(ctx context.Context, a ClaimArgs) error { return s.b.unclaim(ctx, a) }

// Count implements Store.
func (s *RedisStore) Count(ctx context.Context, scope, object string, day Day) (int64, error) {
	return s.b.count(ctx, scope, object, day)
}

// Close closes the core.Client the store created (releasing the leases it
// still holds); a Client given with WithLocks stays open. Close does not
// close the Redis client. Calling it again does nothing.
func (s *RedisStore) Close() error { return s.b.close() }

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
	switch mode {
	case CountExact:
		n, err := claimCountScript.Run(ctx, r.rdb, []string{k.claim, k.counter}, token, at.UnixMilli()).Int64()
		return n == 1, err
	case CountApprox:
		n, err := claimHLLScript.Run(ctx, r.rdb, []string{k.hll}, subject, at.UnixMilli()).Int64()
		return n == 1, err
	}
	// The gate: one atomic SET NX EXAT.
	err := r.rdb.SetArgs(ctx, k.claim, token, redis.SetArgs{Mode: "NX", ExpireAt: at}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
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
