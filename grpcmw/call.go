package grpcmw

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
)

// newRequest is the request httpidem's guards decide for a gRPC call: a
// POST to its full method name, as gRPC itself frames a call on HTTP/2,
// with ctx as its context. header and body may be nil.
func newRequest(ctx context.Context, fullMethod string, header http.Header, body []byte) *http.Request {
	if header == nil {
		header = make(http.Header)
	}
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: fullMethod}, RequestURI: fullMethod,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: header, Body: http.NoBody,
	}
	if len(body) > 0 {
		r.Body, r.ContentLength = readCloser{bytes.NewReader(body)}, int64(len(body))
	}
	return r.WithContext(ctx)
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// recorder is the http.ResponseWriter a guard writes a stored result to,
// or replays one into: in memory, never sent.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

// serverStream is a grpc.ServerStream whose context is the guard's: it
// carries the lock or permit and is cancelled when that is lost.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// lost reports whether ctx, a guard's run context, was cancelled because
// its lock, permit or lease was lost.
func lost(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), core.ErrLost)
}

// lostStatus is the answer to a call whose handler failed after its lock,
// permit or lease was lost: p is the guard's answer, if it gave one.
func lostStatus(p *httpidem.Problem) error {
	if p == nil {
		p = &httpidem.Problem{Code: httpidem.CodeLockLost, Detail: "the lease of this call was lost while it ran; retry"}
	}
	return problemStatus(p).Err()
}

// runUnary runs handler under call (ActionRun of a lock or limit guard):
// with the guard's context, giving the lock or permit back when it
// returns or panics. A handler that fails after the lock was lost is
// answered Aborted (LOCK_LOST); one that succeeded keeps its answer —
// its work is done, and its writes were fenced.
func runUnary(call *httpidem.Call, req any, handler grpc.UnaryHandler) (resp any, err error) {
	ctx := call.Request().Context()
	defer call.Abort() // after Finish a no-op; on a panic it releases
	resp, err = handler(ctx, req)
	wasLost := lost(ctx)
	p := call.Finish(0)
	if err != nil && (wasLost || p != nil) {
		return nil, lostStatus(p)
	}
	return resp, err
}

// runStream is runUnary for a stream.
func runStream(srv any, ss grpc.ServerStream, call *httpidem.Call, handler grpc.StreamHandler) error {
	ctx := call.Request().Context()
	defer call.Abort()
	err := handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
	wasLost := lost(ctx)
	p := call.Finish(0)
	if err != nil && (wasLost || p != nil) {
		return lostStatus(p)
	}
	return err
}
