package echomw

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/httpidem"
)

// DefaultErrorHandler is the default ErrorHandler of every config. For an
// error carrying an *httpidem.Problem it writes the problem as
// application/problem+json (Cache-Control: no-store, Retry-After where
// due), unless the response is already committed, and returns an
// *echo.HTTPError with the problem's status and detail whose Internal is
// the problem (errors.Is sees the sentinel through it). Other errors are
// returned as they are.
func DefaultErrorHandler(c echo.Context, err error) error {
	p, ok := httpidem.ProblemOf(err)
	if !ok {
		return err
	}
	if !c.Response().Committed {
		httpidem.WriteProblem(c.Response(), p)
	}
	return &echo.HTTPError{Code: p.Status, Message: p.Detail, Internal: p}
}

// statusOf is the status a handler answered: what went out if the
// response is committed, else what Echo's error handler will send.
func statusOf(c echo.Context, err error) int {
	if c.Response().Committed {
		return c.Response().Status
	}
	if err == nil {
		return http.StatusOK
	}
	if he, ok := err.(*echo.HTTPError); ok {
		if in, ok := he.Internal.(*echo.HTTPError); ok {
			return in.Code // as Echo's DefaultHTTPErrorHandler sends it
		}
		return he.Code
	}
	return http.StatusInternalServerError
}

// orDefault returns h, or DefaultErrorHandler when it is nil.
func orDefault(h func(echo.Context, error) error) func(echo.Context, error) error {
	if h == nil {
		return DefaultErrorHandler
	}
	return h
}
