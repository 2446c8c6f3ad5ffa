package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Store is the driver.Store on PostgreSQL. Every operation is one
// statement, so one round trip; a claim that loses a race with a
// concurrent first claim of the same key reads the winner once more.
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

// NewStore returns the store on db.
func NewStore(db *DB) *Store { return &Store{db: db} }

const columns = `key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail,
  reopens, reopened_at, reopen_reason, prev_status, prev_detail, generation, history, summary`

// claimSQL writes the claim if the key is absent, past retention, or
// IN_PROGRESS or WAITING with its lease (its not-before) passed and the
// same fingerprint, and returns what it wrote together with the row as it
// was, in one round trip. The row is read with its lock (prev: FOR NO KEY
// UPDATE reads the latest committed version, waiting for a writer that
// holds it), so the update decides on, and the answer reports, the very
// row it replaces: whether the claim took over an IN_PROGRESS claim
// (Reclaimed) or resumed a WAITING record. An absent key is inserted;
// an insert that loses to a concurrent one writes nothing, and the caller
// reads the winner.
//
// $1 key, $2 token, $3 fingerprint, $4 lease until, $5 now, $6 expires at,
// $7 lease expired by, $8 summary ("" keeps the record's unless it is past
// retention: driver.ClaimRequest.SummaryOver).
const claimSQL = `
with prev as (
  select ` + columns + ` from idempotency_records where key = $1 for no key update
), upd as (
  update idempotency_records r set
    attempt = case when p.expires_at <= $5 then 1 else p.attempt + 1 end,
    created_at = case when p.expires_at <= $5 then $5 else p.created_at end,
    state = 'IN_PROGRESS', token = $2, fingerprint = $3, lease_until = $4,
    updated_at = $5, expires_at = $6, status = '', detail = '',
    summary = case when $8 = '' and p.expires_at > $5 then p.summary else $8 end,
    reopens = case when p.expires_at <= $5 then 0 else p.reopens end,
    reopened_at = case when p.expires_at <= $5 then null else p.reopened_at end,
    reopen_reason = case when p.expires_at <= $5 then '' else p.reopen_reason end,
    prev_status = case when p.expires_at <= $5 then '' else p.prev_status end,
    prev_detail = case when p.expires_at <= $5 then '' else p.prev_detail end,
    generation = case when p.expires_at <= $5 then 1 else p.generation end,
    history = case when p.expires_at <= $5 then '' else p.history end
  from prev p
  where r.key = $1
    and (p.expires_at <= $5 or (p.state in ('IN_PROGRESS', 'WAITING') and p.lease_until <= $7 and p.fingerprint = $3))
  returning r.attempt, r.created_at, r.generation, r.history, r.summary
), ins as (
  insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, summary)
  select $1, 'IN_PROGRESS', $2, $3, 1, $4, $5, $5, $6, $8 where not exists (select 1 from prev)
  on conflict (key) do nothing
  returning attempt, created_at, generation, history, summary
), won as (
  select * from upd union all select * from ins
)
select w.attempt, w.created_at, w.generation, w.history, w.summary, p.key, p.state, p.token, p.fingerprint, p.attempt, p.lease_until, p.created_at, p.updated_at,
  p.expires_at, p.status, p.detail, p.reopens, p.reopened_at, p.reopen_reason, p.prev_status, p.prev_detail, p.generation, p.history, p.summary
from (select 1) one left join won w on true left join prev p on true`

// Claim implements driver.Store.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	return claimIn(ctx, s.db.pool, req)
}

// querier runs a statement on the pool or in a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimIn is the claim on q: Store.Claim's on the pool, and the one a
// claiming receive writes in its transaction (Queue.ReceiveClaiming).
func claimIn(ctx context.Context, q querier, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	for range maxStaleRetries {
		res, done, err := claimed(ctx, q, req, q.QueryRow(ctx, claimSQL, claimArgs(req)...))
		if err != nil || done {
			return res, err
		}
	}
	return driver.ClaimResult{}, driver.Unavailable("claim", errors.New("the key kept changing under the claim"))
}

// claimArgs are claimSQL's arguments for req.
func claimArgs(req driver.ClaimRequest) []any {
	return []any{req.Key, req.Token, req.Fingerprint, req.LeaseUntil, req.Now, req.ExpiresAt, req.LeaseExpiredBy, req.Summary}
}

// claimed reads claimSQL's answer for req from row. done is false when the
// statement's snapshot predates a concurrent claim and the record, read
// again on q, may still be taken: run the statement again.
func claimed(ctx context.Context, q querier, req driver.ClaimRequest, row pgx.Row) (res driver.ClaimResult, done bool, err error) {
	var (
		attempt, generation *int32
		created             *time.Time
		history, summary    *string
		prev                nullableRecord
	)
	if err := row.Scan(append([]any{&attempt, &created, &generation, &history, &summary}, prev.dest()...)...); err != nil {
		return driver.ClaimResult{}, true, driver.Unavailable("claim", err)
	}
	rec, ok := prev.record()
	if attempt != nil {
		// prev is the row the claim replaced (read under its lock): a
		// reclaim of an IN_PROGRESS claim, the resume of a WAITING
		// record, a record past retention; none: a new key.
		return driver.ClaimResult{Acquired: true, Reclaimed: ok && req.Reclaims(rec), Record: driver.Record{
			Key: req.Key, State: driver.StateInProgress, LeaseUntil: req.LeaseUntil, Token: req.Token,
			Attempt: int(*attempt), Fingerprint: req.Fingerprint, Summary: *summary, CreatedAt: created.UTC(),
			UpdatedAt: req.Now, ExpiresAt: req.ExpiresAt, Generation: int(*generation), History: driver.SplitHistory(*history),
		}}, true, nil
	}
	if !ok || req.Allows(rec) {
		// A concurrent first claim of the key won (it was absent when
		// this statement began): read the winner.
		rec, err = get(ctx, q, req.Key)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return driver.ClaimResult{}, true, driver.Unavailable("claim", err)
		}
		if err != nil || req.Allows(rec) {
			// Gone again, or the winner's lease has passed by this
			// claim's margin too: claim it (the state machine would).
			return driver.ClaimResult{}, false, nil
		}
	}
	return driver.ClaimResult{Record: rec}, true, nil
}

// maxStaleRetries bounds how often one call runs its statement again after
// finding that the row changed between the statement's snapshot and its
// row lock (READ COMMITTED): each time another writer won, so a few is
// plenty.
const maxStaleRetries = 8

// nullableRecord scans a left-joined record row.
type nullableRecord struct {
	key, state, token, fingerprint, status, detail, reopenReason, prevStatus, prevDetail, history, summary *string
	attempt, reopens, generation                                                                           *int32
	lease, created, updated, expires, reopened                                                             *time.Time
}

func (n *nullableRecord) dest() []any {
	return []any{&n.key, &n.state, &n.token, &n.fingerprint, &n.attempt, &n.lease, &n.created, &n.updated, &n.expires,
		&n.status, &n.detail, &n.reopens, &n.reopened, &n.reopenReason, &n.prevStatus, &n.prevDetail, &n.generation, &n.history, &n.summary}
}

func (n *nullableRecord) record() (driver.Record, bool) {
	if n.key == nil {
		return driver.Record{}, false
	}
	r := driver.Record{
		Key: *n.key, State: driver.State(*n.state), Token: *n.token, Fingerprint: *n.fingerprint,
		Attempt: int(*n.attempt), LeaseUntil: n.lease.UTC(), CreatedAt: n.created.UTC(), UpdatedAt: n.updated.UTC(),
		ExpiresAt: n.expires.UTC(), Status: *n.status, Detail: *n.detail, Reopens: int(*n.reopens),
		ReopenReason: *n.reopenReason, PrevStatus: *n.prevStatus, PrevDetail: *n.prevDetail,
		Generation: int(*n.generation), History: driver.SplitHistory(*n.history), Summary: *n.summary,
	}
	if n.reopened != nil {
		r.ReopenedAt = n.reopened.UTC()
	}
	return r, true
}

func scanRecord(row pgx.Row) (driver.Record, error) {
	var n nullableRecord
	if err := row.Scan(n.dest()...); err != nil {
		return driver.Record{}, err
	}
	r, _ := n.record()
	return r, nil
}

func (s *Store) get(ctx context.Context, key string) (driver.Record, error) {
	return get(ctx, s.db.pool, key)
}

func get(ctx context.Context, q querier, key string) (driver.Record, error) {
	return scanRecord(q.QueryRow(ctx, `select `+columns+` from idempotency_records where key = $1`, key))
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	rec, err := s.get(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
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

// finishSet is what a finish writes (finishSQL's and finishSettleSQL's
// update): the state, the result, the retention; for WAITING the
// not-before as the lease; the generation when $9 > 0, the history when
// $10.
//
// $3 state, $4 status, $5 detail, $6 now, $7 expires at, $8 not-before,
// $9 generation, $10 whether the history is replaced, $11 the history.
const finishSet = `state = $3, status = $4, detail = $5, updated_at = $6, expires_at = $7,
    lease_until = case when $3 = 'WAITING' then $8::timestamptz else lease_until end,
    generation = case when $9::integer > 0 then $9::integer else generation end,
    history = case when $10::boolean then $11::text else history end`

// finishSQL moves the record to its final state (or to WAITING) if we
// hold it, and reads it as it was, in one statement: a record already in
// the target state under our token is a retry that landed. $1 key, $2
// token, the rest as finishSet.
const finishSQL = `
with u as (
  update idempotency_records set ` + finishSet + `
  where key = $1 and state = 'IN_PROGRESS' and token = $2
  returning 1
)
select (select count(*) from u), (select state from idempotency_records where key = $1),
  (select token from idempotency_records where key = $1)`

// Finish implements driver.Store.
func (s *Store) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	var n int64
	var state, token *string
	err := s.db.pool.QueryRow(ctx, finishSQL, finishArgs(f)...).Scan(&n, &state, &token)
	switch {
	case err != nil:
		return driver.Unavailable("finish", err)
	case n == 1:
		return nil
	case state != nil && *state == string(f.State) && token != nil && *token == f.Token:
		return nil // a retry of a finish that landed
	}
	return driver.ErrLeaseLost
}

// finishArgs are finishSQL's arguments for f ($1 to $11).
func finishArgs(f driver.FinishRequest) []any {
	return []any{f.Key, f.Token, string(f.State), f.Status, f.Detail, f.Now, f.ExpiresAt, f.NotBefore,
		int32(f.Generation), f.History != nil, driver.JoinHistory(f.History)}
}

// Extend implements driver.Store.
func (s *Store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	tag, err := s.db.pool.Exec(ctx, `update idempotency_records set lease_until = $3, updated_at = $4
		where key = $1 and state = 'IN_PROGRESS' and token = $2`, req.Key, req.Token, req.LeaseUntil, req.Now)
	if err != nil {
		return driver.Unavailable("extend", err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

const reopenSQL = `
with u as (
  update idempotency_records set
    state = 'IN_PROGRESS', token = $2, lease_until = $6, updated_at = $3, expires_at = $4,
    prev_status = status, prev_detail = detail, status = '', detail = '',
    reopens = reopens + 1, reopened_at = $3, reopen_reason = $5,
    generation = case when $8::integer > 0 then $8::integer else generation end,
    history = case when $8::integer > 0 then $9::text else history end
  where key = $1 and state = 'FAILED' and expires_at > $3 and ($7::text = '' or token = $7::text)
  returning ` + columns + `
)
select true, u.* from u
union all
select false, ` + columns + ` from idempotency_records where key = $1 and not exists (select 1 from u)`

// Reopen implements driver.Store: one conditional UPDATE; when it
// matches nothing, the same statement returns the row to say why.
func (s *Store) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	if r.Key == "" || r.Token == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs key and token", driver.ErrInvalid)
	}
	for range maxStaleRetries {
		var done bool
		var n nullableRecord
		err := s.db.pool.QueryRow(ctx, reopenSQL, r.Key, r.Token, r.Now, r.ExpiresAt, r.Reason, r.LeaseUntil,
			r.PrevToken, int32(r.Generation), driver.JoinHistory(r.History)).
			Scan(append([]any{&done}, n.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return driver.Record{}, driver.ErrNotFound
		}
		if err != nil {
			return driver.Record{}, driver.Unavailable("reopen", err)
		}
		rec, _ := n.record()
		switch {
		case done:
			return rec, nil
		case rec.Expired(r.Now):
			return driver.Record{}, driver.ErrNotFound
		case r.Allows(rec):
			// The row in the statement's snapshot was reopenable, but a
			// concurrent write changed it before the update took its lock
			// (found by the linearizability check: the answer was "not
			// FAILED" with a FAILED record). Run it again on a new snapshot.
			continue
		}
		return rec, driver.ErrNotFailed
	}
	return driver.Record{}, driver.Unavailable("reopen", errors.New("the record kept changing under the reopen"))
}

// stuckCountSQL counts the claims past their lease ($1 now, $2 the
// internal keys' prefix); stuckSQL lists them, oldest lease first, $2 at
// most ($3 the prefix).
const (
	stuckCountSQL = `select count(*) from idempotency_records
		where state = 'IN_PROGRESS' and ` + openPredicate + ` and lease_until <= $1 and expires_at > $1 and left(key, 1) <> $2`
	stuckSQL = `select ` + columns + ` from idempotency_records
		where state = 'IN_PROGRESS' and ` + openPredicate + ` and lease_until <= $1 and expires_at > $1 and left(key, 1) <> $3
		order by lease_until limit $2`
)

// Stuck implements driver.StuckLister (by the partial index of the
// records not DONE-DEBITED, whose IN_PROGRESS ones are the claims under
// way: the rows it sorts by lease are those).
func (s *Store) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	var total int
	if err := s.db.pool.QueryRow(ctx, stuckCountSQL, now, driver.InternalKeyPrefix).Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := s.db.pool.Query(ctx, stuckSQL, now, limit, driver.InternalKeyPrefix)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, rec)
	}
	return out, total, rows.Err()
}

const amendSQL = `
with u as (
  update idempotency_records set status = $4, detail = $5, history = $6, updated_at = $7
  where key = $1 and state = 'DONE' and token = $2 and status = $3 and expires_at > $7
  returning ` + columns + `
)
select true, u.* from u
union all
select false, ` + columns + ` from idempotency_records where key = $1 and not exists (select 1 from u)`

// Amend implements driver.Amender: one conditional UPDATE; when it
// matches nothing, the same statement returns the row to say why.
func (s *Store) Amend(ctx context.Context, a driver.AmendRequest) (driver.Record, error) {
	var done bool
	var n nullableRecord
	err := s.db.pool.QueryRow(ctx, amendSQL, a.Key, a.Token, a.FromStatus, a.Status, a.Detail, driver.JoinHistory(a.History), a.Now).
		Scan(append([]any{&done}, n.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.Record{}, driver.ErrNotFound
	}
	if err != nil {
		return driver.Record{}, driver.Unavailable("amend", err)
	}
	rec, _ := n.record()
	switch {
	case done:
		return rec, nil
	case rec.Expired(a.Now):
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, driver.ErrStale
}

// collectSQL moves the very record read ($2 state, $3 token, $4
// generation; for IN_PROGRESS its lease passed by $5) to DONE under $6
// with $7 the posted generation, $8 status, $9 detail, $10 history, $11
// now and $12 its retention, in one conditional UPDATE; when it matches
// nothing, the same statement returns the row to say why.
const collectSQL = `
with u as (
  update idempotency_records set state = 'DONE', token = $6, generation = $7, status = $8, detail = $9, history = $10,
    updated_at = $11, expires_at = $12
  where key = $1 and state = $2 and token = $3 and greatest(generation, 1) = $4 and expires_at > $11
    and ($2 <> 'IN_PROGRESS' or lease_until <= $5)
  returning ` + columns + `
)
select true, u.* from u
union all
select false, ` + columns + ` from idempotency_records where key = $1 and not exists (select 1 from u)`

// Collect implements driver.Collector: one conditional UPDATE; when it
// matches nothing, the same statement returns the row to say why (or that
// the collect landed before: its answer lost).
func (s *Store) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	if !c.Valid() {
		return driver.Record{}, fmt.Errorf("%w: collect needs key, the token read, a new token, a state it collects from and the posted generation", driver.ErrInvalid)
	}
	for range maxStaleRetries {
		var done bool
		var n nullableRecord
		err := s.db.pool.QueryRow(ctx, collectSQL, c.Key, string(c.From), c.Token, int32(max(c.Generation, 1)), c.LeaseExpiredBy, c.NewToken,
			int32(c.PostedGeneration), c.Status, c.Detail, driver.JoinHistory(c.History), c.Now, c.ExpiresAt).
			Scan(append([]any{&done}, n.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return driver.Record{}, driver.ErrNotFound
		}
		if err != nil {
			return driver.Record{}, driver.Unavailable("collect", err)
		}
		rec, _ := n.record()
		switch {
		case done:
			return rec, nil
		case rec.Expired(c.Now):
			return driver.Record{}, driver.ErrNotFound
		case c.Landed(rec):
			return rec, nil
		case c.Allows(rec):
			// The row in the statement's snapshot was collectable, but a
			// concurrent write changed it before the update took its lock
			// (as for Reopen): run it again on a new snapshot.
			continue
		}
		return rec, driver.ErrStale
	}
	return driver.Record{}, driver.Unavailable("collect", errors.New("the record kept changing under the collect"))
}

// listByResultSQL lists the records in state $1 with status $2 live at
// $3, $4 at most, by the partial index (false) or for the bulk (true).
var listByResultSQL = map[bool]string{
	false: `select ` + columns + ` from idempotency_records
		where state = $1 and status = $2 and ` + openPredicate + ` and expires_at > $3 order by updated_at limit $4`,
	true: `select ` + columns + ` from idempotency_records
		where state = $1 and status = $2 and expires_at > $3 order by updated_at limit $4`,
}

// ListByResult implements driver.ResultLister: by the partial index of
// the records not DONE-DEBITED (the renotify scan's DONE with
// DEBITED_NOTIFICATION_FAILED among them); DONE-DEBITED itself, the
// bulk, is a scan.
func (s *Store) ListByResult(ctx context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	rows, err := s.db.pool.Query(ctx, listByResultSQL[bulk(state, status)], string(state), status, now, limit)
	if err != nil {
		return nil, driver.Unavailable("list", err)
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// purgeSQL deletes up to $2 records past retention at $1: the keys found
// first (by the expires_at index), then each deleted by the primary key —
// whatever plan PostgreSQL keeps for the statement ("key in (select …)"
// with a limit it cannot see in its generic plan reads the whole table).
const purgeSQL = `delete from idempotency_records where key = any(array(
		select key from idempotency_records where expires_at <= $1 limit $2 for update skip locked))`

// Purge implements driver.Purger: one small delete by the expires_at
// index per call.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	tag, err := s.db.pool.Exec(ctx, purgeSQL, now, limit)
	if err != nil {
		return 0, driver.Unavailable("purge", err)
	}
	return int(tag.RowsAffected()), nil
}

// Expired implements driver.Purger.
func (s *Store) Expired(ctx context.Context, now time.Time) (int, error) {
	var n int
	if err := s.db.pool.QueryRow(ctx, `select count(*) from idempotency_records where expires_at <= $1`, now).Scan(&n); err != nil {
		return 0, driver.Unavailable("expired", err)
	}
	return n, nil
}

// CountByState implements driver.StateCounter.
func (s *Store) CountByState(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	rows, err := s.db.pool.Query(ctx, `select state, count(*) from idempotency_records where expires_at > $1 and left(key, 1) <> $2 group by state`,
		now, driver.InternalKeyPrefix)
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

// bulk says whether records in state with status are the bulk, DONE
// with DEBITED, which no index but the primary key and expires_at's holds
// (migration 5); status "" is any status.
func bulk(state driver.State, status string) bool {
	return state == driver.StateDone && (status == "" || status == "DEBITED")
}

// listStateSQL is a page of ListState: state $1, keys after $2, from $3,
// live at $4, status $5 (empty: any), $6 at most, below $7 (the bounded
// statements only); by the partial index, or walking the primary key for
// the bulk. The prefix's end is a condition of the index scan (a page of a
// prefix with few records stops at its end, instead of reading on to the
// end of the index), so a prefix without one has a statement of its own.
var listStateSQL = map[listKind]string{}

// listKind says which listStateSQL a page needs.
type listKind struct{ bulk, bounded bool }

func init() {
	for _, bulk := range []bool{false, true} {
		for _, bounded := range []bool{false, true} {
			where := `state = $1 and key > $2 and key >= $3`
			if !bulk {
				where += ` and ` + openPredicate
			}
			if bounded {
				where += ` and key < $7`
			}
			listStateSQL[listKind{bulk, bounded}] = `select ` + columns + ` from idempotency_records
		where ` + where + ` and expires_at > $4 and ($5 = '' or status = $5)
		order by key limit $6`
		}
	}
}

// ListState implements driver.StateLister, keys in byte order (the key
// column is collated "C") whatever the database's collation, the prefix a
// key range (never a LIKE pattern), the cursor a key: DONE by walking the
// primary key (most records are DONE, so a page reads few others), every
// other state (and DONE with a status other than DEBITED) by the partial
// index on (state, key).
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	limit := req.PageLimit()
	end, bounded := driver.PrefixEnd(req.Prefix)
	args := []any{string(req.State), req.After, req.Prefix, req.Now, req.Status, limit + 1}
	if bounded {
		args = append(args, end)
	}
	rows, err := s.db.pool.Query(ctx, listStateSQL[listKind{bulk(req.State, req.Status), bounded}], args...)
	if err != nil {
		return driver.ListPage{}, driver.Unavailable("list", err)
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
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
