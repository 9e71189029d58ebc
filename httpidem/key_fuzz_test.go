package httpidem_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
)

// FuzzParseKey checks ParseKey and the Idempotency middleware's use of it
// on any one-line Idempotency-Key header and maximum length:
//
//   - nothing panics, and a present header is always reported present;
//   - an accepted key is 1 to maxLen bytes (maxLen <= 0: the default) of
//     the characters an RFC 8941 sf-string may hold (0x20 to 0x7E), and
//     round-trips: written as an sf-string, and as a bare token when it is
//     one, it parses back to itself;
//   - a rejected header matches ErrKeyInvalid, returns no key, and the
//     middleware answers it 400 idempotency_key_invalid without running
//     the handler, which it runs for an accepted one.
//
// The seed corpus is in testdata/fuzz/FuzzParseKey; go test runs only the
// seeds, go test -fuzz FuzzParseKey explores.
func FuzzParseKey(f *testing.F) {
	f.Add(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, 0)
	f.Add(`abc`, 3)
	store := must(httpidem.NewMemoryStore())
	f.Cleanup(func() { store.Close() })
	var runs atomic.Int64
	// The handler answers 500, which is not stored: the store keeps
	// nothing, however long the fuzzer runs, and every accepted key runs.
	h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: tenant})(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		}))

	f.Fuzz(func(t *testing.T, value string, maxLen int) {
		hdr := http.Header{}
		hdr.Set(httpidem.HeaderKey, value)
		key, ok, err := httpidem.ParseKey(hdr, maxLen)
		if !ok {
			t.Fatalf("ParseKey(%q): ok false with the header present", value)
		}
		limit := maxLen
		if limit <= 0 {
			limit = httpidem.DefaultMaxKeyLength
		}
		if err != nil {
			if !errors.Is(err, httpidem.ErrInvalidKey) || key != "" {
				t.Fatalf("ParseKey(%q) = %q, %v; want no key and ErrKeyInvalid", value, key, err)
			}
		} else {
			checkAcceptedKey(t, value, key, limit)
		}

		// The middleware, with the default MaxKeyLength.
		_, _, err = httpidem.ParseKey(hdr, 0)
		before := runs.Load()
		w := do(h, "POST", "/fuzz", "", withKey(value), withTenant("fuzz"))
		ran := runs.Load() != before
		switch {
		case err != nil && (w.Code != http.StatusBadRequest || ran ||
			!strings.Contains(w.Body.String(), `"code":"`+httpidem.CodeInvalidKey+`"`)):
			t.Fatalf("header %q (%v): %d %s, handler ran %v; want a 400 %s problem", value, err, w.Code, w.Body, ran, httpidem.CodeInvalidKey)
		case err == nil && (w.Code != http.StatusInternalServerError || !ran):
			t.Fatalf("header %q: %d %s, handler ran %v; want the handler's 500", value, w.Code, w.Body, ran)
		}
	})
}

// checkAcceptedKey checks the properties of a key ParseKey accepted from
// value.
func checkAcceptedKey(t *testing.T, value, key string, limit int) {
	t.Helper()
	if key == "" || len(key) > limit {
		t.Fatalf("ParseKey(%q) accepted %q: %d bytes, want 1 to %d", value, key, len(key), limit)
	}
	bare := true // a bare token: no space, DQUOTE, comma, semicolon or backslash
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			t.Fatalf("ParseKey(%q) accepted %q with byte 0x%02x, outside an sf-string", value, key, c)
		}
		if c == ' ' || c == '"' || c == ',' || c == ';' || c == '\\' {
			bare = false
		}
	}
	forms := []string{sfString(key)}
	if bare {
		forms = append(forms, key)
	}
	for _, form := range forms {
		h := http.Header{}
		h.Set(httpidem.HeaderKey, form)
		if got, ok, err := httpidem.ParseKey(h, limit); got != key || !ok || err != nil {
			t.Fatalf("key %q (from %q) written as %q parses as %q, %v, %v", key, value, form, got, ok, err)
		}
	}
}

// sfString writes s as an RFC 8941 sf-string: quoted, with '"' and '\'
// escaped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}
