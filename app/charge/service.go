package charge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Outcome is what processing one delivery of a charge came to. The inbound
// adapter (chargehandler) maps each to an ack decision, in one table.
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
	// Waiting: the charge waits until Result.NotBefore — this delivery
	// recorded the wait (a retry scheduled after a decline, the advance
	// notice sent), or found the charge waiting from an earlier one.
	// Result.Status says why (RetryScheduled, NoticeSent), Result.Reason
	// in words. Neither ack nor dead-letter: handle it again at NotBefore.
	Waiting
)

var outcomeNames = map[Outcome]string{
	Processed: "processed", DebitFailed: "debit_failed", RetryLater: "retry_later",
	DuplicateDone: "duplicate_done", DuplicateInProgress: "duplicate_in_progress",
	DuplicateFailed: "duplicate_failed", Conflict: "conflict", LeaseLost: "lease_lost",
	Invalid: "invalid", Waiting: "waiting",
}

func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Result is what Service.Process did with one delivery.
type Result struct {
	Outcome Outcome
	// Status is the recorded status for Processed, DebitFailed, Waiting and
	// the duplicates of a finished charge.
	Status Status
	// Reason explains dead-letters and retries, for logs and DLQ attributes.
	Reason string
	// Reference is the core-banking reference when there is one.
	Reference string
	// Attempt is the claim attempt (1 on the first claim).
	Attempt int
	// RetryAfter is how long to wait before the message should be seen
	// again (the rest of a live lease, or of a wait); 0 lets the listener
	// choose.
	RetryAfter time.Duration
	// NotBefore is when a Waiting charge runs again.
	NotBefore time.Time
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
	// Fingerprints keys the charges' fingerprints (see
	// idempotency.Fingerprinter), and recognises those written under its
	// previous keys. Default nil: unkeyed fingerprints, which reveal the
	// account number to whoever reads the store — tests only.
	Fingerprints *idempotency.Fingerprinter
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
	// It bounds the advance notice too (notice-first mode), which is then
	// not sent: no debit. Default 5s.
	NotifyTimeout time.Duration
	// Now is the clock of the notice's debitedAt, of the declines and of
	// the retries' times. Default: the Guard's clock (Guard.Now), the one
	// that decides when a waiting charge comes due.
	Now func() time.Time
	// Retry, when set, retries declines by their code (see RetryPolicy):
	// a decline its rules retry, while the schedule has room, records the
	// charge WAITING (RetryScheduled) until the next attempt, under the
	// next bank-key generation; when the schedule has run out, FAILED
	// with "retries_exhausted: " and the decline; a hard decline or a code
	// not listed is FAILED as without a policy. Every attempt's outcome is
	// a line of the record's history (HistoryLine). NewService refuses a
	// policy that Validate refuses. Default nil: every decline is final.
	Retry *RetryPolicy
	// NoticeLead, when more than zero, is notice-first mode: a charge's
	// first run sends the advance notice (AdvanceNotice: "₹25.00 will be
	// debited on or after T", T = NoticeLead after the record's first
	// claim, to the second) and records the charge WAITING (NoticeSent)
	// until T — or, for a notice sent again later, until NoticeLead after
	// that send — with the notice's line in its history; the run after
	// then debits, and sends no notification after the debit (the
	// customer was told before). A notice that cannot be sent means no
	// debit (a *NoticeError: the lease is given up and a later delivery
	// sends the same notice again, under the same key; one that could not
	// be sent for NoticeLead gives a T from its send). The one notice covers every attempt of the charge: a retry
	// after a decline (Retry) is not noticed again, nor is a debit after
	// an operator's reopening. Default 0: off, the notification after the
	// debit as always.
	NoticeLead time.Duration
	// AdvanceNotifier sends the advance notices of notice-first mode.
	// Default: the Notifier, when it is one too (every production channel
	// is); NewService refuses a NoticeLead without one.
	AdvanceNotifier AdvanceNotifier
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
	if opts.FinishTimeout < 0 || opts.FinishAttempts < 0 || opts.NotifyTimeout < 0 || opts.NoticeLead < 0 {
		return nil, errors.New("charge: FinishTimeout, FinishAttempts, NotifyTimeout and NoticeLead must not be negative")
	}
	if opts.NoticeLead > 0 && opts.AdvanceNotifier == nil {
		an, ok := opts.Notifier.(AdvanceNotifier)
		if !ok {
			return nil, errors.New("charge: NewService: a NoticeLead needs an AdvanceNotifier, and the Notifier is not one")
		}
		opts.AdvanceNotifier = an
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
	if opts.Now == nil {
		opts.Now = opts.Guard.Now
	}
	if opts.Retry != nil {
		p, err := opts.Retry.withDefaults()
		if err != nil {
			return nil, fmt.Errorf("charge: NewService: %w", err)
		}
		opts.Retry = p
	}
	return &Service{opts: opts}, nil
}

// Process handles one delivery of c: a short user of idempotency.Guard.Do,
// whose work is debit → notify. hb may be nil; when set, the lease is
// extended on every beat while the work runs, and a lost lease cancels it.
func (s *Service) Process(ctx context.Context, c Charge, hb idempotency.Heartbeat) Result {
	return s.ProcessDelivery(ctx, c, Delivery{Heartbeat: hb})
}

// Delivery is what Process is told of the delivery a charge came in.
type Delivery struct {
	// Heartbeat, when set, extends the lease on every beat while the work
	// runs (the consumer runtime's delivery).
	Heartbeat idempotency.Heartbeat
	// Bound, when set, is the claim the queue made in the transaction that
	// received the charge, and the way to record the result with the
	// message's settlement (idempotency.DoOptions.Bound).
	Bound driver.Bound
}

// ProcessDelivery is Process for a delivery that may carry a claim made in
// its receive's transaction (d.Bound).
func (s *Service) ProcessDelivery(ctx context.Context, c Charge, d Delivery) Result {
	fp := c.Fingerprint(s.opts.Fingerprints)
	res, err := s.do(ctx, c, fp, d)
	if err == nil && res.Outcome == idempotency.Conflict && res.Record.Fingerprint != fp {
		// Written under another key (a previous one, or none): the same
		// charge if its fingerprint matches under that key, and then the
		// record's own fingerprint is the one to claim with.
		same, merr := s.opts.Fingerprints.Match(res.Record.Fingerprint, c.FingerprintParts()...)
		switch {
		case merr != nil:
			return Result{Outcome: Conflict, Attempt: res.Attempt,
				Reason: fmt.Sprintf("charge id %s has a record whose fingerprint was written under a key this process does not hold (%v): add that key as a previous fingerprint key, then redrive", c.ID, merr)}
		case same:
			res, err = s.do(ctx, c, res.Record.Fingerprint, d)
		}
	}
	return s.result(c, res, err)
}

// do is one Guard.Do of c under fingerprint fp. Its error is the store's
// or the options': an outcome where the work did not run (a
// *idempotency.NotRunError) is in the result, which outcomeOf maps.
func (s *Service) do(ctx context.Context, c Charge, fp string, d Delivery) (idempotency.DoResult, error) {
	res, err := s.opts.Guard.Do(ctx, c.ID, fp, func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		return s.work(ctx, c, run)
	}, idempotency.DoOptions{Heartbeat: d.Heartbeat, Bound: d.Bound, FinishTimeout: s.opts.FinishTimeout, FinishAttempts: s.opts.FinishAttempts,
		Summary: SummaryOf(c).String()})
	var notRun *idempotency.NotRunError
	if errors.As(err, &notRun) {
		err = nil
	}
	return res, err
}

