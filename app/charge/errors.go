package charge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// ErrPermanent marks a failure that will never succeed on retry (a declined
// debit: insufficient funds, closed account). Adapters wrap their errors
// with Permanent or return a *DeclineError; everything else is transient.
// It is the idempotency package's marker, so that Guard.Do records FAILED.
var ErrPermanent = idempotency.ErrPermanent

// ErrInvalidEvent marks a message that is not a valid ChargeDueEvent.
var ErrInvalidEvent = errors.New("invalid charge event")

// DeclineError is a permanent refusal by the core-banking system.
type DeclineError struct {
	Code    string // e.g. INSUFFICIENT_FUNDS, ACCOUNT_CLOSED
	Message string
}

// declinedPrefix starts the text of every decline (and so the detail of a
// record FAILED by one).
const declinedPrefix = "debit declined: "

func (e *DeclineError) Error() string {
	if e.Message == "" {
		return declinedPrefix + e.Code
	}
	return fmt.Sprintf("%s%s: %s", declinedPrefix, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrPermanent) hold for a decline.
func (e *DeclineError) Is(target error) bool { return target == ErrPermanent }

// RetriesExhaustedPrefix starts the detail of a charge recorded FAILED
// because its retry schedule ran out, before the last decline's text.
const RetriesExhaustedPrefix = "retries_exhausted: "

// ErrRetriesExhausted marks the last decline of a charge whose retry
// schedule ran out (RetriesExhaustedError).
var ErrRetriesExhausted = errors.New("retries exhausted")

// RetriesExhaustedError is the last decline of a charge whose retry
// schedule (RetryPolicy) ran out: its rule's retries, the attempts per
// charge, or the window. It is permanent: recorded FAILED with
// "retries_exhausted: " and the decline's text, and Note as the history
// line of that last attempt.
type RetriesExhaustedError struct {
	Decline *DeclineError
	// Note is the history line of the last attempt (a HistoryLine).
	Note string
}

func (e *RetriesExhaustedError) Error() string { return RetriesExhaustedPrefix + e.Decline.Error() }

// Unwrap is the decline (so errors.Is(err, ErrPermanent) holds).
func (e *RetriesExhaustedError) Unwrap() error { return e.Decline }

// Is makes errors.Is(err, ErrRetriesExhausted) hold.
func (e *RetriesExhaustedError) Is(target error) bool { return target == ErrRetriesExhausted }

// HistoryNote is the line idempotency.Guard.Do adds to the FAILED
// record's history.
func (e *RetriesExhaustedError) HistoryNote() string { return e.Note }

// NoticeError is an advance notice that was not sent (notice-first mode):
// the charge is not debited. It reads as idempotency.ErrNotStarted (nothing
// was debited), so that Guard.Do gives the lease up and a later delivery
// sends the notice again, under the same key.
type NoticeError struct {
	Key string // the notice's NotificationKey
	Err error
}

func (e *NoticeError) Error() string {
	return fmt.Sprintf("advance notice %s not sent, so no debit: %v", e.Key, e.Err)
}

func (e *NoticeError) Unwrap() []error { return []error{e.Err, idempotency.ErrNotStarted} }

// notedDecline is a final decline (hard, or not in the schedule) of a
// charge whose record has a history: recorded as the decline itself, with
// its line in the history.
type notedDecline struct {
	*DeclineError
	note string
}

func (e *notedDecline) Unwrap() error       { return e.DeclineError }
func (e *notedDecline) HistoryNote() string { return e.note }

// Permanent wraps err so that IsPermanent reports true.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }

// BankFailure says what kind of not-final answer the bank gave.
type BankFailure int

// The kinds of not-final answer. Neither is ever recorded as FAILED: the
// charge is retried with the same idempotency key.
const (
	// BankUnavailable: the bank could not answer now (5xx, 408, 429, 409
	// request in progress, 423, 425, a timeout, a reset, an unreadable 2xx).
	BankUnavailable BankFailure = iota + 1
	// BankRejected: the bank refused our request as wrong or unauthorised
	// (400, 401, 403, 404, 405, 410, a redirect, any other 4xx that is not a
	// configured decline). Nothing is wrong with the charge; something is
	// wrong with us (an expired gateway token, a bad URL): alert a person.
	BankRejected
)

func (k BankFailure) String() string {
	switch k {
	case BankUnavailable:
		return "unavailable"
	case BankRejected:
		return "rejected"
	}
	return fmt.Sprintf("bank_failure(%d)", int(k))
}

// BankError is a not-final answer from the core-banking system, or no
// answer at all. It is never permanent.
type BankError struct {
	Kind BankFailure
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Code is the bank's error code, if it gave one (REQUEST_IN_PROGRESS).
	Code string
	// NotSent: the request provably never reached the bank (the connection
	// was refused, the circuit breaker is open). Only then may the claim be
	// given up early; any other failure may have posted.
	NotSent bool
	Err     error
}

func (e *BankError) Error() string {
	var b strings.Builder
	b.WriteString("core banking ")
	b.WriteString(e.Kind.String())
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.NotSent {
		b.WriteString(" (not sent)")
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *BankError) Unwrap() error { return e.Err }

// Is makes a request that never left the bank's door read as
// idempotency.ErrNotStarted, so that Guard.Do gives the lease up at once.
func (e *BankError) Is(target error) bool { return e.NotSent && target == idempotency.ErrNotStarted }

// MayHavePosted reports whether a failed debit could have moved money: true
// for every error but a decline and one that never left (ErrNotStarted, as
// a *BankError with NotSent says): the same marker Guard.Do reads to keep
// or give up the lease. When in doubt, it may have.
func MayHavePosted(err error) bool {
	return !errors.Is(err, idempotency.ErrNotStarted) && !errors.Is(err, ErrPermanent)
}

// IsRejected reports whether err is the bank refusing our requests as wrong
// or unauthorised (an operator must act).
func IsRejected(err error) bool {
	var be *BankError
	return errors.As(err, &be) && be.Kind == BankRejected
}

// InvalidEventError says which field of a message is wrong and why.
type InvalidEventError struct {
	Field  string // JSON field name, or "" for the body as a whole
	Reason string
}

func (e *InvalidEventError) Error() string {
	if e.Field == "" {
		return "invalid charge event: " + e.Reason
	}
	return fmt.Sprintf("invalid charge event: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidEvent) hold.
func (e *InvalidEventError) Is(target error) bool { return target == ErrInvalidEvent }

// InvalidResult is the result of a message that is not a ChargeDueEvent
// (err from ParseEvent): dead-lettered, never debited. Its Reason, which
// goes to the log line and the DLQ, is err's text made fit to show as any
// text from outside is (Untrusted: control characters dropped, every 8+
// digit run masked, clipped): ParseEvent names fields, not values, and
// this holds whatever else an error quotes from the body.
func InvalidResult(err error) Result {
	return Result{Outcome: Invalid, Reason: Untrusted(err.Error()), Err: err}
}

// Class is what an error means for the message that caused it.
type Class int

// The classes of error.
const (
	// ClassRetryable: nothing final was decided; leave the message for
	// redelivery. This is the default for an error we do not recognise: the
	// core-banking idempotency key makes a retried debit safe, while a
	// wrongly final FAILED loses the charge.
	ClassRetryable Class = iota
	// ClassPermanent: the debit will never succeed; record FAILED.
	ClassPermanent
	// ClassInvalid: the message itself is bad; dead-letter it.
	ClassInvalid
	// ClassLeaseLost: another worker now owns the charge; do nothing more.
	ClassLeaseLost
)

// Classify is the one place that decides what an error means: permanent,
// invalid input, lease lost, or (for anything else, including timeouts,
// cancellations and an unavailable store) retryable.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassRetryable
	case errors.Is(err, idempotency.ErrLeaseLost):
		return ClassLeaseLost
	case errors.Is(err, ErrInvalidEvent):
		return ClassInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassRetryable
	case errors.As(err, new(*BankError)):
		return ClassRetryable // never final, whatever it wraps
	case errors.Is(err, ErrPermanent):
		return ClassPermanent
	default:
		return ClassRetryable
	}
}
