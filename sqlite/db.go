// Package sqlite is the embedded backend: one SQLite file (pure-Go driver,
// WAL) holding an SQS-like queue with a dead-letter queue (maragu.dev/goqite)
// and the idempotency records. It is a real single-node deployment: safe
// across process restarts (every acknowledged write is on disk) and for
// several consumer processes sharing the file (SQLite's locking, WAL mode,
// a busy timeout and immediate write transactions).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"io/fs"
	"os"
	"strings"
	"time"
)

// Sync is SQLite's synchronous setting in WAL mode.
type Sync string

// The durability levels.
const (
	// SyncFull fsyncs the WAL on every commit: a committed send, claim or
	// DONE survives power loss. The default.
	SyncFull Sync = "FULL"
	// SyncNormal fsyncs only at checkpoints: committed transactions survive
	// a process crash but the last ones may be lost on power loss. Faster.
	SyncNormal Sync = "NORMAL"
)

// OpenOptions configure Open.
type OpenOptions struct {
	// Sync defaults to SyncFull.
	Sync Sync
	// BusyTimeout is how long a connection waits for another process's
	// write lock before failing. Default 10s.
	BusyTimeout time.Duration
	// MaxConns bounds open connections (one of them the writer's). Default 8.
	MaxConns int
	// MaxBatch bounds the writes committed together. Default 256.
	MaxBatch int
	// Existing opens only a database that is there and migrated: nothing
	// is created or migrated (ErrNotSetUp otherwise). Operator commands
	// use it, so that a mistyped path is an error, not a new empty file.
	Existing bool
}

// ErrNotSetUp: the database file is missing, or not at this version's
// schema, and Existing forbade creating or migrating it.
var ErrNotSetUp = errors.New("sqlite: not set up")

// DB is an open database file: a pool of connections for reads and one
// group-committing writer for every write of this process.
type DB struct {
	sql   *sql.DB
	w     *writer
	notes []string
}

// Notes are what opening the file did that an operator should know (a
// migration's count of the records it could not fill).
func (db *DB) Notes() []string { return db.notes }

// queryRow runs a read on the pool through a statement prepared once
// (parsing the SQL each time costs more than the read).
func (db *DB) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	s, err := db.w.stmts.get(ctx, query)
	if err != nil {
		return db.sql.QueryRowContext(ctx, query, args...) // reports the same error
	}
	return s.QueryRowContext(ctx, args...)
}

// Close stops the writer (after the writes already queued) and closes the
// file.
func (db *DB) Close() error {
	db.w.close()
	return db.sql.Close()
}

// Ping checks that the file answers.
func (db *DB) Ping(ctx context.Context) error { return db.sql.PingContext(ctx) }

// Open opens (creating if needed) the database file at path and brings its
// schema up to date.
func Open(ctx context.Context, path string, opts OpenOptions) (*DB, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if opts.Sync == "" {
		opts.Sync = SyncFull
	}
	if opts.Sync != SyncFull && opts.Sync != SyncNormal {
		return nil, fmt.Errorf("sqlite: sync %q is not FULL or NORMAL", opts.Sync)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = 8
	}
	if opts.MaxConns < 2 {
		return nil, errors.New("sqlite: MaxConns must be at least 2 (a writer and a reader)")
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 256
	}
	if opts.Existing {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: no database file %s", ErrNotSetUp, path)
		}
	}
	if err := ownerOnly(path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := sql.Open(driverName, dsn(path, opts))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	db.SetConnMaxIdleTime(0)
	var notes []string
	if opts.Existing {
		var version int
		if err := db.QueryRowContext(ctx, "pragma user_version").Scan(&version); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite: %s: %w", path, err)
		}
		if version != len(migrations) {
			db.Close()
			return nil, fmt.Errorf("%w: %s is at schema version %d, this version needs %d (serve or setup migrates it)", ErrNotSetUp, path, version, len(migrations))
		}
	} else if notes, err = migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	return &DB{sql: db, w: newWriter(db, opts.MaxBatch, opts.BusyTimeout), notes: notes}, nil
}

