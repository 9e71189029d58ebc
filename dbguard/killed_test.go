package dbguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/latchkey/latchkey/internal/dbtest"
	mrand "math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/latchkey/latchkey/dbguard"
)

// The flash sale while the database kills the buyers' connections: the
// server-side KILL (MariaDB) or pg_terminate_backend (PostgreSQL) lands
// before, during and after the deducting statements. Whatever the buyers
// were told, the stock must add up: every unit that left the table went
// to a buyer told it was sold, or to one told the outcome is unknown
// (ErrOutcomeUnknown) — never to a buyer told the deduction failed — and
// nothing is oversold.
func TestFlashSaleKilledConnections(t *testing.T) {
	const (
		buyers   = 24 // buying one unit of the hot SKU after another
		orderers = 8  // ordering b and c together, one order after another
		saleFor  = 3 * time.Second
	)
	stocks := map[string]int64{hotSKU: 600, "b": 300, "c": 200}
	servers := []struct {
		name  string
		open  func(testing.TB) *sql.DB
		pool  func(t testing.TB, admin *sql.DB) (*sql.DB, killer)
		strat []dbguard.Strategy
	}{
		{"mariadb", openMySQL, mariaKiller, []dbguard.Strategy{dbguard.Atomic, dbguard.Locked}},
		{"postgres", openPostgres, postgresKiller, []dbguard.Strategy{dbguard.Atomic, dbguard.Locked}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range srv.strat {
				t.Run(s.String(), func(t *testing.T) {
					t.Parallel()
					admin := srv.open(t) // creates, kills, drops: never killed
					table := tableName(t, admin)
					buyersDB, k := srv.pool(t, admin)
					opts := []dbguard.Option{dbguard.WithTable(table), dbguard.WithStrategy(s)}
					if s == dbguard.Locked {
						opts = append(opts, dbguard.WithLocks(testLocker(t)), dbguard.WithWaitTimeout(saleFor))
					}
					g := mustNew(dbguard.New(buyersDB, opts...))
					t.Cleanup(func() { _ = g.Close() })
					setup := ctxFor(t, 20*time.Second)
					must(t, g.Migrate(setup))
					for sku, n := range stocks {
						must(t, g.Restock(setup, sku, n))
					}

					ctx, cancel := context.WithTimeout(context.Background(), saleFor)
					defer cancel()
					var kills atomic.Int64
					killing := make(chan struct{})
					go func() {
						defer close(killing)
						tick := time.NewTicker(3 * time.Millisecond)
						defer tick.Stop()
						for n := 0; ; n++ {
							select {
							case <-ctx.Done():
								return
							case <-tick.C:
							}
							// Kill a connection in mid-statement when there is
							// one, else now and then an idle one.
							ids := k.active(ctx)
							if len(ids) == 0 && n%4 == 0 {
								ids = k.all()
							}
							if len(ids) > 0 && k.kill(ctx, ids[mrand.IntN(len(ids))]) {
								kills.Add(1)
							}
						}
					}()

					res := killedSale(ctx, g, buyers, orderers)
					cancel()
					<-killing

					after := map[string]int64{}
					for sku := range stocks {
						var n int64
						if err := admin.QueryRowContext(setup, "SELECT qty FROM "+table+" WHERE sku = "+placeholder(admin)(1), sku).Scan(&n); err != nil {
							t.Fatal(err)
						}
						after[sku] = n
					}
					st := g.Stats()
					t.Logf("%s %s: %d kills; told sold %v (%d calls), outcome unknown %v (%d calls), failed %d calls (%v); stock drop %v; stats %+v",
						srv.name, s, kills.Load(), res.told, res.okCalls, res.unknown, res.unknownCalls, res.failedCalls, res.sample, drops(stocks, after), st)
					for sku, before := range stocks {
						drop := before - after[sku]
						switch {
						case after[sku] < 0 || drop > before:
							t.Errorf("%s: oversold: stock %d → %d", sku, before, after[sku])
						case drop < res.told[sku]:
							t.Errorf("%s: buyers were told %d units sold, but only %d left the table", sku, res.told[sku], drop)
						case drop > res.told[sku]+res.unknown[sku]:
							t.Errorf("%s: %d units left the table, but buyers were told %d sold and %d unknown: %d taken by calls reported failed",
								sku, drop, res.told[sku], res.unknown[sku], drop-res.told[sku]-res.unknown[sku])
						}
					}
					if st.Deductions != res.okCalls || st.OutcomeUnknown != res.unknownCalls {
						t.Errorf("Stats: %d deductions, %d outcome unknown; buyers counted %d and %d",
							st.Deductions, st.OutcomeUnknown, res.okCalls, res.unknownCalls)
					}
					if kills.Load() == 0 {
						t.Errorf("no connection was killed: the test tested nothing")
					}
				})
			}
		})
	}
}

// killedResult tallies what the buyers of a killed sale were told.
type killedResult struct {
	mu                                 sync.Mutex
	told, unknown                      map[string]int64 // units per SKU
	okCalls, unknownCalls, failedCalls int64
	sample                             []string // a few failures
}

