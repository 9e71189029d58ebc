package zklock

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/core"
)

// DefaultRoot is the znode under which the locks live (WithRoot).
const DefaultRoot = "/latchkey"

// An Option configures New.
type Option func(*config)

type config struct {
	root    string
	session time.Duration
	acl     []zk.ACL
	// sweepEvery is how often the expired records are deleted
	// (sweepEvery but in tests).
	sweepEvery time.Duration
	core       []core.Option
	err        error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: zklock: "+format, append([]any{core.ErrInvalidOption}, args...)...)
	}
}

// WithRoot sets the znode under which the locks live (default DefaultRoot):
// an absolute ZooKeeper path other than "/", without a trailing slash,
// empty, "." or ".." components, or control characters
// (ErrInvalidOption). It is created, with its parents, on first use.
func WithRoot(path string) Option {
	return func(c *config) {
		if err := validRoot(path); err != "" {
			c.fail("root %q: %s", path, err)
			return
		}
		c.root = path
	}
}

func validRoot(p string) string {
	if p == "/" || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return "want an absolute path other than / and without a trailing /"
	}
	if len(p) > 1024 {
		return "longer than 1024 bytes"
	}
	for _, part := range strings.Split(p[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return "empty, . or .. component"
		}
	}
	for _, r := range p {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 {
			return "a character ZooKeeper does not allow in a path"
		}
	}
	return ""
}

// WithSessionTimeout declares the session timeout the zk.Conn was
// connected with (the sessionTimeout of zk.Connect). It is required: the
// client library does not tell the timeout the server granted, and the
// leases are only as long as the session can vouch for — at most two
// thirds of it (see the package documentation). The server must grant what
// was asked (it clamps the request to its minSessionTimeout and
// maxSessionTimeout): declaring more than the server granted breaks the
// lock's promise. Below 10ms is ErrInvalidOption.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 10*time.Millisecond {
			c.fail("session timeout %v: want at least 10ms", d)
			return
		}
		c.session = d
	}
}

// WithACL sets the ACL of the znodes the Client creates (default
// zk.WorldACL(zk.PermAll)). An empty ACL is ErrInvalidOption.
func WithACL(acl ...zk.ACL) Option {
	return func(c *config) {
		if len(acl) == 0 {
			c.fail("empty ACL")
			return
		}
		c.acl = acl
	}
}

// WithClientOptions passes options to the core.Client New returns
// (core.WithTTL, core.WithKeyPrefix, core.WithObserver, …). A TTL above
// what the session vouches for is refused when a lock is taken.
func WithClientOptions(opts ...core.Option) Option {
	return func(c *config) { c.core = append(c.core, opts...) }
}

func newConfig(opts []Option) config {
	c := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll), sweepEvery: sweepEvery}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err == nil && c.session == 0 {
		c.fail("WithSessionTimeout is required: the session timeout given to zk.Connect")
	}
	return c
}
