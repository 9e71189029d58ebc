package ops

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// A DailyCount is how many subjects claimed an object of a scope on a day
// (httpidem.Daily and Gate).
type DailyCount struct {
	Scope  string `json:"scope"`
	Object string `json:"object"`
	Day    string `json:"day"` // YYYY-MM-DD, the civil day of the scope's location
	Count  int64  `json:"count"`
}

// Daily returns the count of scope and object on day (exact where a
// counter is kept, else the HyperLogLog estimate, else 0: see
// httpidem.ClaimCounter).
func Daily(ctx context.Context, store httpidem.ClaimCounter, scope, object string, day httpidem.Day) (DailyCount, error) {
	n, err := store.Count(ctx, scope, object, day)
	if err != nil {
		return DailyCount{}, err
	}
	return DailyCount{Scope: scope, Object: object, Day: day.String(), Count: n}, nil
}

// Responses is what a store offers for stored Idempotency-Key responses
// (httpidem.RedisStore and MemoryStore).
type Responses interface {
	LookupResponse(ctx context.Context, principal, key string) (httpidem.StoredResponse, bool, error)
	DeleteResponse(ctx context.Context, principal, key string) (bool, error)
}

// An IdemRecord is what a store keeps for one principal's Idempotency-Key.
type IdemRecord struct {
	Key       string `json:"key"`
	Principal string `json:"principal"`
	// Stored is true when a completed response is stored; the fields up
	// to ExpiresAt describe it.
	Stored      bool      `json:"stored"`
	Status      int       `json:"status,omitempty"`
	Header      []string  `json:"header,omitempty"` // "Name: value", sorted
	Size        int       `json:"size"`             // body bytes
	Fingerprint string    `json:"fingerprint,omitempty"`
	TTLMs       int64     `json:"ttl_ms,omitempty"` // -1: no expiry
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	// InFlight is set while a request with the key runs.
	InFlight *InFlight `json:"in_flight,omitempty"`
	// Deleted is true when --delete removed the stored response.
	Deleted bool `json:"deleted,omitempty"`
}

// InFlight describes the request running with a key.
type InFlight struct {
	Fingerprint string `json:"fingerprint"`
	TTLMs       int64  `json:"ttl_ms"`
}

// Idem returns the record of key sent by principal; with del it then
// deletes the stored response (a request in flight goes on). Nothing
// there is an error matching ErrNotFound; bad input matches
// httpidem.ErrInvalidArgument and reads nothing.
func Idem(ctx context.Context, store Responses, principal, key string, del bool) (IdemRecord, error) {
	resp, found, err := store.LookupResponse(ctx, principal, key)
	if err != nil {
		return IdemRecord{}, err
	}
	if !found {
		return IdemRecord{}, fmt.Errorf("%w: no stored response or request in flight for Idempotency-Key %q of principal %q", ErrNotFound, key, principal)
	}
	rec := IdemRecord{Key: key, Principal: principal}
	if r := resp.Record; r != nil {
		rec.Stored, rec.Status, rec.Size, rec.Fingerprint = true, r.Status, len(r.Body), r.Fingerprint
		rec.Header = headerLines(r.Header)
		rec.TTLMs = resp.TTL.Milliseconds()
		if resp.TTL < 0 {
			rec.TTLMs = -1
		} else {
			rec.ExpiresAt = time.Now().Add(resp.TTL).Truncate(time.Second)
		}
	}
	if f := resp.InFlight; f != nil {
		rec.InFlight = &InFlight{Fingerprint: f.Fingerprint, TTLMs: f.TTL.Milliseconds()}
	}
	if del && rec.Stored {
		if rec.Deleted, err = store.DeleteResponse(ctx, principal, key); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

func headerLines(h http.Header) []string {
	var out []string
	for name, vs := range h {
		for _, v := range vs {
			out = append(out, name+": "+v)
		}
	}
	sort.Strings(out)
	return out
}
