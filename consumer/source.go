// Package consumer is the listener runtime: the Go counterpart of Spring
// Cloud AWS's listener container. It receives batches from a Source, runs a
// Handler on each message with bounded concurrency, keeps slow messages
// alive with a heartbeat, turns each Decision into ack / retry / dead-letter
// / wait (acks batched; a wait never moves a message toward the DLQ), and
// shuts down gracefully. It holds no business logic.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Message is one delivery of a queue message.
type Message = queue.Message

// Source is the part of a queue.Queue the runtime consumes.
type Source interface {
	// Receive returns up to max messages, waiting (long polling) for a
	// while if none is ready; it may return none. Each message returned is
	// invisible to other receivers for the queue's visibility timeout.
	Receive(ctx context.Context, max int) ([]Message, error)
	// Ack deletes messages whose effect is recorded (at most 10 at a time).
	// A *queue.BatchError reports the ones that failed.
	Ack(ctx context.Context, msgs []Message) error
	// ChangeVisibility makes m visible again after d (0: at once).
	ChangeVisibility(ctx context.Context, m Message, d time.Duration) error
	// DeadLetter sends m's body and attributes plus the reason to the
	// dead-letter queue, then deletes m from this queue.
	DeadLetter(ctx context.Context, m Message, r queue.Reason) error
}

// Sender is an optional capability of a Source: one that can also put a
// message on its queue (every queue.Queue can). The runtime uses it to
// requeue a message that waits (Wait) and was received before, so that
// waiting never moves it toward the dead-letter queue; without it such a
// message's visibility is set instead. A Source that wraps another should
// implement Send by forwarding it, returning ErrCannotSend when the wrapped
// Source is no Sender (SenderOf).
type Sender interface {
	// Send puts one message on the queue and returns its id.
	Send(ctx context.Context, body []byte, attrs map[string]string) (string, error)
}

// ErrCannotSend: the Source, or the one it wraps, cannot send.
var ErrCannotSend = errors.New("consumer: the source cannot send")

// Send is Sender.Send on src when src is a Sender, else ErrCannotSend: the
// forwarding a wrapping Source does.
func Send(ctx context.Context, src Source, body []byte, attrs map[string]string) (string, error) {
	s, ok := src.(Sender)
	if !ok {
		return "", ErrCannotSend
	}
	return s.Send(ctx, body, attrs)
}

// Action is what the runtime does with a handled message.
type Action int

// The actions.
const (
	// Ack deletes the message (batched).
	Ack Action = iota + 1
	// Retry leaves the message on the queue and makes it visible again
	// after Decision.RetryAfter (or the Backoff for its receive count).
	Retry
	// DeadLetter forwards the message with Decision.Reason and deletes it.
	DeadLetter
	// Wait leaves the message to be handled again at Decision.Until (a
	// charge whose next attempt is scheduled): unlike Retry, a wait never
	// moves the message toward the dead-letter queue. A message received
	// for the first time is made invisible until then (at most
	// Options.MaxVisibility at a time); one received before is requeued:
	// a copy with queue.NotBeforeAttribute is sent (Sender) and the
	// original deleted, so that the copy starts again at receive count 0.
	// A message whose not-before is still to come is not handed to the
	// handler: the wait is applied again. Never kept in hand (parked).
	Wait
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead_letter"
	case Wait:
		return "wait"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Decision is a Handler's verdict on one message.
type Decision struct {
	Action Action
	// Reason says why a message is dead-lettered (its code becomes the
	// DLQ's reason-code attribute) or retried (logged).
	Reason     queue.Reason
	RetryAfter time.Duration
	// Until is when a Wait ends: the message is handled again then.
	Until time.Time
}

// Handler handles one delivery. It must be safe for concurrent use.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) Decision
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) Decision

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) Decision { return f(ctx, d) }

// Claiming is src whose every receive claims (r.ReceiveClaiming with p):
// for a queue whose database also holds the idempotency records, so that
// each message arrives with its claim made in the receive's transaction
// (queue.Message.Bound). wrap, when set, wraps each message's Bound (to
// count its writes, or tell a circuit breaker). src's other calls are its
// own.
func Claiming(src Source, r queue.ClaimingReceiver, p queue.ClaimPolicy, wrap func(driver.Bound) driver.Bound) Source {
	return claimingSource{Source: src, r: r, p: p, wrap: wrap}
}

type claimingSource struct {
	Source
	r    queue.ClaimingReceiver
	p    queue.ClaimPolicy
	wrap func(driver.Bound) driver.Bound
}

func (s claimingSource) Receive(ctx context.Context, max int) ([]Message, error) {
	msgs, err := s.r.ReceiveClaiming(ctx, max, s.p)
	if s.wrap != nil {
		for i := range msgs {
			if msgs[i].Bound != nil {
				msgs[i].Bound = s.wrap(msgs[i].Bound)
			}
		}
	}
	return msgs, err
}

// Send implements Sender when the wrapped Source does.
func (s claimingSource) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	return Send(ctx, s.Source, body, attrs)
}
