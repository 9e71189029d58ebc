package temporallock_test

import (
	"testing"

	"github.com/latchkey/latchkey/temporallock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"
)

// The key helpers give the documented key shapes, no key to other
// activity types, and an empty (hence refused) key when the activity has
// no usable argument or workflow ID.
func TestKeyHelpers(t *testing.T) {
	info := func(activityType, workflowID string) activity.Info {
		return activity.Info{ActivityType: activity.Type{Name: activityType},
			WorkflowExecution: workflow.Execution{ID: workflowID}}
	}
	byArg := temporallock.KeyByArg("Charge", func(o Order) string { return o.Account })
	byPtr := temporallock.KeyByArg("Charge", func(o *Order) string { return o.Account })
	byWF := temporallock.KeyByWorkflowID("Charge", "Refund")
	anyWF := temporallock.KeyByWorkflowID()
	cases := []struct {
		name    string
		fn      temporallock.KeyFunc
		info    activity.Info
		args    []any
		wantKey string
		wantOK  bool
	}{
		{"arg", byArg, info("Charge", "wf"), []any{Order{Account: "acct-1"}, 7}, "Charge:acct-1", true},
		{"arg, other type", byArg, info("Refund", "wf"), []any{Order{Account: "acct-1"}}, "", false},
		{"arg, no args", byArg, info("Charge", "wf"), nil, "", true},
		{"arg, wrong type", byArg, info("Charge", "wf"), []any{"acct-1"}, "", true},
		{"arg, empty field", byArg, info("Charge", "wf"), []any{Order{}}, "", true},
		{"pointer arg", byPtr, info("Charge", "wf"), []any{&Order{Account: "acct-2"}}, "Charge:acct-2", true},
		{"pointer arg, nil", byPtr, info("Charge", "wf"), []any{(*Order)(nil)}, "", true},
		{"nil field", temporallock.KeyByArg[Order]("Charge", nil), info("Charge", "wf"), []any{Order{Account: "a"}}, "", true},
		{"workflow ID", byWF, info("Refund", "order-9"), nil, "workflow:order-9", true},
		{"workflow ID, other type", byWF, info("Ship", "order-9"), nil, "", false},
		{"workflow ID, standalone activity", byWF, info("Charge", ""), nil, "", true},
		{"workflow ID, every type", anyWF, info("Ship", "order-9"), nil, "workflow:order-9", true},
		{"first key, first", temporallock.FirstKey(nil, byArg, anyWF), info("Charge", "wf"), []any{Order{Account: "a"}}, "Charge:a", true},
		{"first key, second", temporallock.FirstKey(byArg, anyWF), info("Ship", "wf"), nil, "workflow:wf", true},
		{"first key, none", temporallock.FirstKey(byArg, byWF), info("Ship", "wf"), nil, "", false},
		{"first key, empty", temporallock.FirstKey(), info("Ship", "wf"), nil, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, ok := tc.fn(tc.info, tc.args)
			if key != tc.wantKey || ok != tc.wantOK {
				t.Errorf("got (%q, %v), want (%q, %v)", key, ok, tc.wantKey, tc.wantOK)
			}
		})
	}
}
