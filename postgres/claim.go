package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

var _ queue.ClaimingReceiver = (*Queue)(nil)

// Holds implements queue.ClaimingReceiver: s is a Store on this queue's
// database (the same pool).
func (q *Queue) Holds(s driver.Store) bool {
	st, ok := s.(*Store)
	return ok && st.db == q.db
}

// ReceiveClaiming implements queue.ClaimingReceiver: the receive and every
// claim (claimIn, the store's own statement) are one transaction, and each
// message's result is written in one statement with its delete or
// dead-letter, committed in groups (settler).
func (q *Queue) ReceiveClaiming(ctx context.Context, max int, p queue.ClaimPolicy) ([]queue.Message, error) {
	if err := p.Check(max); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return queue.Poll(ctx, q.opts.WaitTime, q.opts.PollInterval, func() ([]queue.Message, error) { return q.receiveClaimingOnce(ctx, max, p) })
}

// receiveClaimingOnce is two round trips on one connection: "begin" with
// the receive, then every claim with the "commit" (one fsync); a claim
// that needs the record read again (its snapshot predated a concurrent
// winner) is left out, and the Guard claims that message itself. It holds
// one pooled connection and needs no other meanwhile: messages over the
// size limit are moved to the DLQ in the same transaction. It has a
// deadline of its own (receiveTimeout), so a receive never waits forever
// for a connection or a lock.
func (q *Queue) receiveClaimingOnce(ctx context.Context, max int, p queue.ClaimPolicy) ([]queue.Message, error) {
	if err := q.sweep(ctx); err != nil {
		return nil, fmt.Errorf("postgres: move exhausted messages to the DLQ: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, receiveTimeout)
	defer cancel()
	pc, err := q.db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: receive: %w", err)
	}
	defer pc.Release() // a connection left in a transaction is closed, not reused
	var conn batchSender = pc
	if q.wrapConn != nil {
		conn = q.wrapConn(conn)
	}
	receive := &pgx.Batch{}
	receive.Queue("begin")
	receive.Queue(receiveSQL, q.opts.Name, max, q.opts.MaxReceiveCount, q.opts.VisibilityTimeout.Milliseconds(), queue.MaxMessageBytes)
	br := conn.SendBatch(ctx, receive)
	_, err = br.Exec()
	var out, tooLarge []queue.Message
	var sizes []int
	if err == nil {
		out, tooLarge, sizes, err = q.receiveIn(ctx, batchRows{br}, max)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var forwards *pgx.Batch
	if err == nil {
		// Over the limit: moved to the DLQ unread in this transaction, on
		// this connection — never through the pool while holding it.
		forwards, err = q.tooLargeForwards(tooLarge, sizes)
	}
	if err != nil {
		_, _ = pc.Exec(context.WithoutCancel(ctx), "rollback")
		return nil, fmt.Errorf("postgres: receive: %w", err)
	}
	claims := p.Claims(out)
	if err := q.claimAll(ctx, conn, out, claims, p, forwards); err != nil {
		_, _ = pc.Exec(context.WithoutCancel(ctx), "rollback")
		// The commit was sent: it may have landed though the answer was
		// lost (a deadline, a connection cut at shutdown). Its claims are
		// given back and its messages made visible, so that the next
		// delivery claims at once instead of waiting out the lease and
		// the visibility; if it did not land, both find nothing to do.
		q.giveBack(ctx, out, claims)
		return nil, fmt.Errorf("postgres: receive: %w", err)
	}
	return out, nil
}

// receiveTimeout bounds one receive's round trips (the connection, the
// row locks, the commit).
const receiveTimeout = 30 * time.Second

// giveBack undoes what a receive whose answer was lost may have done:
// each claim's lease is set to have passed (as Guard.Yield does) and, for
// a claim that was there to give back, its message made visible again, in
// statements of their own.
func (q *Queue) giveBack(ctx context.Context, msgs []queue.Message, claims []queue.PendingClaim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	store := &Store{db: q.db}
	for _, c := range claims {
		err := store.Extend(ctx, driver.ExtendRequest{Key: c.Req.Key, Token: c.Req.Token, LeaseUntil: c.Req.LeaseExpiredBy, Now: c.Req.Now})
		if err == nil {
			// The claim's token is this receive's own: the commit landed,
			// so the receipt is this delivery's too (had it not landed,
			// another receive could hold a delivery with the same one).
			_ = q.ChangeVisibility(ctx, msgs[c.Index], 0)
		}
	}
}

// batchRows reads the next result of a batch as a query's rows.
type batchRows struct{ br pgx.BatchResults }

func (b batchRows) Query(context.Context, string, ...any) (pgx.Rows, error) { return b.br.Query() }

// claimAll writes the claims of msgs and commits, in one round trip on
// conn (in the receive's transaction), in key order (every claiming
// transaction takes the records' row locks in that order, so that two
// receivers never wait for each other), and binds each message to its
// claim. Two copies of one charge in one batch: the second sees the
// first's claim. A claim whose answer needs the record read again is not
// bound (the Guard claims that message with a store call).
func (q *Queue) claimAll(ctx context.Context, conn batchSender, msgs []queue.Message, claims []queue.PendingClaim, p queue.ClaimPolicy, forwards *pgx.Batch) error {
	batch := &pgx.Batch{}
	var moves []*pgx.QueuedQuery
	if forwards != nil {
		moves = forwards.QueuedQueries
		batch.QueuedQueries = append(batch.QueuedQueries, moves...)
	}
	for _, c := range claims {
		batch.Queue(claimSQL, claimArgs(c.Req)...)
	}
	batch.Queue("commit")
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	for range moves {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("move a message over the size limit to the DLQ: %w", err)
		}
	}
	results := make([]driver.ClaimResult, len(claims))
	bind := make([]bool, len(claims))
	for i, c := range claims {
		res, done, err := claimed(ctx, noReread{}, c.Req, br.QueryRow())
		if errors.Is(err, errReread) {
			continue // left to the Guard
		}
		if err != nil {
			return fmt.Errorf("claim %s: %w", c.Req.Key, err)
		}
		results[i], bind[i] = res, done
	}
	tag, err := br.Exec()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("commit: the transaction was rolled back (%s)", tag)
	}
	if err := br.Close(); err != nil {
		return err
	}
	for i, c := range claims {
		if bind[i] {
			m := msgs[c.Index]
			msgs[c.Index].Bound = &bound{ClaimedAtReceive: driver.NewClaimedAtReceive(&Store{db: q.db}, c.Req, results[i]), q: q, p: p, m: m,
				margin: queue.SkewMarginOf(c.Req)}
		}
	}
	return nil
}

