package main

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/ops"
)

func dailyFlags(e *env) {
	e.fs.StringVar(&e.day, "day", "", "the `day`, YYYY-MM-DD (default: today in --tz)")
	e.fs.StringVar(&e.tz, "tz", "UTC", "the time `zone` of the scope's days (its DailyConfig.Location), for today")
}

func idemFlags(e *env) {
	e.fs.StringVar(&e.principal, "principal", "", "required: the `principal` the key was sent by (keys are scoped by it)")
	e.fs.BoolVar(&e.del, "delete", false, "delete the stored response: the next request with the key runs again")
	e.fs.BoolVar(&e.yes, "yes", false, "do not ask for confirmation before --delete")
}

// store opens httpidem's Redis store on the prefix.
func (e *env) store() (*httpidem.RedisStore, error) {
	rdb, err := e.connect()
	if err != nil {
		return nil, err
	}
	s, err := httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(e.prefix))
	if err != nil {
		return nil, usagef("--prefix %q: %v", e.prefix, err)
	}
	return s, nil
}

// runDaily shows the count of a scope and object on a day.
func runDaily(ctx context.Context, e *env, args []string) error {
	loc, err := time.LoadLocation(e.tz)
	if err != nil {
		return usagef("--tz %q: %v", e.tz, err)
	}
	day := httpidem.DayOf(time.Now(), loc)
	if e.day != "" {
		if day, err = httpidem.ParseDay(e.day); err != nil {
			return usagef("--day %q: want YYYY-MM-DD", e.day)
		}
	}
	s, err := e.store()
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	n, err := ops.Daily(ctx, s, args[0], args[1], day)
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.stdout, n)
	}
	fmt.Fprintf(e.stdout, "%s %s on %s: %d\n", printable(n.Scope), printable(n.Object), n.Day, n.Count)
	return nil
}

// runIdem shows a stored response, and deletes it with --delete.
func runIdem(ctx context.Context, e *env, args []string) error {
	if e.principal == "" {
		return usagef("--principal is required: Idempotency-Keys are scoped by their sender")
	}
	if e.yes && !e.del {
		return usagef("--yes without --delete")
	}
	s, err := e.store()
	if err != nil {
		return err
	}
	defer s.Close()
	lctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	rec, err := ops.Idem(lctx, s, e.principal, args[0], false)
	if err != nil {
		return err
	}
	if e.del && rec.Stored {
		if !e.json {
			printIdem(e, rec)
		}
		if err := e.confirm("Delete this stored response? The next request with the key runs again"); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, e.timeout) // the time to answer is not the command's
		defer cancel()
		if rec, err = ops.Idem(ctx, s, e.principal, args[0], true); err != nil {
			return err
		}
		if e.json {
			return writeJSON(e.stdout, rec)
		}
		if rec.Deleted {
			fmt.Fprintln(e.stdout, "deleted: the next request with this key runs again")
		} else {
			fmt.Fprintln(e.stdout, "nothing deleted: the response had already gone")
		}
		return nil
	}
	if e.json {
		if err := writeJSON(e.stdout, rec); err != nil {
			return err
		}
	} else {
		printIdem(e, rec)
	}
	if e.del {
		return fmt.Errorf("%w: no stored response to delete (a request is in flight)", ops.ErrNotFound)
	}
	return nil
}

func printIdem(e *env, r ops.IdemRecord) {
	w := e.stdout
	fmt.Fprintf(w, "key        %s (principal %s)\n", printable(r.Key), printable(r.Principal))
	if r.Stored {
		fmt.Fprintf(w, "status     %d\n", r.Status)
		fmt.Fprintf(w, "size       %d bytes\n", r.Size)
		if r.TTLMs < 0 {
			fmt.Fprintf(w, "expires    never\n")
		} else {
			fmt.Fprintf(w, "expires    %s (%s left)\n", stamp(r.ExpiresAt), ttl(r.TTLMs))
		}
		fmt.Fprintf(w, "request    %s\n", printable(r.Fingerprint))
		for i, h := range r.Header {
			label := "          "
			if i == 0 {
				label = "headers   "
			}
			fmt.Fprintf(w, "%s %s\n", label, printable(h))
		}
	} else {
		fmt.Fprintf(w, "stored     no response stored\n")
	}
	if f := r.InFlight; f != nil {
		fmt.Fprintf(w, "in flight  a request is running with this key (%s left on its lease)\n", ttl(f.TTLMs))
	}
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
