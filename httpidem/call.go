package httpidem

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
)

// An Action is what a guard decided for a request, and so what the
// adapter driving it does next. Every Call has exactly one.
type Action uint8

// The actions.
const (
	// ActionPass: run the handler with Call.Request(), unprotected — the
	// guard does not apply to the request (its Skipper, its Methods, an
	// Idempotency request without a key where none is required), or the
	// store failed and the config fails open.
	ActionPass Action = iota + 1

	// ActionAnswer: do not run the handler; answer Call.Problem().
	ActionAnswer

	// ActionReplay: do not run the handler; write the stored response with
	// Call.Replay.
	ActionReplay

	// ActionDuplicate: Daily only — the subject already claimed today. Do
	// not run the handler; answer with the adapter's duplicate handler
	// (its request is Call.Request(), carrying the Ticket), or else
	// Call.Problem() (409 with Retry-After until local midnight).
	ActionDuplicate

	// ActionRun: run the handler under the guard's protection, with
	// Call.Request() and Call.Writer(w); then call Call.Finish, and defer
	// Call.Abort so a panicking handler gives the key, claim or lock back.
	ActionRun
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case ActionPass:
		return "pass"
	case ActionAnswer:
		return "answer"
	case ActionReplay:
		return "replay"
	case ActionDuplicate:
		return "duplicate"
	case ActionRun:
		return "run"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// A Call is one request decided by a guard (IdempotencyGuard, DailyGuard,
// ParamLockGuard): its Action and what that action needs. Its methods are
// called from the request's goroutine. Adapters drive every guard the
// same way:
//
//	call := guard.Begin(r, ...)
//	switch call.Action() {
//	case httpidem.ActionPass:
//		run the handler with call.Request()
//	case httpidem.ActionAnswer:
//		answer call.Problem() (WriteProblem)
//	case httpidem.ActionReplay:
//		call.Replay(w)
//	case httpidem.ActionDuplicate:
//		run the duplicate handler with call.Request(), or answer call.Problem()
//	case httpidem.ActionRun:
//		defer call.Abort()                                  // on panic
//		run the handler with call.Request() and call.Writer(w)
//		call.Finish(status)                                 // store, release, count
//	}
type Call struct {
	action  Action
	problem *Problem
	req     *http.Request
	rec     *Record // ActionReplay
	run     runner  // ActionRun
	ended   bool
}

// runner is what a Call of ActionRun does around the handler.
type runner interface {
	writer(w http.ResponseWriter) http.ResponseWriter
	finish(status int) *Problem
	abort()
}

// pass, answer and replay make the Calls of those actions.
func pass(r *http.Request) *Call { return &Call{action: ActionPass, req: r} }

func answer(r *http.Request, p *Problem) *Call {
	return &Call{action: ActionAnswer, req: r, problem: p}
}

// Action returns what the guard decided.
func (c *Call) Action() Action { return c.action }

// Problem returns the answer of ActionAnswer and ActionDuplicate, and nil
// for the other actions.
func (c *Call) Problem() *Problem { return c.problem }

// Request returns the request to hand to the handler (or to a duplicate
// handler): for Idempotency its body is readable again, for Daily its
// context carries the Ticket, and under ActionRun its context is
// cancelled — with a cause matching ErrLost — if the lease or lock is
// lost while the handler runs.
func (c *Call) Request() *http.Request { return c.req }

// Replay writes the stored response of ActionReplay — its status, headers
// and body byte for byte, plus Idempotent-Replayed: true — and reports
// true; for other actions it writes nothing and reports false.
func (c *Call) Replay(w http.ResponseWriter) bool {
	if c.rec == nil {
		return false
	}
	writeRecord(w, c.rec)
	return true
}

// Writer returns w wrapped for ActionRun: Idempotency records the response
// as it is sent (up to MaxResponseBody; flushing or hijacking makes it
// unstorable), Daily notes its status. A request in a transaction (a
// SQLStore made WithHandlerTx) holds its response instead, and Finish
// sends it once it is committed; a Flush sends nothing before that, and
// Hijack fails. The wrapper supports http.NewResponseController through
// Unwrap. For other actions it returns w.
func (c *Call) Writer(w http.ResponseWriter) http.ResponseWriter {
	if c.run == nil || c.ended {
		return w
	}
	return c.run.writer(w)
}

// Finish ends ActionRun once the handler has answered. status is the
// status the handler answered; 0 means what went out through Writer (an
// adapter whose framework renders a returned error later passes the
// status it will send). Idempotency stores the response (unless
// StoreStatus, its size or streaming forbid it) and releases the lease;
// Daily keeps the claim, or gives it back when ReleaseOn(status); Count
// mode counts a 2xx answer; ParamLock releases the lock. All of that runs
// without the request's cancellation, with a short timeout.
//
// A request in a transaction is answered by Finish itself, through w as
// given to Writer: the held response once committed, or, when it could
// not be (the lease was lost, the commit failed, the response could not
// be stored), a problem written with the config's ProblemWriter.
//
// It returns a *Problem when the protection failed while the handler ran
// in a way the client must hear: ParamLock's lock was lost (503,
// CodeLockLost, matching ErrLost). An adapter whose response is not yet
// committed answers it; otherwise it returns or logs it. Calls after the
// first, and calls for other actions, do nothing and return nil.
func (c *Call) Finish(status int) *Problem {
	if c.run == nil || c.ended {
		return nil
	}
	c.ended = true
	return c.run.finish(status)
}

// Abort ends ActionRun without the handler's answer — for a handler that
// panicked: it gives the lease, claim or lock back, so a retry runs again.
// Calls after Finish or Abort do nothing.
func (c *Call) Abort() {
	if c.run == nil || c.ended {
		return
	}
	c.ended = true
	c.run.abort()
}

// finishContext is the context completions run in: the request's values
// without its cancellation, bounded by completeTimeout.
func finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && (code < 100 || code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// code is the status that went out; 200 if none was written.
func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

func (s *statusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// serve drives call for a net/http middleware: dup answers ActionDuplicate
// (nil: the problem), write answers problems.
func serve(w http.ResponseWriter, next http.Handler, call *Call, write ProblemWriter, dup http.Handler) {
	r := call.Request()
	switch call.Action() {
	case ActionPass:
		next.ServeHTTP(w, r)
	case ActionReplay:
		call.Replay(w)
	case ActionDuplicate:
		if dup != nil {
			dup.ServeHTTP(w, r)
			return
		}
		write(w, r, call.Problem())
	case ActionRun:
		defer call.Abort() // runs first on a panic: gives the key or claim up
		next.ServeHTTP(call.Writer(w), r)
		if p := call.Finish(0); p != nil {
			write(w, r, p) // ignored by net/http once the handler has written
		}
	default:
		write(w, r, call.Problem())
	}
}

func itoa(n int) string     { return strconv.Itoa(n) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
