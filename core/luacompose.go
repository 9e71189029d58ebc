package core

import (
	"fmt"
	"strings"
)

// composeLua prefixes a script's body with the definitions it uses from
// its libraries (lib_*.lua), and only those: a script runs its
// `local function` statements on every call, each creating a closure (and
// its upvalues), so a definition nobody calls costs every call. A
// definition is kept if the body, or a kept definition, names it; the
// kept ones stay in the libraries' order, so each is defined before the
// definitions that call it. Comments do not count as a use.
//
// A body may hold one top-level line luaRestMark, after its common path
// (an uncontended acquisition, say) has returned: the definitions only
// the rest of the body uses are made there, so that path does not make
// them.
//
// A library is a sequence of top-level items, each an optional comment
// block, then either `local function name(...)` up to a line `end`, or a
// one-line `local name = ...`. Anything else in a library panics: a
// package variable's initialisation, so every test (and every program)
// finds it at once.
func composeLua(body string, libs ...string) string {
	var items []luaItem
	for _, lib := range libs {
		items = append(items, splitLuaLib(lib)...)
	}
	head, rest, split := strings.Cut(body, "\n"+luaRestMark+"\n")
	if split {
		head += "\n" + luaRestMark + "\n"
	}
	early := luaNeeds(items, luaIdents(head))
	all := luaNeeds(items, luaIdents(body))
	var b strings.Builder
	for i, it := range items {
		if early[i] {
			b.WriteString(it.text)
		}
	}
	b.WriteString(head)
	for i, it := range items {
		if all[i] && !early[i] {
			b.WriteString(it.text)
		}
	}
	b.WriteString(rest)
	return b.String()
}

// luaRestMark is the line of a script body after which the definitions
// that only the rest of it uses are made (see composeLua).
const luaRestMark = "-- (the helpers only the rest uses are defined here)"

// luaNeeds reports which items code that names the identifiers used
// needs: those it names, and those they name, and so on.
func luaNeeds(items []luaItem, used map[string]bool) []bool {
	keep := make([]bool, len(items))
	for grew := true; grew; {
		grew = false
		for i, it := range items {
			if !keep[i] && used[it.name] {
				keep[i], grew = true, true
				for id := range luaIdents(it.text) {
					used[id] = true
				}
			}
		}
	}
	return keep
}

// A luaItem is one top-level definition of a library, its comments
// included.
type luaItem struct {
	name, text string
}

// splitLuaLib splits a library into its items (see composeLua).
func splitLuaLib(lib string) []luaItem {
	var items []luaItem
	var pending strings.Builder // comments (and blank lines) since the last item
	lines := strings.SplitAfter(lib, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(line, "--"):
			pending.WriteString(line)
			continue
		case strings.HasPrefix(line, "local function "):
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "local function "), "(")
			if !ok {
				panic(fmt.Sprintf("latchkey: a library's line %q: no parameter list", trimmed))
			}
			pending.WriteString(line)
			for i++; ; i++ {
				if i == len(lines) {
					panic(fmt.Sprintf("latchkey: a library's function %s: no line `end` closes it", name))
				}
				pending.WriteString(lines[i])
				if strings.TrimRight(lines[i], "\r\n") == "end" {
					break
				}
			}
			items = append(items, luaItem{name: strings.TrimSpace(name), text: pending.String()})
		case strings.HasPrefix(line, "local "):
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "local "), "=")
			if !ok || strings.ContainsAny(strings.TrimSpace(name), " ,\t") {
				panic(fmt.Sprintf("latchkey: a library's line %q: not `local name = value`", trimmed))
			}
			pending.WriteString(line)
			items = append(items, luaItem{name: strings.TrimSpace(name), text: pending.String()})
		default:
			panic(fmt.Sprintf("latchkey: a library's line %q: not a local definition", trimmed))
		}
		pending.Reset()
	}
	return items
}

// luaIdents is the set of identifiers (and keywords) in Lua code, with
// its comments left out. Strings are read as code: a word in a string may
// keep a definition nobody uses. A "--" in a string would end its line
// early, and could drop a definition that is used: the scripts have none,
// and TestComposedScriptsDefineWhatTheyCall parses every composed script
// and fails on a library function it calls but does not define.
func luaIdents(code string) map[string]bool {
	ids := make(map[string]bool)
	for line := range strings.Lines(code) {
		line, _, _ = strings.Cut(line, "--")
		for _, w := range strings.FieldsFunc(line, func(r rune) bool {
			return !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		}) {
			ids[w] = true
		}
	}
	return ids
}
