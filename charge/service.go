package charge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// Outcome is what processing one delivery of a charge came to. The listener
// maps each to an ack decision (see Outcome.Action).
type Outcome int

// The outcomes, one per row of the design's outcome table.
const (
	// Processed: we debited (Result.Status says whether the notification
	// went out) and recorded DONE. Ack.
	Processed Outcome = iota + 1
	// DebitFailed: the debit was declined permanently and FAILED recorded.
	// Dead-letter, ack.
	DebitFailed
	// RetryLater: a transient failure (debit timeout, 5xx, store
	// unavailable). Nothing final was recorded. Do not ack; back off.
	RetryLater
	// DuplicateDone: already debited by an earlier delivery. Audit, ack.
	DuplicateDone
	// DuplicateInProgress: another delivery holds a live lease. Do not ack;
	// make the message visible again around Result.RetryAfter.
	DuplicateInProgress
	// DuplicateFailed: an earlier delivery recorded FAILED. Dead-letter, ack.
	DuplicateFailed
	// Conflict: the charge id was seen with a different payload. Never
	// debit. Dead-letter with the reason, ack, alert.
	Conflict
	// LeaseLost: our claim was taken over while we worked. Do not ack and
	// do not overwrite; the new owner finishes.
	LeaseLost
	// Invalid: the message is not a valid ChargeDueEvent. Never debit.
	// Dead-letter with the reason, ack.
	Invalid
)

var outcomeNames = map[Outcome]string{
	Processed: "processed", DebitFailed: "debit_failed", RetryLater: "retry_later",
	DuplicateDone: "duplicate_done", DuplicateInProgress: "duplicate_in_progress",
	DuplicateFailed: "duplicate_failed", Conflict: "conflict", LeaseLost: "lease_lost",
	Invalid: "invalid",
}

func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Action is what the listener does with the message.
type Action int

// The three things a listener can do with a message.
const (
	// Ack deletes the message: its effect is recorded (or it is a recorded
	// duplicate).
	Ack Action = iota + 1
	// Retry leaves the message on the queue, to be delivered again after a
	// delay; it is never acked.
	Retry
	// DeadLetter forwards the message to the dead-letter queue with a reason
	// and then deletes it from the main queue.
	DeadLetter
)

// Action maps an outcome to what the listener does: the design's table.
func (o Outcome) Action() Action {
	switch o {
	case Processed, DuplicateDone:
		return Ack
	case DebitFailed, DuplicateFailed, Conflict, Invalid:
		return DeadLetter
	default: // RetryLater, DuplicateInProgress, LeaseLost, and anything unknown
		return Retry
	}
}

// Result is what Service.Process did with one delivery.
type Result struct {
	Outcome Outcome
	// Status is the recorded status for Processed, DebitFailed and the
	// duplicates of a finished charge.
	Status Status
	// Reason explains dead-letters and retries, for logs and DLQ attributes.
	Reason string
	// Reference is the core-banking reference when there is one.
	Reference string
	// Attempt is the claim attempt (1 on the first claim).
	Attempt int
	// RetryAfter is how long to wait before the message should be seen
	// again (the rest of a live lease); 0 lets the listener choose.
	RetryAfter time.Duration
	// Err is the underlying error for RetryLater and LeaseLost.
	Err error
}

// Options configure a Service.
type Options struct {
	// Guard runs the claim state machine. Required.
	Guard *idempotency.Guard
	// Debiter and Notifier are the outbound ports. Required.
	Debiter  Debiter
	Notifier Notifier
	// Logger for what the Result cannot carry (a notification failure after a
	// debit). Default: slog.Default().
	Logger *slog.Logger
	// FinishTimeout bounds each attempt to record DONE or FAILED after the
	// debit. It runs even if the delivery's context was cancelled, because the
	// money has already moved. Default 5s.
	FinishTimeout time.Duration
	// FinishAttempts is how many times recording DONE or FAILED is tried
	// while the store is unavailable before giving up (RetryLater). Default 3.
	FinishAttempts int
}

// Service runs claim → debit → notify → done for one charge.
type Service struct {
	opts Options
}

