package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finedge/idempotent-consumer/queue"
)

// QueueOptions configure the PostgreSQL queue: queue.TableOptions, whose
// Name is required and PollInterval defaults to 50ms here.
type QueueOptions = queue.TableOptions

// Queue is a queue.Queue on the queue_messages table. Receipts are the
// message id plus its receive count, so a stale delivery cannot ack,
// extend or dead-letter a newer one; a dead-letter forward and its delete
// are one statement.
type Queue struct {
	db   *DB
	opts QueueOptions
	dlq  string

	sweepMu   sync.Mutex
	nextSweep time.Time

	settler settler // results written with their messages' settlement

	// wrapConn, in tests, stands between a claiming receive and its
	// connection.
	wrapConn func(batchSender) batchSender
}

var _ queue.Queue = (*Queue)(nil)

// NewQueue returns the queue named in opts on db.
func NewQueue(db *DB, opts QueueOptions) (*Queue, error) {
	if opts.Name == "" {
		return nil, fmt.Errorf("%w: queue needs a name", ErrConfig)
	}
	opts, err := opts.WithDefaults("", 50*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Queue{db: db, opts: opts, dlq: opts.Name + "-dlq"}, nil
}

func receipt(id int64, received int32) string {
	return strconv.FormatInt(id, 10) + "#" + strconv.Itoa(int(received))
}

func parseReceipt(r string) (int64, int32, error) {
	id, n, ok := strings.Cut(r, "#")
	i, err1 := strconv.ParseInt(id, 10, 64)
	c, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, queue.ErrStaleReceipt
	}
	return i, int32(c), nil
}

func encodeAttrs(attrs map[string]string) ([]byte, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	return json.Marshal(attrs)
}

// Send implements queue.Queue.
func (q *Queue) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	if err := queue.CheckOutgoing(body, attrs); err != nil {
		return "", fmt.Errorf("postgres: send: %w", err)
	}
	enc, err := encodeAttrs(attrs)
	if err != nil {
		return "", err
	}
	var id int64
	if err := q.db.pool.QueryRow(ctx, `insert into queue_messages (queue, body, attributes) values ($1, $2, $3) returning id`,
		q.opts.Name, body, enc).Scan(&id); err != nil {
		return "", fmt.Errorf("postgres: send: %w", err)
	}
	return strconv.FormatInt(id, 10), nil
}

// SendBatch implements queue.Queue: one INSERT for all of msgs.
func (q *Queue) SendBatch(ctx context.Context, msgs []queue.Outgoing) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := queue.CheckBatch(msgs); err != nil {
		return 0, fmt.Errorf("postgres: send batch: %w", err)
	}
	bodies := make([][]byte, len(msgs))
	attrs := make([][]byte, len(msgs))
	for i, m := range msgs {
		bodies[i] = m.Body
		enc, err := encodeAttrs(m.Attributes)
		if err != nil {
			return 0, err
		}
		attrs[i] = enc
	}
	if _, err := q.db.pool.Exec(ctx, `insert into queue_messages (queue, body, attributes)
		select $1, b, a from unnest($2::bytea[], $3::jsonb[]) as t(b, a)`, q.opts.Name, bodies, attrs); err != nil {
		return 0, fmt.Errorf("postgres: send batch: %w", err)
	}
	return len(msgs), nil
}

// receiveSQL takes up to $2 visible messages, oldest first, skipping rows
// another receiver has locked, and makes them invisible for $4.
const receiveSQL = `
with picked as (
  select id from queue_messages
  where queue = $1 and visible_at <= clock_timestamp() and received < $3
  order by visible_at, id
  limit $2
  for update skip locked
)
update queue_messages m set received = m.received + 1, visible_at = clock_timestamp() + $4 * interval '1 millisecond'
from picked where m.id = picked.id
returning m.id, case when octet_length(m.body) <= $5 then m.body end, octet_length(m.body), m.attributes, m.received, m.created_at`

// Receive implements queue.Queue, long polling up to WaitTime.
func (q *Queue) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	if max < 1 || max > queue.MaxReceive {
		return nil, fmt.Errorf("postgres: receive of %d messages (1-%d)", max, queue.MaxReceive)
	}
	return queue.Poll(ctx, q.opts.WaitTime, q.opts.PollInterval, func() ([]queue.Message, error) { return q.receiveOnce(ctx, max) })
}

