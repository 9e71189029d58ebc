package core

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A luaScript is one of the package's scripts: go-redis's Script (for
// Load, pipelines and the calls off the hot path), with its digest and
// source boxed once for run.
type luaScript struct {
	*redis.Script
	sha, src any
}

// newLuaScript is the script body, prefixed with the definitions it uses
// from libs (composeLua).
func newLuaScript(body string, libs ...string) *luaScript {
	src := composeLua(body, libs...)
	s := redis.NewScript(src)
	return &luaScript{Script: s, sha: s.Hash(), src: src}
}

// run runs the script as Script.Run does — EVALSHA, and EVAL if the server
// does not have the script cached — through the client's Process, so its
// hooks and routing are the same. It builds the command in one slice with
// the digest already boxed, where Script.Run takes the caller's keys and
// arguments in two slices and copies them, boxing the digest again, into a
// third: run's callers keep theirs on the stack.
func (s *luaScript) run(ctx context.Context, rdb processor, keys []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := s.process(ctx, rdb, a, len(keys) > 0)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		a = slices.Clone(a) // the first command keeps its own
		a[0], a[1] = "eval", s.src
		cmd = s.process(ctx, rdb, a, len(keys) > 0)
	}
	return cmd
}

func (s *luaScript) process(ctx context.Context, rdb processor, a []any, keyed bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, a...)
	if keyed {
		cmd.SetFirstKeyPos(3) // as go-redis's own EVALSHA: Cluster routes by the first key
	}
	_ = rdb.Process(ctx, cmd)
	return cmd
}

// replyInts appends to dst the integers of an array reply, as
// Cmd.Int64Slice reads them but without allocating a slice of its own.
func replyInts(cmd *redis.Cmd, dst []int64) ([]int64, error) {
	vs, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		switch v := v.(type) {
		case int64:
			dst = append(dst, v)
		case string:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			dst = append(dst, n)
		default:
			return nil, fmt.Errorf("core: unexpected element %v (%T) in reply %v", v, v, vs)
		}
	}
	return dst, nil
}