// batchSender sends a batch on one connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// errReread: a claim's answer needs the record read again, which cannot
// happen inside the batch (noReread).
var errReread = errors.New("postgres: read the record again")

// noReread is the querier of a claim answer read from a batch: it cannot
// read again meanwhile, and says so.
type noReread struct{}

func (noReread) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{errReread} }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// bound is a message received with its claim (driver.Bound): the claim
// as every store keeps it, and this queue's Finish.
type bound struct {
	*driver.ClaimedAtReceive
	q *Queue
	p queue.ClaimPolicy
	m queue.Message // as received, without its Bound
	// margin is the claim's skew margin: a WAITING record is claimable
	// that long after its not-before.
	margin time.Duration
}

// Finish writes the result with the message's delete or dead-letter in one
// statement (finishSettleSQL) — for WAITING, with the message kept but
// hidden until the record is due and its receive count reset
// (waitSettleSQL) — committed together with the other handlers' waiting at
// that moment (settler).
func (b *bound) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	id, n, err := parseReceipt(b.m.Receipt)
	if err != nil {
		return fmt.Errorf("%w: %v", driver.ErrInvalid, err)
	}
	r := &settleReq{f: f, id: id, received: n, done: make(chan struct{})}
	if f.State == driver.StateWaiting {
		r.wait, r.hiddenFor = true, queue.WaitVisibility(f, b.margin)
	} else if deadLetter, reason := b.p.Settlement(f); deadLetter {
		if r.attrs, err = encodeAttrs(queue.DeadLetterAttributes(b.m, reason, 0)); err != nil {
			return err
		}
		r.dlq = b.q.dlq
	}
	if err := b.q.settler.do(ctx, b.q, r); err != nil {
		return driver.Unavailable("finish", err)
	}
	if !r.ok {
		return driver.ErrLeaseLost
	}
	if r.settled {
		b.SetSettled()
	}
	return nil
}

