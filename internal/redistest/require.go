package redistest

import (
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns a missing server from a
// skipped test into a failed one when it is set to "1".
const RequireEnv = "LATCHKEY_REQUIRE_SERVERS"

// Require reports whether LATCHKEY_REQUIRE_SERVERS=1 is set: then a missing
// server fails the test instead of skipping it.
func Require() bool {
	return os.Getenv(RequireEnv) == "1"
}

// Unavailable skips the test with the reason given by format and args, or
// fails it with t.Fatalf when [Require] is true. Either way it does not
// return.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Require() {
		t.Fatalf("redistest: "+format+" ("+RequireEnv+"=1)", args...)
	}
	t.Skipf("redistest: "+format+" (set "+RequireEnv+"=1 to fail instead)", args...)
}