// NewService checks opts and returns a Service.
func NewService(opts Options) (*Service, error) {
	if opts.Guard == nil || opts.Debiter == nil || opts.Notifier == nil {
		return nil, errors.New("charge: NewService needs a Guard, a Debiter and a Notifier")
	}
	if opts.FinishTimeout < 0 || opts.FinishAttempts < 0 {
		return nil, errors.New("charge: FinishTimeout and FinishAttempts must not be negative")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FinishTimeout == 0 {
		opts.FinishTimeout = 5 * time.Second
	}
	if opts.FinishAttempts == 0 {
		opts.FinishAttempts = 3
	}
	return &Service{opts: opts}, nil
}

// Process handles one delivery of c. hb may be nil; when set, the service
// registers a beat that extends its lease while the debit and notification
// run.
func (s *Service) Process(ctx context.Context, c Charge, hb Heartbeat) Result {
	g := s.opts.Guard
	claim, err := g.Claim(ctx, c.ID, c.Fingerprint())
	if err != nil {
		return Result{Outcome: RetryLater, Reason: "claim: " + err.Error(), Err: err}
	}
	rec := claim.Record
	switch claim.Outcome {
	case idempotency.DuplicateDone:
		return Result{Outcome: DuplicateDone, Status: Status(rec.Status), Reference: rec.Detail, Attempt: rec.Attempt}
	case idempotency.DuplicateFailed:
		return Result{Outcome: DuplicateFailed, Status: Status(rec.Status), Attempt: rec.Attempt,
			Reason: "charge previously failed: " + rec.Detail}
	case idempotency.DuplicateInProgress:
		return Result{Outcome: DuplicateInProgress, Attempt: rec.Attempt,
			Reason: "another delivery holds the claim", RetryAfter: rec.LeaseUntil.Sub(g.Now())}
	case idempotency.Conflict:
		return Result{Outcome: Conflict, Attempt: rec.Attempt,
			Reason: fmt.Sprintf("charge id %s was already seen with a different payload (state %s)", c.ID, rec.State)}
	}

	lease := claim.Lease()
	if hb != nil {
		leaseCh := make(chan idempotency.Lease, 1)
		leaseCh <- lease
		unregister := hb.Register(func(ctx context.Context) error {
			l := <-leaseCh
			nl, err := g.Extend(ctx, l)
			leaseCh <- nl
			return err
		})
		defer unregister()
	}

	receipt, err := s.opts.Debiter.Debit(ctx, DebitRequest{
		IdempotencyKey: c.ID,
		AccountID:      c.AccountID,
		Amount:         c.Amount,
		ChargeType:     c.Type,
		Narrative:      fmt.Sprintf("%s %s", c.Type, c.DueDate.Format(time.DateOnly)),
	})
	if err != nil {
		if Classify(err) == ClassPermanent {
			reason := err.Error()
			if ferr := s.finish(ctx, lease, g.Fail, Failed, reason); ferr != nil {
				return s.finishError(ferr, lease.Attempt)
			}
			return Result{Outcome: DebitFailed, Status: Failed, Reason: reason, Attempt: lease.Attempt}
		}
		// Transient: record nothing final. Give the lease up early (keeping
		// the record and its attempt count) so the next delivery reclaims
		// at once instead of waiting out the lease.
		s.yield(ctx, lease)
		return Result{Outcome: RetryLater, Reason: "debit: " + err.Error(), Attempt: lease.Attempt, Err: err}
	}

	status := Debited
	if nerr := s.opts.Notifier.NotifyPreDebit(ctx, c, receipt); nerr != nil {
		status = DebitedNotificationFailed
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "pre-debit notification failed after a successful debit; the debit stands",
			slog.Any("charge", c), slog.String("reference", receipt.Reference), slog.String("error", nerr.Error()))
	}
	if ferr := s.finish(ctx, lease, g.Complete, status, receipt.Reference); ferr != nil {
		return s.finishError(ferr, lease.Attempt)
	}
	return Result{Outcome: Processed, Status: status, Reference: receipt.Reference, Attempt: lease.Attempt}
}

// finish records the final state. The money has moved (or been refused) by
// now, so it runs on a context that the delivery's cancellation does not
// reach, and retries while the store is unavailable.
func (s *Service) finish(ctx context.Context, l idempotency.Lease,
	write func(context.Context, idempotency.Lease, string, string) error, status Status, detail string) error {
	base := context.WithoutCancel(ctx)
	var err error
	for i := range s.opts.FinishAttempts {
		if i > 0 {
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
		}
		fctx, cancel := context.WithTimeout(base, s.opts.FinishTimeout)
		err = write(fctx, l, string(status), detail)
		cancel()
		if err == nil || errors.Is(err, idempotency.ErrLeaseLost) {
			return err
		}
	}
	return err
}

func (s *Service) finishError(err error, attempt int) Result {
	if errors.Is(err, idempotency.ErrLeaseLost) {
		return Result{Outcome: LeaseLost, Reason: "lease lost before the result was recorded; the new owner finishes", Attempt: attempt, Err: err}
	}
	return Result{Outcome: RetryLater, Reason: "record result: " + err.Error(), Attempt: attempt, Err: err}
}

// yield ends the lease now, so that the next delivery may reclaim the key
// without waiting; failure to do so only delays that.
func (s *Service) yield(ctx context.Context, l idempotency.Lease) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.FinishTimeout)
	defer cancel()
	if err := s.opts.Guard.Yield(fctx, l); err != nil && !errors.Is(err, idempotency.ErrLeaseLost) {
		s.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "could not end the lease early", slog.String("error", err.Error()))
	}
}
