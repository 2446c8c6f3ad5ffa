// Package lambdasqs runs the idempotency guard in an SQS-triggered AWS
// Lambda function (github.com/aws/aws-lambda-go): each record of a batch
// is claimed and run under idempotency.Guard.Do, and the function's
// response (events.SQSEventResponse) names in batchItemFailures exactly the
// records that must come back: those another invocation holds, those whose
// work did not reach a final result, and those never started. A record
// whose work is done — now or by an earlier delivery — is not named, so
// the event source mapping deletes it.
//
// # The event source mapping
//
// A partial batch response means something only when the mapping has
// FunctionResponseTypes [ReportBatchItemFailures]. Without it Lambda
// ignores batchItemFailures and deletes every record of a batch the
// function returned without an error (aws-lambda-go issue #430): the
// records to retry are lost. CheckMapping asks the Lambda API and refuses
// a mapping without it; where it cannot tell (no lambda:ListEventSourceMappings
// permission), set Options.WholeBatchOnFailure: a batch with any record to
// retry then fails as a whole, which retries every record of it (the ones
// already done come back as duplicates and are deleted then).
//
// # Permanent failures
//
// A record whose key is recorded FAILED (the work failed for good, now or
// before), whose key was claimed with another fingerprint (Conflict), or
// which has no key (or a blank one), never runs again. With Options.DeadLetter the function
// sends it to the dead-letter queue itself (with the reason, at once, within
// half the Margin before the deadline) and leaves it out of batchItemFailures; without it the record is named in
// batchItemFailures and the source queue's redrive policy moves it to its
// DLQ after maxReceiveCount receives (each receive finds the FAILED record
// and does not run the work; the record reaches the DLQ after
// maxReceiveCount × the visibility timeout).
//
// # The lease and the deadline
//
// Options.MinWork is how long the work of one record can take. A record is
// started only when the invocation has at least MinWork + Margin left;
// otherwise it is named in batchItemFailures without being claimed. The
// claim's lease is the guard's (at least MinWork, checked), extended every third of it while the work
// runs, and never tied to the invocation's deadline. The work's context
// ends when the lease as last extended runs out (every beat failed: the
// store throttled or unreachable), counted from before the claim or the
// extension was sent: the key is never reclaimable while a work that
// honours its context still runs. A beat sent before the work's deadline
// ends by it, and a beat in flight is cancelled when the work returns, so
// a hung store cannot hold the answer past the invocation's deadline; a
// work that goes on past its deadline (a call already sent) is still
// beaten for.
//
// Tying the lease to the deadline is the tempting fix for records left
// IN_PROGRESS after a timeout, and it is wrong: a deadline says when this
// invocation is cut off, not when the work's effect stops — a bank call
// sent a second before the timeout is still being posted when a lease that
// ended at the deadline hands the key to the next invocation, which posts
// it again. Here a record left IN_PROGRESS by a timed-out invocation comes
// back as a reclaim once its lease (plus the guard's skew margin) has
// passed: bounded by the lease, never early. The visibility timeout of the
// source queue (at least 6 × the function's timeout, as AWS advises) is
// what spaces the retries.
//
// # Waiting
//
// A record whose key waits (idempotency.Waiting: a charge whose next
// attempt is scheduled, the record WAITING until T) waits on the queue
// as serve's consumer runtime keeps it, without moving toward the DLQ or
// toward the queue's retention. On its first receive
// (ApproximateReceiveCount 1) it is named in batchItemFailures and, with
// Options.ChangeVisibility, made invisible until T, at most 12 hours at a
// time (SQS's ceiling, counted from the receive: less the batching
// window's 5 minutes and the invocation's time so far). Received before
// (StartsOver), it is started over with Options.Requeue: a copy carrying
// queue.NotBeforeAttribute (T) is sent to the source queue and the
// original is left out of batchItemFailures, so the copy starts a new age
// and a receive count of 0; a copy that cannot be sent falls back to the
// hide. A record whose not-before is still ahead is not processed (no
// claim, no store request): it waits again by the same rule.
//
// On Lambda 12 hours of waiting cost two receives and two invocations
// (the copy's first, which hides it, and its second, which starts it over),
// one visibility change, one send and one delete (two: RequeueTo deletes
// the original, and so does the mapping). The only hide of a message is
// within 12 hours of its receive, so the queue's MessageRetentionPeriod
// must be longer than one hide (HideStep, or the longest wait if shorter)
// and its maxReceiveCount at least 2 (queue.CheckWaitWithinQueue with
// resetsAge); the schedule's sum is then not bounded by the queue.
// Without Requeue the message keeps its age and its receive count across
// every wait: a wait longer than (maxReceiveCount − 1) × 12 hours reaches
// the DLQ by the redrive policy, and one that, with the message's age when
// it began, passes the retention is deleted by SQS with its record left
// waiting. Without ChangeVisibility a first receive's wait comes back
// after the queue's visibility timeout, as one to retry.
//
// On a FIFO queue a waiting record is always hidden, never requeued: a
// copy would go behind the later messages of its group (and need its own
// MessageGroupId and deduplication id, which the source queue's Send does
// not give), breaking the group's order. There the wait keeps the
// message's age and receive count, as above.
//
// # FIFO queues
//
// On a FIFO queue (an event source ARN ending in .fifo) records run one at
// a time in order, and once one is to be retried every later record of the
// batch is named too, so that a message group keeps its order.
package lambdasqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/queue"
)

