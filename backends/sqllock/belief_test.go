package sqllock_test

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest/belief"
	"github.com/latchkey/latchkey/internal/dbtest"
	"github.com/latchkey/latchkey/internal/faultnet"
)

// A beliefDB is a server the belief checker runs on: how to open a pool
// on it, and on it through a proxy at another address.
type beliefDB struct {
	name, driver, what string
	dsn                func() string
	// server returns dsn's host:port; via returns dsn with addr instead.
	server func(dsn string) (string, error)
	via    func(dsn, addr string) (string, error)
}

var beliefDBs = []beliefDB{
	{
		name: "postgres", driver: "pgx", what: "PostgreSQL (set DATABASE_URL)", dsn: dbtest.PostgresURL,
		server: func(dsn string) (string, error) {
			u, err := url.Parse(dsn)
			if err != nil {
				return "", err
			}
			if u.Port() == "" {
				return net.JoinHostPort(u.Hostname(), "5432"), nil
			}
			return u.Host, nil
		},
		via: func(dsn, addr string) (string, error) {
			u, err := url.Parse(dsn)
			if err != nil {
				return "", err
			}
			u.Host = addr
			return u.String(), nil
		},
	},
	{
		name: "mariadb", driver: "mysql", what: "MariaDB/MySQL (set MYSQL_DSN)", dsn: dbtest.MySQLDSN,
		server: func(dsn string) (string, error) {
			c, err := mysql.ParseDSN(dsn)
			if err != nil {
				return "", err
			}
			return c.Addr, nil
		},
		via: func(dsn, addr string) (string, error) {
			c, err := mysql.ParseDSN(dsn)
			if err != nil {
				return "", err
			}
			c.Net, c.Addr = "tcp", addr
			return c.FormatDSN(), nil
		},
	},
}

// TestBelief runs the belief checker on PostgreSQL and on MariaDB, each
// Client on a pool of its own through a fault proxy of its own (on
// PostgreSQL its LISTEN connection too), while one Client at a time has
// its connections cut, or stalled — a pause as the server sees it, with
// a transaction perhaps open and its row locked. The tables are the
// test's own, dropped when it ends. Restarts are TestBeliefRestart's.
func TestBelief(t *testing.T) {
	for _, bdb := range beliefDBs {
		t.Run(bdb.name, func(t *testing.T) {
			dsn := bdb.dsn()
			direct := dbtest.Open(t, bdb.driver, dsn, bdb.what, 2) // skips without the server
			tbl := table(t, direct)
			upstream, err := bdb.server(dsn)
			if err != nil {
				t.Fatal(err)
			}
			var proxies []*faultnet.Proxy
			for range 3 {
				proxies = append(proxies, faultnet.Start(t, upstream))
			}
			belief.Run(t, belief.Config{
				Clients: len(proxies),
				Workers: 12,
				TTLs:    []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond},
				Open: func(i int, obs core.Observer) (*core.Client, error) {
					via, err := bdb.via(dsn, proxies[i].Addr())
					if err != nil {
						return nil, err
					}
					db := dbtest.Open(t, bdb.driver, via, bdb.what, 6)
					return sqllock.New(db, tbl, sqllock.WithClientOptions(core.WithObserver(obs)))
				},
				Faults: []belief.Fault{
					{Name: "cut", Min: 50 * time.Millisecond, Max: time.Second,
						Inject: func(i int) (func(), error) { return proxies[i].Cut(), nil }},
					{Name: "stall", Min: 50 * time.Millisecond, Max: 1500 * time.Millisecond,
						Inject: func(i int) (func(), error) { return proxies[i].Stall(), nil }},
				},
			})
		})
	}
}

// TestBeliefRestart runs the belief checker on a private PostgreSQL
// (pgPrivate) that is restarted now and then (stopped at once, as a
// crash, and started again on its data directory), while one Client at a
// time also has its connections cut.
func TestBeliefRestart(t *testing.T) {
	pg := startPGPrivate(t)
	dsn := pg.DSN()
	tbl := table(t, dbtest.Open(t, "pgx", dsn, "the private PostgreSQL", 2))
	var proxies []*faultnet.Proxy
	for range 3 {
		proxies = append(proxies, faultnet.Start(t, "127.0.0.1:"+pg.port))
	}
	cfg := belief.Config{
		Clients: len(proxies),
		Workers: 12,
		TTLs:    []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond},
		Open: func(i int, obs core.Observer) (*core.Client, error) {
			db := dbtest.Open(t, "pgx", "postgres://postgres@"+proxies[i].Addr()+"/postgres?sslmode=disable", "the private PostgreSQL", 6)
			return sqllock.New(db, tbl, sqllock.WithClientOptions(core.WithObserver(obs)))
		},
		// A restart keeps every Client out for about a second: spaced
		// so that the run still acquires often enough to judge (at 600 ms
		// with restarts two in three, a loaded CI machine fell short).
		FaultEvery: time.Second,
		Faults: []belief.Fault{
			{Name: "restart", Weight: 1, Inject: func(int) (func(), error) { return nil, pg.restart() }},
			{Name: "cut", Min: 50 * time.Millisecond, Max: time.Second,
				Inject: func(i int) (func(), error) { return proxies[i].Cut(), nil }},
		},
	}
	if os.Getenv(belief.DurationEnv) == "" {
		cfg.Duration = 8 * time.Second
	}
	belief.Run(t, cfg)
}
