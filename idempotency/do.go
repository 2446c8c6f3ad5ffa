package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Markers for the errors a unit of work returns to Do.
var (
	// ErrPermanent marks a failure that will never succeed on retry (a
	// declined debit): Do records the key FAILED with the error's text.
	ErrPermanent = errors.New("idempotency: permanent failure")
	// ErrNotStarted marks a failure that provably had no side effect (the
	// request never left): Do gives the lease up at once, so that the next
	// attempt need not wait for it. Any other error may have had an effect,
	// and Do keeps the lease until it runs out.
	ErrNotStarted = errors.New("idempotency: work not started")
	// ErrInProgress: another worker holds a live claim (see *BusyError).
	ErrInProgress = errors.New("idempotency: in progress elsewhere")
	// ErrConflict: the key was claimed with another fingerprint (see
	// *ConflictError). The work must never run for it.
	ErrConflict = errors.New("idempotency: key reused with another payload")
	// ErrFailed: the key is recorded FAILED (see *FailedError).
	ErrFailed = errors.New("idempotency: recorded as failed")
)

// Heartbeat keeps work alive while it runs (the consumer runtime's
// Delivery): every registered function runs on each beat. An error keeps
// the function registered; the returned function unregisters it.
type Heartbeat interface {
	Register(beat func(ctx context.Context) error) (unregister func())
}

// DoOptions configure one Guard.Do. The zero value takes the defaults.
type DoOptions struct {
	// Heartbeat, when set, extends the lease on every beat while the work
	// runs; a lost lease cancels the work's context.
	Heartbeat Heartbeat
	// FinishTimeout bounds each attempt to record DONE or FAILED; the
	// recording runs on a context the caller's cancellation cannot reach,
	// since the work's effect has happened. Default 5s.
	FinishTimeout time.Duration
	// FinishAttempts is how often recording is tried while the store is
	// unavailable. Default 3.
	FinishAttempts int
}

// Run is what the work is told about its claim.
type Run struct {
	Lease Lease
	// Reclaimed: an earlier attempt held the key and did not finish; its
	// effect may have happened (ask before doing it again, where you can).
	Reclaimed bool
	// Generation is the record's key generation (1 unless an operator
	// reopened it into a new one): derive a downstream idempotency key
	// from it, so that a new generation is a new request downstream.
	Generation int
}

// Done is the work's result, stored with DONE and handed to duplicates.
type Done struct {
	Status string
	Detail string
}

// DoResult is what Do did.
type DoResult struct {
	// Outcome is Acquired or Reclaimed (the work ran now) or DuplicateDone
	// (it ran before; Done is the stored result).
	Outcome Outcome
	Done    Done
	Attempt int
}

// BusyError: another worker holds a live claim; try again after RetryAfter.
type BusyError struct {
	Record     Record
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("idempotency: %s is in progress elsewhere (attempt %d); retry after %s", e.Record.Key, e.Record.Attempt, e.RetryAfter)
}

// Is makes errors.Is(err, ErrInProgress) hold.
func (e *BusyError) Is(target error) bool { return target == ErrInProgress }

// ConflictError: the key exists with another fingerprint.
type ConflictError struct{ Record Record }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("idempotency: %s was already seen with a different payload (state %s)", e.Record.Key, e.Record.State)
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// FailedError: the key is recorded FAILED, by an earlier attempt
// (Previously) or by this one, whose work returned Err (ErrPermanent).
type FailedError struct {
	Record     Record
	Previously bool
	Err        error
}

func (e *FailedError) Error() string {
	if e.Previously {
		return "idempotency: previously failed: " + e.Record.Detail
	}
	return "idempotency: failed: " + e.Err.Error()
}

// Is makes errors.Is(err, ErrFailed) hold.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// Unwrap returns the work's error.
func (e *FailedError) Unwrap() error { return e.Err }

// RetryError: the work failed without a final result. Nothing was
// recorded; try again after RetryAfter (0: at once, the lease was given
// up because the work never started), under the same key.
type RetryError struct {
	RetryAfter time.Duration
	Attempt    int
	Err        error
}

func (e *RetryError) Error() string { return e.Err.Error() }

// Unwrap returns the work's error.
func (e *RetryError) Unwrap() error { return e.Err }

