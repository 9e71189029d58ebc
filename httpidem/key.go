package httpidem

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is the response header that marks a replayed response,
// with the value "true" (Stripe's spelling, also used by Echo Pro).
const HeaderReplayed = "Idempotent-Replayed"

// DefaultMaxKeyLength is the longest key accepted, in bytes (Stripe's limit).
const DefaultMaxKeyLength = 255

// maxKeyLength is the largest MaxKeyLength a config may set: scoped keys
// must fit core.MaxKeyLen with their escaping.
const maxKeyLength = 300

// ParseKey returns the idempotency key of h. ok is false when there is no
// Idempotency-Key header. The value must be one RFC 8941 sf-string
// ("abc", with \" and \\ escapes) or a bare token (abc: visible ASCII
// without DQUOTE, comma, semicolon or backslash); either way the key is
// 1 to maxLen bytes (maxLen <= 0: DefaultMaxKeyLength). Repeated header
// lines, lists, parameters, empty keys and control characters are
// errors matching ErrInvalidKey.
func ParseKey(h http.Header, maxLen int) (key string, ok bool, err error) {
	vals := h.Values(HeaderKey)
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%w: %d header lines", ErrInvalidKey, len(vals))
	}
	if maxLen <= 0 {
		maxLen = DefaultMaxKeyLength
	}
	key, err = parseItem(strings.Trim(vals[0], " \t"))
	if err != nil {
		return "", true, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	switch {
	case key == "":
		return "", true, fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > maxLen:
		return "", true, fmt.Errorf("%w: %d bytes, over %d", ErrInvalidKey, len(key), maxLen)
	}
	return key, true, nil
}

// parseItem parses an sf-string or a bare token.
func parseItem(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c < 0x21 || c > 0x7e:
				return "", fmt.Errorf("byte 0x%02x at %d", c, i)
			case c == ',':
				return "", fmt.Errorf("a list")
			case c == '"' || c == ';' || c == '\\':
				return "", fmt.Errorf("%q in a bare key", c)
			}
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("bad escape at %d", i)
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := strings.TrimLeft(v[i+1:], " \t"); rest != "" {
				if rest[0] == ',' {
					return "", fmt.Errorf("a list")
				}
				return "", fmt.Errorf("%q after the string", rest)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte 0x%02x at %d", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string")
}

// scopedKey is the store key of a client key under a principal: a hash of
// the principal (fixed length, no user IDs in Redis key names) and the
// escaped key, so distinct pairs never collide.
func scopedKey(principal, key string) string {
	sum := sha256.Sum256([]byte(principal))
	var b strings.Builder
	b.Grow(4 + 22 + 1 + len(key))
	b.WriteString("idem:")
	var enc [22]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:16])
	b.Write(enc[:])
	b.WriteByte(':')
	escapeTo(&b, key)
	return b.String()
}

// escapeTo writes s with '%', ':', '{', '}', space and control bytes
// percent-encoded, so the result is unambiguous inside a ':'-separated key
// and never changes a Redis Cluster hash tag.
func escapeTo(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f || c == '%' || c == ':' || c == '{' || c == '}' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func escape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	escapeTo(&b, s)
	return b.String()
}
