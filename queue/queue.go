// Package queue is the port every message queue implements — Amazon SQS
// (awssqs), the embedded SQLite queue (sqlite), the PostgreSQL queue
// (postgres) and the in-memory one (memqueue) — and the vocabulary they share: the message, the receipt
// rules, the dead-letter reason and its attributes, depth, and what a
// redrive of the dead-letter queue may move. It imports only the standard
// library. queuetest holds the conformance suite every implementation
// passes.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Message is one delivery of a queue message.
type Message struct {
	// ID is the transport's message id. It is the same across redeliveries
	// of one send and differs between sends: never a business key.
	ID string
	// Body is the payload as sent.
	Body []byte
	// Attributes are the message attributes (string-valued).
	Attributes map[string]string
	// ReceiveCount is how many times the message has been received,
	// including this time (1 on first delivery).
	ReceiveCount int
	// Receipt identifies this delivery for Ack, ChangeVisibility and
	// DeadLetter (an SQS receipt handle). A receipt from an earlier
	// delivery of the same message is stale.
	Receipt string
	// SentAt is when the message was first sent, if the queue knows.
	SentAt time.Time
	// Bound is the claim a ClaimingReceiver made for this delivery in the
	// receive's own transaction, and the way to record its result with the
	// message's settlement (driver.Bound); nil from every other receive.
	Bound driver.Bound
	// parsed is what a ClaimPolicy read of Body at the receive (Parsed).
	parsed parsedBody
}

// parsedBody is a value read from a message's body, with the body it was
// read from (its first byte's address, its length and a hash of its bytes,
// so that a body rewritten in place no longer matches).
type parsedBody struct {
	v    any
	body *byte
	n    int
	sum  uint64
}

// parsedSeed is the hash seed of parsedBody's sum.
var parsedSeed = maphash.MakeSeed()

// Parsed is what the claim policy of a claiming receive read of this
// delivery's Body (ClaimPolicy.Read's value), so that the handler need not
// read the body again; nil from every other receive, when the policy read
// nothing, or when Body is not the bytes the value was read from (a copy
// of the message given another body never carries the value of the one it
// was copied from, nor does a body rewritten in place). The value is
// opaque here: its type is the application's.
func (m Message) Parsed() any {
	if m.parsed.v == nil || len(m.Body) == 0 || len(m.Body) != m.parsed.n || &m.Body[0] != m.parsed.body ||
		maphash.Bytes(parsedSeed, m.Body) != m.parsed.sum {
		return nil
	}
	return m.parsed.v
}

// setParsed attaches v, read from m.Body, to m (Parsed).
func (m *Message) setParsed(v any) {
	if v == nil || len(m.Body) == 0 {
		m.parsed = parsedBody{}
		return
	}
	m.parsed = parsedBody{v: v, body: &m.Body[0], n: len(m.Body), sum: maphash.Bytes(parsedSeed, m.Body)}
}

// Outgoing is one message to send.
type Outgoing struct {
	Body       []byte
	Attributes map[string]string
}

// Code says why a message was dead-lettered, as a short stable word that
// metrics label by and redrive filters on. The consumer's handler chooses
// it (e.g. "invalid", "conflict"); a queue's own redrive policy uses
// CodeMaxReceives.
type Code string

// CodeMaxReceives marks a message the queue moved to its DLQ itself after
// MaxReceiveCount receives without a delete (SQS's redrive policy). SQS
// moves such messages without attributes of ours: a DLQ message with no
// code attribute reads as this code.
const CodeMaxReceives Code = "max_receives"

// Reason is why a message was dead-lettered: the code, and a human detail.
type Reason struct {
	Code   Code
	Detail string
}

func (r Reason) String() string {
	if r.Detail == "" {
		return string(r.Code)
	}
	return string(r.Code) + ": " + r.Detail
}

