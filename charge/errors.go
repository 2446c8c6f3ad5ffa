package charge

import (
	"context"
	"errors"
	"fmt"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// ErrPermanent marks a failure that will never succeed on retry (a declined
// debit: insufficient funds, closed account). Adapters wrap their errors
// with Permanent or return a *DeclineError; everything else is transient.
var ErrPermanent = errors.New("permanent failure")

// ErrInvalidEvent marks a message that is not a valid ChargeDueEvent.
var ErrInvalidEvent = errors.New("invalid charge event")

// DeclineError is a permanent refusal by the core-banking system.
type DeclineError struct {
	Code    string // e.g. INSUFFICIENT_FUNDS, ACCOUNT_CLOSED
	Message string
}

func (e *DeclineError) Error() string {
	if e.Message == "" {
		return "debit declined: " + e.Code
	}
	return fmt.Sprintf("debit declined: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrPermanent) hold for a decline.
func (e *DeclineError) Is(target error) bool { return target == ErrPermanent }

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
	case errors.Is(err, ErrPermanent):
		return ClassPermanent
	default:
		return ClassRetryable
	}
}
