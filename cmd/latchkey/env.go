package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
)

// env is one run of a subcommand: its flags, its streams, its connection.
type env struct {
	cmd            *command
	fs             *flag.FlagSet
	stdin          *bufio.Reader
	stdout, stderr io.Writer

	redisURL string
	prefix   string
	json     bool
	timeout  time.Duration

	// subcommand flags
	match     string
	force     bool
	yes       bool
	day, tz   string
	principal string
	del       bool
	keyspace  string

	rdb    redis.UniversalClient
	client *core.Client
}

// errHelp: -h was asked for; the usage has been printed.
var errHelp = errors.New("help")

func newEnv(cmd *command, stdin io.Reader, stdout, stderr io.Writer) *env {
	e := &env{cmd: cmd, stdin: bufio.NewReader(stdin), stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("latchkey "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defPrefix := core.DefaultKeyPrefix
	if cmd.name == "daily" || cmd.name == "idem" {
		defPrefix = httpidem.DefaultKeyPrefix
	}
	fs.StringVar(&e.redisURL, "redis", "", "Redis `URL` (default $REDIS_URL, else redis://127.0.0.1:6379/0)")
	fs.StringVar(&e.prefix, "prefix", defPrefix, "key `prefix`")
	fs.BoolVar(&e.json, "json", false, "JSON output")
	fs.DurationVar(&e.timeout, "timeout", 30*time.Second, "bound on the command")
	e.fs = fs
	if cmd.flags != nil {
		cmd.flags(e)
	}
	return e
}

// parse parses args, flags anywhere among the arguments (up to a "--"),
// and returns the arguments.
func (e *env) parse(args []string) ([]string, error) {
	var pos []string
	for {
		err := e.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			e.help()
			return nil, errHelp
		}
		if err != nil {
			return nil, err
		}
		rest := e.fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if e.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: want a positive duration", e.timeout)
	}
	return pos, nil
}

func (e *env) help() {
	fmt.Fprintf(e.stdout, "usage: latchkey %s %s\n\n%s\n\nflags:\n", e.cmd.name, e.cmd.args, e.cmd.summary)
	e.fs.SetOutput(e.stdout)
	e.fs.PrintDefaults()
}

// connect opens the Redis client (once).
func (e *env) connect() (redis.UniversalClient, error) {
	if e.rdb != nil {
		return e.rdb, nil
	}
	raw := e.redisURL
	if raw == "" {
		raw = os.Getenv("REDIS_URL")
	}
	if raw == "" {
		raw = defaultRedisURL
	}
	rdb, err := openRedis(raw)
	if err != nil {
		return nil, err
	}
	e.redisURL = raw
	e.rdb = rdb
	return rdb, nil
}

// locks opens the core client on the prefix.
func (e *env) locks() (*core.Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	rdb, err := e.connect()
	if err != nil {
		return nil, err
	}
	c, err := core.NewRedis(rdb, core.WithKeyPrefix(e.prefix))
	if err != nil {
		return nil, usagef("--prefix %q: %v", e.prefix, err)
	}
	e.client = c
	return c, nil
}

func (e *env) close() {
	if e.client != nil {
		_ = e.client.Close()
	}
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
}

// explain adds where the command was connected to an error that came
// from Redis, with the password left out.
func (e *env) explain(err error) error {
	if errors.Is(err, core.ErrUnavailable) || errors.Is(err, httpidem.ErrUnavailable) {
		return fmt.Errorf("%w (redis %s)", err, redact(e.redisURL))
	}
	return err
}

// confirm asks question on stderr and reads the answer from stdin; only
// "y" or "yes" confirms. --yes confirms without asking.
func (e *env) confirm(question string) error {
	if e.yes {
		return nil
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, err := e.stdin.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(e.stderr)
		return fmt.Errorf("%w (no answer on standard input; pass --yes to confirm without asking)", errDeclined)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errDeclined
}
