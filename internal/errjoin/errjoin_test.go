package errjoin_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/latchkey/latchkey/internal/errjoin"
)

func TestJoin(t *testing.T) {
	if errjoin.Join() != nil || errjoin.Join(nil, nil) != nil {
		t.Fatal("Join of nothing is not nil")
	}
	if err := errjoin.Join(nil, io.EOF); err != io.EOF {
		t.Fatalf("Join of one error: %v", err)
	}
	err := errjoin.Join(io.EOF, nil, errors.Join(context.Canceled, context.DeadlineExceeded))
	if got, want := err.Error(), "EOF; context canceled; context deadline exceeded"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	for _, e := range []error{io.EOF, context.Canceled, context.DeadlineExceeded} {
		if !errors.Is(err, e) {
			t.Fatalf("errors.Is(%v) false", e)
		}
	}
}