// Disposition is what becomes of one record of a batch.
type Disposition int

// The dispositions.
const (
	// Delete: the work is done (now, or by an earlier delivery); the
	// record is left out of batchItemFailures and the mapping deletes it.
	Delete Disposition = iota + 1
	// Retry: not final (another invocation holds the key, the work failed
	// without a final result, the store could not be reached, or the work
	// was not started); the record is named in batchItemFailures.
	Retry
	// Permanent: it will never succeed; dead-lettered by the function
	// (Options.DeadLetter) or named in batchItemFailures for the queue's
	// redrive policy.
	Permanent
	// Wait: not to run before Verdict.Until (the key is WAITING). On a
	// first receive named in batchItemFailures and made invisible until
	// then (Options.ChangeVisibility), at most 12 hours at a time;
	// received before, started over (Options.Requeue): a copy with the
	// not-before is sent and the record left out of batchItemFailures.
	Wait
)

func (d Disposition) String() string {
	switch d {
	case Delete:
		return "delete"
	case Retry:
		return "retry"
	case Permanent:
		return "permanent"
	case Wait:
		return "wait"
	}
	return fmt.Sprintf("disposition(%d)", int(d))
}

// Verdict is what processing one record came to.
type Verdict struct {
	Disposition Disposition
	// Reason says why (its code on the DLQ for Permanent; logged for Retry).
	Reason queue.Reason
	// Until is when a Wait ends.
	Until time.Time
}

// Reason codes of the records this package decides on itself.
const (
	// CodeNoTime: not started, the invocation had less than MinWork +
	// Margin left.
	CodeNoTime queue.Code = "deadline_near"
	// CodeNoKey: Options.Key gave no key (an error, an empty or a blank key).
	CodeNoKey queue.Code = "no_key"
	// CodeAfterFailure: a FIFO record after one to retry.
	CodeAfterFailure queue.Code = "fifo_after_failure"
	// CodeDeadLetterFailed: sending a permanent failure to the DLQ failed.
	CodeDeadLetterFailed queue.Code = "dead_letter_failed"
)

// The reason codes Handler gives for the guard's outcomes.
const (
	CodeInProgress  queue.Code = "duplicate_in_progress"
	CodeUnfinished  queue.Code = "unfinished"
	CodeLeaseLost   queue.Code = "lease_lost"
	CodeUnavailable queue.Code = "store_unavailable"
	CodeFailed      queue.Code = "failed"
	CodeDupFailed   queue.Code = "duplicate_failed"
	CodeConflict    queue.Code = "conflict"
	CodeWaiting     queue.Code = "waiting"
	// CodeNotBefore: a record whose queue.NotBeforeAttribute is still
	// ahead, waiting again without being processed.
	CodeNotBefore queue.Code = "not_before"
)