func (q *Queue) receiveOnce(ctx context.Context, max int) ([]queue.Message, error) {
	if err := q.sweep(ctx); err != nil {
		return nil, fmt.Errorf("postgres: move exhausted messages to the DLQ: %w", err)
	}
	out, tooLarge, sizes, err := q.receiveIn(ctx, q.db.pool, max)
	if err != nil {
		return nil, fmt.Errorf("postgres: receive: %w", err)
	}
	if len(tooLarge) > 0 {
		// The receive's connection is back in the pool: this takes one of
		// its own. If it fails, the messages are visible again later and
		// moved then (or by the max-receive sweep, also unread).
		if b, err := q.tooLargeForwards(tooLarge, sizes); err == nil {
			_ = q.db.pool.SendBatch(ctx, b).Close()
		}
	}
	return out, nil
}

// rowsQuerier runs a query on the pool or in a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// receiveIn runs the receive statement on db: the messages to hand out,
// and apart those over the size limit (unread), with their sizes.
func (q *Queue) receiveIn(ctx context.Context, db rowsQuerier, max int) (out, tooLarge []queue.Message, sizes []int, err error) {
	rows, err := db.Query(ctx, receiveSQL, q.opts.Name, max, q.opts.MaxReceiveCount, q.opts.VisibilityTimeout.Milliseconds(), queue.MaxMessageBytes)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var received, size int32
		var attrs []byte
		m := queue.Message{}
		if err := rows.Scan(&id, &m.Body, &size, &attrs, &received, &m.SentAt); err != nil {
			return nil, nil, nil, err
		}
		m.Attributes = queue.DecodeAttributes(attrs) // never fails: a bad column is no reason to stop
		m.ID, m.ReceiveCount, m.Receipt, m.SentAt = strconv.FormatInt(id, 10), int(received), receipt(id, received), m.SentAt.UTC()
		if size > queue.MaxMessageBytes {
			tooLarge, sizes = append(tooLarge, m), append(sizes, int(size))
			continue
		}
		out = append(out, m)
	}
	return out, tooLarge, sizes, rows.Err()
}

// tooLargeForwards are the statements that move messages over the limit
// (written around Send) to the DLQ, each in one statement, body and all,
// never read into memory (nil for none). A receive runs them on the
// connection it holds.
func (q *Queue) tooLargeForwards(tooLarge []queue.Message, sizes []int) (*pgx.Batch, error) {
	if len(tooLarge) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	for i, m := range tooLarge {
		id, n, err := parseReceipt(m.Receipt)
		if err != nil {
			return nil, err
		}
		attrs, err := encodeAttrs(queue.DeadLetterAttributes(m, queue.TooLargeReason(sizes[i]), 0))
		if err != nil {
			return nil, err
		}
		b.Queue(deadLetterSQL, q.opts.Name, id, n, q.dlq, attrs)
	}
	return b, nil
}

// deadLetterSQL moves one delivery of a message to the DLQ: $1 queue, $2
// id, $3 receive count, $4 the DLQ, $5 the DLQ copy's attributes.
const deadLetterSQL = `with d as (
  delete from queue_messages where queue = $1 and id = $2 and received = $3 returning body)
insert into queue_messages (queue, body, attributes) select $4, body, $5 from d`

// sweepSQL moves messages received MaxReceiveCount times and visible again
// to the DLQ, as SQS's redrive policy does: delete and insert in one
// statement, without dead-letter attributes (they read as max_receives).
const sweepSQL = `
with moved as (
  delete from queue_messages where id in (
    select id from queue_messages
    where queue = $1 and received >= $2 and visible_at <= clock_timestamp()
    limit 100 for update skip locked)
  returning body, attributes
)
insert into queue_messages (queue, body, attributes) select $3, body, attributes from moved`

func (q *Queue) sweep(ctx context.Context) error {
	q.db.vac.maybe(q.db) // the queue table's dead rows (vacuum.go)
	q.sweepMu.Lock()
	if time.Now().Before(q.nextSweep) {
		q.sweepMu.Unlock()
		return nil
	}
	q.nextSweep = time.Now().Add(q.opts.SweepInterval)
	q.sweepMu.Unlock()
	_, err := q.db.pool.Exec(ctx, sweepSQL, q.opts.Name, q.opts.MaxReceiveCount, q.dlq)
	return err
}

