// Package name holds the one rule that every package of this module applies
// to the names it takes from its caller and turns into lock or storage keys:
// cron job names and node IDs, SKUs and versioned keys, activity keys,
// ParamLock names and values, daily scopes. One rule means every adapter
// accepts and rejects the same strings.
package name

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns why s breaks the rule — 1 to max bytes of valid UTF-8
// without control characters (C0, DEL, C1) — or "" when it keeps it. The
// reason is a short phrase for an error message: "empty", "70 bytes, over
// 64", "not valid UTF-8", "contains control character U+000A".
func Check(s string, max int) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > max:
		return fmt.Sprintf("%d bytes, over %d", len(s), max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains control character %U", r)
		}
	}
	return ""
}