// Options configure a batch handler. MinWork is required.
type Options struct {
	// MinWork is the longest the work of one record can take. A record is
	// started only with MinWork + Margin left before the deadline; the
	// guard's lease must be at least MinWork (checked), so that the key is
	// held for the work's whole length even if every heartbeat fails.
	MinWork time.Duration
	// Margin is kept free before the deadline for recording results and
	// answering. Default 2s.
	Margin time.Duration
	// Lease is the claim's lease (Handler sets the guard's): the heartbeat
	// extends it every Lease/3 while the work runs. Records requires it.
	Lease time.Duration
	// Key gives a record's idempotency key (Handler). An error or a key
	// that is empty or blank (only white space) is a permanent failure of
	// that record (CodeNoKey): never a shared key.
	Key func(events.SQSMessage) (string, error)
	// Fingerprint gives a record's fingerprint (Handler). Default: the
	// SHA-256 of the body, hex.
	Fingerprint func(events.SQSMessage) string
	// DeadLetter, when set, sends a permanent failure to the dead-letter
	// queue; the record is then left out of batchItemFailures (and named
	// in them if DeadLetter fails). Nil: permanent failures are named in
	// batchItemFailures and the queue's redrive policy moves them.
	//
	// A record is sent as soon as its verdict is known, before the next
	// record of a FIFO batch runs (a failed send stops that batch: it and
	// every later record are named). Each send is bounded by
	// DeadLetterTimeout, and every send of a batch by half the Margin
	// before the invocation's deadline; a record not sent by then is named
	// for retry (CodeDeadLetterFailed). DeadLetter should delete the source
	// message (queue's DeadLetter does, by MessageOf's receipt): otherwise a
	// batch that fails whole (WholeBatchOnFailure) brings the record back.
	// The handler remembers the message ids it sent (the last 4096) and
	// does not send one again, but another execution environment would.
	DeadLetter func(ctx context.Context, m events.SQSMessage, r queue.Reason) error
	// ChangeVisibility, when set, makes a record that waits (Wait)
	// invisible for d (the source queue's ChangeVisibility, by
	// MessageOf's receipt). It is bounded as a DeadLetter send is; a
	// failure is logged, and the record comes back after the queue's
	// visibility timeout. Nil: every Wait comes back after it.
	ChangeVisibility func(ctx context.Context, m events.SQSMessage, d time.Duration) error
	// Requeue, when set, starts over a record that waits (Wait) and was
	// received before (StartsOver: ApproximateReceiveCount > 1): it sends
	// a copy of m to the source queue, its body and CopyAttributes(m,
	// until) (its attributes and queue.NotBeforeAttribute), and returns
	// nil once the copy is sent; the record is then left out of
	// batchItemFailures and the mapping deletes it. It should delete m
	// itself too (RequeueTo does, by MessageOf's receipt), as DeadLetter
	// should: otherwise a batch that fails whole (WholeBatchOnFailure)
	// brings the original back beside its copy. An error means no copy was
	// sent: the record is hidden instead (ChangeVisibility) and named.
	// It is bounded as a DeadLetter send is, and never used on a FIFO
	// queue (see Waiting in the package doc). Nil: every Wait is hidden.
	Requeue func(ctx context.Context, m events.SQSMessage, until time.Time) error
	// Concurrency is how many records run at once. Default 1 (in order);
	// always 1 on a FIFO queue.
	Concurrency int
	// WholeBatchOnFailure makes a batch with any record to retry fail as a
	// whole (the handler returns an error): for a mapping not known to
	// have ReportBatchItemFailures (CheckMapping could not tell).
	WholeBatchOnFailure bool
	// Logger gets one line per record not deleted. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// DefaultMargin is Options.Margin's default.
const DefaultMargin = 2 * time.Second

// DeadLetterTimeout bounds one Options.DeadLetter call (within half the
// Margin before the invocation's deadline, which bounds them all).
const DeadLetterTimeout = 10 * time.Second

// ErrInvalid is returned for options that cannot work.
var ErrInvalid = errors.New("lambdasqs: invalid options")

// BatchHandler is what lambda.Start takes for an SQS event source.
type BatchHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Process handles one record: hb extends the claim's lease while the work
// runs (pass it to idempotency.DoOptions.Heartbeat). The context ends
// Margin before the invocation's deadline, and when the lease runs out: at
// Lease after the record started, pushed out to Lease after each beat that
// succeeded (cause ErrLeaseRunOut). The work must return promptly once it
// ends, before the guard's skew margin has passed.
type Process func(ctx context.Context, m events.SQSMessage, hb idempotency.Heartbeat) Verdict

func (o *Options) defaults() error {
	if o.MinWork <= 0 {
		return fmt.Errorf("%w: MinWork (how long one record's work can take) must be positive", ErrInvalid)
	}
	if o.Margin < 0 || o.Concurrency < 0 || o.Lease < 0 {
		return fmt.Errorf("%w: Margin, Lease and Concurrency must not be negative", ErrInvalid)
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lease == 0 {
		return fmt.Errorf("%w: Lease must be set (the guard's)", ErrInvalid)
	}
	// The lease alone must cover the work: a claim whose every beat fails
	// (the store unreachable) still holds the key for MinWork.
	if o.Lease < o.MinWork {
		return fmt.Errorf("%w: lease %s is shorter than MinWork %s: a second invocation could take the key while the work still runs",
			ErrInvalid, o.Lease, o.MinWork)
	}
	return nil
}

// Records returns a batch handler that runs process for each record, with
// the deadline rule, the heartbeat and the mapping of verdicts to
// batchItemFailures of this package. Handler is Records over a Guard; use
// Records where the work runs the guard itself (the charge service).
func Records(opts Options, process Process) (BatchHandler, error) {
	if process == nil {
		return nil, fmt.Errorf("%w: nil process", ErrInvalid)
	}
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, process: process}
	return r.handle, nil
}

type runner struct {
	opts    Options
	process Process
	sent    sentSet
}

func (r *runner) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	n := len(ev.Records)
	verdicts := make([]Verdict, n)
	sent := make([]bool, n) // dead-lettered: left out of batchItemFailures
	fifo := false
	for _, m := range ev.Records {
		fifo = fifo || strings.HasSuffix(m.EventSourceARN, ".fifo")
	}
	dl := r.deadLetterBy(ctx)
	began := r.opts.Now()
	settle := func(i int, m events.SQSMessage) {
		switch {
		case verdicts[i].Disposition == Permanent && r.opts.DeadLetter != nil:
			verdicts[i], sent[i] = r.deadLetter(ctx, dl, m, verdicts[i])
		case verdicts[i].Disposition == Wait:
			sent[i] = r.wait(ctx, dl, began, fifo, m, verdicts[i])
		}
	}
	if fifo || r.opts.Concurrency == 1 {
		stop := false
		for i, m := range ev.Records {
			if stop {
				verdicts[i] = Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeAfterFailure, Detail: "an earlier record of this FIFO batch is retried"}}
				continue
			}
			verdicts[i] = r.one(ctx, m)
			// Dead-lettered here, before the next record runs: on FIFO a
			// record that could not be sent is retried, and so is every
			// later one of its batch.
			settle(i, m)
			stop = fifo && !sent[i] && verdicts[i].Disposition != Delete
		}
	} else {
		sem := make(chan struct{}, r.opts.Concurrency)
		var wg sync.WaitGroup
		for i, m := range ev.Records {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				verdicts[i] = r.one(ctx, m)
				settle(i, m)
			})
		}
		wg.Wait()
	}
	var resp events.SQSEventResponse
	resp.BatchItemFailures = []events.SQSBatchItemFailure{}
	for i, m := range ev.Records {
		v := verdicts[i]
		if v.Disposition == Wait && sent[i] {
			r.opts.Logger.Info("record waits, started over as a copy", "message_id", m.MessageId, "until", v.Until.UTC().Format(time.RFC3339), "reason", v.Reason.String())
		}
		if sent[i] || v.Disposition == Delete {
			continue
		}
		switch {
		case v.Disposition == Permanent:
			r.opts.Logger.Warn("permanent failure left to the queue's redrive policy", "message_id", m.MessageId, "reason", v.Reason.String())
		case v.Disposition == Wait:
			r.opts.Logger.Info("record waits", "message_id", m.MessageId, "until", v.Until.UTC().Format(time.RFC3339), "reason", v.Reason.String())
		default:
			r.opts.Logger.Info("record named for retry", "message_id", m.MessageId, "reason", v.Reason.String())
		}
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
	}
	if r.opts.WholeBatchOnFailure && len(resp.BatchItemFailures) > 0 {
		return resp, fmt.Errorf("lambdasqs: %d of %d records to retry and the mapping is not known to report batch item failures: failing the whole batch", len(resp.BatchItemFailures), len(ev.Records))
	}
	return resp, nil
}

