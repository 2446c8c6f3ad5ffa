package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"maragu.dev/goqite"

	"github.com/finedge/idempotent-consumer/queue"
)

// timeFormat is goqite's timestamp format (UTC, millisecond precision).
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// QueueOptions configure the embedded queue: queue.TableOptions, whose
// Name defaults to "charges" and PollInterval to 25ms here.
type QueueOptions = queue.TableOptions

// The default message retentions.
const (
	DefaultRetention    = queue.DefaultRetention
	DefaultDLQRetention = queue.DefaultDLQRetention
)

// Queue is a queue.Queue on goqite: a queue and its DLQ in the SQLite
// file. A batch receive, a batch ack and a dead-letter forward are each one
// transaction. Receipts are the message id plus its receive count, so a
// stale delivery cannot ack, extend or dead-letter a newer one.
type Queue struct {
	db   *DB
	q    *goqite.Queue
	dlq  *goqite.Queue
	opts QueueOptions

	sweepMu   sync.Mutex
	nextSweep time.Time
}

var _ queue.Queue = (*Queue)(nil)

// DLQEntry is a dead-lettered message: the original body and attributes
// plus why (the DLQ holds it as JSON).
type DLQEntry struct {
	Body       []byte            `json:"body"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Code       queue.Code        `json:"code,omitempty"`
	// Detail is the reason's text. Entries written before codes existed
	// hold "code: detail" here and no Code (see Reason).
	Detail       string    `json:"reason"`
	SourceID     string    `json:"sourceMessageId"`
	ReceiveCount int       `json:"receiveCount"`
	At           time.Time `json:"at"`
	// TooLarge: the body is over queue.MaxMessageBytes and was not read
	// (Body is nil); such an entry cannot be redriven. Size is its body's
	// length then.
	TooLarge bool `json:"-"`
	Size     int  `json:"-"`
}

// Reason is why the entry was dead-lettered.
func (e DLQEntry) Reason() queue.Reason { return queue.StoredReason(e.Code, e.Detail) }

// NewQueue returns the queue named in opts on db (from Open).
func NewQueue(db *DB, opts QueueOptions) (*Queue, error) {
	opts, err := opts.WithDefaults("charges", 25*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return &Queue{
		db:   db,
		q:    goqite.New(goqite.NewOpts{DB: db.sql, Name: opts.Name, MaxReceive: opts.MaxReceiveCount, Timeout: opts.VisibilityTimeout}),
		dlq:  goqite.New(goqite.NewOpts{DB: db.sql, Name: opts.Name + "-dlq", MaxReceive: 1 << 30, Timeout: opts.VisibilityTimeout}),
		opts: opts,
	}, nil
}

// Send implements queue.Queue.
func (q *Queue) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	var id string
	err := q.db.write1(ctx, func(tx *wtx) error {
		var err error
		id, err = q.insert(ctx, tx, q.opts.Name, body, attrs)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("sqlite: send: %w", err)
	}
	return id, nil
}

const sendSQL = `insert into goqite (id, queue, body, attributes) values (?, ?, ?, ?)`

// newID is a message id in goqite's shape ("m_" and 32 hex digits) that
// sorts by time: the send time in nanoseconds, then 64 random bits (unique
// across processes on one file). goqite's default is 128 random bits, which
// puts every insert and delete on a random page of the id index, so that a
// group commit writes many more pages to the WAL.
func newID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint64(b[8:], rand.Uint64())
	return "m_" + hex.EncodeToString(b[:])
}

// insert puts one message on the named queue (goqite's row, plus our
// attributes column).
func (q *Queue) insert(ctx context.Context, tx *wtx, name string, body []byte, attrs map[string]string) (string, error) {
	if err := queue.CheckOutgoing(body, attrs); err != nil {
		return "", err
	}
	var enc any // null without attributes
	if len(attrs) > 0 {
		b, err := json.Marshal(attrs)
		if err != nil {
			return "", err
		}
		enc = string(b)
	}
	id := newID()
	_, err := tx.Exec(ctx, sendSQL, id, name, body, enc)
	return id, err
}

// SendBatch implements queue.Queue: one transaction for all of msgs.
func (q *Queue) SendBatch(ctx context.Context, msgs []queue.Outgoing) (int, error) {
	err := q.db.write(ctx, func(tx *wtx) error {
		for _, m := range msgs {
			if _, err := q.insert(ctx, tx, q.opts.Name, m.Body, m.Attributes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: send batch: %w", err)
	}
	return len(msgs), nil
}

// Ping implements queue.Queue.
func (q *Queue) Ping(ctx context.Context) error { return q.db.Ping(ctx) }

func receipt(id string, received int) string { return id + "#" + strconv.Itoa(received) }

func parseReceipt(r string) (string, int, error) {
	id, n, ok := strings.Cut(r, "#")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || id == "" {
		return "", 0, queue.ErrStaleReceipt
	}
	return id, count, nil
}

// Receive implements consumer.Source: up to max messages in one
// transaction, long polling up to WaitTime when none is ready.
func (q *Queue) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	if max < 1 || max > 10 {
		return nil, fmt.Errorf("sqlite: receive of %d messages (1-10)", max)
	}
	return queue.Poll(ctx, q.opts.WaitTime, q.opts.PollInterval, func() ([]queue.Message, error) { return q.receiveOnce(ctx, max, nil) })
}

// receiveOnce receives up to max messages in one write transaction; with a
// claim policy, the claims of their keys are written in it too.
func (q *Queue) receiveOnce(ctx context.Context, max int, p *queue.ClaimPolicy) ([]queue.Message, error) {
	if err := q.sweep(ctx); err != nil {
		return nil, fmt.Errorf("sqlite: redrive exhausted messages: %w", err)
	}
	// One statement for the whole batch: the same selection and update as
	// goqite's ReceiveTx (oldest visible first, under the max receive
	// count), for up to max messages at once, returning what the receipt
	// and the runtime need.
	var out []queue.Message
	now := time.Now().UTC()
	write := q.db.write1 // one statement (plus the rare unread forward)
	if p != nil {
		write = q.db.write // the claims too: all or nothing
	}
	err := write(ctx, func(tx *wtx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, receiveSQL, now.Add(q.opts.VisibilityTimeout).Format(timeFormat),
			q.opts.Name, now.Format(timeFormat), q.opts.MaxReceiveCount, max, queue.MaxMessageBytes)
		if err != nil {
			return err
		}
		defer rows.Close()
		var tooLarge []queue.Message
		var sizes []int
		for rows.Next() {
			var m queue.Message
			var created string
			var attrs sql.NullString
			var size int
			if err := rows.Scan(&m.ID, &m.Body, &size, &m.ReceiveCount, &created, &attrs); err != nil {
				return err
			}
			if size > queue.MaxMessageBytes {
				// Written around Send: moved to the DLQ below, unread.
				tooLarge, sizes = append(tooLarge, m), append(sizes, size)
				continue
			}
			if attrs.Valid {
				m.Attributes = queue.DecodeAttributes([]byte(attrs.String)) // never fails: a bad column is no reason to stop
			}
			m.SentAt, _ = time.Parse(time.RFC3339Nano, created)
			m.Receipt = receipt(m.ID, m.ReceiveCount)
			out = append(out, m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for i, m := range tooLarge {
			if err := q.forwardUnread(ctx, tx, m, queue.TooLargeReason(sizes[i])); err != nil {
				return err
			}
		}
		if p != nil {
			return q.claimAll(ctx, tx, out, *p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: receive: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SentAt.Before(out[j].SentAt) })
	return out, nil
}

const receiveSQL = `update goqite set timeout = ?, received = received + 1
where id in (
  select id from goqite
  where queue = ? and ? >= timeout and received < ?
  order by priority desc, created
  limit ?)
returning id, case when length(body) <= ? then body end, length(body), received, created, attributes`

// sweep moves messages that were received MaxReceiveCount times and are
// visible again into the DLQ (goqite itself just stops handing them out),
// as SQS's redrive policy does. It looks at most every sweepEvery, with a
// read outside the writer; each move re-checks its row in the write.
// (SweepInterval)
func (q *Queue) sweep(ctx context.Context) error {
	q.sweepMu.Lock()
	if time.Now().Before(q.nextSweep) {
		q.sweepMu.Unlock()
		return nil
	}
	q.nextSweep = time.Now().Add(q.opts.SweepInterval)
	q.sweepMu.Unlock()
	now := time.Now().UTC().Format(timeFormat)
	rows, err := q.db.sql.QueryContext(ctx, `select id from goqite
		where queue = ? and received >= ? and timeout <= ? limit 100`, q.opts.Name, q.opts.MaxReceiveCount, now)
	if err != nil {
		return err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return err
	}
	return q.db.write(ctx, func(tx *wtx) error {
		for _, id := range ids {
			var body []byte
			var received int
			var attrs sql.NullString
			err := tx.QueryRow(ctx, `select body, received, attributes from goqite
				where queue = ? and id = ? and received >= ? and timeout <= ?`, q.opts.Name, id, q.opts.MaxReceiveCount, now).Scan(&body, &received, &attrs)
			if errors.Is(err, sql.ErrNoRows) {
				continue // acked or redriven meanwhile
			}
			if err != nil {
				return err
			}
			m := queue.Message{ID: id, Body: body, ReceiveCount: received, Receipt: receipt(id, received)}
			if attrs.Valid {
				m.Attributes = queue.DecodeAttributes([]byte(attrs.String)) // a bad column loses attributes, not the message
			}
			reason := queue.Reason{Code: queue.CodeMaxReceives,
				Detail: fmt.Sprintf("received %d times without being deleted (max receive count %d)", received, q.opts.MaxReceiveCount)}
			if _, err := q.forward(ctx, tx, m, reason); err != nil {
				return err
			}
		}
		return nil
	})
}

// current checks, inside tx, that m's receipt is its latest delivery.
func (q *Queue) current(ctx context.Context, tx *wtx, m queue.Message) error {
	id, count, err := parseReceipt(m.Receipt)
	if err != nil {
		return err
	}
	var received int
	err = tx.QueryRow(ctx, `select received from goqite where queue = ? and id = ?`, q.opts.Name, id).Scan(&received)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && received != count) {
		return queue.ErrStaleReceipt
	}
	return err
}

// Ack implements consumer.Source: one transaction for the batch, one
// statement per message that deletes it only if the receipt is its latest
// delivery.
func (q *Queue) Ack(ctx context.Context, msgs []queue.Message) error {
	if len(msgs) > 10 {
		return fmt.Errorf("sqlite: ack of %d messages (at most 10)", len(msgs))
	}
	failed := map[string]error{}
	err := q.db.write(ctx, func(tx *wtx) error {
		clear(failed)
		for _, m := range msgs {
			id, count, err := parseReceipt(m.Receipt)
			if err != nil {
				failed[m.ID] = err
				continue
			}
			res, err := tx.Exec(ctx, `delete from goqite where queue = ? and id = ? and received = ?`, q.opts.Name, id, count)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				failed[m.ID] = queue.ErrStaleReceipt
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: ack: %w", err)
	}
	if len(failed) > 0 {
		return &queue.BatchError{Failed: failed}
	}
	return nil
}

// ChangeVisibility implements consumer.Source.
func (q *Queue) ChangeVisibility(ctx context.Context, m queue.Message, d time.Duration) error {
	return q.db.write(ctx, func(tx *wtx) error {
		if err := q.current(ctx, tx, m); err != nil {
			return err
		}
		return q.q.ExtendTx(ctx, tx.Tx, goqite.ID(m.ID), max(d, 0))
	})
}

// DeadLetter implements consumer.Source: the forward and the delete are one
// transaction, so a message is never both in the DLQ and on the queue.
func (q *Queue) DeadLetter(ctx context.Context, m queue.Message, reason queue.Reason) error {
	if _, _, err := parseReceipt(m.Receipt); err != nil {
		return err
	}
	return q.db.write(ctx, func(tx *wtx) error {
		moved, err := q.forward(ctx, tx, m, reason)
		if err == nil && !moved {
			err = queue.ErrStaleReceipt
		}
		return err
	})
}

// dlqEntry is m as the DLQ holds it, with reason.
func (q *Queue) dlqEntry(m queue.Message, reason queue.Reason) ([]byte, error) {
	return json.Marshal(DLQEntry{
		Body: m.Body, Attributes: queue.OriginalAttributes(m.Attributes), Code: reason.Code,
		Detail: queue.Truncate(reason.Detail, queue.MaxDetailBytes), SourceID: m.ID,
		ReceiveCount: m.ReceiveCount, At: time.Now().UTC(),
	})
}

// forward moves the delivery of m its receipt names to the DLQ, with
// reason, in tx: two cached statements, the delete of that delivery (none:
// the receipt is stale, nothing changes and moved is false), then the DLQ
// copy.
func (q *Queue) forward(ctx context.Context, tx *wtx, m queue.Message, reason queue.Reason) (moved bool, err error) {
	id, count, err := parseReceipt(m.Receipt)
	if err != nil {
		return false, err
	}
	entry, err := q.dlqEntry(m, reason)
	if err != nil {
		return false, err
	}
	res, err := tx.Exec(ctx, `delete from goqite where queue = ? and id = ? and received = ?`, q.opts.Name, id, count)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	_, err = tx.Exec(ctx, sendSQL, newID(), q.opts.Name+"-dlq", entry, nil)
	return err == nil, err
}

// forwardUnread moves m to the DLQ without reading its body into memory:
// the row is copied as it is, its dead-letter attributes in the attributes
// column (an entry in the DLQ's other form, see DLQEntries).
func (q *Queue) forwardUnread(ctx context.Context, tx *wtx, m queue.Message, reason queue.Reason) error {
	var own sql.NullString
	if err := tx.QueryRow(ctx, `select attributes from goqite where queue = ? and id = ?`, q.opts.Name, m.ID).Scan(&own); err != nil {
		return err
	}
	if own.Valid {
		_ = json.Unmarshal([]byte(own.String), &m.Attributes)
	}
	attrs, err := json.Marshal(queue.DeadLetterAttributes(m, reason, 0))
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `insert into goqite (id, queue, body, attributes) select ?, ?, body, ? from goqite where queue = ? and id = ?`,
		newID(), q.opts.Name+"-dlq", string(attrs), q.opts.Name, m.ID); err != nil {
		return err
	}
	return q.q.DeleteTx(ctx, tx.Tx, goqite.ID(m.ID))
}

// Expire deletes up to limit messages past retention at now from the queue
// and up to limit from the DLQ, and says how many from each. One small
// delete per queue, so that it never holds the write lock for long.
func (q *Queue) Expire(ctx context.Context, now time.Time, limit int) (main, dlq int, err error) {
	del := func(name string, retention time.Duration) (int, error) {
		cutoff := now.Add(-retention).UTC().Format(timeFormat)
		var n int64
		err := q.db.write1(ctx, func(tx *wtx) error {
			res, err := tx.Exec(ctx, `delete from goqite where id in
				(select id from goqite where queue = ? and created < ? order by created limit ?)`, name, cutoff, limit)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return int(n), err
	}
	if main, err = del(q.opts.Name, q.opts.Retention); err != nil {
		return 0, 0, fmt.Errorf("sqlite: expire: %w", err)
	}
	if dlq, err = del(q.opts.Name+"-dlq", q.opts.DLQRetention); err != nil {
		return main, 0, fmt.Errorf("sqlite: expire DLQ: %w", err)
	}
	return main, dlq, nil
}

// Expired counts the messages past retention at now on the queue and the DLQ.
func (q *Queue) Expired(ctx context.Context, now time.Time) (main, dlq int, err error) {
	err = q.db.sql.QueryRowContext(ctx, `select
		coalesce(sum(queue = ? and created < ?), 0), coalesce(sum(queue = ? and created < ?), 0) from goqite where queue in (?, ?)`,
		q.opts.Name, now.Add(-q.opts.Retention).UTC().Format(timeFormat),
		q.opts.Name+"-dlq", now.Add(-q.opts.DLQRetention).UTC().Format(timeFormat),
		q.opts.Name, q.opts.Name+"-dlq").Scan(&main, &dlq)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlite: expired: %w", err)
	}
	return main, dlq, nil
}

// Depth implements queue.Queue.
func (q *Queue) Depth(ctx context.Context) (queue.Depth, error) {
	d := queue.Depth{OldestKnown: true}
	at := time.Now().UTC()
	now := at.Format(timeFormat)
	var oldest sql.NullString
	err := q.db.sql.QueryRowContext(ctx, `select
		coalesce(sum(queue = ? and timeout <= ?), 0), coalesce(sum(queue = ? and timeout > ?), 0), coalesce(sum(queue = ?), 0),
		min(case when queue = ? and not (received = 0 and timeout > ?) then created end)
		from goqite where queue in (?, ?)`,
		q.opts.Name, now, q.opts.Name, now, q.opts.Name+"-dlq", q.opts.Name, now, q.opts.Name, q.opts.Name+"-dlq").Scan(&d.Waiting, &d.InFlight, &d.DLQ, &oldest)
	if err != nil {
		return d, fmt.Errorf("sqlite: depth: %w", err)
	}
	if oldest.Valid {
		if t, err := time.Parse(time.RFC3339Nano, oldest.String); err == nil {
			d.OldestAge = max(at.Sub(t), 0)
		}
	}
	return d, nil
}

// DLQEntries returns up to limit dead-lettered entries, oldest first, with
// their DLQ message ids.
func (q *Queue) DLQEntries(ctx context.Context, limit int) (map[string]DLQEntry, []string, error) {
	rows, err := q.db.sql.QueryContext(ctx, `select id, case when attributes is null or length(body) <= ? then body end, length(body), attributes, created
		from goqite where queue = ? order by created limit ?`, queue.MaxMessageBytes, q.opts.Name+"-dlq", limit)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	entries := map[string]DLQEntry{}
	var order []string
	for rows.Next() {
		var id, created string
		var body []byte
		var size int
		var attrs sql.NullString
		if err := rows.Scan(&id, &body, &size, &attrs, &created); err != nil {
			return nil, nil, err
		}
		var e DLQEntry
		if attrs.Valid {
			// A row moved as it was (forwardUnread): the reason is in
			// its attributes; a body over the limit is not read.
			// Unreadable attributes (written by hand) read as none: the
			// entry is still listed, and can be purged.
			a := queue.DecodeAttributes([]byte(attrs.String))
			r := queue.ReasonFromAttributes(a)
			e = DLQEntry{Body: body, Attributes: a, Code: r.Code, Detail: r.Detail, SourceID: a[queue.SourceIDAttribute], TooLarge: size > queue.MaxMessageBytes}
			if e.TooLarge {
				e.Size = size
			}
			e.ReceiveCount, _ = strconv.Atoi(a[queue.ReceiveCountAttribute])
			e.At, _ = time.Parse(time.RFC3339Nano, created)
		} else if err := json.Unmarshal(body, &e); err != nil {
			// Not an entry this queue wrote: listed with its bytes as
			// the body, so that it can be read and purged.
			e = DLQEntry{Body: body, Detail: "unreadable: the DLQ row is not in the format this queue writes (" + err.Error() + ")"}
			e.At, _ = time.Parse(time.RFC3339Nano, created)
		}
		entries[id] = e
		order = append(order, id)
	}
	return entries, order, rows.Err()
}

// Redrive implements queue.Queue (queue.Redrive over the DLQ, oldest
// first; each move, insert and delete, is one transaction).
func (q *Queue) Redrive(ctx context.Context, opts queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, &dlqScan{q: q}, opts)
}

// dlqScan reads the whole DLQ in one page (entries are small: bodies over
// the limit are not read).
type dlqScan struct {
	q    *Queue
	done bool
}

func (s *dlqScan) Next(ctx context.Context) ([]queue.DLQEntry, error) {
	if s.done {
		return nil, nil
	}
	s.done = true
	entries, order, err := s.q.DLQEntries(ctx, 1<<30)
	if err != nil {
		return nil, err
	}
	page := make([]queue.DLQEntry, 0, len(order))
	for _, id := range order {
		e := entries[id]
		page = append(page, queue.DLQEntry{ID: id, Reason: e.Reason(), At: e.At, Body: e.Body, Attributes: e.Attributes,
			SourceID: e.SourceID, ReceiveCount: e.ReceiveCount, TooLarge: e.TooLarge, Size: e.Size})
	}
	return page, nil
}

func (s *dlqScan) MoveBack(ctx context.Context, e queue.DLQEntry, attrs map[string]string) error {
	q := s.q
	err := q.db.write(ctx, func(tx *wtx) error {
		// The delete first: only an entry still on the DLQ is put back.
		res, err := tx.Exec(ctx, `delete from goqite where queue = ? and id = ?`, q.opts.Name+"-dlq", e.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return cmp.Or(err, queue.ErrGone)
		}
		_, err = q.insert(ctx, tx, q.opts.Name, e.Body, attrs)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: redrive %s: %w", e.ID, err)
	}
	return nil
}

func (s *dlqScan) Close() {}

var _ queue.DLQPurger = (*Queue)(nil)

// PurgeDLQ implements queue.DLQPurger: the DLQ rows with these ids
// deleted in one write.
func (q *Queue) PurgeDLQ(ctx context.Context, ids []string) ([]string, error) {
	var deleted []string
	err := q.db.write(ctx, func(tx *wtx) error {
		deleted = deleted[:0]
		for _, id := range ids {
			res, err := tx.Exec(ctx, `delete from goqite where queue = ? and id = ?`, q.opts.Name+"-dlq", id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				deleted = append(deleted, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: purge DLQ entries: %w", err)
	}
	return deleted, nil
}
