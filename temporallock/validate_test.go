package temporallock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/activity"
)

// A misconfigured interceptor is refused by NewInterceptor, with an error
// that says what is wrong.
func TestInvalidConfig(t *testing.T) {
	mem := mustNew(core.NewMemory())
	t.Cleanup(func() { mem.Close() })
	cases := []struct {
		name   string
		client *core.Client
		opts   []temporallock.Option
		want   error
	}{
		{"nil client", nil, []temporallock.Option{temporallock.WithKey(byAccount)}, temporallock.ErrNilClient},
		{"no key", mem, nil, temporallock.ErrNoKey},
		{"nil key func", mem, []temporallock.Option{temporallock.WithKey(nil)}, temporallock.ErrNoKey},
		{"negative wait", mem, []temporallock.Option{temporallock.WithKey(byAccount), temporallock.WithWaitTimeout(-time.Second)}, temporallock.ErrInvalidOption},
		{"nil option", mem, []temporallock.Option{temporallock.WithKey(byAccount), nil}, temporallock.ErrInvalidOption},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ic, err := temporallock.NewInterceptor(tc.client, tc.opts...)
			if !errors.Is(err, tc.want) || ic != nil {
				t.Fatalf("NewInterceptor = %v, %v; want nil, %v", ic, err, tc.want)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		if _, err := temporallock.NewInterceptor(mem, temporallock.WithKey(byAccount)); err != nil {
			t.Errorf("NewInterceptor = %v, want nil error", err)
		}
	})
}

// A key function that returns ok with a key that cannot be locked fails
// the activity with the non-retryable ErrTypeInvalidKey error: a keyed
// activity never runs unlocked by mistake. So does a core lock option that
// the core rejects, with ErrTypeInvalidConfig.
func TestInvalidKeysAndLockOptions(t *testing.T) {
	mem := mustNew(core.NewMemory())
	t.Cleanup(func() { mem.Close() })
	constant := func(key string) temporallock.KeyFunc {
		return func(activity.Info, []any) (string, bool) { return key, true }
	}
	cases := []struct {
		name     string
		opts     []temporallock.Option
		wantType string
	}{
		{"empty", []temporallock.Option{temporallock.WithKey(constant(""))}, temporallock.ErrTypeInvalidKey},
		{"too long", []temporallock.Option{temporallock.WithKey(constant(strings.Repeat("k", temporallock.MaxKeyLen+1)))}, temporallock.ErrTypeInvalidKey},
		{"control character", []temporallock.Option{temporallock.WithKey(constant("a\nb"))}, temporallock.ErrTypeInvalidKey},
		{"not UTF-8", []temporallock.Option{temporallock.WithKey(constant("a\xffb"))}, temporallock.ErrTypeInvalidKey},
		{"KeyByArg, wrong argument type", []temporallock.Option{temporallock.WithKey(
			temporallock.KeyByArg("Free", func(s string) string { return s }))}, temporallock.ErrTypeInvalidKey},
		{"KeyByArg, empty field", []temporallock.Option{temporallock.WithKey(
			temporallock.KeyByArg("Free", func(o Order) string { return o.Account }))}, temporallock.ErrTypeInvalidKey},
		{"zero TTL", []temporallock.Option{temporallock.WithKey(constant("k")),
			temporallock.WithLockOptions(core.WithTTL(0))}, temporallock.ErrTypeInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ic := mustNew(temporallock.NewInterceptor(mem, tc.opts...))
			w := newWorks()
			_, err := activityEnv(ic, w).ExecuteActivity(w.Free, Order{})
			wantFailure(t, err, tc.wantType, true)
		})
	}
	t.Run("longest key", func(t *testing.T) {
		ic := mustNew(temporallock.NewInterceptor(mem, temporallock.WithKey(constant(strings.Repeat("k", temporallock.MaxKeyLen)))))
		w := newWorks()
		if _, err := activityEnv(ic, w).ExecuteActivity(w.Free, Order{}); err != nil {
			t.Errorf("a key of MaxKeyLen bytes: %v", err)
		}
	})
}

// A lock backend that cannot be reached fails the activity, before it
// runs, with the retryable ErrTypeUnavailable error — not with
// ErrTypeBusy: an outage is not contention.
func TestBackendUnavailable(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	client := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() { client.Close() })
	mr.Close()
	for _, opt := range []temporallock.Option{temporallock.WithFailFast(), temporallock.WithWaitTimeout(time.Second)} {
		ic := mustNew(temporallock.NewInterceptor(client, temporallock.WithKey(byAccount), opt))
		w := newWorks()
		_, err := activityEnv(ic, w).ExecuteActivity(w.Hold, Order{Account: uniqueID(t)})
		wantFailure(t, err, temporallock.ErrTypeUnavailable, false)
		if w.runs != 0 {
			t.Errorf("the activity ran without its lock")
		}
	}
	// A closed core.Client is unavailable too.
	closed := mustNew(core.NewMemory())
	closed.Close()
	ic := mustNew(temporallock.NewInterceptor(closed, temporallock.WithKey(byAccount)))
	w := newWorks()
	_, err := activityEnv(ic, w).ExecuteActivity(w.Hold, Order{Account: uniqueID(t)})
	wantFailure(t, err, temporallock.ErrTypeUnavailable, false)
}

// wantFailure checks that err is an application error of type typ with the
// given retryability.
func wantFailure(t *testing.T, err error, typ string, nonRetryable bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", typ)
	}
	app := appError(t, err)
	if app.Type() != typ || app.NonRetryable() != nonRetryable {
		t.Errorf("error %v: type %q non-retryable %v, want %q non-retryable %v", err, app.Type(), app.NonRetryable(), typ, nonRetryable)
	}
}