// deadLetterBy is when every dead-letter send of the batch must be done:
// half the margin before the invocation's deadline (the other half is for
// answering), or zero for an invocation without one.
func (r *runner) deadLetterBy(ctx context.Context) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return deadline.Add(-r.opts.Margin / 2)
}

// BatchingWindow is the most a record can have been received before its
// invocation began (the event source mapping's largest
// MaximumBatchingWindowInSeconds): taken off the 12 hours a Wait's
// visibility may last, which SQS counts from the receive.
const BatchingWindow = 5 * time.Minute

// HideStep is the least a Wait's hide lasts when its wait is longer: SQS's
// 12 hours from the receive, less BatchingWindow and the longest
// invocation (15 minutes) before it. A wait of D costs up to ⌈D /
// HideStep⌉ receives of the message.
const HideStep = queue.MaxVisibility - BatchingWindow - 15*time.Minute

// WaitVisibility is how long a record received no later than began waits
// invisible at now: until until, at most SQS's 12 hours from its receive
// (less BatchingWindow and the invocation's time so far), never negative.
func WaitVisibility(until, began, now time.Time) time.Duration {
	left := queue.MaxVisibility - BatchingWindow - now.Sub(began)
	return max(min(until.Sub(now), left), 0)
}

// StartsOver says whether a record that waits and was received
// receiveCount times (its ApproximateReceiveCount) is started over as a
// copy (Options.Requeue) rather than hidden: when it was received before,
// as serve's consumer runtime does. A first receive is hidden (one
// request, no copy); the receive that ends the hide starts the message
// over, so that no message is hidden twice and its age and receive count
// never add up across waits.
func StartsOver(receiveCount int) bool { return receiveCount > 1 }

