package core

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// A hand-over script that go-redis runs twice (its first answer timed
// out: go-redis retries a command whose read timed out) answers 0, "not
// held": the first run made the waiter's lease, the second found the key
// no longer the releaser's. When the waiter gave up meanwhile (its ctx
// ended while the hand-over was under way), nobody knows of that lease:
// the releaser was told "not held" (so it gives nothing back) and the
// waiter is gone. The key stayed held by nobody until the waiter's TTL
// (found by a fourth review); release.lua now answers its own earlier run
// as that run would have.
func TestReview4HandOverDuplicatedToALeaver(t *testing.T) {
	h := &handHook{hold: make(chan struct{}), held: make(chan struct{})}
	c, mr := handClient(t, h)
	c.be.(*redisBackend).rdb.(*redis.Client).AddHook(dupHook{})
	handOverToALeaver(t, c, mr, h)
}
