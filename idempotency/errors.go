package idempotency

import (
	"errors"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Errors: the markers a unit of work returns to Do, and what the Guard
// returns. Check them with errors.Is.
var (
	// ErrPermanent marks a failure that will never succeed on retry (a
	// declined debit): Do records the key FAILED with the error's text.
	ErrPermanent = errors.New("idempotency: permanent failure")
	// ErrNotStarted marks a failure that provably had no side effect (the
	// request never left): Do gives the lease up at once, so that the next
	// attempt need not wait for it. Any other error may have had an effect,
	// and Do keeps the lease until it runs out.
	ErrNotStarted = errors.New("idempotency: work not started")

	// ErrNotFound: no record for the key (or only one past its retention).
	ErrNotFound = driver.ErrNotFound
	// ErrLeaseLost: a write conditional on our claim found it taken over
	// or finished. Do not ack, do not overwrite.
	ErrLeaseLost = driver.ErrLeaseLost
	// ErrUnavailable: the store could not be reached or answered with a
	// retryable error. Nothing was decided; back off and retry.
	ErrUnavailable = driver.ErrUnavailable
	// ErrInvalid: the caller passed something the state machine refuses.
	ErrInvalid = driver.ErrInvalid
	// ErrNotFailed: Reopen found the record not FAILED (or FAILED by a
	// later claim than the one read) and changed nothing.
	ErrNotFailed = driver.ErrNotFailed
	// ErrStale: the record changed since it was read; nothing was written.
	ErrStale = driver.ErrStale
	// ErrNotEligible: a reopening into a new generation was refused by the
	// caller's rule (ReopenOptions.Eligible; for charges: the failure was
	// not an explicit decline).
	ErrNotEligible = errors.New("idempotency: not eligible for a new generation")
	// ErrResultTooLarge: the work's value encodes to more than
	// driver.MaxResultBytes. The work ran (once): DoTyped records the key DONE
	// with a marker instead of the value, so that the work never runs
	// again for it, and every duplicate gets this error instead of a value.
	ErrResultTooLarge = errors.New("idempotency: result too large to store")
	// ErrResultNotStored: the work ran, but its value could not be stored
	// (too large, or the codec refused it); duplicates get it instead of a
	// value, and the work does not run again. ErrResultTooLarge is one kind.
	ErrResultNotStored = errors.New("idempotency: result not stored")
	// ErrResultUnreadable: the DONE record's detail is not a result this
	// call can decode: written by Guard.Do (not DoTyped), by another codec,
	// or into another type.
	ErrResultUnreadable = errors.New("idempotency: stored result unreadable")
	// ErrInProgress, ErrConflict, ErrAlreadyFailed and ErrWaiting are what
	// Do and DoTyped return (inside a *NotRunError) when the work did not
	// run and no stored result came back: another worker holds the key
	// (DuplicateInProgress), the key came with another payload (Conflict),
	// it failed for good before (DuplicateFailed), or it waits for its
	// time (Waiting, from an earlier run).
	ErrInProgress    = errors.New("idempotency: another worker holds the key")
	ErrConflict      = errors.New("idempotency: the key was used with another payload")
	ErrAlreadyFailed = errors.New("idempotency: the key failed for good before")
	ErrWaiting       = errors.New("idempotency: the key waits for its time")
	// ErrUnknownFingerprintKey: a stored fingerprint was written under a
	// key this Fingerprinter does not hold, so whether it is the same
	// payload cannot be told.
	ErrUnknownFingerprintKey = errors.New("idempotency: fingerprint written under a key not held")
)

// NotRunError is the error of Do and DoTyped when the work did not run and
// no stored result came back (the shape a Powertools user expects: "not
// done by you" is an error). errors.Is finds its sentinel (ErrInProgress,
// ErrConflict, ErrAlreadyFailed, ErrWaiting); errors.As gives the outcome,
// when a retry can succeed and the record found. The DoResult beside it
// holds the same, for callers that switch on Outcome.
type NotRunError struct {
	Outcome Outcome
	// RetryAfter is how long until a retry can succeed (DuplicateInProgress:
	// the rest of the other worker's lease; Waiting: until its time); 0
	// when a retry never will (Conflict, DuplicateFailed).
	RetryAfter time.Duration
	Record     driver.Record
}

var notRunCause = map[Outcome]error{
	DuplicateInProgress: ErrInProgress,
	Conflict:            ErrConflict,
	DuplicateFailed:     ErrAlreadyFailed,
	Waiting:             ErrWaiting,
}

func (e *NotRunError) Error() string {
	msg := "idempotency: the work did not run (outcome " + e.Outcome.String() + ")"
	if cause := e.Unwrap(); cause != nil {
		msg = cause.Error()
	}
	var about []string
	if e.Record.Key != "" {
		about = append(about, "key "+e.Record.Key)
	}
	if e.RetryAfter > 0 {
		about = append(about, "retry after "+e.RetryAfter.Round(time.Millisecond).String())
	}
	if len(about) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(about, "; ") + ")"
}

// Unwrap is the sentinel of the outcome.
func (e *NotRunError) Unwrap() error { return notRunCause[e.Outcome] }

// notRun is the NotRunError of res, an outcome where the work did not run.
func notRun(res DoResult) error {
	return &NotRunError{Outcome: res.Outcome, RetryAfter: res.RetryAfter, Record: res.Record}
}
