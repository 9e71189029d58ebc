package core

import (
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// allScripts are the package's scripts, by name.
func allScripts() map[string]*luaScript {
	m := map[string]*luaScript{
		"extend": extendScript, "inspect": inspectScript, "fence_max": fenceMaxScript,
		"sem_acquire": semAcquireScript, "sem_extend": semExtendScript,
		"rw_rlock": rwRLockScript, "inspect_holds": inspectHoldsScript,
		"rw_lock": rwLockScript, "acquire_all": acquireAllScript,
		"extend_many": extendManyScript, "queue_touch": queueTouchScript,
		"claim": claimScript, "claim_within": claimWithinScript, "set_newer": setNewerScript,
		"redlock_acquire": redlockAcquireScript,
	}
	for flavour, s := range map[string]*notifyScripts{"classic": classicScripts, "sharded": shardedScripts} {
		m[flavour+"/acquire"], m[flavour+"/acquire_fair"] = s.acquire, s.acquireFair
		m[flavour+"/release"], m[flavour+"/sem_release"] = s.release, s.semRelease
		m[flavour+"/rw_unlock"], m[flavour+"/evict"] = s.rwUnlock, s.evict
	}
	return m
}

// globalsRead compiles Lua source and returns the global names its code
// reads, in any of its functions: a call of a helper that is not defined
// reads a global of that name. It decodes gopher-lua's instructions (an
// opcode in the top 6 bits, Bx in the low 18), an independent reading of
// what composeLua finds by words.
func globalsRead(t *testing.T, src string) []string {
	t.Helper()
	chunk, err := parse.Parse(strings.NewReader(src), "script")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	proto, err := lua.Compile(chunk, "script")
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	var names []string
	var walk func(p *lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, inst := range p.Code {
			if int(inst>>26) == lua.OP_GETGLOBAL {
				names = append(names, p.Constants[inst&0x3ffff].String())
			}
		}
		for _, sub := range p.FunctionPrototypes {
			walk(sub)
		}
	}
	walk(proto)
	return names
}

// TestComposedScriptsDefineWhatTheyCall: no script reads, as a global, a
// name some library defines: a helper it calls that composeLua left out.
func TestComposedScriptsDefineWhatTheyCall(t *testing.T) {
	libNames := map[string]bool{}
	for _, lib := range []string{libPub, libPubSharded, libOwns, libFence, libWait, libQueue, libSem} {
		for _, it := range splitLuaLib(lib) {
			libNames[it.name] = true
		}
	}
	if len(libNames) < 20 {
		t.Fatalf("%d library definitions found, want the 20 or more the libraries hold", len(libNames))
	}
	for name, s := range allScripts() {
		src := s.src.(string)
		for _, g := range globalsRead(t, src) {
			if libNames[g] {
				t.Errorf("%s calls %s, which it does not define", name, g)
			}
		}
	}
	// The common paths make only these closures (the rest, after the mark).
	for name, want := range map[string][]string{
		"classic/acquire": {"set_nx", "FENCE_LEAD_MAX", "hold_counter", "ahead_ms", "next_fence", "fresh_fence"},
		"classic/release": {"owns", "counter_above"},
	} {
		before, _, ok := strings.Cut(allScripts()[name].src.(string), luaRestMark)
		if !ok {
			t.Errorf("%s: no mark", name)
			continue
		}
		var got []string
		for line := range strings.Lines(before) {
			if f, ok := strings.CutPrefix(line, "local function "); ok {
				got = append(got, f[:strings.Index(f, "(")])
			} else if v, ok := strings.CutPrefix(line, "local "); ok && libNames[strings.Fields(v)[0]] {
				got = append(got, strings.Fields(v)[0])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s defines %v before the mark, want %v", name, got, want)
		}
	}
	// The check can fail: a library function a script calls, left out.
	broken := strings.Replace(releaseScript.src.(string), "local function wait_split(", "local function wait_split_gone(", 1)
	if !slices.Contains(globalsRead(t, broken), "wait_split") {
		t.Fatal("a release without wait_split was not caught")
	}
}

func TestComposeLuaKeepsWhatIsCalled(t *testing.T) {
	lib1 := "-- a\nlocal K = 3\n\n-- b\nlocal function b(x)\n  return x + K\nend\n-- c\nlocal function c()\n  return 1\nend\n"
	lib2 := "local function d(y)\n  return b(y) -- c(y) in a comment\nend\nlocal function e()\nend\n"
	for _, tc := range []struct {
		body string
		want []string // definitions kept, in order
	}{
		{"return d(1)\n", []string{"K", "b", "d"}},
		{"return c() -- d()\n", []string{"c"}},
		{"return 1\n", nil},
		{"e() return b(c())\n", []string{"K", "b", "c", "e"}},
	} {
		got := composeLua(tc.body, lib1, lib2)
		if !strings.HasSuffix(got, tc.body) {
			t.Errorf("%q: composed script does not end with its body: %q", tc.body, got)
		}
		var kept []string
		for _, it := range splitLuaLib(strings.TrimSuffix(got, tc.body)) {
			kept = append(kept, it.name)
		}
		if !slices.Equal(kept, tc.want) {
			t.Errorf("%q: kept %v, want %v", tc.body, kept, tc.want)
		}
	}
	if got := composeLua("return b(1)\n", lib1); !strings.Contains(got, "-- b\nlocal function b(x)") {
		t.Errorf("a kept definition lost its comment: %q", got)
	}
	// With the mark, what only the rest uses comes after the head.
	head := "if x then return b(1) end\n"
	rest := "return d(c())\n"
	got := composeLua(head+luaRestMark+"\n"+rest, lib1, lib2)
	before, after, ok := strings.Cut(got, head+luaRestMark+"\n")
	if !ok || !strings.HasSuffix(after, rest) {
		t.Fatalf("head, mark and rest not kept in order: %q", got)
	}
	var early, late []string
	for _, it := range splitLuaLib(before) {
		early = append(early, it.name)
	}
	for _, it := range splitLuaLib(strings.TrimSuffix(after, rest)) {
		late = append(late, it.name)
	}
	if !slices.Equal(early, []string{"K", "b"}) || !slices.Equal(late, []string{"c", "d"}) {
		t.Errorf("defined before the mark %v, after it %v; want [K b], [c d]", early, late)
	}
}

func TestSplitLuaLibRefusesOtherCode(t *testing.T) {
	for _, lib := range []string{
		"redis.call('PING')\n",
		"local function f()\n  return 1\n",
		"local a, b = 1, 2\n",
		"if x then\nend\n",
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q: no panic", lib)
				}
			}()
			splitLuaLib(lib)
		}()
	}
}
