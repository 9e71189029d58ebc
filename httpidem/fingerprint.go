package httpidem

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// maxFingerprintLen is the longest fingerprint kept as it is; longer ones
// (and ones with bytes outside visible ASCII) are replaced by their SHA-256.
const maxFingerprintLen = 128

// DefaultFingerprint is the hex SHA-256 of the request's upper-case method,
// escaped path, raw query and body:
//
//	SHA-256(METHOD "\n" escaped-path "?" raw-query "\n" body)
//
// so the same key sent with another method, path, query or body is 422.
// Headers are not part of it. It is the default IdempotencyConfig.Fingerprint.
func DefaultFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(strings.ToUpper(r.Method)))
	h.Write([]byte{'\n'})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{'?'})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{'\n'})
	h.Write(body)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// normFingerprint keeps fp if it is short visible ASCII, else hashes it,
// so stores can keep it on one line and in lock metadata.
func normFingerprint(fp string) string {
	ok := len(fp) <= maxFingerprintLen
	for i := 0; ok && i < len(fp); i++ {
		ok = fp[i] > 0x20 && fp[i] < 0x7f
	}
	if ok {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return hex.EncodeToString(sum[:])
}
