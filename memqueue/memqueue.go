// Package memqueue is an in-memory queue that behaves like a standard SQS
// queue where it matters for exactly-once tests: a visibility timeout,
// redelivery of unacked messages, a receive count, a fresh receipt per
// delivery (a stale receipt cannot delete or extend), long polling, and a
// redrive to a dead-letter queue after MaxReceiveCount receives.
package memqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
)

// ErrStaleReceipt: the receipt is not the message's latest delivery (or the
// message is gone).
var ErrStaleReceipt = errors.New("memqueue: receipt is stale or the message is gone")

// ReasonAttribute is the attribute DeadLetter sets on the forwarded copy.
const ReasonAttribute = "dlq-reason"

// Options configure a Queue.
type Options struct {
	// VisibilityTimeout applies to every receive. Default 30s.
	VisibilityTimeout time.Duration
	// WaitTime is the long-poll wait of Receive. Default 100ms.
	WaitTime time.Duration
	// MaxReceiveCount moves a message to DLQ when a receive would exceed
	// it (SQS's redrive policy). 0: never.
	MaxReceiveCount int
	// DLQ receives redriven and dead-lettered messages.
	DLQ *Queue
	// Now is the clock for visibility. Default time.Now.
	Now func() time.Time
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
}

type entry struct {
	seq       int
	msg       consumer.Message
	visibleAt time.Time
	deleted   bool
}

var _ consumer.Source = (*Queue)(nil)

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
	return &Queue{opts: opts, msgs: map[string]*entry{}, wake: make(chan struct{})}
}

// Send enqueues body with attrs and returns the message id.
func (q *Queue) Send(_ context.Context, body []byte, attrs map[string]string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Sends++
	q.seq++
	id := fmt.Sprintf("mem-%08d", q.seq)
	e := &entry{seq: q.seq, msg: consumer.Message{
		ID: id, Body: append([]byte(nil), body...), Attributes: maps.Clone(attrs), SentAt: q.opts.Now(),
	}}
	q.msgs[id] = e
	q.order = append(q.order, e)
	q.signal()
	return id, nil
}

// signal wakes long-polling receivers. Caller holds mu.
func (q *Queue) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Receive implements consumer.Source.
func (q *Queue) Receive(ctx context.Context, max int) ([]consumer.Message, error) {
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
func (q *Queue) take(max int) []consumer.Message {
	now := q.opts.Now()
	for q.head < len(q.order) && q.order[q.head].deleted {
		q.head++
	}
	if q.head > 1024 && q.head > len(q.order)/2 {
		q.order = append([]*entry(nil), q.order[q.head:]...)
		q.head = 0
	}
	var out []consumer.Message
	for _, e := range q.order[q.head:] {
		if len(out) == max {
			break
		}
		if e.deleted || now.Before(e.visibleAt) {
			continue
		}
		if q.opts.MaxReceiveCount > 0 && e.msg.ReceiveCount >= q.opts.MaxReceiveCount && q.opts.DLQ != nil {
			q.remove(e)
			attrs := maps.Clone(e.msg.Attributes)
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs[ReasonAttribute] = "max receive count " + strconv.Itoa(q.opts.MaxReceiveCount) + " exceeded"
			_, _ = q.opts.DLQ.Send(context.Background(), e.msg.Body, attrs)
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

// remove deletes e. Caller holds mu.
func (q *Queue) remove(e *entry) {
	e.deleted = true
	delete(q.msgs, e.msg.ID)
}

// current returns the entry iff receipt is its latest delivery. Caller holds mu.
func (q *Queue) current(m consumer.Message) (*entry, error) {
	e, ok := q.msgs[m.ID]
	if !ok || e.msg.Receipt != m.Receipt || m.Receipt == "" {
		return nil, ErrStaleReceipt
	}
	return e, nil
}

// Ack implements consumer.Source.
func (q *Queue) Ack(_ context.Context, msgs []consumer.Message) error {
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
		return &consumer.BatchError{Failed: failed}
	}
	return nil
}

// ChangeVisibility implements consumer.Source.
func (q *Queue) ChangeVisibility(_ context.Context, m consumer.Message, d time.Duration) error {
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
func (q *Queue) DeadLetter(ctx context.Context, m consumer.Message, reason string) error {
	if q.opts.DLQ == nil {
		return errors.New("memqueue: no dead-letter queue configured")
	}
	q.mu.Lock()
	q.counts.DeadLetters++
	_, err := q.current(m)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	attrs := maps.Clone(m.Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs[ReasonAttribute] = reason
	if _, err := q.opts.DLQ.Send(ctx, m.Body, attrs); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, err := q.current(m); err == nil {
		q.remove(e)
	}
	return nil
}

// Depth returns how many messages the queue holds (visible or not).
func (q *Queue) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// Counts returns the calls made so far.
func (q *Queue) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts
}

// Messages returns a copy of every message held, oldest first, with its
// receive count (for assertions on a DLQ).
func (q *Queue) Messages() []consumer.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	es := slices.DeleteFunc(slices.Clone(q.order[q.head:]), func(e *entry) bool { return e.deleted })
	out := make([]consumer.Message, len(es))
	for i, e := range es {
		out[i] = e.msg
		out[i].Attributes = maps.Clone(e.msg.Attributes)
		out[i].Body = append([]byte(nil), e.msg.Body...)
	}
	return out
}
