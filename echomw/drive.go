package echomw

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/latchkey/latchkey/httpidem"
)

// wrap makes the Echo middleware of serve: skip (nil:
// middleware.DefaultSkipper) passes requests through, before (if set) runs
// just before serve decides the others.
func wrap(skip middleware.Skipper, before middleware.BeforeFunc, serve func(c echo.Context, next echo.HandlerFunc) error) echo.MiddlewareFunc {
	if skip == nil {
		skip = middleware.DefaultSkipper
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if skip(c) {
				return next(c)
			}
			if before != nil {
				before(c)
			}
			return serve(c, next)
		}
	}
}

// drive runs call, a guard's decision of c's request, through Echo: it is
// the one place echomw turns an httpidem.Action into Echo's terms. render
// makes a handler's returned error rendered (c.Error) before Finish, so the
// response it becomes is what Idempotency stores; otherwise the status
// Echo's error handler will send is passed to Finish. dup answers
// ActionDuplicate (nil: the problem).
func drive(c echo.Context, next echo.HandlerFunc, call *httpidem.Call, onError func(echo.Context, error) error,
	render bool, dup func(c echo.Context, p *httpidem.Problem) error) error {
	switch call.Action() {
	case httpidem.ActionPass:
		return withRequest(c, call.Request(), next)
	case httpidem.ActionReplay:
		call.Replay(c.Response())
		return nil
	case httpidem.ActionDuplicate:
		if dup != nil {
			return withRequest(c, call.Request(), func(c echo.Context) error { return dup(c, call.Problem()) })
		}
		return onError(c, call.Problem())
	case httpidem.ActionRun:
		return run(c, next, call, onError, render)
	}
	return onError(c, call.Problem())
}

// withRequest runs f with r as c's request, then puts the original back.
func withRequest(c echo.Context, r *http.Request, f echo.HandlerFunc) error {
	orig := c.Request()
	if r == orig {
		return f(c)
	}
	c.SetRequest(r)
	defer c.SetRequest(orig)
	return f(c)
}

// run serves ActionRun: the response goes out through call.Writer, and
// an error the handler returns is returned, so outer middleware sees it.
func run(c echo.Context, next echo.HandlerFunc, call *httpidem.Call, onError func(echo.Context, error) error, render bool) error {
	req, res := c.Request(), c.Response()
	orig := res.Writer
	res.Writer = call.Writer(orig)
	c.SetRequest(call.Request())
	defer func() {
		res.Writer = orig
		c.SetRequest(req)
		call.Abort() // after Finish a no-op; on a panic it gives the key, claim or lock up
	}()
	err := next(c)
	if err != nil && render && !res.Committed {
		c.Error(err)
	}
	p := call.Finish(statusOf(c, err))
	switch {
	case p == nil:
		return err
	case res.Committed:
		if err != nil {
			return err
		}
		return p
	}
	// Nothing went out yet: the guard's answer (a lost lock: 503
	// lock_lost), not the handler's error, which the loss most likely
	// caused (its context was cancelled).
	return onError(c, p)
}