// killedSale runs workers that buy one unit of the hot SKU at a time, and
// fewer that order b and c together, each until its stock runs out or ctx
// ends, all released at once.
func killedSale(ctx context.Context, g *dbguard.Guard, buyers, orderers int) *killedResult {
	res := &killedResult{told: map[string]int64{}, unknown: map[string]int64{}}
	record := func(o map[string]int64, err error) {
		res.mu.Lock()
		defer res.mu.Unlock()
		switch {
		case err == nil:
			res.okCalls++
			for sku, n := range o {
				res.told[sku] += n
			}
		case errors.Is(err, dbguard.ErrOutcomeUnknown):
			res.unknownCalls++
			for sku, n := range o {
				res.unknown[sku] += n
			}
		case errors.Is(err, dbguard.ErrInsufficientStock):
		default:
			res.failedCalls++
			if len(res.sample) < 3 {
				res.sample = append(res.sample, err.Error())
			}
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range buyers + orderers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o := map[string]int64{hotSKU: 1}
			if i >= buyers {
				o = map[string]int64{"b": 1 + int64(i%2), "c": 1}
			}
			for ctx.Err() == nil {
				var err error
				if len(o) == 1 {
					err = g.Deduct(ctx, hotSKU, 1)
				} else {
					err = g.DeductMany(ctx, o)
				}
				record(o, err)
				if errors.Is(err, dbguard.ErrInsufficientStock) {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return res
}

func drops(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for sku, n := range before {
		d[sku] = n - after[sku]
	}
	return d
}

// A killer ends the buyers' connections from the server side.
type killer interface {
	active(ctx context.Context) []int64      // connections in mid-statement
	all() []int64                            // every connection opened
	kill(ctx context.Context, id int64) bool // false if it was gone already
}

// idConnector records the server-side id of every connection it opens
// (idQuery on the new connection), then hands the driver's connection to
// database/sql untouched.
type idConnector struct {
	inner   driver.Connector
	idQuery string

	mu  sync.Mutex
	ids []int64
}

func (c *idConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, c.idQuery, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	dest := make([]driver.Value, 1)
	err = rows.Next(dest)
	rows.Close()
	if err != nil {
		conn.Close()
		return nil, err
	}
	id, err := strconv.ParseInt(fmt.Sprint(asString(dest[0])), 10, 64)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.mu.Unlock()
	return conn, nil
}

func (c *idConnector) Driver() driver.Driver { return c.inner.Driver() }

func (c *idConnector) list() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.ids...)
}

func asString(v driver.Value) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

// openIdentified opens a pool of 2*poolSize connections through inner,
// recording their ids.
func openIdentified(t testing.TB, inner driver.Connector, idQuery string) (*sql.DB, *idConnector) {
	t.Helper()
	c := &idConnector{inner: inner, idQuery: idQuery}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(2 * poolSize)
	db.SetMaxIdleConns(2 * poolSize)
	t.Cleanup(func() { db.Close() })
	return db, c
}

// mariaKiller kills with KILL, from admin; a connection is active while
// its statement, which names the test's table, runs.
func mariaKiller(t testing.TB, admin *sql.DB) (*sql.DB, killer) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dbtest.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = &mysql.NopLogger{} // the driver would log every killed connection
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db, c := openIdentified(t, inner, "SELECT CONNECTION_ID()")
	return db, &maria{admin: admin, c: c}
}

type maria struct {
	admin *sql.DB
	c     *idConnector
}

func (m *maria) all() []int64 { return m.c.list() }

func (m *maria) active(ctx context.Context) []int64 {
	ours := map[int64]bool{}
	for _, id := range m.c.list() {
		ours[id] = true
	}
	rows, err := m.admin.QueryContext(ctx,
		"SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Execute' OR COMMAND = 'Query'")
	if err != nil {
		return nil
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil && ours[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

func (m *maria) kill(ctx context.Context, id int64) bool {
	_, err := m.admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	return err == nil
}

// postgresKiller terminates backends with pg_terminate_backend, from
// admin; the buyers' pool is told apart by its application_name, so that
// a backend pid reused by another test's connection is never hit.
func postgresKiller(t testing.TB, admin *sql.DB) (*sql.DB, killer) {
	t.Helper()
	app := "dbguard_killed_" + strings.ToLower(rand.Text()[:10])
	u, err := url.Parse(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	db, c := openIdentified(t, stdlib.GetConnector(*cfg), "SELECT pg_backend_pid()")
	return db, &pg{admin: admin, c: c, app: app}
}

type pg struct {
	admin *sql.DB
	c     *idConnector
	app   string
}

func (p *pg) all() []int64 { return p.c.list() }

func (p *pg) active(ctx context.Context) []int64 {
	rows, err := p.admin.QueryContext(ctx,
		"SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'", p.app)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *pg) kill(ctx context.Context, id int64) bool {
	var ok bool
	err := p.admin.QueryRowContext(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2", id, p.app).Scan(&ok)
	return err == nil && ok
}
