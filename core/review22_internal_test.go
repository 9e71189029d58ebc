package core

import (
	"strings"
	"testing"
)

// TestR22ReleaseHeadHelpers: release.lua's uncontended paths return
// before the release-mark helpers are made (composeLua): the marks cost
// the hot path nothing (review 22).
func TestR22ReleaseHeadHelpers(t *testing.T) {
	s := composeLua(releaseLua, libPub, libOwns, libFence, libWait, libRel)
	head, _, _ := strings.Cut(s, luaRestMark)
	for _, l := range strings.Split(head, "\n") {
		if strings.HasPrefix(l, "local function") {
			t.Log("early:", l)
		}
	}
	if strings.Contains(head, "local function rel_") {
		t.Fatal("rel helpers made on the early path")
	}
}