// The attributes a dead-letter forward adds to the copy on the DLQ. A
// redrive drops every attribute with this prefix.
const (
	AttributePrefix       = "dlq-"
	CodeAttribute         = "dlq-reason-code"
	DetailAttribute       = "dlq-reason"
	SourceIDAttribute     = "dlq-source-message-id"
	ReceiveCountAttribute = "dlq-receive-count"
)

// NotBeforeAttribute is the attribute of a message put back on the queue
// to wait (the consumer's requeue of a charge whose next attempt is
// scheduled): the time, in RFC 3339 with nanoseconds, before which the
// message is not handed to a handler. A copy of a message that waits
// starts again at receive count 0, so that a wait never moves it toward
// the DLQ. The record stays the authority: a message handed to a handler
// is claimed as any other.
const NotBeforeAttribute = "not-before"

// MaxMessageBytes is the largest message a queue takes, its body and its
// attributes' names and values together (SQS's limit, 256 KiB). Send
// refuses a larger one (ErrTooLarge); one found on a queue anyway (written
// around Send) is moved to the DLQ unread, with CodeTooLarge.
const MaxMessageBytes = 256 << 10

// CodeTooLarge marks a message over MaxMessageBytes found on the queue: it
// was dead-lettered without its body being read.
const CodeTooLarge Code = "too_large"

// ErrTooLarge: a message over MaxMessageBytes.
var ErrTooLarge = errors.New("queue: message over the size limit")

// ErrReservedAttribute: an attribute whose name starts with
// AttributePrefix, which only a dead-letter forward may write (a producer
// could otherwise choose the reason its message shows on the DLQ).
var ErrReservedAttribute = errors.New("queue: attribute name reserved for dead-letter reasons")

// CheckOutgoing is what every Send checks before writing: the size, and
// no reserved attribute.
func CheckOutgoing(body []byte, attrs map[string]string) error {
	n := len(body)
	for k, v := range attrs {
		if isDeadLetterAttribute(k) {
			return fmt.Errorf("%w: %q (names starting with %q are the queue's own)", ErrReservedAttribute, k, AttributePrefix)
		}
		n += len(k) + len(v)
	}
	if n > MaxMessageBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, n, MaxMessageBytes)
	}
	return nil
}

// CheckBatch is CheckOutgoing for every message of a batch, naming the
// first that fails.
func CheckBatch(msgs []Outgoing) error {
	for i, m := range msgs {
		if err := CheckOutgoing(m.Body, m.Attributes); err != nil {
			return fmt.Errorf("message %d of the batch: %w", i, err)
		}
	}
	return nil
}

// TooLargeReason is the reason of a message moved to the DLQ unread.
func TooLargeReason(size int) Reason {
	return Reason{Code: CodeTooLarge, Detail: fmt.Sprintf("a message of %d bytes, over the %d-byte limit, was found on the queue and moved here without being read", size, MaxMessageBytes)}
}

// MaxDetailBytes bounds the detail a queue keeps with a dead letter.
const MaxDetailBytes = 1024

// MaxAttributes is the most message attributes a message may carry (SQS's
// limit; SendMessage refuses more).
const MaxAttributes = 10

// MaxVisibility is the longest visibility timeout (SQS's 12 hours).
const MaxVisibility = 12 * time.Hour

// MaxReceive is the most messages one Receive returns, and one Ack takes
// (SQS's batch limit).
const MaxReceive = 10

// ErrStaleReceipt: the receipt is not the message's latest delivery, or
// the message is gone (acked, dead-lettered, expired). SQS itself may
// accept a stale receipt; the other queues refuse it.
var ErrStaleReceipt = errors.New("queue: receipt is stale or the message is gone")

// ErrSentNotDeleted: a redrive put a DLQ entry back on the queue but could
// not delete it from the DLQ (its copy stays there; the claim makes a
// second delivery a duplicate). It was moved: the report and the audit
// line count it.
var ErrSentNotDeleted = errors.New("queue: sent back to the queue, but not deleted from the DLQ")

