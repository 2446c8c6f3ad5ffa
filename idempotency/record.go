package idempotency

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is where a key is in the claim state machine.
type State string

// The three states of a record. There is no "absent" state: absence is the
// lack of a record.
const (
	StateInProgress State = "IN_PROGRESS"
	StateDone       State = "DONE"
	StateFailed     State = "FAILED"
)

// Valid reports whether s is one of the three states.
func (s State) Valid() bool {
	switch s {
	case StateInProgress, StateDone, StateFailed:
		return true
	}
	return false
}

// Record is the one item kept per business key.
type Record struct {
	Key   string
	State State
	// LeaseUntil is when the current claim expires. An IN_PROGRESS record
	// whose lease has passed may be reclaimed.
	LeaseUntil time.Time
	// Token is random per claim (the fencing token).
	Token string
	// Attempt is 1 on the first claim and grows by one on every reclaim.
	Attempt int
	// Fingerprint is a hash of the business payload (see Fingerprint).
	Fingerprint string
	// Status and Detail are the application's result, written with the final
	// state: for charges DEBITED / DEBITED_NOTIFICATION_FAILED / FAILED and a
	// reason or core-banking reference.
	Status string
	Detail string
	// CreatedAt is the time of the first claim; UpdatedAt of the last write.
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt is the retention deadline; past it the record counts as
	// absent (a DynamoDB TTL attribute deletes it some time later).
	ExpiresAt time.Time
	// The audit trail of operator reopenings (Guard.Reopen) of a FAILED
	// record: how many there were, and the last one's time, reason and the
	// status and detail the record held before it. Claims and finishes keep
	// these fields; a record taken over past its retention starts without.
	Reopens      int
	ReopenedAt   time.Time
	ReopenReason string
	PrevStatus   string
	PrevDetail   string
	// Generation counts the key generations of the work's side effect: 1
	// for the first, one more for every reopening into a new generation
	// (ReopenOptions.NewGeneration), for work whose downstream system
	// has given a final answer under the old one (a bank's decline under an
	// idempotency key is final for that key). Claims and finishes keep it;
	// a record taken over past its retention starts at 1. A store reads a
	// record written before generations existed as 1.
	Generation int
	// History holds one line per reopening, oldest first: the generation,
	// the outcome it ended with, when, why (see Guard.Reopen). With the
	// current Status and Detail it is every generation's outcome.
	History []string
}

// LeaseLive reports whether r is IN_PROGRESS with a lease that has not passed
// at now.
func (r Record) LeaseLive(now time.Time) bool {
	return r.State == StateInProgress && now.Before(r.LeaseUntil)
}

// Expired reports whether r is past its retention at now.
func (r Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// Errors returned by the Guard and by every Store. Check them with errors.Is.
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
	// ErrStale: the record changed since the caller read it (Amend); nothing
	// was written.
	ErrStale = errors.New("idempotency: record changed since it was read")
	// ErrNotEligible: a reopening into a new generation was refused by the
	// caller's rule (for charges: the failure was not an explicit decline).
	ErrNotEligible = errors.New("idempotency: not eligible for a new generation")
)

// Unavailable wraps err so that errors.Is(err, ErrUnavailable) holds, keeping
// the original error in the chain. Store implementations use it for network
// errors, throttling and timeouts.
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

// JoinHistory is a record's History as one text (one line per entry), for
// stores that keep it in a text column; SplitHistory is its inverse.
func JoinHistory(h []string) string { return strings.Join(h, "\n") }

// SplitHistory reads what JoinHistory wrote ("" is no history).
func SplitHistory(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
