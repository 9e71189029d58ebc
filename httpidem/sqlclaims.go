package httpidem

import "context"

// A claim is a row of the claims table keyed by (scope, day, object, kind,
// subject): kind claim for CountNone and CountExact — counted when
// CountExact took it — and kind member for CountApprox. A claim lives
// until ExpireAt by the database's clock; an expired row is taken over by
// the next claim, and swept.

// dayNumber encodes d as yyyymmdd.
func dayNumber(d Day) int64 { return int64(d.Year)*10000 + int64(d.Month)*100 + int64(d.Day) }

// Claim implements ClaimStore: one INSERT that does nothing when the row
// exists, then, only if it existed, an UPDATE that takes it over if it
// expired. The claim, and with CountExact its count, are that one row.
func (s *SQLStore) Claim(ctx context.Context, a ClaimArgs) (bool, error) {
	if err := checkClaim(a); err != nil {
		return false, err
	}
	kind, counted, token := int64(kindClaim), int64(0), bin(a.Token)
	switch a.Count {
	case CountExact:
		counted = 1
	case CountApprox:
		kind, token = kindMember, bin("")
	}
	scope, day, object, subject := bin(a.Scope), dayNumber(a.Day), bin(a.Object), bin(a.Subject)
	at := a.ExpireAt.UnixMilli()
	s.wrote()
	for attempt := 0; ; attempt++ {
		res, err := s.db.ExecContext(ctx, s.q.insertClaim, scope, day, object, kind, subject, token, counted, at)
		n, err := insertedRows(s.dialect, res, err)
		if err == nil && n == 0 {
			res, err = s.db.ExecContext(ctx, s.q.takeClaim, token, counted, at, scope, day, object, kind, subject)
			if err == nil {
				n, err = res.RowsAffected()
			}
		}
		switch {
		case err == nil:
			return n == 1, nil
		case !retryableError(s.dialect, err) || attempt == 4:
			return false, storeErr("claim", err)
		}
		if perr := pause(ctx, pollDelay(attempt)); perr != nil {
			return false, storeErr("claim", err)
		}
	}
}

// Unclaim implements ClaimStore: it deletes the claim row if it carries
// a.Token, and with it its count.
func (s *SQLStore) Unclaim(ctx context.Context, a ClaimArgs) error {
	if err := checkClaim(a); err != nil {
		return err
	}
	if a.Count == CountApprox {
		return nil // nothing to give back
	}
	_, err := s.db.ExecContext(ctx, s.q.unclaim, bin(a.Scope), dayNumber(a.Day), bin(a.Object), bin(a.Subject), bin(a.Token))
	if err != nil {
		return storeErr("unclaim", err)
	}
	return nil
}

// Count implements ClaimCounter: the live counted claims of object in
// scope on day, or, if there are none, its live CountApprox members.
func (s *SQLStore) Count(ctx context.Context, scope, object string, day Day) (int64, error) {
	if err := checkDay(scope, object, day); err != nil {
		return 0, err
	}
	var exact, approx int64
	err := s.db.QueryRowContext(ctx, s.q.count, bin(scope), dayNumber(day), bin(object)).Scan(&exact, &approx)
	if err != nil {
		return 0, storeErr("count", err)
	}
	if exact > 0 {
		return exact, nil
	}
	return approx, nil
}
