// Package sqltest holds the tests of httpidem.SQLStore on real databases:
// SQLite (embedded, always there), PostgreSQL and MySQL/MariaDB. It is a
// module of its own so that the SQL drivers the tests need never become
// requirements of the root module, which a program importing only core
// or httpidem downloads. It has no API.
//
//	cd httpidem/sqltest && go test ./...                              # servers missing: skipped
//	cd httpidem/sqltest && LATCHKEY_REQUIRE_SERVERS=1 go test ./...   # servers missing: failed
//
// PostgreSQL is $DATABASE_URL when it names one (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), MySQL or
// MariaDB $MYSQL_DSN (default root@tcp(127.0.0.1:3306)/test). Every test
// makes tables of its own, with random names, and drops them.
package sqltest
