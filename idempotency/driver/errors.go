package driver

import (
	"errors"
	"fmt"
)

// Errors returned by every Store (and passed on by the Guard). Check them
// with errors.Is.
var (
	// ErrNotFound: no record for the key (or only one past its retention).
	ErrNotFound = errors.New("idempotency: record not found")
	// ErrLeaseLost: the write was conditional on state IN_PROGRESS and our
	// token, and the condition failed: the claim was reclaimed by another
	// worker, or already finished. Do not ack, do not overwrite.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrUnavailable: the store could not be reached or answered with a
	// retryable error. Nothing was decided; back off and retry.
	ErrUnavailable = errors.New("idempotency: store unavailable")
	// ErrInvalid: the caller passed something the state machine refuses
	// (empty key, bad state, zero lease).
	ErrInvalid = errors.New("idempotency: invalid argument")
	// ErrNotFailed: Reopen found the record in a state other than FAILED
	// (DONE or IN_PROGRESS are never reopened), or — with a PrevToken — a
	// FAILED record of a later claim than the one read, and changed nothing.
	ErrNotFailed = errors.New("idempotency: record is not FAILED")
	// ErrStale: the record changed since the caller read it (Amend,
	// Collect); nothing
	// was written.
	ErrStale = errors.New("idempotency: record changed since it was read")
	// ErrNotIndexed: the store cannot answer without a scan of every
	// record (a state its index does not hold, or a table made before
	// the index: the error says which and what to run). Nothing is wrong
	// with the records.
	ErrNotIndexed = errors.New("idempotency: not indexed")
)

// Unavailable wraps err so that errors.Is(err, ErrUnavailable) holds, keeping
// the original error in the chain. Stores use it for network errors,
// throttling and timeouts.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{op: op, err: err}
}

type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("idempotency: %s: store unavailable: %v", e.op, e.err)
}
func (e *unavailableError) Unwrap() []error {
	return []error{ErrUnavailable, e.err}
}