// ownerOnly makes the database file readable and writable by its owner
// only — it holds account numbers — creating it so if it is not there.
// SQLite creates the -wal and -shm files with the database's mode; a
// database found open to others is tightened, with its side files.
func ownerOnly(path string) error {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make %s readable by its owner only: %w", p, err)
		}
	}
	return nil
}

// schema is goqite's SQLite schema (the library leaves creating it to its
// user) plus the idempotency table. It runs at every Open, before the
// migrations: it creates no index a migration drops (the index on (state,
// lease_until), which migration 6 makes and 8 drops, was made here again
// at every Open after the upgrade, putting the bulk back in an index).
const schema = `
create table if not exists goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create index if not exists goqite_queue_priority_created_idx on goqite (queue, priority desc, created);

create table if not exists idempotency_records (
  key text primary key,
  state text not null check (state in ('IN_PROGRESS', 'DONE', 'FAILED')),
  token text not null,
  fingerprint text not null,
  attempt integer not null,
  lease_until integer not null, -- Unix ms
  created_at integer not null,
  updated_at integer not null,
  expires_at integer not null,
  status text not null default '',
  detail text not null default ''
) strict;

create index if not exists idempotency_records_expires_idx on idempotency_records (expires_at);
`

// migrations bring a file made by an older version up to date, in order;
// the file's user_version counts those applied. Each runs once, in the same
// transaction as the version bump.
var migrations = []string{
	// 1: the audit trail of operator reopenings (Store.Reopen).
	`alter table idempotency_records add column reopens integer not null default 0;
	 alter table idempotency_records add column reopened_at integer not null default 0;
	 alter table idempotency_records add column reopen_reason text not null default '';
	 alter table idempotency_records add column prev_status text not null default '';
	 alter table idempotency_records add column prev_detail text not null default '';`,
	// 2: message attributes on the queue (JSON object; null when none).
	`alter table goqite add column attributes text;`,
	// 3: goqite's trigger that stamps "updated" on every receive, extend
	// and retry: a second write per received message that nothing reads.
	`drop trigger if exists goqite_updated_timestamp;`,
	// 4: bank-key generations of reopened records, and their history
	// (one line per reopening).
	`alter table idempotency_records add column generation integer not null default 1;
	 alter table idempotency_records add column history text not null default '';`,
	// 5: records listed by state, a page at a time by key (StateLister).
	`create index if not exists idempotency_records_state_key_idx on idempotency_records (state, key);`,
	// 6: the state WAITING (work that runs again at or after a time). SQLite
	// cannot change a CHECK constraint in place: the table is rebuilt as
	// its documentation says (a new table, the rows copied, the old one
	// dropped, the new one renamed, its indexes made again), in this
	// migration's transaction. It reads and writes every record once.
	`create table idempotency_records_v6 (
	   key text primary key,
	   state text not null check (state in ('IN_PROGRESS', 'DONE', 'FAILED', 'WAITING')),
	   token text not null,
	   fingerprint text not null,
	   attempt integer not null,
	   lease_until integer not null, -- Unix ms; for WAITING, the not-before
	   created_at integer not null,
	   updated_at integer not null,
	   expires_at integer not null,
	   status text not null default '',
	   detail text not null default '',
	   reopens integer not null default 0,
	   reopened_at integer not null default 0,
	   reopen_reason text not null default '',
	   prev_status text not null default '',
	   prev_detail text not null default '',
	   generation integer not null default 1,
	   history text not null default ''
	 ) strict;
	 insert into idempotency_records_v6 (` + columnsV6 + `) select ` + columnsV6 + ` from idempotency_records;
	 drop table idempotency_records;
	 alter table idempotency_records_v6 rename to idempotency_records;
	 create index idempotency_records_state_lease_idx on idempotency_records (state, lease_until);
	 create index idempotency_records_expires_idx on idempotency_records (expires_at);
	 create index idempotency_records_state_key_idx on idempotency_records (state, key);`,
	// 7: what the caller keeps with a record to check it against an outside
	// ledger (driver.Record.Summary). Older records have none: it cannot be
	// derived from a keyed fingerprint, so they stay "" until a claim
	// writes one (reconciliation says which it matched by key only).
	`alter table idempotency_records add column summary text not null default '';`,
	// 8: fewer index writes per charge in the single writer (issue 55), as
	// PostgreSQL's migration 5. A record's DONE moved it in the indexes on
	// (state, lease_until) and (state, key): a delete and an insert in
	// each. The bulk — DONE with status DEBITED — is now kept out of every
	// index but the primary key and expires_at's: one partial index on
	// (state, key) holds the rest (the claims under way, FAILED, WAITING,
	// DONE with another status), and the stuck listing sorts its few
	// IN_PROGRESS rows by lease. Building it reads the table once (about a
	// second per million records), in this migration's transaction.
	`drop index if exists idempotency_records_state_lease_idx;
	 drop index if exists idempotency_records_state_key_idx;
	 create index if not exists idempotency_records_open_idx on idempotency_records (state, key) where ` + openPredicate + `;`,
}

