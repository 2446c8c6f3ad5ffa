package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Store is the driver.Store on the SQLite file. The claim runs in the
// writer's transaction: a plain INSERT … ON CONFLICT DO NOTHING for a new
// key; otherwise the row is read and, only when it may be taken over, an
// INSERT … ON CONFLICT DO UPDATE … WHERE <claimable> RETURNING takes it.
// Why this shape and not another is in BENCHMARKS.md (SQLite claim path).
type Store struct {
	db *DB
}

var (
	_ driver.Store        = (*Store)(nil)
	_ driver.StuckLister  = (*Store)(nil)
	_ driver.Purger       = (*Store)(nil)
	_ driver.StateCounter = (*Store)(nil)
	_ driver.Amender      = (*Store)(nil)
	_ driver.Collector    = (*Store)(nil)
	_ driver.ResultLister = (*Store)(nil)
	_ driver.StateLister  = (*Store)(nil)
)

// NewStore returns a store on db (from Open).
func NewStore(db *DB) *Store { return &Store{db: db} }

const claimSQL = `
insert into idempotency_records
  (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail, summary)
values (?1, 'IN_PROGRESS', ?2, ?3, 1, ?4, ?5, ?5, ?6, '', '', ?8)
on conflict (key) do update set
  attempt = case when expires_at <= ?5 then 1 else attempt + 1 end,
  created_at = case when expires_at <= ?5 then ?5 else created_at end,
  state = 'IN_PROGRESS', token = ?2, fingerprint = ?3, lease_until = ?4,
  updated_at = ?5, expires_at = ?6, status = '', detail = '', summary = ?8,
  reopens = case when expires_at <= ?5 then 0 else reopens end,
  reopened_at = case when expires_at <= ?5 then 0 else reopened_at end,
  reopen_reason = case when expires_at <= ?5 then '' else reopen_reason end,
  prev_status = case when expires_at <= ?5 then '' else prev_status end,
  prev_detail = case when expires_at <= ?5 then '' else prev_detail end,
  generation = case when expires_at <= ?5 then 1 else generation end,
  history = case when expires_at <= ?5 then '' else history end
where expires_at <= ?5
   or (state in ('IN_PROGRESS', 'WAITING') and lease_until <= ?7 and fingerprint = ?3)
returning attempt, created_at, generation, history`

const insertSQL = `
insert into idempotency_records
  (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail, summary)
values (?1, 'IN_PROGRESS', ?2, ?3, 1, ?4, ?5, ?5, ?6, '', '', ?7)
on conflict (key) do nothing`

const columns = `key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail,
  reopens, reopened_at, reopen_reason, prev_status, prev_detail, generation, history, summary`

const selectSQL = `select ` + columns + ` from idempotency_records where key = ?`

// Claim implements driver.Store.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	var res driver.ClaimResult
	err := s.db.write1(ctx, func(tx *wtx) error {
		var err error
		res, err = claimTx(ctx, tx, req)
		return err
	})
	if err != nil {
		return driver.ClaimResult{}, driver.Unavailable("claim", err)
	}
	return res, nil
}

