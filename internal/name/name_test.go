package name_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/internal/name"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		in, why string
	}{
		{"daily-report", ""},
		{"sku:42/ü", ""},
		{"{tag}", ""},
		{strings.Repeat("k", 16), ""},
		{"", "empty"},
		{strings.Repeat("k", 17), "17 bytes, over 16"},
		{"a\xffb", "not valid UTF-8"},
		{"a\nb", "contains control character U+000A"},
		{"a\x00b", "contains control character U+0000"},
		{"a\x7fb", "contains control character U+007F"},
		{"a\u0085b", "contains control character U+0085"},
	} {
		if got := name.Check(tc.in, 16); got != tc.why {
			t.Errorf("Check(%q, 16) = %q, want %q", tc.in, got, tc.why)
		}
	}
}
