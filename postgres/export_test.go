package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BatchSender is what a claiming receive sends its batches through.
type BatchSender = batchSender

// WrapConn puts w between q's claiming receives and their connections.
func WrapConn(q *Queue, w func(BatchSender) BatchSender) { q.wrapConn = w }

// HoldSettles makes q's next settle group wait until release is called,
// so that every finish started meanwhile joins it; pending counts them.
func HoldSettles(q *Queue) (pending func() int, release func()) {
	q.settler.hold = make(chan struct{})
	return func() int {
			q.settler.mu.Lock()
			defer q.settler.mu.Unlock()
			return len(q.settler.pending)
		}, func() {
			close(q.settler.hold)
		}
}

// OpenAtVersion opens schema at url migrated to version n only (an older
// one: where a test of an upgrade starts); Open afterwards migrates the
// rest.
func OpenAtVersion(ctx context.Context, url, schema string, n int) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	db := &DB{pool: pool, schema: schema}
	if err := db.migrateTo(ctx, n); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// PlannedQuery is a statement of the store with arguments, and the
// indexes it must be served by at any size of the table.
type PlannedQuery struct {
	Name, SQL string
	Indexes   []string
	Args      []any
}

// RecordQueries are the store's statements that read many records: each
// must be served by an index, whatever the table's size.
func RecordQueries(now time.Time) []PlannedQuery {
	list := func(name, state, status string, bulk bool, index ...string) []PlannedQuery {
		return []PlannedQuery{
			{"list " + name, listStateSQL[listKind{bulk, false}], index, []any{state, "", "", now, status, 101}},
			{"list " + name + " by prefix", listStateSQL[listKind{bulk, true}], index, []any{state, "", "B0001", now, status, 101, "B0002"}},
		}
	}
	const pkey, open = "idempotency_records_pkey", "idempotency_records_open_idx"
	var out []PlannedQuery
	out = append(out, list("DONE", "DONE", "", true, pkey)...)
	out = append(out, list("DONE DEBITED", "DONE", "DEBITED", true, pkey)...)
	out = append(out, list("FAILED", "FAILED", "", false, open)...)
	out = append(out, list("WAITING", "WAITING", "", false, open)...)
	out = append(out, list("DONE with a rare status", "DONE", "DEBITED_NOTIFICATION_FAILED", false, open)...)
	return append(out,
		PlannedQuery{"renotify scan", listByResultSQL[false], []string{open}, []any{"DONE", "DEBITED_NOTIFICATION_FAILED", now, 100}},
		PlannedQuery{"stuck count", stuckCountSQL, []string{open}, []any{now, "~"}},
		PlannedQuery{"stuck", stuckSQL, []string{open}, []any{now, 100, "~"}},
		PlannedQuery{"sweep", purgeSQL, []string{"idempotency_records_expires_idx", pkey}, []any{now, 500}},
	)
}

// QueueVacuums says how many VACUUMs of the queue table db ran, whether
// it found it may not vacuum it, and the error of its last check or
// VACUUM, once the one under way (if any) has ended; every, if positive,
// becomes the time between checks.
func QueueVacuums(db *DB, every time.Duration) (runs int64, notOwner bool, last error) {
	if every > 0 {
		db.vac.mu.Lock()
		db.vac.every, db.vac.nextCheck = every, time.Time{}
		db.vac.mu.Unlock()
	}
	db.vac.wait()
	if b, ok := db.vac.lastErr.Load().(errBox); ok {
		last = b.err
	}
	return db.vac.runs.Load(), db.vac.notOwner.Load(), last
}

// QueueVacuumBackoff is the time between db's checks of the queue table
// after VACUUMs that left it over the threshold (0: none).
func QueueVacuumBackoff(db *DB) time.Duration {
	db.vac.wait()
	db.vac.mu.Lock()
	defer db.vac.mu.Unlock()
	return db.vac.backoff
}
