package core

import "time"

// Test-only views of unexported helpers, for the external test package.

// ValidKey is validKey.
var ValidKey = validKey

// HashTag and ClusterSlot are hashTag and clusterSlot.
var (
	HashTag     = hashTag
	ClusterSlot = clusterSlot
)

// StorageNames returns the Redis names of key under prefix: lease, fence
// counter, waiters, their Clients, the waiters' mark and release 0.2.0's
// queue.
func StorageNames(prefix, key string) []string {
	c := &Client{cfg: clientConfig{prefix: prefix}}
	n := c.names(key)
	return []string{n.lease, n.fence, n.queue, n.dues, n.mark, n.oldQ}
}

// mustNew returns v, or panics with err.
func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ErrLateAnswer is the cause of an acquisition's ErrUnavailable when its
// answer came after the lease's TTL (tooLate).
var ErrLateAnswer = errLateAnswer

// QueueTouchHash is the SHA1 of the script a queued mutex waiter keeps its
// place with.
var QueueTouchHash = queueTouchScript.Hash()

// ReleaseHash is the SHA1 of a mutex's release script.
var ReleaseHash = releaseScript.Hash()

// SetTouchTimings sets how often a queued mutex waiter on Redis touches
// its entry and how long the entry lives, until restore is called.
func SetTouchTimings(poll, entry time.Duration) (restore func()) {
	touchTimings[0].Store(int64(poll))
	touchTimings[1].Store(int64(entry))
	return func() {
		touchTimings[0].Store(int64(touchPollDefault))
		touchTimings[1].Store(int64(touchEntryTTLDefault))
	}
}

// FenceMaxHash is the SHA1 of Redlock's fence write-back script.
var FenceMaxHash = fenceMaxScript.Hash()

// SetClockSkew makes Redlock acquisitions propose their fences as a client
// whose clock is off by d would, until restore is called.
func SetClockSkew(d time.Duration) (restore func()) {
	clockSkew.Store(int64(d))
	return func() { clockSkew.Store(0) }
}

// AcquireHash is the SHA1 of a mutex's acquisition script (the default
// mode), and AcquireShardedHash of its sharded flavour (WithShardedNotify).
var (
	AcquireHash        = acquireScript.Hash()
	AcquireShardedHash = shardedScripts.acquire.Hash()
)

// SetStarvationThreshold sets how long a Lock waiter of the default mode
// waits before it queues, until restore is called.
func SetStarvationThreshold(d time.Duration) (restore func()) {
	starvation.Store(int64(d))
	return func() { starvation.Store(int64(starvationThresholdDefault)) }
}

// SetWaitMarkTTL sets how long a default-mode waiter's mark that the key
// is waited for lives, until restore is called.
func SetWaitMarkTTL(d time.Duration) (restore func()) {
	waitMark.Store(int64(d))
	return func() { waitMark.Store(int64(waitMarkTTLDefault)) }
}
