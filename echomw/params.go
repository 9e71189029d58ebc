package echomw

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/httpidem"
)

// routeParams returns the route parameters of c as httpidem.Params. Echo
// routes on the escaped path when the request has one that differs from
// the decoded path (URL.RawPath), and c.Param then returns the value still
// escaped: /sku/%41 gives "%41" where /sku/A gives "A". Such values are
// marked Escaped, so httpidem decodes them as Echo decodes the paths it
// unescapes itself, and both give "A".
func routeParams(c echo.Context) []httpidem.Param {
	names, values := c.ParamNames(), c.ParamValues()
	escaped := c.Request().URL.RawPath != ""
	params := make([]httpidem.Param, len(names))
	for i, name := range names {
		params[i] = httpidem.Param{Name: name, Escaped: escaped}
		if i < len(values) {
			params[i].Value = values[i]
		}
	}
	return params
}

// routeObject is the default Daily object: the route's parameter values
// joined by httpidem.JoinParams ("9" on /vote/:item, "" without
// parameters).
func routeObject(c echo.Context) (string, error) {
	return httpidem.JoinParams(routeParams(c))
}

// extractor adapts an Echo extractor to the request-based form the
// httpidem guards take (nil stays nil: the guard's default).
func extractor(c echo.Context, f func(echo.Context) (string, error)) func(*http.Request) (string, error) {
	if f == nil {
		return nil
	}
	return func(*http.Request) (string, error) { return f(c) }
}