// wait applies a Wait verdict: the record is started over (Requeue) when
// StartsOver says so and the queue is not FIFO, else hidden
// (ChangeVisibility). It reports whether a copy was sent (the record is
// then left out of batchItemFailures).
func (r *runner) wait(ctx context.Context, by, began time.Time, fifo bool, m events.SQSMessage, v Verdict) bool {
	if r.opts.Requeue != nil && !fifo && StartsOver(MessageOf(m).ReceiveCount) {
		err := r.bounded(ctx, by, func(ctx context.Context) error { return r.opts.Requeue(ctx, m, v.Until) })
		if err == nil {
			return true
		}
		r.opts.Logger.Warn("could not start a waiting record over as a copy; making it invisible instead (its next receive counts toward the DLQ, and it keeps its age)",
			"message_id", m.MessageId, "receive_count", m.Attributes["ApproximateReceiveCount"], "error", err.Error())
	}
	if r.opts.ChangeVisibility != nil {
		r.hide(ctx, by, began, m, v)
	}
	return false
}

// bounded runs call past the work's context (the verdict is final) but
// within DeadLetterTimeout and by: a queue that hangs cannot hold the
// invocation to its timeout.
func (r *runner) bounded(ctx context.Context, by time.Time, call func(context.Context) error) error {
	end := time.Now().Add(DeadLetterTimeout)
	if !by.IsZero() && by.Before(end) {
		end = by
	}
	if time.Until(end) <= 0 {
		return errors.New("no time left before the invocation's deadline")
	}
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	return call(bctx)
}

// hide makes a record that waits invisible until its verdict's Until
// (WaitVisibility), bounded as a dead-letter send is. A failure is logged:
// the record comes back after the queue's visibility timeout.
func (r *runner) hide(ctx context.Context, by, began time.Time, m events.SQSMessage, v Verdict) {
	now := r.opts.Now()
	d := WaitVisibility(v.Until, began, now)
	err := r.bounded(ctx, by, func(ctx context.Context) error { return r.opts.ChangeVisibility(ctx, m, d) })
	if err != nil {
		r.opts.Logger.Warn("could not make a waiting record invisible; it comes back after the queue's visibility timeout",
			"message_id", m.MessageId, "until", v.Until.UTC().Format(time.RFC3339), "error", err.Error())
	}
}

// MaxNotBeforeAhead is the furthest ahead a not-before attribute is
// believed (as serve's runtime): one further, or one that does not parse,
// is ignored with a warning and the record processed, its claim deciding.
const MaxNotBeforeAhead = 400 * 24 * time.Hour

// notBefore is m's queue.NotBeforeAttribute when it is still ahead.
func (r *runner) notBefore(m events.SQSMessage) (time.Time, bool) {
	a, ok := m.MessageAttributes[queue.NotBeforeAttribute]
	if !ok || a.StringValue == nil {
		return time.Time{}, false
	}
	v := *a.StringValue
	t, err := time.Parse(time.RFC3339Nano, v)
	now := r.opts.Now()
	switch {
	case err != nil:
		r.opts.Logger.Warn("ignoring a not-before attribute that does not parse; processing the record now",
			"message_id", m.MessageId, "not_before", queue.Truncate(v, 64), "error", err.Error())
		return time.Time{}, false
	case t.Sub(now) > MaxNotBeforeAhead:
		r.opts.Logger.Warn("ignoring a not-before attribute more than 400 days ahead; processing the record now",
			"message_id", m.MessageId, "not_before", queue.Truncate(v, 64))
		return time.Time{}, false
	}
	return t, t.After(now)
}

