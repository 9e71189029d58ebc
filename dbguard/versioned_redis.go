package dbguard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/internal/nilness"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/versioned_put.lua
	versionedPutLua string
	//go:embed scripts/versioned_get.lua
	versionedGetLua string

	versionedPut = redis.NewScript(versionedPutLua)
	versionedGet = redis.NewScript(versionedGetLua)
)

// DefaultVersionsPrefix is the Redis key prefix of VersionsInRedis when the
// prefix given is empty.
const DefaultVersionsPrefix = "dbguard"

// VersionsInRedis returns a VersionStore on Redis: key K is the hash
// "<prefix>:{K}" with fields v (the value), ver (the version) and w (the
// last put's random id, by which a put sent again after a lost answer
// knows its own write), and Put is
// one Lua compare-and-set on ver (EVALSHA) that compares versions as
// decimal strings and bumps them with HINCRBY, so they are exact over the
// whole int64 range (Lua's numbers are doubles, exact only to 2^53: no
// version goes through one). An empty prefix means
// DefaultVersionsPrefix; a prefix with '{' or '}', or a nil rdb, is
// ErrInvalidOption. rdb may be a *redis.Client or a
// *redis.ClusterClient (each key is one hash, in one slot).
func VersionsInRedis(rdb redis.Scripter, prefix string) (VersionStore, error) {
	s := &redisVersions{rdb: rdb, prefix: prefix}
	if s.prefix == "" {
		s.prefix = DefaultVersionsPrefix
	}
	switch {
	case nilness.IsNil(rdb):
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	case strings.ContainsAny(s.prefix, "{}"):
		return nil, fmt.Errorf("%w: key prefix %q has braces", ErrInvalidOption, s.prefix)
	}
	return s, nil
}

type redisVersions struct {
	rdb    redis.Scripter
	prefix string
}

func (s *redisVersions) migrate(context.Context) error { return nil }

func (s *redisVersions) key(k string) string { return s.prefix + ":{" + k + "}" }

func (s *redisVersions) get(ctx context.Context, key string) ([]byte, int64, bool, error) {
	v, err := versionedGet.Run(ctx, s.rdb, []string{s.key(key)}).Slice()
	if err != nil {
		return nil, 0, false, err
	}
	if len(v) != 2 {
		return nil, 0, false, fmt.Errorf("dbguard: unexpected reply %v", v)
	}
	ver, ok := v[1].(string)
	if !ok { // no version: never written
		return nil, 0, false, nil
	}
	n, err := strconv.ParseInt(ver, 10, 64)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%w: %q holds version %q, not a decimal int64", ErrInvalidVersion, key, ver)
	}
	val, _ := v[0].(string)
	return []byte(val), n, true, nil
}

func (s *redisVersions) put(ctx context.Context, key string, value []byte, version int64) (bool, error) {
	live := ctx.Err() == nil
	// The put's id lets a put sent again (its answer lost) know its own
	// write (see versioned_put.lua).
	id := strconv.FormatUint(rand.Uint64(), 36)
	n, err := versionedPut.Run(ctx, s.rdb, []string{s.key(key)}, value,
		strconv.FormatInt(version, 10), id, strconv.FormatInt(version+1, 10)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case mayHaveCommitted(live, err):
		// Sent, perhaps run, and the answer lost (go-redis sent it again
		// as many times as MaxRetries allows): it may have been written.
		// A reply of the server (an error reply has no SQLSTATE, but is
		// none of the lost-answer errors either), a pool timeout or a
		// failed dial is not.
		return false, &unknownOutcome{what: fmt.Sprintf("put %q", key), err: err}
	}
	return n == 1, err
}