// work is one run of c under its claim: debit → notify, or, after a
// decline the schedule retries, a wait for the next attempt.
func (s *Service) work(ctx context.Context, c Charge, run idempotency.Run) (idempotency.Done, error) {
	past := readHistory(run.History)
	if s.opts.NoticeLead > 0 {
		if past.notice == nil {
			return idempotency.Done{}, s.advance(ctx, c, run)
		}
		if now := s.opts.Now(); now.Before(past.notice.Next) {
			// Never before the time the customer was given (a store
			// resumes a wait only after it; this is the domain's own word).
			return idempotency.Done{}, &idempotency.Wait{Until: past.notice.Next, Status: string(NoticeSent), Detail: noticeDetail(*past.notice)}
		}
	}
	receipt, err := s.debit(ctx, c, run)
	var decline *DeclineError
	if errors.As(err, &decline) {
		// Recorded as the decline itself ("debit declined: CODE…"): the
		// mark of a FAILED record that may get a new key generation.
		return idempotency.Done{}, s.declined(run, past, decline)
	}
	if err != nil {
		return idempotency.Done{}, err
	}
	var note string
	if s.noting() && len(run.History) > 0 {
		note = HistoryLine{Kind: HistoryDebited, Generation: run.Generation, Reference: receipt.Reference, At: s.opts.Now()}.String()
	}
	if past.notice != nil {
		// Told before the debit: no notification after it.
		return idempotency.Done{Status: string(Debited), Detail: receipt.Reference, Note: note}, nil
	}
	if nerr := s.notify(ctx, c, receipt); nerr != nil {
		s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "pre-debit notification failed after a successful debit; the debit stands",
			slog.Any("charge", c), slog.String("reference", receipt.Reference), slog.String("error", nerr.Error()))
		// The record keeps the notice (account masked), so that the
		// notification can be sent later (renotify) without the message.
		if notice, err := NoticeOf(c, receipt, s.opts.Now()).Marshal(); err == nil {
			return idempotency.Done{Status: string(DebitedNotificationFailed), Detail: string(notice), Note: note}, nil
		}
		return idempotency.Done{Status: string(DebitedNotificationFailed), Detail: receipt.Reference, Note: note}, nil
	}
	return idempotency.Done{Status: string(Debited), Detail: receipt.Reference, Note: note}, nil
}