// CopyAttributes are the attributes of the copy that starts a waiting
// record over (Options.Requeue): its string-valued message attributes
// (MessageOf's: a binary one is not copied), without the dead-letter
// ones (queue.OriginalAttributes), and queue.NotBeforeAttribute set to
// until. A message with no room for one more attribute
// (queue.MaxAttributes, or the size limit) is copied without the
// not-before: its copy is processed on its first receive, and waits by
// its record's answer.
func CopyAttributes(m events.SQSMessage, until time.Time) map[string]string {
	attrs := queue.OriginalAttributes(MessageOf(m).Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs[queue.NotBeforeAttribute] = until.UTC().Format(time.RFC3339Nano)
	if len(attrs) > queue.MaxAttributes || queue.CheckOutgoing([]byte(m.Body), attrs) != nil {
		delete(attrs, queue.NotBeforeAttribute)
	}
	return attrs
}

// Requeuer is the part of the source queue (a queue.Queue, such as
// awssqs's) RequeueTo uses.
type Requeuer interface {
	Send(ctx context.Context, body []byte, attrs map[string]string) (string, error)
	Ack(ctx context.Context, msgs []queue.Message) error
}

// RequeueTo is an Options.Requeue on q, the source queue of the event
// source mapping (a standard queue): it sends m's body with
// CopyAttributes(m, until), then deletes m by its receipt (MessageOf). A
// failed send is its error (the record is hidden instead); a failed
// delete is logged on log (nil: slog.Default()) and not an error: the copy
// is on the queue, and the mapping deletes the record, left out of
// batchItemFailures (unless the batch fails whole: the original then
// comes back beside its copy, and its claim makes it a duplicate).
func RequeueTo(q Requeuer, log *slog.Logger) func(ctx context.Context, m events.SQSMessage, until time.Time) error {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, m events.SQSMessage, until time.Time) error {
		if _, err := q.Send(ctx, []byte(m.Body), CopyAttributes(m, until)); err != nil {
			return err
		}
		if err := q.Ack(ctx, []queue.Message{MessageOf(m)}); err != nil {
			log.Warn("started a waiting record over as a copy but could not delete the original; the event source mapping deletes it",
				"message_id", m.MessageId, "error", err.Error())
		}
		return nil
	}
}

// deadLetter sends a permanent failure to the DLQ: true when it was sent;
// else the record is to be retried (CodeDeadLetterFailed). A send runs past
// the work's context (the verdict is final) but is bounded by
// DeadLetterTimeout and by by, so that a DLQ that hangs cannot hold the
// invocation to its timeout (the whole batch would then come back).
func (r *runner) deadLetter(ctx context.Context, by time.Time, m events.SQSMessage, v Verdict) (Verdict, bool) {
	if r.sent.has(m.MessageId) {
		// Sent by this execution environment before, and back: a batch
		// that failed whole (WholeBatchOnFailure) brings it back when
		// DeadLetter does not delete the source. Not sent again.
		r.opts.Logger.Warn("permanent failure already dead-lettered; not sent again", "message_id", m.MessageId, "reason", v.Reason.String())
		return v, true
	}
	err := r.bounded(ctx, by, func(ctx context.Context) error { return r.opts.DeadLetter(ctx, m, v.Reason) })
	if err != nil {
		r.opts.Logger.Error("could not dead-letter a permanent failure; named for retry", "message_id", m.MessageId,
			"reason", v.Reason.String(), "error", err.Error())
		return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeDeadLetterFailed, Detail: err.Error()}}, false
	}
	r.sent.add(m.MessageId)
	r.opts.Logger.Warn("permanent failure dead-lettered", "message_id", m.MessageId, "reason", v.Reason.String())
	return v, true
}

// sentSet is the message ids an execution environment has dead-lettered,
// the newest sentMemory of them.
type sentSet struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	fifo []string
}

// sentMemory is how many dead-lettered message ids a handler remembers.
const sentMemory = 4096

