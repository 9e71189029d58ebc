package temporallock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/errjoin"
	"github.com/latchkey/latchkey/internal/nodeid"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// An Interceptor is a Temporal worker interceptor that runs keyed
// activities under a latchkey lock. Install it in worker.Options:
//
//	ic, err := temporallock.NewInterceptor(client, temporallock.WithKey(keyFn))
//	if err != nil { ... }
//	w := worker.New(tc, "queue", worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
//
// It intercepts activities only (workflows and Nexus operations pass
// through), local activities included. It is safe for concurrent use and
// may be installed in several workers; workers in other processes exclude
// each other when their core.Clients share a backend. Put it first in
// Interceptors so that the interceptors after it run inside the lock.
type Interceptor struct {
	interceptor.WorkerInterceptorBase

	client *core.Client
	cfg    config
	holder string // host:pid, for the lease metadata
}

var _ interceptor.WorkerInterceptor = (*Interceptor)(nil)

// NewInterceptor returns an interceptor that takes its locks on client. It
// does no I/O. WithKey is required. The error is ErrNilClient, ErrNoKey or
// ErrInvalidOption (with the reason).
func NewInterceptor(client *core.Client, opts ...Option) (*Interceptor, error) {
	ic := &Interceptor{client: client, cfg: config{wait: DefaultWaitTimeout}}
	for _, o := range opts {
		if o == nil {
			ic.cfg.fail(fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&ic.cfg)
	}
	switch {
	case ic.cfg.err != nil:
		return nil, ic.cfg.err
	case client == nil:
		return nil, ErrNilClient
	case ic.cfg.key == nil:
		return nil, ErrNoKey
	}
	if ic.cfg.limit > 1 {
		if err := client.Require(core.CapPrimitives); err != nil {
			return nil, fmt.Errorf("%w: WithLimit needs semaphores: %w", ErrInvalidOption, err)
		}
	}
	ic.holder = nodeid.Default(256)
	return ic, nil
}

// InterceptActivity implements interceptor.WorkerInterceptor: the Temporal
// worker calls it for each activity task.
func (ic *Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, ic: ic}
}

// activityInbound runs one activity execution under its lock.
type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	ic *Interceptor
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (res any, err error) {
	ic := a.ic
	info := activity.GetInfo(ctx)
	key, ok := ic.cfg.key(info, in.Args)
	if !ok {
		return a.Next.ExecuteActivity(ctx, in)
	}
	if o := ic.cfg.observer; o != nil {
		octx, end := o.ActivityLockStart(ctx, info.ActivityType.Name)
		if octx != nil {
			ctx = octx
		}
		if end != nil {
			var h *core.Lock
			defer func() {
				var fence int64
				if h != nil {
					fence = h.Fence()
				}
				end(outcomeOf(h != nil, err), fence, err)
			}()
			return a.locked(ctx, in, info, key, &h)
		}
	}
	return a.locked(ctx, in, info, key, nil)
}

// locked runs the keyed activity under its lock; it stores the held lock
// in *held, if held is not nil, once it has it.
func (a *activityInbound) locked(ctx context.Context, in *interceptor.ExecuteActivityInput, info activity.Info, key string, held **core.Lock) (any, error) {
	ic := a.ic
	if err := validKey(key); err != nil {
		return nil, appError(ErrTypeInvalidKey, "activity "+info.ActivityType.Name+" not run", err)
	}
	h, err := ic.acquire(ctx, info, KeyPrefix+key)
	if err != nil {
		return nil, err
	}
	if held != nil {
		*held = h
	}
	return ic.run(ctx, info, h, func(ctx context.Context) (any, error) {
		return a.Next.ExecuteActivity(ctx, in)
	})
}