// claimTx is the claim inside a write transaction: Store.Claim's, and the
// one the queue's claiming receive writes (Queue.ReceiveClaiming).
func claimTx(ctx context.Context, tx *wtx, req driver.ClaimRequest) (driver.ClaimResult, error) {
	// A new key (most claims) is one plain insert. Otherwise the row is
	// read and, only if the claim may take it, taken over by the
	// conditional upsert: all in the writer's transaction, so nothing
	// changes the row between the read and the write.
	ins, err := tx.Exec(ctx, insertSQL, req.Key, req.Token, req.Fingerprint,
		req.LeaseUntil.UnixMilli(), req.Now.UnixMilli(), req.ExpiresAt.UnixMilli(), req.Summary)
	if err != nil {
		return driver.ClaimResult{}, err
	}
	if n, err := ins.RowsAffected(); err != nil {
		return driver.ClaimResult{}, err
	} else if n == 1 {
		return driver.ClaimResult{Acquired: true, Record: driver.Record{
			Key: req.Key, State: driver.StateInProgress, LeaseUntil: req.LeaseUntil, Token: req.Token,
			Attempt: 1, Fingerprint: req.Fingerprint, Summary: req.Summary, CreatedAt: req.Now, UpdatedAt: req.Now, ExpiresAt: req.ExpiresAt, Generation: 1,
		}}, nil
	}
	existing, err := scan(tx.QueryRow(ctx, selectSQL, req.Key))
	if err != nil {
		return driver.ClaimResult{}, err
	}
	if !req.Allows(existing) {
		return driver.ClaimResult{Record: existing}, nil // a duplicate
	}
	var attempt, generation int
	var created int64
	var history string
	summary := req.SummaryOver(existing)
	err = tx.QueryRow(ctx, claimSQL, req.Key, req.Token, req.Fingerprint,
		req.LeaseUntil.UnixMilli(), req.Now.UnixMilli(), req.ExpiresAt.UnixMilli(), req.LeaseExpiredBy.UnixMilli(), summary).Scan(&attempt, &created, &generation, &history)
	if err == nil {
		// existing is the row the upsert took over (read in this
		// transaction): a reclaim of an IN_PROGRESS claim, the resume of a
		// WAITING record that is due, or a record past retention.
		return driver.ClaimResult{Acquired: true, Reclaimed: req.Reclaims(existing), Record: driver.Record{
			Key: req.Key, State: driver.StateInProgress, LeaseUntil: req.LeaseUntil, Token: req.Token,
			Attempt: attempt, Fingerprint: req.Fingerprint, Summary: summary, CreatedAt: time.UnixMilli(created).UTC(),
			UpdatedAt: req.Now, ExpiresAt: req.ExpiresAt, Generation: generation, History: driver.SplitHistory(history),
		}}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return driver.ClaimResult{}, err
	}
	return driver.ClaimResult{Record: existing}, nil
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	rec, err := scan(s.db.queryRow(ctx, selectSQL, key))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Record{}, driver.ErrNotFound
	}
	if err != nil {
		return driver.Record{}, driver.Unavailable("get", err)
	}
	if rec.Expired(now) {
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, nil
}

type row interface{ Scan(...any) error }

func scan(r row) (driver.Record, error) {
	var rec driver.Record
	var state string
	var lease, created, updated, expires, reopened int64
	var history string
	if err := r.Scan(&rec.Key, &state, &rec.Token, &rec.Fingerprint, &rec.Attempt, &lease, &created, &updated, &expires, &rec.Status, &rec.Detail,
		&rec.Reopens, &reopened, &rec.ReopenReason, &rec.PrevStatus, &rec.PrevDetail, &rec.Generation, &history, &rec.Summary); err != nil {
		return driver.Record{}, err
	}
	rec.History = driver.SplitHistory(history)
	if reopened != 0 {
		rec.ReopenedAt = time.UnixMilli(reopened).UTC()
	}
	rec.State = driver.State(state)
	rec.LeaseUntil = time.UnixMilli(lease).UTC()
	rec.CreatedAt = time.UnixMilli(created).UTC()
	rec.UpdatedAt = time.UnixMilli(updated).UTC()
	rec.ExpiresAt = time.UnixMilli(expires).UTC()
	return rec, nil
}

// Finish implements driver.Store.
func (s *Store) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	var ok bool
	err := s.db.write1(ctx, func(tx *wtx) error {
		var err error
		ok, err = finishTx(ctx, tx, f)
		return err
	})
	return finishAnswer(ok, err)
}

// finishAnswer is Store.Finish's answer for finishTx's: unavailable, lease
// lost (the record is not ours in that state), or nil.
func finishAnswer(ok bool, err error) error {
	switch {
	case err != nil:
		return driver.Unavailable("finish", err)
	case !ok:
		return driver.ErrLeaseLost
	}
	return nil
}