// finishSettleSQL is the store's finish (finishSQL's update) and, only
// when it moved the record, the delete of this delivery of the message —
// and for a dead-letter, its copy to the DLQ — in one statement. When it
// moved nothing (a retry of a finish that landed, or a lease lost: rare),
// landedSettleSQL says which, and settles the message for the former.
//
// $1 key, $2 token, $3–$11 as finishSet, $12 queue, $13 message id, $14
// receive count, $15 the DLQ (empty: delete only), $16 the DLQ copy's
// attributes.
const finishSettleSQL = `
with u as (
  update idempotency_records set ` + finishSet + `
  where key = $1 and state = 'IN_PROGRESS' and token = $2
  returning 1
), d as (
  delete from queue_messages
  where queue = $12 and id = $13 and received = $14 and exists (select 1 from u)
  returning body
), f as (
  insert into queue_messages (queue, body, attributes) select $15::text, body, $16::jsonb from d where $15::text <> ''
)
select (select count(*) from u), (select count(*) from d)`

// holdSet keeps a message of a WAITING record hidden until the record is
// due (hidden, the parameter of how many milliseconds from now) with its
// receive count reset to 0, so that a wait never moves it toward the DLQ.
// A message already at 0 (nobody received it since this delivery's own
// wait landed) keeps its time. The wait restarts the message's retention
// (created_at), from when it is due (as a copy sent then would be on SQS),
// so that a wait longer than the queue's retention (a 14-day notice lead)
// does not lose the charge to the sweep while it is held.
func holdSet(hidden string) string {
	due := `clock_timestamp() + ` + hidden + `::bigint * interval '1 millisecond'`
	return `visible_at = case when received = 0 then visible_at else ` + due + ` end,
    created_at = case when received = 0 then created_at else ` + due + ` end,
    received = 0`
}

// waitSettleSQL is finishSettleSQL for WAITING: the finish and, only when
// it moved the record, the message held (holdSet) if the receipt is its
// latest delivery. $1–$14 as finishSettleSQL, $15 how long the message
// stays hidden (ms).
var waitSettleSQL = `
with u as (
  update idempotency_records set ` + finishSet + `
  where key = $1 and state = 'IN_PROGRESS' and token = $2
  returning 1
), h as (
  update queue_messages set ` + holdSet("$15") + `
  where queue = $12 and id = $13 and received in ($14, 0) and exists (select 1 from u)
  returning 1
)
select (select count(*) from u), (select count(*) from h)`

// landedSettleSQL settles the message if the record is already in the
// final state under the token (a finish that landed), and says whether it
// is: $1 key, $2 token, $3 state, $4 queue, $5 message id, $6 receive
// count, $7 the DLQ (empty: delete only), $8 the DLQ copy's attributes.
const landedSettleSQL = `
with cur as (
  select 1 from idempotency_records where key = $1 and state = $3 and token = $2
), d as (
  delete from queue_messages
  where queue = $4 and id = $5 and received = $6 and exists (select 1 from cur)
  returning body
), f as (
  insert into queue_messages (queue, body, attributes) select $7::text, body, $8::jsonb from d where $7::text <> ''
)
select (select count(*) from cur), (select count(*) from d)`

// landedWaitSQL is landedSettleSQL for WAITING: the message held
// (holdSet) if the wait landed. $1–$6 as landedSettleSQL, $7 how long the
// message stays hidden (ms).
var landedWaitSQL = `
with cur as (
  select 1 from idempotency_records where key = $1 and state = $3 and token = $2
), h as (
  update queue_messages set ` + holdSet("$7") + `
  where queue = $4 and id = $5 and received in ($6, 0) and exists (select 1 from cur)
  returning 1
)
select (select count(*) from cur), (select count(*) from h)`

// settleReq is one result to write with its message's settlement.
type settleReq struct {
	f        driver.FinishRequest
	id       int64
	received int32
	dlq      string
	attrs    []byte
	// wait: f is to WAITING; the message is held, hidden for hiddenFor.
	wait        bool
	hiddenFor   time.Duration
	ok, settled bool
	err         error
	done        chan struct{}
}

// settler commits waiting results in groups: one round trip and one commit
// for every result that waited while the previous group committed (a batch
// of statements is one implicit transaction), as the SQLite writer does.
// Statements run in key order, like the claims, so that two processes'
// groups never wait for each other. No goroutine is left when idle.
type settler struct {
	mu      sync.Mutex
	pending []*settleReq
	running bool
	hold    chan struct{} // tests: a group waits for it before it forms
}

// maxSettleBatch bounds one group.
const maxSettleBatch = 64

