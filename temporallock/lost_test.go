package temporallock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/temporallock"
)

// errDoom is what Doom panics with.
var errDoom = errors.New("Doom panics on purpose")

// Doom enters, reports it, waits until its context ends (its lease lost)
// and then panics.
func (w *works) Doom(ctx context.Context, o Order) error {
	w.enter(ctx, o)
	defer w.leave(o)
	w.started <- o.Account
	<-ctx.Done()
	panic(errDoom)
}

// An activity that panics after its lease was lost fails as lost, not as a
// panic: loss wins. The error still carries the panic (ErrPanic and the
// panic value, on one line), the Observer sees outcome lost with that
// error, and the key is free afterwards.
func TestPanicAfterLossIsLost(t *testing.T) {
	forEachBackend(t, true, func(t *testing.T, b backend) {
		w := newWorks()
		obs := &seen{}
		client := b.newClient(t)
		ic := mustNew(temporallock.NewInterceptor(client,
			temporallock.WithKey(temporallock.KeyByArg("Doom", func(o Order) string { return o.Account })),
			temporallock.WithLockOptions(core.WithTTL(300*time.Millisecond)), temporallock.WithObserver(obs)))
		account := uniqueID(t)
		lockKey := temporallock.KeyPrefix + "Doom:" + account
		env := activityEnv(ic, w)
		done := make(chan error, 1)
		go func() {
			_, err := env.ExecuteActivity(w.Doom, Order{Account: account})
			done <- err
		}()
		select {
		case <-w.started:
		case <-time.After(10 * time.Second):
			t.Fatal("Doom never started")
		}
		b.steal(t, lockKey)
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the activity did not end within 10s of losing its lease")
		}
		if !temporallock.IsLost(err) {
			t.Fatalf("error %v: want IsLost", err)
		}
		if app := appError(t, err); app.Type() != temporallock.ErrTypeLost || app.NonRetryable() {
			t.Errorf("type %q non-retryable %v: want %q, retryable", app.Type(), app.NonRetryable(), temporallock.ErrTypeLost)
		}
		if msg := err.Error(); !strings.Contains(msg, errDoom.Error()) || strings.Contains(msg, "\n") {
			t.Errorf("error text %q: want the panic value, on one line", msg)
		}

		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.outcomes) != 1 || obs.outcomes[0] != temporallock.OutcomeLost || obs.fences[0] <= 0 {
			t.Fatalf("observed outcomes %v fences %v: want one %q with a fence", obs.outcomes, obs.fences, temporallock.OutcomeLost)
		}
		oerr := obs.errs[0] // the error in the worker's process, before conversion
		for _, want := range []error{temporallock.ErrLost, core.ErrLost, temporallock.ErrPanic, errDoom} {
			if !errors.Is(oerr, want) {
				t.Errorf("observed error %v: does not match %v", oerr, want)
			}
		}
		if !temporallock.IsLost(oerr) {
			t.Errorf("observed error %v: want IsLost", oerr)
		}
		if held(t, client, lockKey) {
			t.Errorf("%q still held after the activity ended", lockKey)
		}
	})
}

// A lost lease's error prints on one line: the loss and the activity's own
// error are joined with "; ", not a newline.
func TestLostErrorOneLine(t *testing.T) {
	forEachBackend(t, true, func(t *testing.T, b backend) {
		w := newWorks()
		obs := &seen{}
		ic := mustNew(temporallock.NewInterceptor(b.newClient(t), temporallock.WithKey(byAccount),
			temporallock.WithLockOptions(core.WithTTL(300*time.Millisecond)), temporallock.WithObserver(obs)))
		account := uniqueID(t)
		env := activityEnv(ic, w)
		done := make(chan error, 1)
		go func() {
			_, err := env.ExecuteActivity(w.Block, Order{Account: account})
			done <- err
		}()
		select {
		case <-w.started:
		case <-time.After(10 * time.Second):
			t.Fatal("Block never started")
		}
		b.steal(t, temporallock.KeyPrefix+"Block:"+account)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the activity did not end within 10s of losing its lease")
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.errs) != 1 {
			t.Fatalf("%d executions observed, want 1", len(obs.errs))
		}
		oerr := obs.errs[0]
		if !errors.Is(oerr, temporallock.ErrLost) || !errors.Is(oerr, context.Canceled) {
			t.Errorf("observed error %v: want ErrLost joined with the activity's context.Canceled", oerr)
		}
		if msg := oerr.Error(); strings.Contains(msg, "\n") {
			t.Errorf("error text %q: want one line", msg)
		}
	})
}