// ErrGone: a DLQ entry a redrive was about to move is no longer on the
// DLQ (another redrive moved it, an operator purged it, or it expired
// meanwhile); nothing was moved.
var ErrGone = errors.New("queue: the DLQ entry is gone (moved, purged or expired meanwhile)")

// BatchError reports the messages of a batch call that failed, by ID.
type BatchError struct {
	Failed map[string]error
}

func (e *BatchError) Error() string {
	for id, err := range e.Failed {
		if len(e.Failed) == 1 {
			return fmt.Sprintf("batch: message %s: %v", id, err)
		}
		return fmt.Sprintf("batch: %d messages failed, e.g. %s: %v", len(e.Failed), id, err)
	}
	return "batch: no failures"
}

// Depth is how many messages a queue and its DLQ hold. On SQS the counts
// are approximate.
type Depth struct {
	// Waiting are visible (or delayed) messages not yet received.
	Waiting int `json:"waiting"`
	// InFlight are received and not yet deleted or visible again.
	InFlight int `json:"inFlight"`
	// DLQ is every message on the dead-letter queue.
	DLQ int `json:"dlq"`
	// OldestAge is how long the oldest message on the queue (waiting or in
	// flight) has been there, 0 when it is empty; a message held for its
	// record's wait (a SQL queue's, hidden and never received since) is
	// not counted: it is not late, it waits for its time. OldestKnown is false
	// where the queue cannot tell: SQS reports it only to CloudWatch
	// (ApproximateAgeOfOldestMessage).
	OldestAge   time.Duration `json:"oldestAge"`
	OldestKnown bool          `json:"oldestKnown"`
	// Approximate: the counts are the queue's estimates (SQS: they lag
	// by up to a minute and are not exact), not counted rows.
	Approximate bool `json:"approximate,omitempty"`
}

// Counts is d without the age, for comparing counts.
func (d Depth) Counts() Depth { return Depth{Waiting: d.Waiting, InFlight: d.InFlight, DLQ: d.DLQ} }

// Queue is a queue with its dead-letter queue: what a consumer, a
// producer and an operator each ask of it. Implementations are safe for
// concurrent use.
type Queue interface {
	Receiver
	Sender
	Operator
}

// Receiver is what a consumer does with a queue.
type Receiver interface {
	// Receive returns up to max (1-MaxReceive) messages, long polling for a
	// while if none is ready; it may return none. Each message returned is
	// invisible to other receivers for the visibility timeout.
	Receive(ctx context.Context, max int) ([]Message, error)
	// Ack deletes up to MaxReceive received messages. A *BatchError
	// reports the ones that failed (ErrStaleReceipt where the queue can tell).
	Ack(ctx context.Context, msgs []Message) error
	// ChangeVisibility makes m visible again after d (0: at once).
	ChangeVisibility(ctx context.Context, m Message, d time.Duration) error
	// DeadLetter puts m's body and attributes, with the reason and the
	// Attribute* attributes, on the DLQ and deletes m from the queue.
	DeadLetter(ctx context.Context, m Message, r Reason) error
}

// Sender is what a producer does with a queue.
type Sender interface {
	// Send puts one message on the queue and returns its id.
	Send(ctx context.Context, body []byte, attrs map[string]string) (string, error)
	// SendBatch puts msgs on the queue, in as few calls as the queue
	// allows (SQS: 10 per call; SQL queues: one transaction). It returns
	// how many of msgs, from the start, are certainly sent.
	SendBatch(ctx context.Context, msgs []Outgoing) (int, error)
}

// Operator is what an operator's tools ask of a queue.
type Operator interface {
	// Depth counts the messages on the queue and the DLQ.
	Depth(ctx context.Context) (Depth, error)
	// Ping checks that the queue and the DLQ are reachable.
	Ping(ctx context.Context) error
	// Redrive moves DLQ messages back to the queue as o decides, with their
	// body and original attributes (the dead-letter ones dropped); drivers
	// implement it as Redrive over a DLQScan of theirs.
	Redrive(ctx context.Context, o RedriveOptions) (RedriveReport, error)
}

