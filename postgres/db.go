// Package postgres is the PostgreSQL backend: a queue with its dead-letter
// queue (queue.Queue, rows taken with FOR UPDATE SKIP LOCKED) and an
// idempotency store (driver.Store, the claim one statement that reads the
// row under its lock, takes it with a conditional UPDATE or inserts it, and
// returns the previous row), on a pgx connection pool. Several consumer processes on different machines share
// one database safely: every transition is one conditional statement.
//
// The schema is created and migrated by Open (versioned, under an advisory
// lock, so that processes starting together migrate once).
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"log/slog"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure Open.
type Options struct {
	// Schema holds the tables; created if missing. Default "public".
	Schema string
	// MaxConns bounds the pool. Default: pgx's (max(4, CPUs)), or, with
	// Receivers, PoolFor(Receivers); a pool_max_conns in the URL wins over
	// both.
	MaxConns int32
	// Receivers is how many receives the process runs at once. Each
	// claiming receive holds a connection for its transaction, and the
	// results it hands out are written through another (the settle
	// group): with it, the pool is sized PoolFor(Receivers) unless the URL
	// or MaxConns sizes it, and a pool sized below NeedFor(Receivers) is
	// refused (ErrConfig), since receives would starve the results. 0: no
	// sizing and no check.
	Receivers int
	// Existing uses the schema as it is: nothing is created or migrated
	// (ErrNotSetUp when it is missing or behind). It needs no privilege
	// beyond USAGE on the schema and SELECT/INSERT/UPDATE/DELETE on its
	// tables — what serve and the operator commands run with in production.
	Existing bool
	// QueueVacuumThreshold: a process receiving from the queue table
	// vacuums it (VACUUM, in the background, one at a time) once it holds
	// this many dead rows, so that receiving stays fast without autovacuum
	// (docs/operations/postgres.md). It needs the role that owns the table;
	// for another role it is skipped. 0: DefaultQueueVacuumThreshold
	// (10,000); negative: never.
	QueueVacuumThreshold int
	// Logger receives what an operator must see of the queue vacuum: a
	// VACUUM or check that failed (then retried less often, up to once a
	// minute). Default: slog.Default().
	Logger *slog.Logger
}

// ErrNotSetUp: the schema is missing or not migrated to this version, and
// Existing forbade creating or migrating it.
var ErrNotSetUp = errors.New("postgres: not set up")

// DB is an open pool on a migrated schema.
type DB struct {
	pool    *pgxpool.Pool
	schema  string
	sslmode string
	vac     *vacuumer
	notes   []string
}

// Notes are what opening the database did that an operator should know (a
// migration's count of the records it could not fill).
func (db *DB) Notes() []string { return db.notes }

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// setsPoolSize says whether a connection string sets pool_max_conns, as
// pgx reads it (pgconn's own parser: a URL's query decoded, key=value
// pairs quoted; the text inside a password is not a setting).
func setsPoolSize(conn string) bool {
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return false // pgxpool.ParseConfig has said what is wrong
	}
	_, ok := cfg.RuntimeParams["pool_max_conns"]
	return ok
}

// NeedFor is the smallest pool a process running receivers receives at
// once works with: one connection per receive (a claiming receive holds
// one for its transaction), one for the settle group that writes their
// results, one for everything else (heartbeats, the sweeper, depth).
func NeedFor(receivers int) int32 { return int32(receivers) + 2 }

// PoolFor is the pool Open makes for receivers receives: NeedFor with two
// more for heartbeats and samples under load.
func PoolFor(receivers int) int32 { return NeedFor(receivers) + 2 }

// ErrConfig marks a connection string or option that cannot work
// (configuration, not an outage).
var ErrConfig = errors.New("postgres: configuration")

