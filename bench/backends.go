package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	_ "github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"
)

// The backend comparison (-backends) runs latchkey's lock, core.Client, on
// each backend of the repository: Redis (core.NewRedis), and the modules
// under backends/. A backendConf is what a process needs to open a Client
// on one backend; the section hands it to its worker processes as JSON.
type backendConf struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`             // server address, URL or DSN; SQLite: the file
	Table  string `json:"table,omitempty"`  // sqllock's table (dropped at the end)
	Root   string `json:"root,omitempty"`   // zklock's root, memcachelock's namespace
	RunID  string `json:"run_id"`           // in every key name
	TTLms  int64  `json:"ttl_ms,omitempty"` // lock TTL
	Shared bool   `json:"shared,omitempty"` // the server serves others too (counters may include their work)
}

// backendNames is the table order.
var backendNames = []string{"redis", "postgres", "mariadb", "sqlite", "etcd", "zookeeper", "memcached"}

// countSpec says what a backend's request counter counts, and how.
var countSpec = map[string]string{
	"redis":     "commands written on the wire by the client (a go-redis hook parsing RESP; SUBSCRIBE included); executed on the server, Lua-inner commands included: INFO commandstats calls, below",
	"postgres":  "statements sent by the client (a pgx QueryTracer; BEGIN, COMMIT, LISTEN and pg_notify included); commits: transactions the client committed (COMMITs, and statements outside BEGIN … COMMIT, each a transaction of its own); no pg_stat_statements on this server",
	"mariadb":   "statements: SHOW GLOBAL STATUS Questions (not counting the driver's COM_STMT_PREPARE/CLOSE round trips; prepares below); commits: Com_commit (explicit COMMITs only; autocommit statements are not in it)",
	"sqlite":    "not measured: an embedded library with no server counters",
	"etcd":      "gRPC unary requests handled (/metrics grpc_server_handled_total); commits: raft proposals committed",
	"zookeeper": "packets received (srvr Received: requests and session pings); commits: zxid advance (write transactions)",
	"memcached": "commands (stats cmd_get+cmd_set+cmd_touch+incr+decr+delete; cas counts in cmd_set)",
}

// backendSetup is one backend ready for a section: its conf and how to undo it.
type backendSetup struct {
	conf    backendConf
	cleanup func() error
	// read returns the server's counters (nil: the backend has none);
	// overhead is what one pair of reads adds to a delta by itself.
	read     func(ctx context.Context) (map[string]float64, error)
	overhead map[string]float64
}

// setupBackend starts the backend's private server (etcd, ZooKeeper,
// memcached), or checks the shared one and creates the tables (PostgreSQL,
// MariaDB, SQLite). An error wrapping errUnavailable means skip.
func setupBackend(name, runID string, ttl time.Duration) (*backendSetup, error) {
	conf := backendConf{Name: name, RunID: runID, TTLms: ttl.Milliseconds()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch name {
	case "redis":
		conf.Addr, conf.Shared = envOr("REDIS_ADDR", "127.0.0.1:6379"), true
		admin := redis.NewClient(&redis.Options{Addr: conf.Addr, PoolSize: 1, MaxRetries: -1})
		if err := admin.Ping(ctx).Err(); err != nil {
			admin.Close()
			return nil, unavailable("no Redis at %s (set REDIS_ADDR): %v", conf.Addr, err)
		}
		return &backendSetup{conf: conf, cleanup: func() error {
			defer admin.Close()
			return cleanup([]*redis.Client{admin}, runID)
		}, read: func(ctx context.Context) (map[string]float64, error) { return redisCounts(ctx, admin) },
			// one INFO commandstats call per pair of reads (measured on
			// an idle server)
			overhead: map[string]float64{"executed": 1}}, nil
	case "postgres", "mariadb", "sqlite":
		conf.Table = "lkbench_" + runID
		var dir string
		switch name {
		case "postgres":
			conf.Addr, conf.Shared = postgresDSN(), true
		case "mariadb":
			conf.Addr, conf.Shared = mysqlDSN(), true
		case "sqlite":
			var err error
			if dir, err = os.MkdirTemp("", "lkbench-sqlite-"); err != nil {
				return nil, err
			}
			conf.Addr = filepath.Join(dir, "locks.db")
		}
		db, err := openSQL(conf, nil)
		if err == nil {
			err = db.PingContext(ctx)
		}
		if err != nil {
			if db != nil {
				db.Close()
			}
			os.RemoveAll(dir)
			return nil, unavailable("no %s at %s: %v", name, redactDSN(conf.Addr), err)
		}
		if err := sqllock.Migrate(ctx, db, sqlOptions(conf)...); err != nil {
			db.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: migrate: %w", name, err)
		}
		bs := &backendSetup{conf: conf, cleanup: func() error {
			defer os.RemoveAll(dir)
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, t := range []string{conf.Table, conf.Table + "_records"} {
				if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
					return fmt.Errorf("drop %s: %w", t, err)
				}
			}
			return nil
		}}
		if name == "mariadb" {
			bs.read = func(ctx context.Context) (map[string]float64, error) { return mariadbCounts(ctx, db) }
			bs.overhead = map[string]float64{"reqs": 1} // the second SHOW GLOBAL STATUS
		}
		return bs, nil
	case "etcd", "zookeeper", "memcached":
		var (
			p   *proc
			err error
		)
		switch name {
		case "etcd":
			p, conf.Addr, err = startEtcd()
		case "zookeeper":
			p, conf.Addr, err = startZooKeeper()
			conf.Root = "/lkbench-" + runID
		case "memcached":
			p, conf.Addr, err = startMemcached()
			conf.Root = "lkbench-" + runID
		}
		if err != nil {
			return nil, err
		}
		c := conf
		bs := &backendSetup{conf: conf, cleanup: func() error { p.stop(); return nil },
			read: func(ctx context.Context) (map[string]float64, error) { return serverCounts(ctx, c) }}
		if name == "zookeeper" {
			bs.overhead = map[string]float64{"reqs": 1} // srvr counts as a packet received
		}
		return bs, nil
	}
	return nil, fmt.Errorf("unknown backend %q (have: %s)", name, strings.Join(backendNames, ", "))
}

func postgresDSN() string {
	if u := os.Getenv("DATABASE_URL"); strings.HasPrefix(u, "postgres") {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func mysqlDSN() string { return envOr("MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test") }

func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "@"); i > 0 && strings.Contains(dsn[:i], ":") {
		return "…@" + dsn[i+1:]
	}
	return dsn
}

func sqlOptions(conf backendConf) []sqllock.Option {
	return []sqllock.Option{sqllock.WithTable(conf.Table),
		sqllock.WithClientOptions(core.WithTTL(time.Duration(conf.TTLms) * time.Millisecond))}
}

// stmtCounter counts the statements pgx connections send, and the
// transactions they commit: COMMITs, and statements sent outside
// BEGIN … COMMIT/ROLLBACK (each its own transaction).
type stmtCounter struct {
	stmts, commits atomic.Int64
	mu             sync.Mutex
	inTx           map[*pgx.Conn]bool
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.stmts.Add(1)
	verb := strings.ToLower(strings.TrimSpace(d.SQL))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inTx == nil {
		c.inTx = map[*pgx.Conn]bool{}
	}
	switch {
	case strings.HasPrefix(verb, "begin"):
		c.inTx[conn] = true
	case verb == "commit":
		c.inTx[conn] = false
		c.commits.Add(1)
	case verb == "rollback":
		c.inTx[conn] = false
	case !c.inTx[conn]:
		c.commits.Add(1)
	}
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// openSQL opens a pool as the sqllock tests do: 6 connections for a
// server, 2 for SQLite (one writer), busy timeout and WAL for SQLite. On
// PostgreSQL, tr (if not nil) counts the statements.
func openSQL(conf backendConf, tr *stmtCounter) (*sql.DB, error) {
	switch conf.Name {
	case "postgres":
		cc, err := pgx.ParseConfig(conf.Addr)
		if err != nil {
			return nil, err
		}
		if tr != nil {
			cc.Tracer = tr
		}
		db := stdlib.OpenDB(*cc)
		db.SetMaxOpenConns(6)
		return db, nil
	case "mariadb":
		db, err := sql.Open("mysql", conf.Addr)
		if err == nil {
			db.SetMaxOpenConns(6)
		}
		return db, err
	case "sqlite":
		db, err := sql.Open("sqlite", "file:"+conf.Addr+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		if err == nil {
			db.SetMaxOpenConns(2)
		}
		return db, err
	}
	return nil, fmt.Errorf("not a SQL backend: %s", conf.Name)
}

// backendClient is a core.Client on one backend with its own connections
// (pool, session), as a separate process would have.
type backendClient struct {
	c      *core.Client
	closer func() error
	tr     *stmtCounter // PostgreSQL's client-side count, else nil
	rc     *Counter     // Redis's client-side count, else nil
}

// clientCounts returns what the client itself counted ("reqs", and
// "commits" on PostgreSQL), or nil if it counts nothing.
func (b *backendClient) clientCounts() map[string]float64 {
	switch {
	case b.tr != nil:
		return map[string]float64{"reqs": float64(b.tr.stmts.Load()), "commits": float64(b.tr.commits.Load())}
	case b.rc != nil:
		return map[string]float64{"reqs": float64(b.rc.Snapshot().Wire)}
	}
	return nil
}

func (b *backendClient) Close() error {
	err := b.c.Close()
	if cerr := b.closer(); err == nil {
		err = cerr
	}
	return err
}

func openBackend(conf backendConf) (*backendClient, error) {
	ttl := time.Duration(conf.TTLms) * time.Millisecond
	var (
		c      *core.Client
		closer func() error
		tr     *stmtCounter
		rc     *Counter
		err    error
	)
	switch conf.Name {
	case "redis":
		rc = &Counter{}
		rdb := newClient(conf.Addr, rc)
		closer = rdb.Close
		c, err = core.NewRedis(rdb, core.WithTTL(ttl))
	case "postgres", "mariadb", "sqlite":
		if conf.Name == "postgres" {
			tr = &stmtCounter{}
		}
		var db *sql.DB
		if db, err = openSQL(conf, tr); err != nil {
			return nil, err
		}
		closer = db.Close
		c, err = sqllock.New(db, sqlOptions(conf)...)
	case "etcd":
		var cli *clientv3.Client
		cli, err = clientv3.New(clientv3.Config{Endpoints: []string{conf.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		closer = cli.Close
		c, err = etcdlock.New(cli, etcdlock.WithClientOptions(core.WithTTL(ttl)))
	case "zookeeper":
		var conn *zk.Conn
		conn, err = connectZK(conf.Addr, 30*time.Second)
		if err != nil {
			return nil, err
		}
		closer = func() error { conn.Close(); return nil }
		c, err = zklock.New(conn, zklock.WithSessionTimeout(30*time.Second), zklock.WithRoot(conf.Root),
			zklock.WithClientOptions(core.WithTTL(ttl)))
	case "memcached":
		mc := memcache.New(conf.Addr)
		mc.Timeout = 2 * time.Second
		mc.MaxIdleConns = 16
		closer = mc.Close
		c, err = memcachelock.New(mc, memcachelock.WithNamespace(conf.Root), memcachelock.WithClientOptions(core.WithTTL(ttl)))
	default:
		return nil, fmt.Errorf("unknown backend %q", conf.Name)
	}
	if err != nil {
		closer()
		return nil, fmt.Errorf("%s: %w", conf.Name, err)
	}
	return &backendClient{c: c, closer: closer, tr: tr, rc: rc}, nil
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

func connectZK(addr string, timeout time.Duration) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{addr}, timeout, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("no ZooKeeper session with %s within 10s (state %v)", addr, conn.State())
		}
	}
	return conn, nil
}

// The counters are "reqs" (requests or statements, see countSpec) and,
// where the server has them, "commits", "executed" and "fsyncs".
// PostgreSQL's are client-side (stmtCounter); SQLite has no server.
func redisCounts(ctx context.Context, admin *redis.Client) (map[string]float64, error) {
	calls, _, err := redisTotals(ctx, admin)
	if err != nil {
		return nil, err
	}
	return map[string]float64{"executed": float64(calls)}, nil
}

func mariadbCounts(ctx context.Context, admin *sql.DB) (map[string]float64, error) {
	rows, err := admin.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions','Com_commit','Com_stmt_prepare')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "Questions":
			out["reqs"] = f
		case "Com_commit":
			out["commits"] = f
		case "Com_stmt_prepare":
			out["prepares"] = f
		}
	}
	return out, rows.Err()
}

// serverCounts reads a private server's counters.
func serverCounts(ctx context.Context, conf backendConf) (map[string]float64, error) {
	switch conf.Name {
	case "etcd":
		req, _ := http.NewRequestWithContext(ctx, "GET", conf.Addr+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		out := map[string]float64{}
		for _, line := range strings.Split(string(b), "\n") {
			name, val, ok := strings.Cut(line, " ")
			if !ok || strings.HasPrefix(line, "#") {
				continue
			}
			f, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
			switch {
			case strings.HasPrefix(name, "grpc_server_handled_total{") && strings.Contains(name, `grpc_type="unary"`):
				out["reqs"] += f
			case name == "etcd_server_proposals_committed_total":
				out["commits"] = f
			case name == "etcd_disk_wal_fsync_duration_seconds_count":
				out["fsyncs"] = f
			}
		}
		return out, nil
	case "zookeeper":
		m, err := zkSrvr(conf.Addr)
		if err != nil {
			return nil, err
		}
		recv, _ := strconv.ParseFloat(m["Received"], 64)
		zxid, _ := strconv.ParseInt(strings.TrimPrefix(m["Zxid"], "0x"), 16, 64)
		return map[string]float64{"reqs": recv, "commits": float64(zxid & 0xffffffff)}, nil
	case "memcached":
		m, err := memcachedStats(conf.Addr)
		if err != nil {
			return nil, err
		}
		var n float64
		for _, k := range []string{"cmd_get", "cmd_set", "cmd_touch", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "delete_hits", "delete_misses"} {
			f, _ := strconv.ParseFloat(m[k], 64)
			n += f
		}
		return map[string]float64{"reqs": n}, nil
	}
	return nil, nil
}

// subCounts returns b - a - overhead for the keys of b.
func subCounts(a, b, overhead map[string]float64) map[string]float64 {
	if a == nil || b == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range b {
		out[k] = v - a[k] - overhead[k]
	}
	return out
}