// finishSQL moves the record we hold to its final state, or to WAITING
// (its not-before the lease), replacing the generation and the history
// when the request carries them.
//
// ?1 key, ?2 token, ?3 state, ?4 status, ?5 detail, ?6 now, ?7 expires at,
// ?8 not-before, ?9 generation (0: kept), ?10 whether the history is
// replaced, ?11 the history.
const finishSQL = `update idempotency_records set state = ?3, status = ?4, detail = ?5, updated_at = ?6, expires_at = ?7,
  lease_until = case when ?3 = 'WAITING' then ?8 else lease_until end,
  generation = case when ?9 > 0 then ?9 else generation end,
  history = case when ?10 then ?11 else history end
where key = ?1 and state = 'IN_PROGRESS' and token = ?2`

// finishTx is the finish inside a write transaction (Store.Finish's, and
// the one a claiming receive's bound message writes with its delete). It
// reports whether the record is now in f.State under f.Token: moved there,
// or already there (a retry of a finish that landed).
func finishTx(ctx context.Context, tx *wtx, f driver.FinishRequest) (bool, error) {
	res, err := tx.Exec(ctx, finishSQL, f.Key, f.Token, string(f.State), f.Status, f.Detail, f.Now.UnixMilli(), f.ExpiresAt.UnixMilli(),
		f.NotBefore.UnixMilli(), f.Generation, f.History != nil, driver.JoinHistory(f.History))
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return n > 0, err
	}
	// Already in the target state under our token: a retry of a finish
	// that landed. Success, and nothing to change.
	var state, token string
	err = tx.QueryRow(ctx, `select state, token from idempotency_records where key = ?`, f.Key).Scan(&state, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && state == string(f.State) && token == f.Token, err
}

// Extend implements driver.Store.
func (s *Store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	return s.held(ctx, "extend", `update idempotency_records set lease_until = ?, updated_at = ?
		where key = ? and state = 'IN_PROGRESS' and token = ?`, req.LeaseUntil.UnixMilli(), req.Now.UnixMilli(), req.Key, req.Token)
}

const reopenSQL = `update idempotency_records set
  state = 'IN_PROGRESS', token = ?2, lease_until = ?6, updated_at = ?3, expires_at = ?4,
  prev_status = status, prev_detail = detail, status = '', detail = '',
  reopens = reopens + 1, reopened_at = ?3, reopen_reason = ?5,
  generation = case when ?8 > 0 then ?8 else generation end,
  history = case when ?8 > 0 then ?9 else history end
where key = ?1 and state = 'FAILED' and expires_at > ?3 and (?7 = '' or token = ?7)
returning ` + columns

