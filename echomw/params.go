package echomw

import (
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// paramValue returns raw, a route parameter value of c, as the request
// meant it. Echo routes on the escaped path when the request has one that
// differs from the decoded path (URL.RawPath), and c.Param then returns the
// value still escaped: /sku/%41 gives "%41" where /sku/A gives "A".
// paramValue decodes such a value with url.PathUnescape, as Echo does for
// the paths it unescapes itself, so that both give "A". A value that
// cannot be decoded is an error.
func paramValue(c echo.Context, raw string) (string, error) {
	if c.Request().URL.RawPath == "" {
		return raw, nil // routed on URL.Path: already decoded
	}
	return url.PathUnescape(raw)
}

// escapeParam returns s with '%' and the bytes of seps percent-encoded,
// so that values joined with those separators stay unambiguous. Other
// bytes are kept: a value without them is returned as it is.
func escapeParam(s, seps string) string {
	const hex = "0123456789ABCDEF"
	if !strings.ContainsAny(s, seps) && !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || strings.IndexByte(seps, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
