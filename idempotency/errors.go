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
)