func (s *sentSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

func (s *sentSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	if _, ok := s.ids[id]; ok {
		return
	}
	if len(s.fifo) >= sentMemory {
		delete(s.ids, s.fifo[0])
		s.fifo = s.fifo[1:]
	}
	s.ids[id] = struct{}{}
	s.fifo = append(s.fifo, id)
}

// one runs one record: started only with MinWork + Margin left, under a
// heartbeat while it runs. The work's context ends Margin before the
// deadline, and when the lease as last extended runs out: a work whose
// heartbeats all fail is stopped before its key can be reclaimed.
func (r *runner) one(ctx context.Context, m events.SQSMessage) Verdict {
	if until, ok := r.notBefore(m); ok {
		// A copy started over to wait, and not due yet: it waits again
		// without being processed (no claim, no store request).
		return Verdict{Disposition: Wait, Until: until,
			Reason: queue.Reason{Code: CodeNotBefore, Detail: "not before " + until.UTC().Format(time.RFC3339)}}
	}
	deadline, bounded := ctx.Deadline()
	if ctx.Err() != nil {
		return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeNoTime, Detail: "the invocation ended before this record started"}}
	}
	if bounded {
		left := deadline.Sub(r.opts.Now())
		if left < r.opts.MinWork+r.opts.Margin {
			return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeNoTime,
				Detail: fmt.Sprintf("%s left, the work needs %s plus a margin of %s: not started", left.Round(time.Millisecond), r.opts.MinWork, r.opts.Margin)}}
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-r.opts.Margin))
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hb := newBeater(r.opts.Lease, func() { cancel(ErrLeaseRunOut) })
	stop := hb.run(ctx, max(r.opts.Lease/3, 10*time.Millisecond))
	defer stop()
	return r.process(ctx, m, hb)
}

// ErrLeaseRunOut is the cause of a work's context ended because its lease,
// as last extended, ran out (every heartbeat failed): the key may be
// reclaimed by another invocation from then on.
var ErrLeaseRunOut = errors.New("lambdasqs: the claim's lease ran out (no heartbeat extended it)")

// beater is the heartbeat of one record's work. It keeps the lease's end
// as the last beat that succeeded left it (counted from before the claim or
// the extension was sent, so never later than the store's) and calls
// runOut when it passes.
type beater struct {
	lease  time.Duration
	runOut func()

	mu     sync.Mutex
	next   int
	beats  map[int]func(context.Context) error
	until  time.Time
	timer  *time.Timer
	quiet  context.Context // ends when the work has returned or the heartbeat stops
	silent context.CancelFunc
}

func newBeater(lease time.Duration, runOut func()) *beater {
	b := &beater{lease: lease, runOut: runOut, beats: map[int]func(context.Context) error{}, until: time.Now().Add(lease)}
	b.timer = time.AfterFunc(lease, runOut)
	return b
}

// Register implements idempotency.Heartbeat.
func (b *beater) Register(beat func(ctx context.Context) error) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.beats[id] = beat
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.beats, id)
	}
}

// extended records a beat sent at sent that succeeded.
func (b *beater) extended(sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	until := sent.Add(b.lease)
	if !until.After(b.until) {
		return
	}
	if !b.timer.Stop() {
		return // already run out: the work was stopped
	}
	b.until = until
	b.timer.Reset(time.Until(until))
}

// done cancels a beat in flight and any later one: the work has returned
// (its result is recorded on the lease as it is).
func (b *beater) done() {
	if b.silent != nil {
		b.silent()
	}
}

// run beats every interval until the returned stop is called. A beat is
// bounded by the interval and, when sent before it, by the work's
// deadline; it is cancelled by done and by stop, which does not wait past
// that.
func (b *beater) run(ctx context.Context, every time.Duration) (stop func()) {
	b.quiet, b.silent = context.WithCancel(context.WithoutCancel(ctx))
	deadline, bounded := ctx.Deadline()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-b.quiet.Done():
				return
			case <-t.C:
			}
			b.mu.Lock()
			fns := make([]func(context.Context) error, 0, len(b.beats))
			for _, f := range b.beats {
				fns = append(fns, f)
			}
			b.mu.Unlock()
			for _, f := range fns {
				// A beat sent before the work's deadline ends by it, so that
				// a hung store cannot hold the result's recording (and the
				// answer) past it; one sent after (a work that goes on past
				// its deadline, a call already sent) gets the interval: the
				// key stays held while the work runs.
				d := every
				if left := time.Until(deadline); bounded && left > 0 {
					d = min(d, left)
				}
				if b.quiet.Err() != nil {
					break
				}
				sent := time.Now()
				bctx, cancel := context.WithTimeout(b.quiet, d)
				err := f(bctx) // a failed beat is tried again on the next
				cancel()
				if err == nil {
					b.extended(sent)
				}
			}
		}
	}()
	return func() {
		b.silent()
		close(done)
		<-finished
		b.mu.Lock()
		b.timer.Stop()
		b.mu.Unlock()
	}
}

