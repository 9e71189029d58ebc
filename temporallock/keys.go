package temporallock

import (
	"fmt"
	"slices"

	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
	"go.temporal.io/sdk/activity"
)

// KeyByArg keys the activities of type activityType by a field of their
// first argument: the key is "<activityType>:<field(arg)>". Executions of
// that type for the same field value — the same account, the same SKU —
// never overlap (with WithLimit(n): at most n run at once); other activity
// types get no key.
//
// T is the type of the activity function's first parameter after the
// context, as declared (a struct or a pointer to one). If an activity of
// that type has no first argument of type T (a nil pointer, map or slice
// counts as none), or field returns "", the key is empty and the activity
// fails with ErrTypeInvalidKey rather than run unlocked. A nil field does
// the same.
//
//	temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })
func KeyByArg[T any](activityType string, field func(arg T) string) KeyFunc {
	return func(info activity.Info, args []any) (string, bool) {
		if info.ActivityType.Name != activityType {
			return "", false
		}
		if field == nil || len(args) == 0 {
			return "", true
		}
		arg, ok := args[0].(T)
		if !ok || nilness.IsNil(arg) {
			return "", true
		}
		v := field(arg)
		if v == "" {
			return "", true
		}
		return activityType + ":" + v, true
	}
}

// KeyByWorkflowID keys the activities of the listed types — every activity
// when none is listed — by the ID of the workflow that scheduled them: the
// key is "workflow:<workflow ID>". Of one workflow ID, only one of those
// activities runs at a time, across runs, retries and workers: an attempt
// that Temporal retries after a heartbeat timeout while the first attempt
// still runs waits for it, and parallel activities of one workflow take
// turns. An activity of a listed type that no workflow started (a
// standalone activity) has no workflow ID and fails with ErrTypeInvalidKey.
func KeyByWorkflowID(activityTypes ...string) KeyFunc {
	types := slices.Clone(activityTypes)
	return func(info activity.Info, _ []any) (string, bool) {
		if len(types) > 0 && !slices.Contains(types, info.ActivityType.Name) {
			return "", false
		}
		id := info.WorkflowExecution.ID
		if id == "" {
			return "", true
		}
		return "workflow:" + id, true
	}
}

// FirstKey combines key functions: the first one that returns ok decides
// the key; with none, the activity is not keyed. Nil functions are
// skipped.
//
//	temporallock.WithKey(temporallock.FirstKey(
//		temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID }),
//		temporallock.KeyByWorkflowID("Rebuild"),
//	))
func FirstKey(fns ...KeyFunc) KeyFunc {
	fns = slices.Clone(fns)
	return func(info activity.Info, args []any) (string, bool) {
		for _, fn := range fns {
			if fn == nil {
				continue
			}
			if key, ok := fn(info, args); ok {
				return key, true
			}
		}
		return "", false
	}
}

// validKey checks a key returned by a KeyFunc.
func validKey(key string) error {
	if why := name.Check(key, MaxKeyLen); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrInvalidKey, key, why)
	}
	return nil
}
