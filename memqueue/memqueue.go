// Package memqueue is an in-memory queue that behaves like a standard SQS
// queue where it matters for exactly-once tests: a visibility timeout,
// redelivery of unacked messages, a receive count, a fresh receipt per
// delivery (a stale receipt cannot delete or extend), long polling, and a
// redrive to a dead-letter queue after MaxReceiveCount receives.
package memqueue

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// Options configure a Queue.
type Options struct {
	// VisibilityTimeout applies to every receive. Default 30s.
	VisibilityTimeout time.Duration
	// WaitTime is the long-poll wait of Receive. Default 100ms.
	WaitTime time.Duration
	// MaxReceiveCount moves a message to DLQ when a receive would exceed
	// it (SQS's redrive policy). 0: never.
	MaxReceiveCount int
	// DLQ receives redriven and dead-lettered messages. Default: a new
	// in-memory queue (see Queue.DLQ).
	DLQ *Queue
	// Now is the clock for visibility. Default time.Now.
	Now func() time.Time
	// Retention deletes a message once it is this old (from its send),
	// whatever its receives, as SQS's MessageRetentionPeriod does: it is
	// never received again and never dead-lettered (Counts.Expired). A
	// copy sent again (a requeue) starts a new age. 0: kept for ever.
	Retention time.Duration
}

// Queue is safe for concurrent use.
type Queue struct {
	opts   Options
	mu     sync.Mutex
	seq    int
	msgs   map[string]*entry
	order  []*entry // by send order; deleted entries are skipped, then compacted
	head   int
	wake   chan struct{}
	counts Counts
}

// Counts are the calls made to the queue (to measure calls per message).
type Counts struct {
	Sends, Receives, Acks, AckedMessages, VisibilityChanges, DeadLetters int
	// Expired counts the messages deleted by age (Options.Retention).
	Expired int
}

type entry struct {
	seq       int
	msg       queue.Message
	visibleAt time.Time
	deleted   bool
}

var _ queue.Queue = (*Queue)(nil)

// New returns an empty queue.
func New(opts Options) *Queue {
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = 30 * time.Second
	}
	if opts.WaitTime <= 0 {
		opts.WaitTime = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DLQ == nil {
		opts.DLQ = &Queue{opts: Options{VisibilityTimeout: opts.VisibilityTimeout, WaitTime: opts.WaitTime, Now: opts.Now},
			msgs: map[string]*entry{}, wake: make(chan struct{})}
	}
	return &Queue{opts: opts, msgs: map[string]*entry{}, wake: make(chan struct{})}
}

// Send enqueues body with attrs and returns the message id.
func (q *Queue) Send(_ context.Context, body []byte, attrs map[string]string) (string, error) {
	if err := queue.CheckOutgoing(body, attrs); err != nil {
		return "", err
	}
	return q.put(body, attrs), nil
}

// put enqueues without Send's checks (a dead-letter forward).
func (q *Queue) put(body []byte, attrs map[string]string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Sends++
	q.seq++
	id := fmt.Sprintf("mem-%08d", q.seq)
	e := &entry{seq: q.seq, msg: queue.Message{
		ID: id, Body: append([]byte(nil), body...), Attributes: maps.Clone(attrs), SentAt: q.opts.Now(),
	}}
	q.msgs[id] = e
	q.order = append(q.order, e)
	q.signal()
	return id
}

// signal wakes long-polling receivers. Caller holds mu.
func (q *Queue) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Receive implements consumer.Source.
func (q *Queue) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	if max < 1 || max > 10 {
		return nil, fmt.Errorf("memqueue: receive of %d messages (1-10)", max)
	}
	deadline := time.NewTimer(q.opts.WaitTime)
	defer deadline.Stop()
	q.mu.Lock()
	q.counts.Receives++
	q.mu.Unlock()
	for {
		q.mu.Lock()
		got := q.take(max)
		wake := q.wake
		q.mu.Unlock()
		if len(got) > 0 {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, nil
		case <-wake:
		case <-time.After(10 * time.Millisecond): // visibility expiries don't signal
		}
	}
}

// take delivers up to max visible messages, oldest first. Caller holds mu.
func (q *Queue) take(max int) []queue.Message {
	now := q.opts.Now()
	for q.head < len(q.order) && q.order[q.head].deleted {
		q.head++
	}
	if q.head > 1024 && q.head > len(q.order)/2 {
		q.order = append([]*entry(nil), q.order[q.head:]...)
		q.head = 0
	}
	var out []queue.Message
	for _, e := range q.order[q.head:] {
		if len(out) == max {
			break
		}
		if e.deleted {
			continue
		}
		if q.opts.Retention > 0 && !now.Before(e.msg.SentAt.Add(q.opts.Retention)) {
			q.remove(e)
			q.counts.Expired++
			continue
		}
		if now.Before(e.visibleAt) {
			continue
		}
		if q.opts.MaxReceiveCount > 0 && e.msg.ReceiveCount >= q.opts.MaxReceiveCount && q.opts.DLQ != nil {
			q.remove(e)
			// Like SQS's redrive policy: the message moves as it is, without
			// dead-letter attributes (it reads as queue.CodeMaxReceives).
			_, _ = q.opts.DLQ.Send(context.Background(), e.msg.Body, queue.OriginalAttributes(e.msg.Attributes))
			continue
		}
		e.msg.ReceiveCount++
		q.seq++
		e.msg.Receipt = e.msg.ID + "#" + strconv.Itoa(q.seq)
		e.visibleAt = now.Add(q.opts.VisibilityTimeout)
		m := e.msg
		m.Attributes = maps.Clone(e.msg.Attributes)
		out = append(out, m)
	}
	return out
}