// DLQPurger is an optional capability of a queue whose DLQ can hold
// entries that cannot be moved back (over MaxMessageBytes, written around
// Send: the SQL queues; SQS refuses such messages itself): the entries
// with these DLQ ids are deleted for good. It returns the ids it deleted
// (an id not on the DLQ is not among them).
type DLQPurger interface {
	PurgeDLQ(ctx context.Context, ids []string) (deleted []string, err error)
}

// ReasonFromAttributes reads the reason a DLQ message carries. A message
// dead-lettered before codes existed has only "code: detail" in its
// detail attribute; one moved by the queue's redrive policy has neither.
func ReasonFromAttributes(attrs map[string]string) Reason {
	code, detail := Code(attrs[CodeAttribute]), attrs[DetailAttribute]
	if code == "" && detail == "" {
		return Reason{Code: CodeMaxReceives}
	}
	return StoredReason(code, detail)
}

// StoredReason reads a reason as a queue kept it: a code and a detail, or,
// written before codes were a field of their own, no code and the detail
// "code: detail" (Reason.String's form).
func StoredReason(code Code, detail string) Reason {
	if code == "" {
		c, d, _ := strings.Cut(detail, ": ")
		return Reason{Code: Code(c), Detail: d}
	}
	return Reason{Code: code, Detail: detail}
}

// DeadLetterAttributes returns the attributes of m's copy on the DLQ: its
// own (up to limit in all, 0 for no limit) plus the dead-letter ones, which
// always fit. detail is cut to MaxDetailBytes.
func DeadLetterAttributes(m Message, r Reason, limit int) map[string]string {
	attrs := map[string]string{
		CodeAttribute:         string(r.Code),
		SourceIDAttribute:     m.ID,
		ReceiveCountAttribute: fmt.Sprint(m.ReceiveCount),
	}
	if d := Truncate(r.Detail, MaxDetailBytes); d != "" {
		attrs[DetailAttribute] = d
	}
	for k, v := range m.Attributes {
		if limit > 0 && len(attrs) >= limit {
			break
		}
		if _, ours := attrs[k]; !ours && v != "" && !isDeadLetterAttribute(k) {
			attrs[k] = v
		}
	}
	return attrs
}

// OriginalAttributes drops the dead-letter attributes (for a redrive).
func OriginalAttributes(attrs map[string]string) map[string]string {
	var out map[string]string
	for k, v := range attrs {
		if isDeadLetterAttribute(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

func isDeadLetterAttribute(k string) bool {
	return strings.HasPrefix(k, AttributePrefix)
}

// Truncate cuts s to at most n bytes on a rune boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Poll is the long poll of a queue that cannot wait on the server: it
// calls once until it returns messages or an error, or wait has passed,
// sleeping interval between empty calls (ctx ends it early).
func Poll(ctx context.Context, wait, interval time.Duration, once func() ([]Message, error)) ([]Message, error) {
	deadline := time.Now().Add(wait)
	for {
		msgs, err := once()
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
		if !time.Now().Before(deadline) {
			return nil, nil
		}
		t := time.NewTimer(min(interval, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// DecodeAttributes reads message attributes a SQL queue stored as a JSON
// object. A column written around Send may hold anything: a value that is
// not a string keeps its JSON text ({"origin": 7} reads as "7"), and a
// column that is not an object reads as no attributes. It never fails: a
// message is never held back by its attributes (a receive that failed on
// them would fail on the same oldest message forever).
func DecodeAttributes(raw []byte) map[string]string {
	var vals map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &vals) != nil || len(vals) == 0 {
		return nil
	}
	out := make(map[string]string, len(vals))
	for k, v := range vals {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		out[k] = s
	}
	return out
}