// Handler returns a batch handler that runs work once per key under guard:
// each record's key (opts.Key, required) and fingerprint (opts.Fingerprint)
// claimed with guard.Do. The outcomes: Acquired, Reclaimed and
// DuplicateDone delete the record; DuplicateInProgress, Unfinished,
// LeaseLost and a store that cannot be reached retry it; Waiting waits
// (until its not-before, see Waiting in the package doc); Failed (work
// returned an error wrapping idempotency.ErrPermanent), DuplicateFailed and
// Conflict are permanent failures. opts.Lease is set to the guard's.
func Handler(guard *idempotency.Guard, opts Options, work func(ctx context.Context, m events.SQSMessage) error) (BatchHandler, error) {
	if guard == nil || work == nil {
		return nil, fmt.Errorf("%w: nil guard or work", ErrInvalid)
	}
	if opts.Key == nil {
		return nil, fmt.Errorf("%w: Key is required (a record without a key of its own must never share one)", ErrInvalid)
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = BodyFingerprint
	}
	opts.Lease = guard.Lease()
	key, fingerprint := opts.Key, opts.Fingerprint
	return Records(opts, func(ctx context.Context, m events.SQSMessage, hb idempotency.Heartbeat) Verdict {
		k, err := key(m)
		if err == nil && strings.TrimSpace(k) == "" {
			err = fmt.Errorf("blank key %q", k)
		}
		if err != nil {
			return Verdict{Disposition: Permanent, Reason: queue.Reason{Code: CodeNoKey, Detail: err.Error()}}
		}
		res, err := guard.Do(ctx, k, fingerprint(m), func(ctx context.Context, _ idempotency.Run) (idempotency.Done, error) {
			err := work(ctx, m)
			if b, ok := hb.(*beater); ok {
				b.done() // a beat in flight would hold the result's recording
			}
			return idempotency.Done{Status: "DONE"}, err
		}, idempotency.DoOptions{Heartbeat: hb})
		var notRun *idempotency.NotRunError // its outcome is VerdictOf's
		if err != nil && !errors.As(err, &notRun) {
			return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeUnavailable, Detail: err.Error()}}
		}
		return VerdictOf(res)
	})
}

// VerdictOf is the verdict for one of Guard.Do's results: the one table.
func VerdictOf(res idempotency.DoResult) Verdict {
	detail := ""
	if res.Err != nil {
		detail = res.Err.Error()
	}
	switch res.Outcome {
	case idempotency.Acquired, idempotency.Reclaimed, idempotency.DuplicateDone:
		return Verdict{Disposition: Delete}
	case idempotency.DuplicateInProgress:
		return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeInProgress, Detail: fmt.Sprintf("another invocation holds the key for %s more", res.RetryAfter.Round(time.Millisecond))}}
	case idempotency.Unfinished:
		return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeUnfinished, Detail: detail}}
	case idempotency.LeaseLost:
		return Verdict{Disposition: Retry, Reason: queue.Reason{Code: CodeLeaseLost, Detail: detail}}
	case idempotency.Failed:
		return Verdict{Disposition: Permanent, Reason: queue.Reason{Code: CodeFailed, Detail: detail}}
	case idempotency.DuplicateFailed:
		return Verdict{Disposition: Permanent, Reason: queue.Reason{Code: CodeDupFailed, Detail: res.Record.Detail}}
	case idempotency.Conflict:
		return Verdict{Disposition: Permanent, Reason: queue.Reason{Code: CodeConflict, Detail: "the key was claimed with another fingerprint"}}
	case idempotency.Waiting:
		return Verdict{Disposition: Wait, Until: res.NotBefore,
			Reason: queue.Reason{Code: CodeWaiting, Detail: "next attempt at " + res.NotBefore.UTC().Format(time.RFC3339)}}
	}
	return Verdict{Disposition: Retry, Reason: queue.Reason{Code: "unknown", Detail: res.Outcome.String()}}
}

// BodyFingerprint is the default fingerprint: the SHA-256 of the body.
func BodyFingerprint(m events.SQSMessage) string {
	s := sha256.Sum256([]byte(m.Body))
	return hex.EncodeToString(s[:])
}

// MessageOf is m as a queue.Message (for a queue's DeadLetter, which sends
// it to the DLQ with the reason's attributes and deletes it by its receipt).
func MessageOf(m events.SQSMessage) queue.Message {
	attrs := make(map[string]string, len(m.MessageAttributes))
	for k, v := range m.MessageAttributes {
		if v.StringValue != nil {
			attrs[k] = *v.StringValue
		}
	}
	n := 0
	_, _ = fmt.Sscan(m.Attributes["ApproximateReceiveCount"], &n)
	return queue.Message{ID: m.MessageId, Body: []byte(m.Body), Attributes: attrs, ReceiveCount: n, Receipt: m.ReceiptHandle}
}
