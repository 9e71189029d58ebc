package core_test

// keyFault: a go-redis hook that holds back the commands naming one key,
// as a stalled connection or a slow Cluster shard would, while every other
// command goes through. The safety regression tests and the belief checker
// use it to hit one lease of a Client and spare the others.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A faultRule says which commands to hold back and how.
type faultRule struct {
	key   string // hit commands naming this Redis key (lease name)
	ttlMs int64  // and, when non-zero, whose last argument is this TTL (a renewal or Extend asking for it)
	names []string
	// delay is how long a hit command is held before it is sent.
	delay time.Duration
	// onWire sends the command after the delay even if its context ended
	// meanwhile, as a command already on the wire reaches the server; else
	// a hit command gives up with its context.
	onWire bool
	// late sends the command at once and holds its answer for the delay,
	// as a stalled connection holds a reply the server already sent: the
	// command has run. The caller's context ending meanwhile fails the
	// call (the answer is lost).
	late bool
	// times bounds the hits (0: every matching command).
	times int
	hits  chan struct{} // receives one value per hit (buffered)
}

type keyFault struct {
	stop chan struct{} // closed by the test's cleanup: every held command goes on

	mu    sync.Mutex
	rules []*faultRule
	used  map[*faultRule]int
}

// newKeyFault installs a keyFault on rdb; held commands are let go when
// the test ends.
func newKeyFault(t *testing.T, rdb redis.UniversalClient) *keyFault {
	kf := &keyFault{stop: make(chan struct{}), used: map[*faultRule]int{}}
	rdb.AddHook(kf)
	t.Cleanup(func() { close(kf.stop) })
	return kf
}

// add adds a rule and returns it (its hits channel made).
func (kf *keyFault) add(r *faultRule) *faultRule {
	r.hits = make(chan struct{}, 1024)
	kf.mu.Lock()
	kf.rules = append(kf.rules, r)
	kf.mu.Unlock()
	return r
}

// clear removes every rule.
func (kf *keyFault) clear() {
	kf.mu.Lock()
	kf.rules = nil
	kf.mu.Unlock()
}

func (r *faultRule) matches(args []any) bool {
	if len(r.names) > 0 && (len(args) == 0 || !slices.Contains(r.names, fmt.Sprint(args[0]))) {
		return false
	}
	named := false
	for _, a := range args {
		if s, ok := a.(string); ok && s == r.key {
			named = true
			break
		}
	}
	if !named {
		return false
	}
	if r.ttlMs != 0 {
		last := fmt.Sprint(args[len(args)-1])
		if last != fmt.Sprint(r.ttlMs) {
			return false
		}
	}
	return true
}

// hit returns the rule a command falls under, counting the hit.
func (kf *keyFault) hit(cmds ...redis.Cmder) *faultRule {
	kf.mu.Lock()
	defer kf.mu.Unlock()
	for _, r := range kf.rules {
		if r.times > 0 && kf.used[r] >= r.times {
			continue
		}
		for _, c := range cmds {
			if r.matches(c.Args()) {
				kf.used[r]++
				select {
				case r.hits <- struct{}{}:
				default:
				}
				return r
			}
		}
	}
	return nil
}

// hold delays a hit command; it returns the context to send it with, or
// the context's error when the command gives up.
func (kf *keyFault) hold(ctx context.Context, r *faultRule) (context.Context, error) {
	t := time.NewTimer(r.delay)
	defer t.Stop()
	var done <-chan struct{}
	if !r.onWire {
		done = ctx.Done()
	}
	select {
	case <-t.C:
	case <-kf.stop:
	case <-done:
		return ctx, ctx.Err()
	}
	if r.onWire {
		return context.WithoutCancel(ctx), nil
	}
	return ctx, nil
}

func (kf *keyFault) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// holdAnswer holds the answer of a command that ran, for a late rule:
// it returns ctx's error if ctx ended meanwhile, else nil.
func (kf *keyFault) holdAnswer(ctx context.Context, r *faultRule) error {
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-kf.stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (kf *keyFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if r := kf.hit(cmd); r != nil && r.late {
			err := next(ctx, cmd)
			if lost := kf.holdAnswer(ctx, r); lost != nil {
				cmd.SetErr(lost)
				return lost
			}
			return err
		} else if r != nil {
			var err error
			if ctx, err = kf.hold(ctx, r); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (kf *keyFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if r := kf.hit(cmds...); r != nil && r.late {
			err := next(ctx, cmds)
			if lost := kf.holdAnswer(ctx, r); lost != nil {
				for _, c := range cmds {
					c.SetErr(lost)
				}
				return lost
			}
			return err
		} else if r != nil {
			var err error
			if ctx, err = kf.hold(ctx, r); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*keyFault)(nil)

// waitHit waits (bounded) for a rule's next hit.
func waitHit(t *testing.T, r *faultRule, within time.Duration) {
	t.Helper()
	select {
	case <-r.hits:
	case <-time.After(within):
		t.Fatalf("no command on %q was held within %v", r.key, within)
	}
}