// Ack implements queue.Queue: one DELETE for the batch, each row only if
// its receipt is the latest delivery.
func (q *Queue) Ack(ctx context.Context, msgs []queue.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) > queue.MaxReceive {
		return fmt.Errorf("postgres: ack of %d messages (at most %d)", len(msgs), queue.MaxReceive)
	}
	failed := map[string]error{}
	ids := make([]int64, 0, len(msgs))
	counts := make([]int32, 0, len(msgs))
	byID := map[int64]string{}
	for _, m := range msgs {
		id, n, err := parseReceipt(m.Receipt)
		if err != nil {
			failed[m.ID] = err
			continue
		}
		ids, counts = append(ids, id), append(counts, n)
		byID[id] = m.ID
	}
	rows, err := q.db.pool.Query(ctx, `delete from queue_messages m using unnest($2::bigint[], $3::int[]) as r(id, received)
		where m.queue = $1 and m.id = r.id and m.received = r.received returning m.id`, q.opts.Name, ids, counts)
	if err != nil {
		return fmt.Errorf("postgres: ack: %w", err)
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("postgres: ack: %w", err)
	}
	for _, id := range deleted {
		delete(byID, id)
	}
	for _, mid := range byID {
		failed[mid] = queue.ErrStaleReceipt
	}
	if len(failed) > 0 {
		return &queue.BatchError{Failed: failed}
	}
	return nil
}

