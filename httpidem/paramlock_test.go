package httpidem_test

import (
	"errors"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

// TestLockKeysNeverCollide: distinct (lock name, parameter names, values)
// tuples get distinct lock keys, whatever separators the names and values
// hold, and values follow the module's one name rule.
func TestLockKeysNeverCollide(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	g, err := httpidem.NewParamLockGuard(httpidem.ParamLockConfig{Locks: locks, Name: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	p := func(name, value string) httpidem.Param { return httpidem.Param{Name: name, Value: value} }
	cases := []struct {
		lock   string
		params []httpidem.Param
	}{
		{"a", []httpidem.Param{p("x", "1")}},
		{"a|x=1", nil},
		{"a:b", nil},
		{"a", []httpidem.Param{p("x", "1|y=2")}},
		{"a", []httpidem.Param{p("x", "1"), p("y", "2")}},
		{"a", []httpidem.Param{p("x=1|y", "2")}},
		{"a", []httpidem.Param{p("x", "%7C")}},
		{"a", []httpidem.Param{p("x", "{1}")}},
	}
	seen := map[string]int{}
	for i, c := range cases {
		key, err := g.LockKey(c.lock, c.params)
		if err != nil {
			t.Fatalf("LockKey(%q, %v): %v", c.lock, c.params, err)
		}
		if j, ok := seen[key]; ok {
			t.Fatalf("cases %d and %d share the lock key %q", j, i, key)
		}
		seen[key] = i
	}
	for _, bad := range []string{"", "a\nb", "a\x00b", "a\xffb"} {
		if _, err := g.LockKey("a", []httpidem.Param{p("x", bad)}); !errors.Is(err, httpidem.ErrInvalidParam) {
			t.Errorf("value %q: %v, want ErrInvalidParam", bad, err)
		}
	}
}