// Do runs fn at most once per key, however often it is called: it claims
// key for fingerprint, runs fn under the claim (extending the lease on
// opts.Heartbeat's beats), and records fn's result as DONE, or FAILED when
// fn's error is ErrPermanent. A later call with the same key gets the
// stored result (Outcome DuplicateDone) without running fn.
//
// Errors: *BusyError (ErrInProgress) while another worker holds the key;
// *ConflictError (ErrConflict) for another fingerprint; *FailedError
// (ErrFailed) when the key is FAILED, now or before; ErrLeaseLost when the
// claim was taken over while fn ran (do not retry: the new owner finishes);
// *RetryError when fn failed without a final result (the lease is kept
// unless fn's error is ErrNotStarted); ErrUnavailable (wrapped) when the
// store could not be reached, before or after fn ran.
func (g *Guard) Do(ctx context.Context, key, fingerprint string, fn func(context.Context, Run) (Done, error), opts DoOptions) (DoResult, error) {
	if opts.FinishTimeout < 0 || opts.FinishAttempts < 0 {
		return DoResult{}, fmt.Errorf("%w: FinishTimeout and FinishAttempts must not be negative", ErrInvalid)
	}
	if opts.FinishTimeout == 0 {
		opts.FinishTimeout = 5 * time.Second
	}
	if opts.FinishAttempts == 0 {
		opts.FinishAttempts = 3
	}
	claim, err := g.Claim(ctx, key, fingerprint)
	if err != nil {
		return DoResult{}, err
	}
	rec := claim.Record
	switch claim.Outcome {
	case DuplicateDone:
		return DoResult{Outcome: DuplicateDone, Done: Done{Status: rec.Status, Detail: rec.Detail}, Attempt: rec.Attempt}, nil
	case DuplicateFailed:
		return DoResult{Attempt: rec.Attempt}, &FailedError{Record: rec, Previously: true}
	case DuplicateInProgress:
		return DoResult{Attempt: rec.Attempt}, &BusyError{Record: rec, RetryAfter: g.ReclaimableAt(rec.LeaseUntil).Sub(g.Now())}
	case Conflict:
		return DoResult{Attempt: rec.Attempt}, &ConflictError{Record: rec}
	}

	// The work runs on a context that a lost lease cancels: a worker that
	// no longer owns the key stops.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := &heldLease{l: claim.Lease()}
	if opts.Heartbeat != nil {
		unregister := opts.Heartbeat.Register(func(bctx context.Context) error {
			err := held.extend(bctx, g)
			if errors.Is(err, ErrLeaseLost) {
				cancel(ErrLeaseLost)
			}
			return err // a transient error keeps the beat: the next one tries again
		})
		defer unregister()
	}
	attempt := held.get().Attempt
	done, err := fn(ctx, Run{Lease: held.get(), Reclaimed: claim.Outcome == Reclaimed, Generation: max(rec.Generation, 1)})
	if errors.Is(context.Cause(ctx), ErrLeaseLost) {
		return DoResult{Attempt: attempt}, fmt.Errorf("%w: taken over while the work ran; the new owner finishes", ErrLeaseLost)
	}
	if err != nil {
		if errors.Is(err, ErrPermanent) {
			if ferr := g.record(ctx, held.get(), StateFailed, "FAILED", err.Error(), opts); ferr != nil {
				return DoResult{Attempt: attempt}, ferr
			}
			return DoResult{Attempt: attempt}, &FailedError{Record: Record{Key: key, State: StateFailed, Status: "FAILED", Detail: err.Error(), Attempt: attempt}, Err: err}
		}
		if errors.Is(err, ErrNotStarted) {
			g.yield(ctx, held.get(), opts)
			return DoResult{Attempt: attempt}, &RetryError{Attempt: attempt, Err: err}
		}
		// It may have had an effect, or may still be having it: keep the
		// claim, so that no other attempt runs meanwhile; come back once
		// it has passed.
		return DoResult{Attempt: attempt}, &RetryError{Attempt: attempt, Err: err,
			RetryAfter: max(g.ReclaimableAt(held.get().Until).Sub(g.Now()), 0)}
	}
	if ferr := g.record(ctx, held.get(), StateDone, done.Status, done.Detail, opts); ferr != nil {
		return DoResult{Attempt: attempt}, ferr
	}
	return DoResult{Outcome: claim.Outcome, Done: done, Attempt: attempt}, nil
}

// record writes the final state on a context the caller's cancellation
// does not reach, retrying while the store is unavailable.
func (g *Guard) record(ctx context.Context, l Lease, s State, status, detail string, opts DoOptions) error {
	base := context.WithoutCancel(ctx)
	var err error
	for i := range opts.FinishAttempts {
		if i > 0 {
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
		}
		fctx, cancel := context.WithTimeout(base, opts.FinishTimeout)
		err = g.finish(fctx, l, s, status, detail)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return fmt.Errorf("%w: before the result was recorded; the new owner finishes", err)
		}
	}
	return fmt.Errorf("record the result: %w", err)
}

// yield gives the lease up; failing to only delays the next attempt.
func (g *Guard) yield(ctx context.Context, l Lease, opts DoOptions) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.FinishTimeout)
	defer cancel()
	_ = g.Yield(fctx, l)
}

// heldLease is the lease as the heartbeat last extended it.
type heldLease struct {
	mu sync.Mutex
	l  Lease
}

func (h *heldLease) get() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

// extend pushes the lease out; on failure the lease stays as it was.
func (h *heldLease) extend(ctx context.Context, g *Guard) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	nl, err := g.Extend(ctx, h.l)
	if err == nil {
		h.l = nl
	}
	return err
}