// Open connects to url (a postgres:// URL or key=value string; empty: the
// standard PG* variables), checks that the server answers, and migrates
// the schema. Without an sslmode (in url or PGSSLMODE) the connection is
// sslmode=verify-full: TLS, the server's certificate checked against the
// trusted CAs (sslrootcert, else the system's) and its host name. A weaker
// mode must be written out (see SSLMode).
func Open(ctx context.Context, url string, o Options) (*DB, error) {
	url, sslmode, defaulted := secureByDefault(url, os.Getenv("PGSSLMODE"))
	if o.Schema == "" {
		o.Schema = "public"
	}
	if !schemaName.MatchString(o.Schema) {
		return nil, fmt.Errorf("%w: schema %q is not a plain lower-case identifier", ErrConfig, o.Schema)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	sized := setsPoolSize(url)
	switch {
	case sized:
	case o.MaxConns > 0:
		cfg.MaxConns, sized = o.MaxConns, true
	case o.Receivers > 0:
		cfg.MaxConns = PoolFor(o.Receivers)
	}
	if need := NeedFor(o.Receivers); o.Receivers > 0 && sized && cfg.MaxConns < need {
		return nil, fmt.Errorf("%w: a pool of %d connections (pool_max_conns) is too small for %d receivers: each claiming receive holds one while the results it hands out need another; set pool_max_conns to at least %d (%d recommended) or lower --receivers",
			ErrConfig, cfg.MaxConns, o.Receivers, need, PoolFor(o.Receivers))
	}
	schema := o.Schema
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "chargerecovery"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	db := &DB{pool: pool, schema: schema, sslmode: sslmode, vac: newVacuumer(o.QueueVacuumThreshold, cmp.Or(o.Logger, slog.Default()))}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if defaulted && ctx.Err() == nil {
			return nil, fmt.Errorf("postgres: connect: %w (no sslmode was given, which means sslmode=verify-full: the server must offer TLS with a certificate for its host name, signed by a CA in sslrootcert or the system's; say sslmode=disable, require or verify-ca explicitly to accept less)", err)
		}
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if o.Existing {
		if err := db.check(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	} else if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	return db, nil
}

// SSLMode is the connection's TLS mode; every mode but verify-full
// accepts a server it has not verified (or no TLS at all).
func (db *DB) SSLMode() string { return db.sslmode }

// secureByDefault returns conn with sslmode=verify-full added when neither
// it nor PGSSLMODE (env) names a mode, the mode in effect, and whether it
// was added.
func secureByDefault(conn, env string) (string, string, bool) {
	if m := sslmodeOf(conn); m != "" {
		return conn, m, false
	}
	if env != "" {
		return conn, env, false
	}
	switch {
	case strings.HasPrefix(conn, "postgres://"), strings.HasPrefix(conn, "postgresql://"):
		u, err := neturl.Parse(conn)
		if err != nil {
			return conn, "", false // pgx says what is wrong with it
		}
		q := u.Query()
		q.Set("sslmode", "verify-full")
		u.RawQuery = q.Encode()
		return u.String(), "verify-full", true
	case strings.TrimSpace(conn) == "":
		return "sslmode=verify-full", "verify-full", true
	default:
		return conn + " sslmode=verify-full", "verify-full", true
	}
}

var sslmodeKV = regexp.MustCompile(`(?:^|\s)sslmode\s*=\s*'?([a-z-]+)`)

// sslmodeOf is the sslmode a connection string names, or "".
func sslmodeOf(conn string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		if u, err := neturl.Parse(conn); err == nil {
			return u.Query().Get("sslmode")
		}
		return ""
	}
	if m := sslmodeKV.FindStringSubmatch(conn); m != nil {
		return m[1]
	}
	return ""
}

// Close ends the queue table's VACUUM under way, if any (vacuum.go), and
// closes the pool.
func (db *DB) Close() {
	db.vac.close()
	db.pool.Close()
}

// Ping checks that the server answers.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// Pool is the connection pool (benchmarks, tools).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// migrationLock is the first key of the migrations' advisory lock (any
// constant shared by every process of this program); the second is a hash
// of the schema name.
const migrationLock = 0x1dc0_0001

// migrations, in order; schema_version counts those applied. Each runs once,
// in the same transaction as the version bump.
var migrations = []string{
	// 1: the idempotency records and the queue table (main queues and DLQs).
	`create table idempotency_records (
	   key           text primary key,
	   state         text not null check (state in ('IN_PROGRESS', 'DONE', 'FAILED')),
	   token         text not null,
	   fingerprint   text not null,
	   attempt       integer not null,
	   lease_until   timestamptz not null,
	   created_at    timestamptz not null,
	   updated_at    timestamptz not null,
	   expires_at    timestamptz not null,
	   status        text not null default '',
	   detail        text not null default '',
	   reopens       integer not null default 0,
	   reopened_at   timestamptz,
	   reopen_reason text not null default '',
	   prev_status   text not null default '',
	   prev_detail   text not null default ''
	 );
	 create index idempotency_records_stuck_idx on idempotency_records (lease_until) where state = 'IN_PROGRESS';
	 create index idempotency_records_expires_idx on idempotency_records (expires_at);
	 create table queue_messages (
	   id         bigint generated always as identity primary key,
	   queue      text not null,
	   body       bytea not null,
	   attributes jsonb,
	   created_at timestamptz not null default clock_timestamp(),
	   visible_at timestamptz not null default clock_timestamp(),
	   received   integer not null default 0
	 );
	 create index queue_messages_ready_idx on queue_messages (queue, visible_at, id);
	 create index queue_messages_created_idx on queue_messages (queue, created_at);`,
	// 2: bank-key generations of reopened records, and their history (one
	// line per reopening).
	`alter table idempotency_records add column generation integer not null default 1;
	 alter table idempotency_records add column history text not null default '';`,
	// 3: records listed by state, a page at a time, in byte order whatever
	// the database's collation (StateLister). It blocks writes to the
	// table while it is built: on a large table build it first with
	// CREATE INDEX CONCURRENTLY under this name (docs/operations/postgres.md),
	// and this is then instant.
	`create index if not exists idempotency_records_state_key_idx on idempotency_records (state, key collate "C");`,
	// 4: the state WAITING (work that runs again at or after a time; its
	// not-before is lease_until). The CHECK is replaced: every row meets
	// the old one, which the new one only widens, so it is added NOT VALID
	// (no scan of the table under its lock) — it holds for every row
	// written from now on, as the old one did before.
	`alter table idempotency_records drop constraint idempotency_records_state_check,
	   add constraint idempotency_records_state_check check (state in ('IN_PROGRESS', 'DONE', 'FAILED', 'WAITING')) not valid;`,
	// 5: fewer index entries per charge (issue 41). A DONE record is
	// rewritten as a new tuple (its state changes, and PostgreSQL 15 keeps
	// an update HOT only if no column any index names changes), and a new
	// tuple enters every index whose predicate it meets. So the bulk — DONE
	// with status DEBITED — is kept out of every index but the primary key
	// and expires_at's (the sweeper): the rest (IN_PROGRESS, WAITING,
	// FAILED, and DONE with any other status) is in one partial index,
	// idempotency_records_open_idx, which serves listing those states, the
	// stuck scan and the renotify scan. Listing DONE walks the primary key
	// in key order, which is byte order once the key column is collated
	// "C": that ALTER rebuilds the primary key (no table rewrite) under an
	// ACCESS EXCLUSIVE lock — on a large table run it in a maintenance
	// window (docs/operations/postgres.md); building the partial index
	// beforehand would not help, the ALTER rebuilds every index on key. A claim
	// writes 3 index entries instead of 4, a DONE 2 instead of 3.
	`drop index if exists idempotency_records_state_key_idx;
	 drop index if exists idempotency_records_stuck_idx;
	 alter table idempotency_records alter column key type text collate "C";
	 create index if not exists idempotency_records_open_idx on idempotency_records (state, key)
	   where ` + openPredicate + `;`,
	// 6: what the caller keeps with a record to check it against an outside
	// ledger (driver.Record.Summary). Adding a column with a constant
	// default rewrites nothing (PostgreSQL 11+), and no index names it, so
	// every update stays HOT where it was. Older records keep "": it
	// cannot be derived from a keyed fingerprint (reconciliation says
	// which it matched by key only).
	`alter table idempotency_records add column summary text not null default '';`,
}

// summaryMigration is the migration that adds the records' summary.
const summaryMigration = 6

// openPredicate is the predicate of the partial index on (state, key)
// (migration 5): every record but DONE with status DEBITED. A query that
// should use that index states it word for word, so that the planner
// proves the index usable whatever the parameters.
const openPredicate = `(state <> 'DONE' or status <> 'DEBITED')`

func (db *DB) migrate(ctx context.Context) error { return db.migrateTo(ctx, len(migrations)) }

// migrateTo brings the schema up to version n (tests start from an older
// one).
func (db *DB) migrateTo(ctx context.Context, n int) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// The lock first, then every CREATE: two openers of a new schema must
		// not both run CREATE SCHEMA IF NOT EXISTS (the loser fails with a
		// duplicate key in pg_namespace). One lock per schema.
		if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock($1, hashtext($2))", int32(migrationLock), db.schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "create schema if not exists "+db.schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `create table if not exists schema_version (version integer not null)`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `select version from schema_version`).Scan(&version)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := tx.Exec(ctx, `insert into schema_version values (0)`); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if version > len(migrations) {
			return fmt.Errorf("schema %s is at version %d, newer than this binary knows (%d): upgrade the binary", db.schema, version, len(migrations))
		}
		for i := version; i < n; i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
			if i+1 == summaryMigration {
				var older int
				if err := tx.QueryRow(ctx, `select count(*) from idempotency_records`).Scan(&older); err != nil {
					return fmt.Errorf("migration %d: count the records: %w", i+1, err)
				}
				if older > 0 {
					db.notes = append(db.notes, driver.UnsummarisedNote(older))
				}
			}
		}
		_, err = tx.Exec(ctx, `update schema_version set version = $1`, max(version, n))
		return err
	})
}