// openPredicate is the predicate of the partial index on (state, key)
// (migration 8): the records that are not the bulk, DONE with DEBITED. A
// query served by it names it word for word (SQLite uses a partial index
// only for a query whose WHERE has its terms).
const openPredicate = `(state <> 'DONE' or status <> 'DEBITED')`

// bulk says whether records in state with status are the bulk, DONE with
// DEBITED, which only the primary key and expires_at's index hold
// (migration 8); status "" is any status.
func bulk(state driver.State, status string) bool {
	return state == driver.StateDone && (status == "" || status == "DEBITED")
}

// columnsV6 are the columns of idempotency_records as migration 6 found
// them (fixed: a later column is not in the table it copies).
const columnsV6 = `key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail,
  reopens, reopened_at, reopen_reason, prev_status, prev_detail, generation, history`

func migrate(ctx context.Context, db *sql.DB) ([]string, error) {
	return migrateTo(ctx, db, len(migrations))
}

// summaryMigration is the migration that adds the records' summary.
const summaryMigration = 7

// migrateTo brings db up to schema version n (tests start from an older
// one), and says what an operator should know of it.
func migrateTo(ctx context.Context, db *sql.DB, n int) (notes []string, err error) {
	tx, err := db.BeginTx(ctx, nil) // immediate: one process migrates at a time
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	var version int
	if err := tx.QueryRowContext(ctx, "pragma user_version").Scan(&version); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	for i := version; i < n; i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return nil, fmt.Errorf("migration %d: %w", i+1, err)
		}
		if i+1 == summaryMigration {
			var older int
			if err := tx.QueryRowContext(ctx, `select count(*) from idempotency_records`).Scan(&older); err != nil {
				return nil, fmt.Errorf("migration %d: count the records: %w", i+1, err)
			}
			if older > 0 {
				notes = append(notes, driver.UnsummarisedNote(older))
			}
		}
	}
	if version < n {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("pragma user_version = %d", n)); err != nil {
			return nil, fmt.Errorf("set schema version: %w", err)
		}
	}
	return notes, tx.Commit()
}

// write runs fn atomically in the writer's next group commit.
func (db *DB) write(ctx context.Context, fn func(*wtx) error) error {
	return db.w.do(ctx, false, fn)
}

// write1 is write for a fn that makes at most one change (one statement,
// plus reads): it needs no savepoint.
func (db *DB) write1(ctx context.Context, fn func(*wtx) error) error {
	return db.w.do(ctx, true, fn)
}