// noting: the service writes history lines (a retry policy or the
// notice-first mode is on); without either it records what it always did.
func (s *Service) noting() bool { return s.opts.Retry != nil || s.opts.NoticeLead > 0 }

// advance sends c's advance notice and waits for its lead: WAITING
// (NoticeSent) until the lead has passed since this send, with the
// notice's history line. A notice not sent is a *NoticeError: no debit.
//
// The notice is the same on every send of it (noticeTime): a send after a
// crash between sending it and recording it — or after an answer that
// did not come in time — is the same request under the same key, which a
// receiver that holds the key replays or drops (one that implements the
// Idempotency-Key draft answers another body under it 422: the notice
// could then never be "sent", and the charge never debited).
func (s *Service) advance(ctx context.Context, c Charge, run idempotency.Run) error {
	now := s.opts.Now()
	n := AdvanceNoticeOf(c, s.noticeTime(run.CreatedAt, now))
	if err := s.bounded(ctx, func(ctx context.Context) error { return s.opts.AdvanceNotifier.NotifyAdvance(ctx, n) }); err != nil {
		// The channel's answer may name the account (the notice carries
		// it masked; the receiver may not).
		return &NoticeError{Key: n.NotificationKey, Err: &maskedError{err: err, text: MaskText(err.Error(), c.AccountID)}}
	}
	// Never sooner than the lead after this send (a re-send may be the
	// first the customer gets); the notice's time is then earlier, and
	// "on or after" it still holds.
	until := ceilSecond(now.Add(s.opts.NoticeLead))
	if n.DebitOnOrAfter.After(until) {
		until = n.DebitOnOrAfter
	}
	line := HistoryLine{Kind: HistoryNotice, NoticeKey: n.NotificationKey, At: now, Next: until}
	return &idempotency.Wait{Until: until, Status: string(NoticeSent), Detail: noticeDetail(line), Note: line.String()}
}

// noticeTime is the "on or after" of a charge's advance notice: the lead
// after the record's first claim, to the whole second below it (what
// every store keeps of that time), so that every send of the notice is
// the same; or, when that has passed already (the notice could not be
// sent for a lead's time) or the store did not say, the lead from now.
func (s *Service) noticeTime(created, now time.Time) time.Time {
	if t := created.Truncate(time.Second).Add(s.opts.NoticeLead); !created.IsZero() && t.After(now) {
		return t
	}
	return ceilSecond(now.Add(s.opts.NoticeLead))
}

// noticeDetail is a NoticeSent record's detail: "notice sent at T, debit
// on or after T2".
func noticeDetail(l HistoryLine) string {
	return fmt.Sprintf("notice sent at %s, debit on or after %s", stamp(l.At), stamp(l.Next))
}

// declined is what a decline of run's debit comes to: a wait for the next
// attempt under the next generation (the schedule retries it), the last
// decline of a schedule that ran out, or the decline itself (final) — with
// its history line whenever the record has a history or the schedule
// applies.
func (s *Service) declined(run idempotency.Run, past attempts, d *DeclineError) error {
	if !s.noting() {
		return d
	}
	at := s.opts.Now().Truncate(time.Second)
	p := s.opts.Retry.plan(d.Code, run.Generation, past, at)
	switch {
	case p.Line.Retry > 0:
		return &idempotency.Wait{Until: p.Line.Next, Status: string(RetryScheduled), NextGeneration: true, Note: p.Line.String(),
			Detail: fmt.Sprintf("next attempt at %s (attempt %d of %d, after %s)", stamp(p.Line.Next), p.Attempt, p.Of, d.Code)}
	case p.Exhausted:
		return &RetriesExhaustedError{Decline: d, Note: p.Line.String()}
	case len(run.History) > 0:
		return &notedDecline{DeclineError: d, note: p.Line.String()}
	}
	return d
}

