package httpidem

import "strconv"

// The kinds of rows of the idempotency table: one key has at most one of
// each, a lease while a request runs and a response once one is stored.
// They are separate rows so that renewing a lease never writes the row
// that a handler's transaction inserts (see WithHandlerTx).
const (
	kindLease  = 0
	kindRecord = 1
)

// The kinds of rows of the claims table.
const (
	kindClaim  = 0 // a subject's claim of the day (CountNone, CountExact)
	kindMember = 1 // a subject counted by CountApprox
)

// sqlQueries are a SQLStore's statements, in its dialect, with its table
// names. Every time in them is the database's ({now}).
type sqlQueries struct {
	look, readRecord, ownRecord        string
	insertLease, takeLease, renewLease string
	releaseLease                       string
	insertRecord, takeRecord           string
	insertClaim, takeClaim, unclaim    string
	count                              string
	sweep                              [2]string
}

func buildSQLQueries(d Dialect, idem, claims string) sqlQueries {
	q := func(s string) string { return sqlText(d, s) }
	lease, record := strconv.Itoa(kindLease), strconv.Itoa(kindRecord)
	return sqlQueries{
		look: q("SELECT kind, fingerprint, response, expires_ms - {now} FROM " + idem +
			" WHERE idem_key = ? AND expires_ms > {now}"),
		readRecord: q("SELECT response FROM " + idem +
			" WHERE idem_key = ? AND kind = " + record + " AND expires_ms > {now}"),
		ownRecord: q("SELECT COUNT(*) FROM " + idem +
			" WHERE idem_key = ? AND kind = " + record + " AND token = ?"),

		insertLease: q(insertIgnoring(d, idem, "idem_key, kind, fingerprint, token, expires_ms",
			"?, "+lease+", ?, ?, {now} + ?")),
		takeLease: q("UPDATE " + idem + " SET fingerprint = ?, token = ?, expires_ms = {now} + ?, version = version + 1" +
			" WHERE idem_key = ? AND kind = " + lease + " AND expires_ms <= {now}"),
		renewLease: q("UPDATE " + idem + " SET expires_ms = {now} + ?, version = version + 1" +
			" WHERE idem_key = ? AND kind = " + lease + " AND token = ? AND expires_ms > {now}"),
		releaseLease: q("DELETE FROM " + idem + " WHERE idem_key = ? AND kind = " + lease + " AND token = ?"),

		insertRecord: q(insertIgnoring(d, idem, "idem_key, kind, fingerprint, token, response, expires_ms",
			"?, "+record+", ?, ?, ?, {now} + ?")),
		takeRecord: q("UPDATE " + idem + " SET fingerprint = ?, token = ?, response = ?, expires_ms = {now} + ?, version = version + 1" +
			" WHERE idem_key = ? AND kind = " + record + " AND expires_ms <= {now}"),

		insertClaim: q(insertIgnoring(d, claims, "scope, claim_day, object, kind, subject, token, counted, expires_ms",
			"?, ?, ?, ?, ?, ?, ?, ?")),
		takeClaim: q("UPDATE " + claims + " SET token = ?, counted = ?, expires_ms = ?, version = version + 1" +
			" WHERE scope = ? AND claim_day = ? AND object = ? AND kind = ? AND subject = ? AND expires_ms <= {now}"),
		unclaim: q("DELETE FROM " + claims +
			" WHERE scope = ? AND claim_day = ? AND object = ? AND kind = " + strconv.Itoa(kindClaim) + " AND subject = ? AND token = ?"),
		count: q("SELECT COALESCE(SUM(CASE WHEN kind = " + strconv.Itoa(kindClaim) + " AND counted = 1 THEN 1 ELSE 0 END), 0)," +
			" COALESCE(SUM(CASE WHEN kind = " + strconv.Itoa(kindMember) + " THEN 1 ELSE 0 END), 0) FROM " + claims +
			" WHERE scope = ? AND claim_day = ? AND object = ? AND expires_ms > {now}"),

		sweep: [2]string{q(sweepQuery(d, idem)), q(sweepQuery(d, claims))},
	}
}

// sweepQuery deletes up to sweepBatch expired rows of table. Only MySQL
// has DELETE ... LIMIT; the others pick the rows by their physical id.
func sweepQuery(d Dialect, table string) string {
	limit := strconv.Itoa(sweepBatch)
	switch d {
	case MySQL:
		return "DELETE FROM " + table + " WHERE expires_ms <= {now} LIMIT " + limit
	case Postgres:
		return "DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
			" WHERE expires_ms <= {now} LIMIT " + limit + ")) AND expires_ms <= {now}"
	}
	return "DELETE FROM " + table + " WHERE rowid IN (SELECT rowid FROM " + table +
		" WHERE expires_ms <= {now} LIMIT " + limit + ") AND expires_ms <= {now}"
}
