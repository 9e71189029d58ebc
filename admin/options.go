package admin

import "time"

// An Option configures Handler. Options are sealed: only this package
// makes them.
type Option interface {
	apply(*config)
}

type config struct {
	writes   bool
	recorder *Recorder
	limit    int
	refresh  time.Duration
	title    string
}

func defaultConfig() config {
	return config{limit: DefaultLimit, refresh: DefaultRefresh, title: "latchkey"}
}

type option func(*config)

func (f option) apply(c *config) { f(c) }

// Defaults of the options.
const (
	// DefaultLimit is how many primitives a listing shows when WithLimit
	// is not given.
	DefaultLimit = 500
	// DefaultRefresh is how often the page refreshes when WithRefresh is
	// not given.
	DefaultRefresh = 2 * time.Second
)

// WithWrites enables the force release (POST api/evict, and the page's
// Release buttons). Without it the handler is read-only and refuses every
// write with 403.
func WithWrites() Option {
	return option(func(c *config) { c.writes = true })
}

// WithRecorder shows the losses r has seen (install r on the host's
// Client with core.WithObserver). nil: no recorded losses, only the force
// releases done through the handler.
func WithRecorder(r *Recorder) Option {
	return option(func(c *config) { c.recorder = r })
}

// WithLimit bounds how many primitives one listing reads and shows
// (default DefaultLimit); the answer says when there were more. n < 1 is
// the default.
func WithLimit(n int) Option {
	return option(func(c *config) {
		if n >= 1 {
			c.limit = n
		}
	})
}

// WithRefresh sets how often the page asks for the state again (default
// DefaultRefresh, at least 250 ms).
func WithRefresh(d time.Duration) Option {
	return option(func(c *config) {
		c.refresh = max(d, 250*time.Millisecond)
	})
}

// WithTitle sets the page's title (default "latchkey"): a service's name,
// say.
func WithTitle(title string) Option {
	return option(func(c *config) {
		if title != "" {
			c.title = title
		}
	})
}