// ClaimRequest is the claim Process would write for c now (its key, its
// fingerprint under the current key, its summary, a fresh token and the
// guard's lease): what a queue that claims in its receive's transaction writes there
// (queue.ClaimPolicy).
func (s *Service) ClaimRequest(c Charge) (driver.ClaimRequest, error) {
	req, err := s.opts.Guard.ClaimRequest(c.ID, c.Fingerprint(s.opts.Fingerprints))
	req.Summary = SummaryOf(c).String()
	return req, err
}

// outcomeOf is what each of Guard.Do's outcomes means for a charge: the
// one place they are translated.
var outcomeOf = map[idempotency.Outcome]Outcome{
	idempotency.Acquired:            Processed,
	idempotency.Reclaimed:           Processed,
	idempotency.Failed:              DebitFailed,
	idempotency.Unfinished:          RetryLater,
	idempotency.LeaseLost:           LeaseLost,
	idempotency.DuplicateDone:       DuplicateDone,
	idempotency.DuplicateInProgress: DuplicateInProgress,
	idempotency.DuplicateFailed:     DuplicateFailed,
	idempotency.Conflict:            Conflict,
	idempotency.Waiting:             Waiting,
}

// result maps what Guard.Do said to the charge's outcome (outcomeOf), with
// the words an operator reads.
func (s *Service) result(c Charge, res idempotency.DoResult, err error) Result {
	if err != nil { // the store could not be reached: nothing was decided, or the result not recorded
		r := Result{Outcome: RetryLater, Reason: err.Error(), Attempt: res.Attempt, Err: err}
		if res.Attempt == 0 {
			r.Reason = "claim: " + r.Reason
		}
		return r
	}
	out, ok := outcomeOf[res.Outcome]
	if !ok {
		return Result{Outcome: RetryLater, Reason: fmt.Sprintf("unknown outcome %v", res.Outcome), Attempt: res.Attempt,
			Err: fmt.Errorf("charge: unknown outcome %v", res.Outcome)}
	}
	r := Result{Outcome: out, Attempt: res.Attempt, RetryAfter: res.RetryAfter}
	switch out {
	case Processed, DuplicateDone:
		r.Status, r.Reference = Status(res.Done.Status), ReferenceOf(res.Done.Status, res.Done.Detail)
	case DebitFailed:
		r.Status, r.Reason = Failed, res.Err.Error()
	case RetryLater:
		r.Reason, r.Err, r.Alert = "debit: "+res.Err.Error(), res.Err, IsRejected(res.Err)
		if errors.As(res.Err, new(*NoticeError)) {
			r.Reason = res.Err.Error()
		}
	case LeaseLost:
		r.Reason, r.Err = "lease lost: "+res.Err.Error(), res.Err
	case DuplicateInProgress:
		r.Reason = "another delivery holds the claim"
	case DuplicateFailed:
		r.Status, r.Reason = Status(res.Record.Status), "charge previously failed: "+res.Record.Detail
	case Conflict:
		r.Reason = fmt.Sprintf("charge id %s was already seen with a different payload (state %s)", c.ID, res.Record.State)
	case Waiting:
		r.Status, r.Reason, r.NotBefore = Status(res.Done.Status), res.Done.Detail, res.NotBefore
	}
	return r
}

// debit posts the charge under its generation's bank key. On a reclaim,
// with an Enquirer, it first asks the bank what became of the earlier
// attempt with that key and posts only if the bank never saw it.
func (s *Service) debit(ctx context.Context, c Charge, run idempotency.Run) (DebitReceipt, error) {
	req := c.DebitRequestFor(run.Generation)
	if run.Reclaimed && s.opts.Enquirer != nil {
		e, err := s.opts.Enquirer.Enquire(ctx, req.IdempotencyKey)
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
	return s.opts.Debiter.Debit(ctx, req)
}

// notify sends the pre-debit notification, waiting at most NotifyTimeout
// even for a notifier that ignores its context.
func (s *Service) notify(ctx context.Context, c Charge, receipt DebitReceipt) error {
	return s.bounded(ctx, func(ctx context.Context) error { return s.opts.Notifier.NotifyPreDebit(ctx, c, receipt) })
}

// bounded runs send, waiting at most NotifyTimeout even for a channel
// that ignores its context.
func (s *Service) bounded(ctx context.Context, send func(context.Context) error) error {
	nctx, cancel := context.WithTimeout(ctx, s.opts.NotifyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- send(nctx) }()
	select {
	case err := <-done:
		return err
	case <-nctx.Done():
		return fmt.Errorf("notification gave no answer within %s: %w", s.opts.NotifyTimeout, context.Cause(nctx))
	}
}

// maskedError is err with its text masked for an account (MaskText); it
// still unwraps to err.
type maskedError struct {
	err  error
	text string
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }
