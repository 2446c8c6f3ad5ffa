package postgres

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueueVacuumThreshold is how many dead rows queue_messages may
// hold before a process receiving from it vacuums it (Options).
const DefaultQueueVacuumThreshold = 10_000

// queueVacuumCheckEvery is how often a receiving process reads the queue
// table's dead-row count (one small statistics query).
const queueVacuumCheckEvery = time.Second

// queueVacuumMaxBackoff is the longest time between checks after VACUUMs
// that could not bring the dead rows under the threshold.
const queueVacuumMaxBackoff = time.Minute

// queueVacuumTimeout bounds one VACUUM of the queue table.
const queueVacuumTimeout = 5 * time.Minute

// queueVacuumSQL reclaims the queue table's dead rows. SKIP_LOCKED: a
// VACUUM another process (or autovacuum) runs already is left to it
// rather than waited for. TRUNCATE false: it never takes the ACCESS
// EXCLUSIVE lock that giving empty pages back to the file system needs,
// so receives never wait for it; the space is reused by later sends.
const queueVacuumSQL = `vacuum (skip_locked, truncate false) queue_messages`

// queueDeadSQL reads the queue table's dead rows (the statistics
// PostgreSQL keeps, as autovacuum does) and whether this role may vacuum
// it (VACUUM needs the table's owner; for another role it only warns).
const queueDeadSQL = `select coalesce(s.n_dead_tup, 0), pg_has_role(c.relowner, 'USAGE')
  from pg_class c left join pg_stat_user_tables s on s.relid = c.oid
  where c.oid = 'queue_messages'::regclass`

// vacuumer vacuums the queue table from a receiving process once its dead
// rows pass threshold: every message is inserted, updated at each receive
// (visible_at is indexed, so never a HOT update) and deleted, and without
// autovacuum (off, or not eager enough at month-end) the dead rows and
// their index entries pile up until every receive walks them. One VACUUM
// at a time per process, in the background: a receive only starts it.
type vacuumer struct {
	threshold int64         // <= 0: never
	every     time.Duration // between checks (queueVacuumCheckEvery)
	log       *slog.Logger  // failures (Options.Logger)

	mu        sync.Mutex
	nextCheck time.Time
	// backoff, when positive, replaces every: the last VACUUM left the
	// dead rows over the threshold (a transaction older than their deletes
	// still runs, so none could be removed), and scanning the table again
	// every second would only cost I/O; or the last check or VACUUM failed.
	// Doubled each time up to queueVacuumMaxBackoff, cleared by a VACUUM
	// that works.
	backoff time.Duration

	running  atomic.Bool
	notOwner atomic.Bool  // this role may not vacuum the table: never tried again
	runs     atomic.Int64 // VACUUMs this process ran
	lastErr  atomic.Value // error of the last check or VACUUM (tests)
	wg       sync.WaitGroup
	// ctx is cancelled by stop (DB.Close): a VACUUM under way is ended
	// rather than waited out, and none starts afterwards.
	ctx  context.Context
	stop context.CancelFunc
}

func newVacuumer(threshold int, log *slog.Logger) *vacuumer {
	switch {
	case threshold == 0:
		threshold = DefaultQueueVacuumThreshold
	case threshold < 0:
		threshold = 0
	}
	ctx, stop := context.WithCancel(context.Background())
	return &vacuumer{threshold: int64(threshold), every: queueVacuumCheckEvery, log: log, ctx: ctx, stop: stop}
}

// maybe starts a check (and, past the threshold, a VACUUM) of the queue
// table in the background, at most once every queueVacuumCheckEvery and
// never while one runs.
func (v *vacuumer) maybe(db *DB) {
	if v == nil || v.threshold <= 0 || v.notOwner.Load() || v.running.Load() || v.ctx.Err() != nil {
		return
	}
	v.mu.Lock()
	now := time.Now()
	if now.Before(v.nextCheck) || v.ctx.Err() != nil || !v.running.CompareAndSwap(false, true) {
		v.mu.Unlock()
		return
	}
	v.nextCheck = now.Add(max(v.every, v.backoff))
	v.wg.Add(1) // under mu: close, once it has stopped, waits for every one added
	v.mu.Unlock()
	go func() {
		defer v.wg.Done()
		defer v.running.Store(false)
		ctx, cancel := context.WithTimeout(v.ctx, queueVacuumTimeout)
		defer cancel()
		err := v.run(ctx, db)
		if err != nil && v.ctx.Err() == nil {
			// A VACUUM that failed (a statement_timeout shorter than it, an
			// outage) is not started again at once: checks back off as
			// after one that removed nothing.
			v.mu.Lock()
			v.backoff = min(max(2*v.backoff, 2*v.every), queueVacuumMaxBackoff)
			v.nextCheck = time.Now().Add(v.backoff)
			next := v.backoff
			v.mu.Unlock()
			v.log.Warn("postgres: vacuuming the queue table failed; its dead rows pile up until a VACUUM succeeds (docs/operations/postgres.md)",
				"err", err, "next_try_in", next.String())
		}
		v.lastErr.Store(errBox{err})
	}()
}

// errBox lets a nil error be stored in an atomic.Value.
type errBox struct{ err error }

func (v *vacuumer) run(ctx context.Context, db *DB) error {
	var dead int64
	var owner bool
	if err := db.pool.QueryRow(ctx, queueDeadSQL).Scan(&dead, &owner); err != nil {
		return err
	}
	if !owner {
		v.notOwner.Store(true) // autovacuum's job (docs/operations/postgres.md)
		return nil
	}
	if dead < v.threshold {
		return nil
	}
	if _, err := db.pool.Exec(ctx, queueVacuumSQL); err != nil {
		return err
	}
	v.runs.Add(1)
	// The VACUUM's report counts the dead rows it could not remove yet.
	if err := db.pool.QueryRow(ctx, queueDeadSQL).Scan(&dead, &owner); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if dead < v.threshold {
		v.backoff = 0
		return nil
	}
	v.backoff = min(max(2*v.backoff, 2*v.every), queueVacuumMaxBackoff)
	v.nextCheck = time.Now().Add(v.backoff)
	return nil
}

// wait waits for a VACUUM under way (Close, tests).
func (v *vacuumer) wait() {
	if v != nil {
		v.wg.Wait()
	}
}

// close ends a VACUUM under way, starts no other, and waits for its
// goroutine (DB.Close, before the pool closes: the pool would otherwise
// wait for the VACUUM's connection).
func (v *vacuumer) close() {
	if v != nil {
		v.mu.Lock()
		v.stop()
		v.mu.Unlock()
		v.wg.Wait()
	}
}
