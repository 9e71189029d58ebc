package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/ops"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // an operational error
	exitUsage    = 2 // a usage error or bad input
	exitNotFound = 3 // not found, not held
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command: it returns the exit code. It stops at SIGINT or
// SIGTERM (watch runs until then).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdin, stdout, stderr)
}

// A command is one subcommand.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, e *env, args []string) error
	flags               func(e *env) // its own flags, beside the common ones
	min, max            int          // positional arguments
}

var commands []*command

func init() {
	commands = []*command{
		{name: "locks", args: "[--match GLOB]", summary: "list held locks, semaphores and read-write locks", run: runLocks, flags: locksFlags, max: 0},
		{name: "inspect", args: "KEY", summary: "show everything known about one key", run: runInspect, min: 1, max: 1},
		{name: "release", args: "--force [--yes] KEY", summary: "evict every holder of KEY and raise its fences", run: runRelease, flags: releaseFlags, min: 1, max: 1},
		{name: "watch", args: "[--keyspace auto|on|off]", summary: "stream releases, grants and leaders as they happen", run: runWatch, flags: watchFlags},
		{name: "cron", args: "[JOB]", summary: "show the last run of every cronlock job, or of JOB", run: runCron, max: 1},
		{name: "daily", args: "SCOPE OBJECT [--day YYYY-MM-DD] [--tz ZONE]", summary: "show httpidem's count of SCOPE and OBJECT on a day", run: runDaily, flags: dailyFlags, min: 2, max: 2},
		{name: "idem", args: "KEY --principal P [--delete [--yes]]", summary: "show (or delete) a stored Idempotency-Key response", run: runIdem, flags: idemFlags, min: 1, max: 1},
	}
}

func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) == 0 {
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "latchkey: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	e := newEnv(cmd, stdin, stdout, stderr)
	pos, err := e.parse(args[1:])
	switch {
	case errors.Is(err, errHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "latchkey %s: %v\nusage: latchkey %s %s (latchkey %s -h for the flags)\n", cmd.name, err, cmd.name, cmd.args, cmd.name)
		return exitUsage
	case len(pos) < cmd.min || len(pos) > cmd.max:
		fmt.Fprintf(stderr, "latchkey %s: want %s, got %d argument(s)\nusage: latchkey %s %s\n", cmd.name, argsWanted(cmd), len(pos), cmd.name, cmd.args)
		return exitUsage
	}
	defer e.close()
	err = cmd.run(ctx, e, pos)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	fmt.Fprintf(stderr, "latchkey %s: %v\n", cmd.name, e.explain(err))
	return code
}

func argsWanted(c *command) string {
	switch {
	case c.min == c.max && c.min == 0:
		return "no arguments"
	case c.min == c.max:
		return fmt.Sprintf("%d argument(s)", c.min)
	case c.min == 0:
		return fmt.Sprintf("at most %d argument(s)", c.max)
	}
	return fmt.Sprintf("%d to %d arguments", c.min, c.max)
}

// Errors of the command itself.
var (
	errUsage    = errors.New("usage error")                    // bad input, found before any I/O
	errDeclined = errors.New("not confirmed: nothing changed") // the operator said no
)

// A usageError is bad input: exit 2. Its text is the message alone.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == errUsage }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// exitCode classifies err.
func exitCode(err error) int {
	switch {
	case errors.Is(err, errUsage), errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidOption),
		errors.Is(err, httpidem.ErrInvalidArgument), errors.Is(err, cronlock.ErrInvalidName):
		return exitUsage
	case ops.NotFound(err):
		return exitNotFound
	}
	return exitError
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "latchkey: see and act on latchkey's locks\n\nusage:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  latchkey %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, `
common flags (before or after the arguments):
  --redis URL   Redis to use (default $REDIS_URL, else
                redis://127.0.0.1:6379/0);
                ?master_name=NAME or redis+sentinel:// for Sentinel,
                redis+cluster:// for a Cluster
  --prefix P    key prefix (default latchkey; daily and idem: latchkey:http)
  --json        JSON output
  --timeout D   bound on the command (default 30s; not watch)

exit codes: 0 ok, 1 error, 2 usage or bad input, 3 not found / not held
`)
}