// acquire takes the lock of lockKey for the activity: one attempt with
// WithFailFast, else a wait bounded by waitBound. Its errors are the
// application errors the activity returns.
func (ic *Interceptor) acquire(ctx context.Context, info activity.Info, lockKey string) (*core.Lock, error) {
	opts := append([]core.LockOption{core.WithMetadata(ic.metadata(info))}, ic.cfg.lockOpts...)
	var h *core.Lock
	var err error
	wait := ic.waitBound(ctx, info)
	tryLock, lock := ic.client.TryLock, ic.client.Lock
	if ic.cfg.limit > 1 {
		sem := ic.client.Semaphore(lockKey, ic.cfg.limit)
		tryLock = func(ctx context.Context, _ string, opts ...core.LockOption) (*core.Lock, error) {
			return sem.TryAcquire(ctx, opts...)
		}
		lock = func(ctx context.Context, _ string, opts ...core.LockOption) (*core.Lock, error) {
			return sem.Acquire(ctx, opts...)
		}
	}
	if wait <= 0 {
		h, err = tryLock(ctx, lockKey, opts...)
	} else {
		wctx, cancel := context.WithTimeout(ctx, wait)
		h, err = lock(wctx, lockKey, opts...)
		cancel()
	}
	if err == nil {
		activity.GetLogger(ctx).Debug("temporallock: lock acquired", "Key", lockKey, "Fence", h.Fence())
		return h, nil
	}
	name := info.ActivityType.Name
	switch {
	case ctx.Err() != nil:
		// The activity itself was cancelled or timed out while it waited:
		// report that (a cancellation stays a cancellation), not contention.
		return nil, fmt.Errorf("temporallock: activity %s ended while waiting for %q: %w", name, lockKey, errjoin.Join(context.Cause(ctx), err))
	case errors.Is(err, core.ErrNotAcquired):
		held := fmt.Sprintf("lock %q is held elsewhere", lockKey)
		if ic.cfg.limit > 1 {
			held = fmt.Sprintf("the %d permits of %q are held", ic.cfg.limit, lockKey)
		}
		return nil, appError(ErrTypeBusy, fmt.Sprintf("activity %s not run: %s", name, held),
			fmt.Errorf("%w: %w", ErrBusy, err))
	case errors.Is(err, core.ErrInvalidOption), errors.Is(err, core.ErrInvalidTTL):
		return nil, appError(ErrTypeInvalidConfig, "activity "+name+" not run: invalid lock option: "+err.Error(),
			fmt.Errorf("%w: %w", ErrInvalidOption, err))
	case errors.Is(err, core.ErrInvalidKey):
		return nil, appError(ErrTypeInvalidKey, "activity "+name+" not run", fmt.Errorf("%w: %w", ErrInvalidKey, err))
	default: // a backend failure, or the core.Client was closed
		return nil, appError(ErrTypeUnavailable, fmt.Sprintf("activity %s not run: cannot lock %q", name, lockKey),
			fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
}

// waitBound is how long the activity may wait for its key: the configured
// timeout, at most half the time left before its deadline and half its
// heartbeat timeout. Zero or less means one attempt.
func (ic *Interceptor) waitBound(ctx context.Context, info activity.Info) time.Duration {
	if ic.cfg.failFast {
		return 0
	}
	d := ic.cfg.wait
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	if hb := info.HeartbeatTimeout; hb > 0 {
		d = min(d, hb/2)
	}
	return d
}

// run runs the activity under the held lock h and releases it afterwards,
// whatever the activity returns (a panic included). If the lease is lost
// meanwhile, the activity's context is cancelled with a cause matching
// ErrLost and core.ErrLost, and the result is replaced by an ErrTypeLost
// error. Loss wins over a panic too: a panic after the loss is recovered
// here and joined, as an ErrPanic error, to the ErrTypeLost error (its
// stack goes to the activity logger); a panic while the lease still holds
// goes on up for the SDK to recover, as it would without the interceptor.
func (ic *Interceptor) run(ctx context.Context, info activity.Info, h *core.Lock, next func(context.Context) (any, error)) (res any, err error) {
	runCtx, cancel := context.WithCancelCause(h.WithContext(ctx))
	runCtx = context.WithValue(runCtx, heldKey{}, held{key: h.Key(), fence: h.Fence()})
	done := make(chan struct{})
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-h.Lost():
			cancel(fmt.Errorf("%w: %w", ErrLost, h.Err()))
		case <-done:
		}
	}()
	returned := false
	defer func() {
		close(done)
		<-watcher
		cancel(nil)
		relErr := h.Release(ctx)
		lost := h.Err()
		if lost == nil && errors.Is(relErr, core.ErrNotHeld) {
			lost = relErr // it expired before the watchdog noticed
		}
		if lost == nil {
			if relErr != nil { // the lease expires by its TTL; the result stands
				activity.GetLogger(ctx).Warn("temporallock: release failed", "Key", h.Key(), "Error", relErr)
			}
			return // a panic, if any, goes on
		}
		how := "returned"
		if !returned {
			// next panicked (or called runtime.Goexit, which recover
			// cannot stop): the loss is still what the attempt reports.
			if p := recover(); p != nil {
				how = "panicked"
				err = panicError(p)
				activity.GetLogger(ctx).Error("temporallock: activity panicked after its lock was lost",
					"Key", h.Key(), "Fence", h.Fence(), "PanicError", fmt.Sprint(p), "PanicStack", string(debug.Stack()))
			}
		}
		res = nil
		err = appError(ErrTypeLost,
			fmt.Sprintf("activity %s: lock %q (fence %d) lost before it %s", info.ActivityType.Name, h.Key(), h.Fence(), how),
			errjoin.Join(fmt.Errorf("%w: %w", ErrLost, lost), err))
	}()
	res, err = next(runCtx)
	returned = true
	return res, err
}

// panicError is the error of a recovered panic value p: it matches
// ErrPanic and, when p is an error, p.
func panicError(p any) error {
	if e, ok := p.(error); ok {
		return fmt.Errorf("%w: %w", ErrPanic, e)
	}
	return fmt.Errorf("%w: %v", ErrPanic, p)
}

// metadata describes the holder of a lease for core.Client.Inspect.
func (ic *Interceptor) metadata(info activity.Info) string {
	var b strings.Builder
	b.WriteString("temporal ")
	b.WriteString(info.Namespace)
	b.WriteByte('/')
	b.WriteString(info.WorkflowExecution.ID)
	b.WriteString(" activity ")
	b.WriteString(info.ActivityType.Name)
	b.WriteByte('/')
	b.WriteString(info.ActivityID)
	b.WriteString(" attempt ")
	b.WriteString(strconv.Itoa(int(info.Attempt)))
	b.WriteString(" on ")
	b.WriteString(ic.holder)
	s := b.String()
	if len(s) > core.MaxMetadataLen {
		s = strings.ToValidUTF8(s[:core.MaxMetadataLen], "")
	}
	return s
}
