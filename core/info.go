package core

import (
	"strings"
	"time"
)

// Info describes a lock key for operators; see Client.Inspect.
type Info struct {
	Key      string        // the lock key as given to Inspect
	Held     bool          // a lease exists now
	Token    string        // the holder's token, when held
	Metadata string        // the holder's WithMetadata, when held
	Fence    int64         // the holder's fence when held, else the last fence issued (0: none)
	TTL      time.Duration // the lease's remaining time, when held (-1: no expiry)
	// Waiters counts the waiters queued for the lock (WithFair, or waiting
	// 50 ms or more) whose Clients are alive; on Redis, past 10,000 queued
	// the rest are counted without that check.
	Waiters int
	// OldestWait is how long the first of them has waited (0: none).
	OldestWait time.Duration

	// Holds are the key's other holds: its Semaphore's permits (Kind
	// "permit", the earliest to expire first), its RWMutex's write hold
	// ("write") and read holds ("read").
	Holds []Hold
	// granted: the lease is a fair grant its waiter has not claimed yet
	// (Token names the waiter); Observe does not report it as a holder.
	granted bool

	// WritersWaiting is how many writers wait for the key's RWMutex, and
	// WriterOldestWait how long the first of them has waited.
	WritersWaiting   int
	WriterOldestWait time.Duration
	// PermitWaiters is how many waiters queue for a permit of the key's
	// Semaphore: those with WithFair, and those that waited long enough
	// to queue (see Semaphore).
	PermitWaiters int
	// PermitOldestWait is how long the first of them has waited.
	PermitOldestWait time.Duration
}

// A Hold is one holder of a key's semaphore or read-write lock.
type Hold struct {
	Kind     Kind          // KindPermit, KindWrite or KindRead
	Token    string        // the holder's token
	Metadata string        // its WithMetadata
	Fence    int64         // its fence
	TTL      time.Duration // its remaining time (-1: no expiry)
}

// parseValue fills Token and Metadata from a lease value: "<token>", or
// "<token>|<metadata>"; "<token>|" is a grant not claimed yet.
func (info *Info) parseValue(v string) {
	var found bool
	info.Token, info.Metadata, found = strings.Cut(v, "|")
	info.granted = found && info.Metadata == ""
}