func (s *settler) do(ctx context.Context, q *Queue, r *settleReq) error {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	if !s.running {
		s.running = true
		go s.loop(q)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// The group may still commit it: its outcome is unknown, as for a
		// lost answer; the Guard's retry finds it landed or not.
		return ctx.Err()
	}
}

func (s *settler) loop(q *Queue) {
	for {
		if s.hold != nil {
			<-s.hold
		}
		s.mu.Lock()
		n := min(len(s.pending), maxSettleBatch)
		if n == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		group := slices.Clone(s.pending[:n])
		s.pending = slices.Delete(s.pending, 0, n)
		s.mu.Unlock()
		q.settleGroup(group)
	}
}

// settleGroup runs a group in one batch: one implicit transaction. It
// locks the group's messages first, then writes each result (its record)
// with its message's delete: messages before records, the order a
// claiming receive takes them in (it skips locked messages, then claims
// the records), so that a receive that re-received a message of the group
// never holds that message while waiting on a record the group holds. If
// the batch fails as a whole anyway (PostgreSQL aborted it, or one
// member's statement failed), each member is tried again alone, in a
// transaction of its own, and gets its own answer: one member never fails
// the others, and a retry never repeats the whole group blindly.
func (q *Queue) settleGroup(group []*settleReq) {
	slices.SortStableFunc(group, func(a, b *settleReq) int { return cmp.Compare(a.f.Key, b.f.Key) })
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	results, err := q.runSettles(ctx, group)
	for i, r := range group {
		res := results[i]
		switch {
		case err != nil && len(group) > 1:
			// A member that landed before its group failed (an answer
			// lost) reads as landed when tried alone.
			var alone []settleResult
			if alone, r.err = q.runSettles(ctx, group[i:i+1]); r.err == nil {
				res = alone[0]
			}
		case err != nil:
			r.err = err
		}
		if r.err == nil && res.n == 0 {
			// Nothing moved: landed before, or the lease is lost.
			res.n, res.d, r.err = q.landed(ctx, r)
		}
		r.ok, r.settled = res.n == 1, res.d == 1
		close(r.done)
	}
}

type settleResult struct{ n, d int64 }

// lockMessagesSQL locks the messages of a settle group, in id order.
const lockMessagesSQL = `select id from queue_messages where queue = $1 and id = any($2::bigint[]) order by id for update`

// runSettles writes group's results with their settlements in one batch
// (one transaction): the messages' locks, then each finishSettleSQL.
func (q *Queue) runSettles(ctx context.Context, group []*settleReq) ([]settleResult, error) {
	ids := make([]int64, len(group))
	for i, r := range group {
		ids[i] = r.id
	}
	batch := &pgx.Batch{}
	batch.Queue(lockMessagesSQL, q.opts.Name, ids)
	for _, r := range group {
		if r.wait {
			batch.Queue(waitSettleSQL, settleArgs(q, r)...)
		} else {
			batch.Queue(finishSettleSQL, settleArgs(q, r)...)
		}
	}
	br := q.db.pool.SendBatch(ctx, batch)
	results := make([]settleResult, len(group))
	_, err := br.Exec()
	for i := range group {
		if err != nil {
			break
		}
		err = br.QueryRow().Scan(&results[i].n, &results[i].d)
	}
	if cerr := br.Close(); err == nil {
		err = cerr // the commit
	}
	return results, err
}

// landed settles r's message if its finish landed before, and says
// whether it had (landedSettleSQL).
func (q *Queue) landed(ctx context.Context, r *settleReq) (n, d int64, err error) {
	if r.wait {
		err = q.db.pool.QueryRow(ctx, landedWaitSQL, r.f.Key, r.f.Token, string(r.f.State),
			q.opts.Name, r.id, r.received, r.hiddenFor.Milliseconds()).Scan(&n, &d)
		return n, d, err
	}
	err = q.db.pool.QueryRow(ctx, landedSettleSQL, r.f.Key, r.f.Token, string(r.f.State),
		q.opts.Name, r.id, r.received, r.dlq, r.attrs).Scan(&n, &d)
	return n, d, err
}

// settleArgs are finishSettleSQL's arguments for r (waitSettleSQL's, for
// a wait).
func settleArgs(q *Queue, r *settleReq) []any {
	args := append(finishArgs(r.f), q.opts.Name, r.id, r.received)
	if r.wait {
		return append(args, r.hiddenFor.Milliseconds())
	}
	return append(args, r.dlq, r.attrs)
}

// settleTimeout bounds one group's round trip and commit.
const settleTimeout = 10 * time.Second