// ChangeVisibility implements queue.Queue.
func (q *Queue) ChangeVisibility(ctx context.Context, m queue.Message, d time.Duration) error {
	id, n, err := parseReceipt(m.Receipt)
	if err != nil {
		return err
	}
	tag, err := q.db.pool.Exec(ctx, `update queue_messages set visible_at = clock_timestamp() + $4 * interval '1 millisecond'
		where queue = $1 and id = $2 and received = $3`, q.opts.Name, id, n, max(d, 0).Milliseconds())
	if err != nil {
		return fmt.Errorf("postgres: change visibility of %s: %w", m.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return queue.ErrStaleReceipt
	}
	return nil
}

// DeadLetter implements queue.Queue: the delete and the forward are one
// statement, so a message is never both on the DLQ and on the queue.
func (q *Queue) DeadLetter(ctx context.Context, m queue.Message, r queue.Reason) error {
	id, n, err := parseReceipt(m.Receipt)
	if err != nil {
		return err
	}
	attrs, err := encodeAttrs(queue.DeadLetterAttributes(m, r, 0))
	if err != nil {
		return err
	}
	tag, err := q.db.pool.Exec(ctx, deadLetterSQL, q.opts.Name, id, n, q.dlq, attrs)
	if err != nil {
		return fmt.Errorf("postgres: dead-letter %s: %w", m.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return queue.ErrStaleReceipt
	}
	return nil
}

// Depth implements queue.Queue.
func (q *Queue) Depth(ctx context.Context) (queue.Depth, error) {
	d := queue.Depth{OldestKnown: true}
	var ageMS float64
	err := q.db.pool.QueryRow(ctx, `select
		  count(*) filter (where queue = $1 and visible_at <= clock_timestamp()),
		  count(*) filter (where queue = $1 and visible_at > clock_timestamp()),
		  count(*) filter (where queue = $2),
		  coalesce(extract(epoch from clock_timestamp() - min(created_at) filter (where queue = $1 and not (received = 0 and visible_at > clock_timestamp()))) * 1000, 0)::float8
		from queue_messages where queue in ($1, $2)`, q.opts.Name, q.dlq).Scan(&d.Waiting, &d.InFlight, &d.DLQ, &ageMS)
	if err != nil {
		return d, fmt.Errorf("postgres: depth: %w", err)
	}
	d.OldestAge = time.Duration(max(ageMS, 0) * float64(time.Millisecond))
	return d, nil
}

// Ping implements queue.Queue.
func (q *Queue) Ping(ctx context.Context) error { return q.db.Ping(ctx) }

// Redrive implements queue.Queue (queue.Redrive over the DLQ, oldest
// first, 500 at a time; each move, delete from the DLQ and insert on the
// queue with the original attributes, is one statement).
func (q *Queue) Redrive(ctx context.Context, o queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, &dlqScan{q: q}, o)
}

// dlqScan pages through the DLQ by id.
type dlqScan struct {
	q      *Queue
	lastID int64
}

func (s *dlqScan) Next(ctx context.Context) ([]queue.DLQEntry, error) {
	rows, err := s.q.db.pool.Query(ctx, `select id, attributes, created_at, octet_length(body), case when octet_length(body) <= $3 then body end
		from queue_messages where queue = $1 and id > $2 order by id limit 500`, s.q.dlq, s.lastID, queue.MaxMessageBytes)
	if err != nil {
		return nil, fmt.Errorf("postgres: redrive: %w", err)
	}
	defer rows.Close()
	var page []queue.DLQEntry
	for rows.Next() {
		var (
			id    int64
			raw   []byte
			at    time.Time
			size  int
			body  []byte
			attrs map[string]string
		)
		if err := rows.Scan(&id, &raw, &at, &size, &body); err != nil {
			return nil, err
		}
		attrs = queue.DecodeAttributes(raw) // unreadable attributes read as the queue's own move
		e := queue.EntryOf(strconv.FormatInt(id, 10), body, attrs, at)
		if e.TooLarge = size > queue.MaxMessageBytes; e.TooLarge {
			e.Size = size
		}
		page = append(page, e)
		s.lastID = id
	}
	return page, rows.Err()
}

func (s *dlqScan) MoveBack(ctx context.Context, e queue.DLQEntry, attrs map[string]string) error {
	id, err := strconv.ParseInt(e.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("postgres: redrive %q: not an id of this queue", e.ID)
	}
	orig, err := encodeAttrs(attrs)
	if err != nil {
		return err
	}
	tag, err := s.q.db.pool.Exec(ctx, `with d as (delete from queue_messages where queue = $1 and id = $2 returning body)
		insert into queue_messages (queue, body, attributes) select $3, body, $4 from d`, s.q.dlq, id, s.q.opts.Name, orig)
	if err != nil {
		return fmt.Errorf("postgres: redrive %s: %w", e.ID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres: redrive %s: %w", e.ID, queue.ErrGone)
	}
	return nil
}

func (s *dlqScan) Close() {}

// Expire deletes up to limit messages past retention at now from the queue
// and up to limit from the DLQ.
func (q *Queue) Expire(ctx context.Context, now time.Time, limit int) (main, dlq int, err error) {
	del := func(name string, retention time.Duration) (int, error) {
		tag, err := q.db.pool.Exec(ctx, `delete from queue_messages where id in
			(select id from queue_messages where queue = $1 and created_at < $2 order by created_at limit $3 for update skip locked)`,
			name, now.Add(-retention), limit)
		return int(tag.RowsAffected()), err
	}
	if main, err = del(q.opts.Name, q.opts.Retention); err != nil {
		return 0, 0, fmt.Errorf("postgres: expire: %w", err)
	}
	if dlq, err = del(q.dlq, q.opts.DLQRetention); err != nil {
		return main, 0, fmt.Errorf("postgres: expire DLQ: %w", err)
	}
	return main, dlq, nil
}

// Expired counts the messages past retention at now on the queue and the DLQ.
func (q *Queue) Expired(ctx context.Context, now time.Time) (main, dlq int, err error) {
	err = q.db.pool.QueryRow(ctx, `select
		  count(*) filter (where queue = $1 and created_at < $2), count(*) filter (where queue = $3 and created_at < $4)
		from queue_messages where queue in ($1, $3)`,
		q.opts.Name, now.Add(-q.opts.Retention), q.dlq, now.Add(-q.opts.DLQRetention)).Scan(&main, &dlq)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: expired: %w", err)
	}
	return main, dlq, nil
}

var _ queue.DLQPurger = (*Queue)(nil)

// PurgeDLQ implements queue.DLQPurger: one DELETE of the DLQ rows with
// these ids.
func (q *Queue) PurgeDLQ(ctx context.Context, ids []string) ([]string, error) {
	nums := make([]int64, 0, len(ids))
	for _, id := range ids {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			continue // not an id of this queue: on no DLQ
		}
		nums = append(nums, n)
	}
	rows, err := q.db.pool.Query(ctx, `delete from queue_messages where queue = $1 and id = any($2::bigint[]) returning id`, q.dlq, nums)
	if err != nil {
		return nil, fmt.Errorf("postgres: purge DLQ entries: %w", err)
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("postgres: purge DLQ entries: %w", err)
	}
	out := make([]string, len(deleted))
	for i, id := range deleted {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out, nil
}
