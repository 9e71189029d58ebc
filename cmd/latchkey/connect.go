package main

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultRedisURL is the Redis used when neither --redis nor REDIS_URL
// says: the library's tests' and examples' default server.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// openRedis makes the client a URL names, without I/O:
//
//	redis://[user:pass@]host:port[/db]     a server (also rediss://, unix://)
//	redis://sentinel:26379?master_name=m  a Sentinel group (also redis+sentinel://)
//	redis+cluster://host:port?addr=h2:p2  a Cluster (also rediss+cluster://)
//
// The query takes go-redis's options (dial_timeout=2s, …). Errors never
// show the password.
func openRedis(raw string) (redis.UniversalClient, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("--redis %s: cannot parse the URL: %s", redact(raw), scrub(err, raw))
	}
	kind := "server"
	base, mode, _ := strings.Cut(u.Scheme, "+")
	switch {
	case mode == "cluster":
		kind = "cluster"
	case mode == "sentinel", u.Query().Has("master_name"):
		kind = "sentinel"
	case mode != "":
		return nil, usagef("--redis %s: unknown scheme %q (want redis+cluster or redis+sentinel)", redact(raw), u.Scheme)
	}
	if base != "redis" && base != "rediss" && !(base == "unix" && kind == "server") {
		return nil, usagef("--redis %s: unknown scheme %q (want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://)", redact(raw), u.Scheme)
	}
	plain := raw
	if mode != "" {
		plain = base + raw[len(u.Scheme):]
	}
	fail := func(err error) (redis.UniversalClient, error) {
		return nil, usagef("--redis %s: %s", redact(raw), scrub(err, plain))
	}
	switch kind {
	case "cluster":
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return fail(err)
		}
		o.ContextTimeoutEnabled = true
		o.DialTimeout = dialTimeout(o.DialTimeout)
		o.DialerRetries = dialerRetries(o.DialerRetries)
		return redis.NewClusterClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return fail(err)
		}
		if o.MasterName == "" {
			return nil, usagef("--redis %s: a Sentinel URL needs ?master_name=NAME", redact(raw))
		}
		o.ContextTimeoutEnabled = true
		o.DialTimeout = dialTimeout(o.DialTimeout)
		o.DialerRetries = dialerRetries(o.DialerRetries)
		return redis.NewFailoverClient(o), nil
	}
	o, err := redis.ParseURL(plain)
	if err != nil {
		return fail(err)
	}
	o.ContextTimeoutEnabled = true
	o.DialTimeout = dialTimeout(o.DialTimeout)
	o.DialerRetries = dialerRetries(o.DialerRetries)
	return redis.NewClient(o), nil
}

// dialTimeout is d, or 2 s when the URL did not say: an operator's
// command should fail fast when Redis is not there.
func dialTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return 2 * time.Second
	}
	return d
}

// dialerRetries is n, or 1 when the URL did not say (go-redis dials five
// times): the cause comes back at once.
func dialerRetries(n int) int {
	if n == 0 {
		return 1
	}
	return n
}

// quiet drops go-redis's own log lines (a failed dial is logged once per
// attempt): the command reports the error itself, once.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// userinfo runs to the URL's last '@': a password may hold '/', '?' or
// '#' unescaped (generated secrets do), and url.Parse then fails.
var userinfo = regexp.MustCompile(`//.*@`)

// redact returns raw with its user information hidden.
func redact(raw string) string {
	return userinfo.ReplaceAllString(raw, "//***@")
}

// scrub is err's text with raw (which may hold a password) redacted.
func scrub(err error, raw string) string {
	s := err.Error()
	if raw != "" {
		s = strings.ReplaceAll(s, raw, redact(raw))
	}
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "***")
		}
	}
	return s
}
