package core

import "time"

// Info describes a lock key for operators; see Client.Inspect.
type Info struct {
	Key      string        // the lock key as given to Inspect
	Held     bool          // a lease exists now
	Token    string        // the holder's token, when held
	Metadata string        // the holder's WithMetadata, when held
	Fence    int64         // the holder's fence when held, else the last fence issued (0: none)
	TTL      time.Duration // the lease's remaining time, when held (-1: no expiry)
	Waiters  int           // fair-mode waiters queued (WithFair)
}
