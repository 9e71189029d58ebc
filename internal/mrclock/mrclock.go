// Package mrclock makes an embedded miniredis age its keys in real time.
package mrclock

import (
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Run moves mr's clock forward with real time, every few milliseconds,
// until the returned stop function is called (miniredis ages keys only when
// told to). stop waits for the goroutine to end.
func Run(mr *miniredis.Miniredis) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(quit); <-done }
}