// Reopen implements driver.Store: one conditional UPDATE … RETURNING;
// when it matches nothing, the row is read in the same transaction to say
// why.
func (s *Store) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	if r.Key == "" || r.Token == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs key and token", driver.ErrInvalid)
	}
	var rec driver.Record
	var found bool
	err := s.db.write1(ctx, func(tx *wtx) error {
		var err error
		rec, err = scan(tx.QueryRow(ctx, reopenSQL, r.Key, r.Token, r.Now.UnixMilli(), r.ExpiresAt.UnixMilli(), r.Reason, r.LeaseUntil.UnixMilli(),
			r.PrevToken, r.Generation, driver.JoinHistory(r.History)))
		if err == nil {
			found = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = scan(tx.QueryRow(ctx, selectSQL, r.Key))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return driver.Record{}, driver.Unavailable("reopen", err)
	case found:
		return rec, nil
	case rec.Key == "" || rec.Expired(r.Now):
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, driver.ErrNotFailed
}

// held runs one statement conditional on IN_PROGRESS and the token.
func (s *Store) held(ctx context.Context, op, query string, args ...any) error {
	var n int64
	err := s.db.write1(ctx, func(tx *wtx) error {
		res, err := tx.Exec(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return driver.Unavailable(op, err)
	}
	if n == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

// stuckCountSQL counts the claims past their lease (?1 lease passed by,
// ?2 live at, ?3 the internal keys' prefix); stuckSQL lists them, oldest
// lease first, ?4 at most: by the partial index, whose IN_PROGRESS rows
// are the claims under way.
const (
	stuckCountSQL = `select count(*) from idempotency_records
		where state = 'IN_PROGRESS' and ` + openPredicate + ` and lease_until <= ?1 and expires_at > ?2 and substr(key, 1, 1) <> ?3`
	stuckSQL = `select ` + columns + ` from idempotency_records
		where state = 'IN_PROGRESS' and ` + openPredicate + ` and lease_until <= ?1 and expires_at > ?2 and substr(key, 1, 1) <> ?3
		order by lease_until limit ?4`
)

// Stuck returns the IN_PROGRESS records whose lease passed before now,
// oldest lease first (at most limit), and how many there are in all.
func (s *Store) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	var total int
	if err := s.db.sql.QueryRowContext(ctx, stuckCountSQL, now.UnixMilli(), now.UnixMilli(), driver.InternalKeyPrefix).Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := s.db.sql.QueryContext(ctx, stuckSQL, now.UnixMilli(), now.UnixMilli(), driver.InternalKeyPrefix, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, rec)
	}
	return out, total, rows.Err()
}

// Amend implements driver.Amender: one conditional UPDATE … RETURNING;
// when it matches nothing, the row is read in the same transaction.
func (s *Store) Amend(ctx context.Context, a driver.AmendRequest) (driver.Record, error) {
	rec, done, found, err := s.updateOrRead(ctx, a.Key, `update idempotency_records set status = ?4, detail = ?5, history = ?6, updated_at = ?7
			where key = ?1 and state = 'DONE' and token = ?2 and status = ?3 and expires_at > ?7 returning `+columns,
		a.Key, a.Token, a.FromStatus, a.Status, a.Detail, driver.JoinHistory(a.History), a.Now.UnixMilli())
	switch {
	case err != nil:
		return driver.Record{}, driver.Unavailable("amend", err)
	case done:
		return rec, nil
	case !found || rec.Expired(a.Now):
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, driver.ErrStale
}

// updateOrRead runs the conditional update update (… RETURNING the row)
// in one write transaction; when it matches nothing, it reads key's row
// in the same transaction, to say why: done, the row written; found, the
// row as it is (neither: no row).
func (s *Store) updateOrRead(ctx context.Context, key, update string, args ...any) (rec driver.Record, done, found bool, err error) {
	err = s.db.write1(ctx, func(tx *wtx) error {
		var err error
		rec, err = scan(tx.QueryRow(ctx, update, args...))
		if err == nil {
			done = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = scan(tx.QueryRow(ctx, selectSQL, key))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	return rec, done, found, err
}

// collectSQL moves the very record read (?2 state, ?3 token, ?4
// generation; for IN_PROGRESS its lease passed by ?5) to DONE under ?6
// with ?7 the posted generation, ?8 status, ?9 detail, ?10 history, ?11
// now and ?12 its retention.
const collectSQL = `update idempotency_records set state = 'DONE', token = ?6, generation = ?7, status = ?8, detail = ?9,
  history = ?10, updated_at = ?11, expires_at = ?12
where key = ?1 and state = ?2 and token = ?3 and max(generation, 1) = ?4 and expires_at > ?11
  and (?2 <> 'IN_PROGRESS' or lease_until <= ?5)
returning ` + columns

// Collect implements driver.Collector: one conditional UPDATE …
// RETURNING; when it matches nothing, the row is read in the same
// transaction to say why (or that the collect landed before).
func (s *Store) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	if !c.Valid() {
		return driver.Record{}, fmt.Errorf("%w: collect needs key, the token read, a new token, a state it collects from and the posted generation", driver.ErrInvalid)
	}
	rec, done, found, err := s.updateOrRead(ctx, c.Key, collectSQL, c.Key, string(c.From), c.Token, max(c.Generation, 1), c.LeaseExpiredBy.UnixMilli(),
		c.NewToken, c.PostedGeneration, c.Status, c.Detail, driver.JoinHistory(c.History), c.Now.UnixMilli(), c.ExpiresAt.UnixMilli())
	switch {
	case err != nil:
		return driver.Record{}, driver.Unavailable("collect", err)
	case done:
		return rec, nil
	case !found || rec.Expired(c.Now):
		return driver.Record{}, driver.ErrNotFound
	case c.Landed(rec):
		return rec, nil
	}
	return rec, driver.ErrStale
}

// listByResultSQL lists the records in state ?1 with status ?2 live at
// ?3, ?4 at most: by the partial index (false), or for the bulk (true) a
// scan.
var listByResultSQL = byBulk(func(open string) string {
	return `select ` + columns + ` from idempotency_records
		where state = ?1 and status = ?2` + open + ` and expires_at > ?3 order by updated_at limit ?4`
})

// byBulk builds a listing's two statements from one text: for the records
// the partial index holds (false) with its predicate as a term, and for
// the bulk (true) without it.
func byBulk(query func(open string) string) map[bool]string {
	return map[bool]string{false: query(" and " + openPredicate), true: query("")}
}

// ListByResult implements driver.ResultLister: by the partial index of
// the records not DONE-DEBITED (the renotify scan's DONE with
// DEBITED_NOTIFICATION_FAILED among them); DONE-DEBITED itself, the
// bulk, is a scan.
func (s *Store) ListByResult(ctx context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	rows, err := s.db.sql.QueryContext(ctx, listByResultSQL[bulk(state, status)], string(state), status, now.UnixMilli(), limit)
	if err != nil {
		return nil, driver.Unavailable("list", err)
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// Purge implements driver.Purger: one small delete (by the expires_at
// index) per call, so that a sweep never holds the write lock for long.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	var n int64
	err := s.db.write1(ctx, func(tx *wtx) error {
		res, err := tx.Exec(ctx, `delete from idempotency_records where key in
			(select key from idempotency_records where expires_at <= ? limit ?)`, now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, driver.Unavailable("purge", err)
	}
	return int(n), nil
}

// Expired implements driver.Purger.
func (s *Store) Expired(ctx context.Context, now time.Time) (int, error) {
	var n int
	if err := s.db.sql.QueryRowContext(ctx, `select count(*) from idempotency_records where expires_at <= ?`, now.UnixMilli()).Scan(&n); err != nil {
		return 0, driver.Unavailable("expired", err)
	}
	return n, nil
}

// CountByState implements driver.StateCounter.
func (s *Store) CountByState(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	rows, err := s.db.sql.QueryContext(ctx, `select state, count(*) from idempotency_records where expires_at > ? and substr(key, 1, 1) <> ? group by state`,
		now.UnixMilli(), driver.InternalKeyPrefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := driver.NewCounts()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[driver.State(st)] = n
	}
	return out, rows.Err()
}

// listStateSQL is a page of ListState: state ?1, keys after ?2, from ?3,
// below ?5 when ?4, live at ?6, status ?7 (empty: any), ?8 at most; by the
// partial index on (state, key) (false), or walking the primary key for
// the bulk (true).
var listStateSQL = byBulk(func(open string) string {
	return `select ` + columns + ` from idempotency_records
		where state = ?1` + open + ` and key > ?2 and key >= ?3 and (?4 = 0 or key < ?5) and expires_at > ?6 and (?7 = '' or status = ?7)
		order by key limit ?8`
})

// ListState implements driver.StateLister, the prefix a key range (never
// a LIKE pattern), the cursor a key: DONE by walking the primary key (most
// records are DONE, so a page reads few others), every other state (and
// DONE with a status other than DEBITED) by the partial index on (state,
// key).
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	limit := req.PageLimit()
	q := listStateSQL[bulk(req.State, req.Status)]
	end, bounded := driver.PrefixEnd(req.Prefix)
	rows, err := s.db.sql.QueryContext(ctx, q, string(req.State), req.After, req.Prefix, bounded, end, req.Now.UnixMilli(), req.Status, limit+1)
	if err != nil {
		return driver.ListPage{}, driver.Unavailable("list", err)
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return driver.ListPage{}, err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return driver.ListPage{}, driver.Unavailable("list", err)
	}
	return driver.Page(out, limit), nil
}
