package charge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// Alert: the bank rejected our request as wrong or unauthorised; a
	// person must act (RetryLater).
	Alert bool
}

// Options configure a Service.
type Options struct {
	// Guard runs the claim state machine. Required.
	Guard *idempotency.Guard
	// Debiter and Notifier are the outbound ports. Required.
	Debiter  Debiter
	Notifier Notifier
	// Enquirer, when set, is asked what became of the debit before a
	// reclaimed charge (one whose earlier attempt may have posted) is posted
	// again: POSTED is recorded DONE with the bank's reference without a
	// second post, IN_PROGRESS waits, NOT_FOUND posts. Optional.
	Enquirer Enquirer
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
	// NotifyTimeout bounds the pre-debit notification. A notification that
	// has not answered by then is a failed notification
	// (DEBITED_NOTIFICATION_FAILED), never a reason to retry the debit; the
	// service stops waiting even for a notifier that ignores its context.
	// Default 5s.
	NotifyTimeout time.Duration
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
	if opts.FinishTimeout < 0 || opts.FinishAttempts < 0 || opts.NotifyTimeout < 0 {
		return nil, errors.New("charge: FinishTimeout, FinishAttempts and NotifyTimeout must not be negative")
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
	if opts.NotifyTimeout == 0 {
		opts.NotifyTimeout = 5 * time.Second
	}
	return &Service{opts: opts}, nil
}

// Process handles one delivery of c. hb may be nil; when set, the service
// registers a beat that extends its lease while the debit and notification
// run. If the lease is lost while it works, the work is cancelled and the
// outcome is LeaseLost.
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
			Reason: "another delivery holds the claim", RetryAfter: g.ReclaimableAt(rec.LeaseUntil).Sub(g.Now())}
	case idempotency.Conflict:
		return Result{Outcome: Conflict, Attempt: rec.Attempt,
			Reason: fmt.Sprintf("charge id %s was already seen with a different payload (state %s)", c.ID, rec.State)}
	}

	// The work runs on a context the heartbeat cancels when the lease is
	// lost: a worker that no longer owns the charge stops talking to the bank.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := &heldLease{l: claim.Lease()}
	if hb != nil {
		unregister := hb.Register(func(bctx context.Context) error {
			err := held.extend(bctx, g)
			if errors.Is(err, idempotency.ErrLeaseLost) {
				cancel(idempotency.ErrLeaseLost)
			}
			return err // logged by the runtime; a transient error keeps the beat
		})
		defer unregister()
	}
	lease := held.get()

	receipt, err := s.debit(ctx, c, claim.Outcome == idempotency.Reclaimed)
	if err != nil {
		if errors.Is(context.Cause(ctx), idempotency.ErrLeaseLost) {
			return Result{Outcome: LeaseLost, Reason: "lease lost while debiting; the new owner finishes (same idempotency key)",
				Attempt: lease.Attempt, Err: idempotency.ErrLeaseLost}
		}
		if Classify(err) == ClassPermanent {
			reason := err.Error()
			if ferr := s.finish(ctx, lease, g.Fail, Failed, reason); ferr != nil {
				return s.finishError(ferr, lease.Attempt)
			}
			return Result{Outcome: DebitFailed, Status: Failed, Reason: reason, Attempt: lease.Attempt}
		}
		res := Result{Outcome: RetryLater, Reason: "debit: " + err.Error(), Attempt: lease.Attempt, Err: err, Alert: IsRejected(err)}
		if !MayHavePosted(err) {
			// The request never reached the bank: give the lease up early
			// (keeping the record and its attempt count) so that the next
			// delivery reclaims at once.
			s.yield(ctx, held.get())
			return res
		}
		// The debit may have posted, or may still be posting: keep the claim,
		// so that no other delivery posts while the first request may still
		// be running at the bank, and come back once the lease has passed
		// (the reclaim asks the bank first, where it can).
		res.RetryAfter = max(g.ReclaimableAt(held.get().Until).Sub(g.Now()), 0)
		return res
	}

	status := Debited
	if nerr := s.notify(ctx, c, receipt); nerr != nil {
		status = DebitedNotificationFailed
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "pre-debit notification failed after a successful debit; the debit stands",
			slog.Any("charge", c), slog.String("reference", receipt.Reference), slog.String("error", nerr.Error()))
	}
	lease = held.get()
	if ferr := s.finish(ctx, lease, g.Complete, status, receipt.Reference); ferr != nil {
		return s.finishError(ferr, lease.Attempt)
	}
	return Result{Outcome: Processed, Status: status, Reference: receipt.Reference, Attempt: lease.Attempt}
}

// debit posts the charge. On a reclaim, with an Enquirer, it first asks the
// bank what became of the earlier attempt and posts only if the bank never
// saw the key.
func (s *Service) debit(ctx context.Context, c Charge, reclaimed bool) (DebitReceipt, error) {
	if reclaimed && s.opts.Enquirer != nil {
		e, err := s.opts.Enquirer.Enquire(ctx, c.ID)
		if err != nil {
			return DebitReceipt{}, fmt.Errorf("status enquiry: %w", err)
		}
		switch e.State {
		case DebitPosted:
			return DebitReceipt{Reference: e.Reference}, nil
		case DebitDeclined:
			if e.Decline != nil {
				return DebitReceipt{}, e.Decline
			}
			return DebitReceipt{}, &DeclineError{Code: "DECLINED"}
		case DebitInProgress:
			return DebitReceipt{}, &BankError{Kind: BankUnavailable, Code: "IN_PROGRESS",
				Err: errors.New("status enquiry: the bank is still processing an earlier request with this key")}
		case DebitNotFound:
		default:
			return DebitReceipt{}, &BankError{Kind: BankUnavailable, Err: fmt.Errorf("status enquiry: unknown state %v", e.State)}
		}
	}
	return s.opts.Debiter.Debit(ctx, DebitRequest{
		IdempotencyKey: c.ID,
		AccountID:      c.AccountID,
		Amount:         c.Amount,
		ChargeType:     c.Type,
		Narrative:      fmt.Sprintf("%s %s", c.Type, c.DueDate.Format(time.DateOnly)),
	})
}

// notify sends the pre-debit notification, waiting at most NotifyTimeout
// even for a notifier that ignores its context.
func (s *Service) notify(ctx context.Context, c Charge, receipt DebitReceipt) error {
	nctx, cancel := context.WithTimeout(ctx, s.opts.NotifyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.opts.Notifier.NotifyPreDebit(nctx, c, receipt) }()
	select {
	case err := <-done:
		return err
	case <-nctx.Done():
		return fmt.Errorf("notification gave no answer within %s: %w", s.opts.NotifyTimeout, context.Cause(nctx))
	}
}

// heldLease is the lease as the heartbeat last extended it.
type heldLease struct {
	mu sync.Mutex
	l  idempotency.Lease
}

func (h *heldLease) get() idempotency.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

// extend pushes the lease out; on failure the lease stays as it was.
func (h *heldLease) extend(ctx context.Context, g *idempotency.Guard) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	nl, err := g.Extend(ctx, h.l)
	if err == nil {
		h.l = nl
	}
	return err
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
