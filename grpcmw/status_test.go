package grpcmw_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/httpidem"
)

// TestReasons pins the reasons to httpidem's codes: the same answer has
// the same name in JSON problems and in gRPC ErrorInfo.
func TestReasons(t *testing.T) {
	for reason, code := range map[string]string{
		grpcmw.ReasonKeyMissing:      httpidem.CodeKeyMissing,
		grpcmw.ReasonInvalidKey:      httpidem.CodeInvalidKey,
		grpcmw.ReasonKeyReused:       httpidem.CodeKeyReused,
		grpcmw.ReasonInFlight:        httpidem.CodeInFlight,
		grpcmw.ReasonInvalidRequest:  httpidem.CodeInvalidRequest,
		grpcmw.ReasonUnauthenticated: httpidem.CodeUnauthenticated,
		grpcmw.ReasonLocked:          httpidem.CodeLocked,
		grpcmw.ReasonLimited:         httpidem.CodeLimited,
		grpcmw.ReasonLockLost:        httpidem.CodeLockLost,
		grpcmw.ReasonUnavailable:     httpidem.CodeUnavailable,
	} {
		if reason != strings.ToUpper(code) {
			t.Errorf("reason %s for code %s", reason, code)
		}
	}
	if grpcmw.Reason(nil) != "" {
		t.Error("a reason for nil")
	}
	if _, ok := grpcmw.RetryDelay(nil); ok {
		t.Error("a retry delay for nil")
	}
}