// NextVisible is when the next message held becomes visible (now, when
// one is visible already); ok is false when the queue holds none. A
// simulation that runs a clock of its own jumps to it.
func (q *Queue) NextVisible() (at time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.order[q.head:] {
		if e.deleted {
			continue
		}
		if !ok || e.visibleAt.Before(at) {
			at, ok = e.visibleAt, true
		}
	}
	return at, ok
}

// remove deletes e. Caller holds mu.
func (q *Queue) remove(e *entry) {
	e.deleted = true
	delete(q.msgs, e.msg.ID)
}

// current returns the entry iff receipt is its latest delivery. Caller holds mu.
func (q *Queue) current(m queue.Message) (*entry, error) {
	e, ok := q.msgs[m.ID]
	if !ok || e.msg.Receipt != m.Receipt || m.Receipt == "" {
		return nil, queue.ErrStaleReceipt
	}
	return e, nil
}

// Ack implements consumer.Source.
func (q *Queue) Ack(_ context.Context, msgs []queue.Message) error {
	if len(msgs) > 10 {
		return fmt.Errorf("memqueue: ack of %d messages (at most 10)", len(msgs))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Acks++
	failed := map[string]error{}
	for _, m := range msgs {
		if _, err := q.current(m); err != nil {
			failed[m.ID] = err
			continue
		}
		q.remove(q.msgs[m.ID])
		q.counts.AckedMessages++
	}
	if len(failed) > 0 {
		return &queue.BatchError{Failed: failed}
	}
	return nil
}

// ChangeVisibility implements consumer.Source.
func (q *Queue) ChangeVisibility(_ context.Context, m queue.Message, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.VisibilityChanges++
	e, err := q.current(m)
	if err != nil {
		return err
	}
	e.visibleAt = q.opts.Now().Add(d)
	if d <= 0 {
		q.signal()
	}
	return nil
}

// DeadLetter implements consumer.Source.
func (q *Queue) DeadLetter(ctx context.Context, m queue.Message, r queue.Reason) error {
	q.mu.Lock()
	q.counts.DeadLetters++
	_, err := q.current(m)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	q.opts.DLQ.put(m.Body, queue.DeadLetterAttributes(m, r, 0))
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, err := q.current(m); err == nil {
		q.remove(e)
	}
	return nil
}

// Len returns how many messages the queue holds (visible or not).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// DLQ returns the dead-letter queue.
func (q *Queue) DLQ() *Queue { return q.opts.DLQ }

// Depth implements queue.Queue.
func (q *Queue) Depth(context.Context) (queue.Depth, error) {
	d := queue.Depth{OldestKnown: true}
	q.mu.Lock()
	now := q.opts.Now()
	for _, e := range q.msgs {
		if now.Before(e.visibleAt) {
			d.InFlight++
		} else {
			d.Waiting++
		}
		d.OldestAge = max(d.OldestAge, now.Sub(e.msg.SentAt))
	}
	q.mu.Unlock()
	d.DLQ = q.opts.DLQ.Len()
	return d, nil
}

// Ping implements queue.Queue: an in-memory queue is always there.
func (q *Queue) Ping(context.Context) error { return nil }

// SendBatch implements queue.Queue.
func (q *Queue) SendBatch(ctx context.Context, msgs []queue.Outgoing) (int, error) {
	if err := queue.CheckBatch(msgs); err != nil {
		return 0, err
	}
	for i, m := range msgs {
		if _, err := q.Send(ctx, m.Body, m.Attributes); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}

// Redrive implements queue.Queue (queue.Redrive over the DLQ, oldest
// first, under the DLQ's lock for the whole run).
func (q *Queue) Redrive(ctx context.Context, o queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, &dlqScan{q: q}, o)
}

// dlqScan holds the DLQ's lock from its first page to Close.
type dlqScan struct {
	q       *Queue
	entries map[string]*entry
	locked  bool
}

func (s *dlqScan) Next(context.Context) ([]queue.DLQEntry, error) {
	if s.entries != nil {
		return nil, nil
	}
	d := s.q.opts.DLQ
	d.mu.Lock()
	s.locked = true
	s.entries = map[string]*entry{}
	var page []queue.DLQEntry
	for _, e := range d.order[d.head:] {
		if e.deleted {
			continue
		}
		s.entries[e.msg.ID] = e
		page = append(page, queue.EntryOf(e.msg.ID, e.msg.Body, e.msg.Attributes, e.msg.SentAt))
	}
	return page, nil
}

func (s *dlqScan) MoveBack(ctx context.Context, e queue.DLQEntry, attrs map[string]string) error {
	if _, err := s.q.Send(ctx, e.Body, attrs); err != nil {
		return err
	}
	s.q.opts.DLQ.remove(s.entries[e.ID])
	return nil
}

func (s *dlqScan) Close() {
	if s.locked {
		s.q.opts.DLQ.mu.Unlock()
	}
}

// Counts returns the calls made so far.
func (q *Queue) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts
}

// Messages returns a copy of every message held, oldest first, with its
// receive count (for assertions on a DLQ).
func (q *Queue) Messages() []queue.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	es := slices.DeleteFunc(slices.Clone(q.order[q.head:]), func(e *entry) bool { return e.deleted })
	out := make([]queue.Message, len(es))
	for i, e := range es {
		out[i] = e.msg
		out[i].Attributes = maps.Clone(e.msg.Attributes)
		out[i].Body = append([]byte(nil), e.msg.Body...)
	}
	return out
}
