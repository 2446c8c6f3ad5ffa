package idempotency

import (
	"errors"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Errors returned by the Guard. Check them with errors.Is.
var (
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
)