// check reports ErrNotSetUp unless the schema exists at this version.
func (db *DB) check(ctx context.Context) error {
	var exists bool
	if err := db.pool.QueryRow(ctx, `select exists (select 1 from pg_namespace where nspname = $1)`, db.schema).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w: schema %s does not exist", ErrNotSetUp, db.schema)
	}
	var version int
	err := db.pool.QueryRow(ctx, `select version from schema_version`).Scan(&version)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01", errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: schema %s has no tables of ours", ErrNotSetUp, db.schema)
	case err != nil:
		return fmt.Errorf("postgres: read the schema version: %w", err)
	case version < len(migrations):
		return fmt.Errorf("%w: schema %s is at version %d, this version needs %d (setup migrates it)", ErrNotSetUp, db.schema, version, len(migrations))
	case version > len(migrations):
		return fmt.Errorf("postgres: schema %s is at version %d, newer than this binary knows (%d): upgrade the binary", db.schema, version, len(migrations))
	}
	return nil
}

// DropSchema drops the schema and everything in it (tests, demo reset).
func (db *DB) DropSchema(ctx context.Context) error {
	if db.schema == "public" {
		return errors.New("postgres: refusing to drop schema public")
	}
	_, err := db.pool.Exec(ctx, "drop schema if exists "+db.schema+" cascade")
	return err
}
