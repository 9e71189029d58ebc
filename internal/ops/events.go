package ops

import (
	"strings"
	"time"
)

// What `latchkey watch` can see. core publishes on a primitive's own name
// (its release channel) when it is released ("r:", "r:<nonce>" on
// Redlock; a lock's release only while someone waits for it or observes
// it), when a release hands it to a fair waiter ("g:<token>") and
// when a Campaign's new leader is announced ("l:<token>"); Evict publishes
// a release too. An acquisition that was not a grant, a renewal, an
// expiry and a holder's loss publish nothing: those are seen only through
// Redis keyspace notifications, where the server has them enabled
// (notify-keyspace-events), and a loss is never seen from outside the
// holder's process (it is a local belief deadline).

// The events of an Event.
const (
	EventRelease = "release" // a hold was given back (or evicted)
	EventGrant   = "grant"   // a release handed the lock to a fair waiter
	EventLeader  = "leader"  // a Campaign announced its new leader
	EventAcquire = "acquire" // a lock or write hold was taken (keyspace notifications only)
	EventExpire  = "expire"  // a lease ran out unrenewed: its holder died or lost it (keyspace only)
)

// Event sources.
const (
	SourceNotification = "notification" // core's own release notifications
	SourceKeyspace     = "keyspace"     // Redis keyspace notifications
)

// An Event is one thing `watch` saw happen to a primitive.
type Event struct {
	At     time.Time `json:"at"`
	Key    string    `json:"key"`
	Type   string    `json:"type"`  // TypeLock, TypeSemaphore or TypeRWMutex
	Event  string    `json:"event"` // EventRelease, EventGrant, …
	Token  string    `json:"token,omitempty"`
	Source string    `json:"source"`
}

// parseName finds the key and primitive type of a storage name under
// prefix: "<prefix>:{K}" a lock, "…}:sem" a semaphore, "…}:rw" an
// RWMutex's writer and "…}:rw:r" its readers. Other names (fences, queues,
// records) are not primitives.
func parseName(prefix, name string) (key, typ string, readers, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix+":{")
	if !ok {
		return "", "", false, false
	}
	for _, s := range []struct {
		suffix  string
		typ     string
		readers bool
	}{{"}:rw:r", TypeRWMutex, true}, {"}:rw", TypeRWMutex, false}, {"}:sem", TypeSemaphore, false}, {"}", TypeLock, false}} {
		if k, ok := strings.CutSuffix(rest, s.suffix); ok && k != "" && k[0] != '}' {
			return k, s.typ, s.readers, true
		}
	}
	return "", "", false, false
}

// ParseNotification reads a message core published on channel under
// prefix; ok is false for anything else.
func ParseNotification(prefix, channel, payload string, at time.Time) (Event, bool) {
	if strings.HasPrefix(channel, prefix+":grants:") {
		// A grant sent to the grantee's Client alone: "g:<token>|<lease>".
		tok, lease, ok := strings.Cut(strings.TrimPrefix(payload, "g:"), "|")
		if !ok || !strings.HasPrefix(payload, "g:") {
			return Event{}, false
		}
		channel, payload = lease, "g:"+tok
	}
	key, typ, readers, ok := parseName(prefix, channel)
	if !ok || readers {
		return Event{}, false
	}
	ev := Event{At: at, Key: key, Type: typ, Source: SourceNotification}
	switch {
	case strings.HasPrefix(payload, "r:"):
		ev.Event = EventRelease
	case strings.HasPrefix(payload, "g:"):
		ev.Event, ev.Token = EventGrant, payload[2:]
	case strings.HasPrefix(payload, "l:"):
		ev.Event, ev.Token = EventLeader, payload[2:]
	default:
		return Event{}, false
	}
	return ev, true
}

// KeyspacePattern is the PSUBSCRIBE pattern of the keyspace
// notifications of names under prefix, on any database.
func KeyspacePattern(prefix string) string {
	return "__keyspace@*__:" + GlobEscape(prefix) + ":{*"
}

// ParseKeyspace reads a keyspace notification ("__keyspace@<db>__:<name>",
// the command as payload) of a name under prefix. Only what the release
// notifications do not tell is kept: a lock or write hold set (acquired,
// or granted), and a lock, write hold or whole semaphore expiring. A
// permit's or a read hold's acquisition is not kept: its ZADD is the same
// for a renewal.
func ParseKeyspace(prefix, channel, payload string, at time.Time) (Event, bool) {
	_, name, ok := strings.Cut(channel, "__:")
	if !ok || !strings.HasPrefix(channel, "__keyspace@") {
		return Event{}, false
	}
	key, typ, readers, ok := parseName(prefix, name)
	if !ok {
		return Event{}, false
	}
	ev := Event{At: at, Key: key, Type: typ, Source: SourceKeyspace}
	switch {
	case payload == "set" && typ != TypeSemaphore && !readers:
		ev.Event = EventAcquire
	case payload == "expired":
		ev.Event = EventExpire
	default:
		return Event{}, false
	}
	return ev, true
}

// NotificationPatterns are the PSUBSCRIBE patterns of core's
// notifications under prefix: every primitive's channel, and every
// Client's grant channel.
func NotificationPatterns(prefix string) []string {
	return []string{GlobEscape(prefix) + ":{*", GlobEscape(prefix) + ":grants:*"}
}

// GlobEscape escapes the Redis glob characters of s.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// KeyspaceEnabled reports whether a notify-keyspace-events setting sends
// the keyspace notifications ParseKeyspace reads: keyspace events (K) of
// strings ($) and expirations (x), or all (A).
func KeyspaceEnabled(setting string) bool {
	if !strings.Contains(setting, "K") {
		return false
	}
	return strings.Contains(setting, "A") || strings.Contains(setting, "$") && strings.Contains(setting, "x")
}
