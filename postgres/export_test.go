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
