package httpidem_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	valid := []struct{ header, key string }{
		{`abc`, "abc"},
		{`"abc"`, "abc"},
		{`  "abc"  `, "abc"},
		{"\tabc ", "abc"},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`"a \"quoted\" key \\ ok"`, `a "quoted" key \ ok`},
		{`dGVzdA==/+x`, "dGVzdA==/+x"},
		{long, long},
		{`"` + long + `"`, long},
	}
	for _, c := range valid {
		h := http.Header{}
		h.Set(httpidem.HeaderKey, c.header)
		key, ok, err := httpidem.ParseKey(h, 0)
		if err != nil || !ok || key != c.key {
			t.Errorf("ParseKey(%q) = %q, %v, %v; want %q", c.header, key, ok, err, c.key)
		}
	}

	invalid := map[string][]string{
		"empty":             {``},
		"empty string":      {`""`},
		"blank":             {`   `},
		"256 bytes":         {strings.Repeat("k", 256)},
		"256 bytes quoted":  {`"` + strings.Repeat("k", 256) + `"`},
		"list":              {`a,b`},
		"quoted list":       {`"a", "b"`},
		"parameters":        {`"abc";p=1`},
		"bare parameters":   {`abc;p=1`},
		"control":           {"a\x01b"},
		"quoted control":    {"\"a\x01b\""},
		"tab inside":        {"a\tb"},
		"space inside bare": {"a b"},
		"unterminated":      {`"abc`},
		"bad escape":        {`"a\b"`},
		"non-ascii":         {"clé"},
		"two lines":         {"a", "b"},
		"two equal lines":   {"a", "a"},
	}
	for name, lines := range invalid {
		h := http.Header{}
		for _, l := range lines {
			h.Add(httpidem.HeaderKey, l)
		}
		key, ok, err := httpidem.ParseKey(h, 0)
		if !errors.Is(err, httpidem.ErrInvalidKey) || !ok {
			t.Errorf("%s: ParseKey(%q) = %q, %v, %v; want ErrKeyInvalid", name, lines, key, ok, err)
		}
	}

	if _, ok, err := httpidem.ParseKey(http.Header{}, 0); ok || err != nil {
		t.Errorf("no header: ok %v err %v", ok, err)
	}
	h := http.Header{}
	h.Set(httpidem.HeaderKey, "abcdef")
	if _, _, err := httpidem.ParseKey(h, 5); !errors.Is(err, httpidem.ErrInvalidKey) {
		t.Errorf("maxLen 5: %v", err)
	}
}
