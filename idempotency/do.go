package idempotency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
	// Bound, when set, is the claim the queue made for this delivery in
	// its receive's transaction (a queue.ClaimingReceiver): Do takes it
	// instead of claiming, when it is for this key and fingerprint, and
	// records the result through it, in the transaction that deletes or
	// dead-letters the message. The state machine is the same; only the
	// transactions differ.
	Bound driver.Bound
	// Summary, when set, is kept with the record (driver.Record.Summary)
	// by the claim: what the effect is checked against later and shown —
	// an amount, a currency, the last four of an account; never a secret.
	// At most driver.MaxSummaryBytes. Empty: the record keeps the one an
	// earlier claim wrote, if any.
	Summary string
	// Namespace, when set, is put before the key in the store
	// (Namespace + ":" + key), so that callers sharing a store (two
	// endpoints, two services) never read each other's results. It must
	// not hold the separator (so the stored key splits one way only); give
	// every caller sharing a store a namespace, since a key without one
	// may itself look like "ns:key".
	Namespace string
	// Codec encodes DoTyped's first result for the record. Default
	// encoding/json (named "json"). Do, whose work returns a Done, ignores
	// it.
	Codec Codec
}

// Run is what the work is told about its claim.
type Run struct {
	Lease Lease
	// Reclaimed: an earlier attempt held the key and did not finish; its
	// effect may have happened (ask before doing it again, where you can).
	Reclaimed bool
	// Generation is the record's key generation (1 unless an operator
	// reopened it into a new one, or a *Wait moved it on): derive a
	// downstream idempotency key from it, so that a new generation is a
	// new request downstream.
	Generation int
	// History is the record's history so far, oldest first: the lines of
	// operator reopenings and the notes of earlier runs (a *Wait's, a
	// Done's). Work that runs on a schedule reads where it is from it.
	History []string
	// CreatedAt is when the record was first claimed: kept by reclaims,
	// resumptions and reopenings, so that work can derive from it what
	// must come out the same on every attempt (a message it may have sent
	// before a crash, sent again as the same request). Zero when the store
	// did not say.
	CreatedAt time.Time
}

// Done is the work's result, stored with DONE and handed to duplicates.
type Done struct {
	Status string
	Detail string
	// Note, when set, is added to the record's history as one line (the
	// last attempt's outcome, after earlier *Wait notes).
	Note string
}

// Wait is what work returns, as its error, to end a run without a final
// result: the key is recorded WAITING until Until with Status and Detail
// (why it waits), and the first claim at or after Until (plus the skew
// margin) runs the work again — a new attempt, not a reclaim: the run
// ended cleanly. NextGeneration moves the record to the next key
// generation (Run.Generation + 1: the downstream system gave a final
// answer under the old key, as a declined debit). Note is added to the
// record's history as one line. The record's retention counts from
// Until. Do returns Outcome Waiting with NotBefore set.
//
// A Note can also ride on a permanent failure: an error with a method
// HistoryNote() string, found with errors.As, adds its line to the
// FAILED record's history.
type Wait struct {
	Until          time.Time
	Status, Detail string
	NextGeneration bool
	Note           string
}

func (w *Wait) Error() string {
	return fmt.Sprintf("waiting until %s: %s %s", w.Until.UTC().Format(time.RFC3339), w.Status, w.Detail)
}

// DoResult is what Do did. Every outcome of the claim and of the work is
// here, as data (as an HTTP client returns a 409 as a response, not an
// error); Do's error is kept for a store it could not reach.
type DoResult struct {
	// Outcome is how it ended (Outcome's doc says what each asks of the
	// caller). Waiting is returned when the work returned a *Wait now (Done
	// holds its Status and Detail, Record is empty) or an earlier run did
	// (Record).
	Outcome Outcome
	// Done is the work's result (Acquired, Reclaimed) or the stored one
	// (DuplicateDone).
	Done Done
	// Err is the work's error (Failed, Unfinished) or what took the lease
	// (LeaseLost).
	Err error
	// Record is the record found, for the outcomes where the work did not
	// run. Its State is one of driver.StateInProgress, driver.StateDone and
	// driver.StateFailed (package idempotency/driver).
	Record driver.Record
	// Attempt is the claim's attempt (1 on the first claim).
	Attempt int
	// RetryAfter is how long until trying again can succeed: the rest of
	// another worker's lease (DuplicateInProgress), or of our own, which Do
	// keeps after work that may have had an effect (Unfinished; 0 when the
	// lease was given up, the work having provably not started).
	RetryAfter time.Duration
	// NotBefore is when a Waiting key may run again (the not-before plus
	// the skew margin: the first time a claim succeeds).
	NotBefore time.Time
}

// Do runs fn at most once per key, however often it is called: it claims
// key for fingerprint, runs fn under the claim (extending the lease on
// opts.Heartbeat's beats), and records fn's result as DONE, or FAILED when
// fn's error is ErrPermanent. A later call with the same key gets the
// stored result (Outcome DuplicateDone) without running fn. The result says
// what happened (see DoResult.Outcome); the error is a *NotRunError when fn
// did not run and no stored result came back (DuplicateInProgress,
// Conflict, DuplicateFailed, Waiting from an earlier run), ErrInvalid for
// bad options, or wraps ErrUnavailable when the store could not be reached
// to claim (Attempt 0) or to record the result (the work ran; Attempt set).
//
// A Done.Status that starts with "TYPED " (kept for DoTyped's
// records, so that DoTyped never decodes a Do result as its own) is a bug
// of the work: it is recorded FAILED (the work ran), and Do returns
// Outcome Failed with an error wrapping ErrInvalid, as Err and as Do's
// error.
func (g *Guard) Do(ctx context.Context, key, fingerprint string, fn func(context.Context, Run) (Done, error), opts DoOptions) (DoResult, error) {
	if fn == nil {
		return DoResult{}, fmt.Errorf("%w: nil work", ErrInvalid)
	}
	var bad error
	res, err := g.do(ctx, key, fingerprint, func(ctx context.Context, run Run) (Done, error) {
		done, err := fn(ctx, run)
		if err == nil {
			if bad = typedStatusError(done.Status); bad != nil {
				return Done{}, fmt.Errorf("%w: %w", bad, ErrPermanent)
			}
		}
		return done, err
	}, opts, driver.MaxDetailBytes)
	if err == nil && bad != nil && res.Outcome == Failed {
		err = res.Err
	}
	return res, err
}

// do is Do, with the bound on the Detail of a DONE record: Do's
// driver.MaxDetailBytes, DoTyped's driver.MaxResultBytes (a FAILED
// record's detail, an error's text, is always cut at MaxDetailBytes).
func (g *Guard) do(ctx context.Context, key, fingerprint string, fn func(context.Context, Run) (Done, error), opts DoOptions, doneLimit int) (DoResult, error) {
	if opts.FinishTimeout < 0 || opts.FinishAttempts < 0 {
		return DoResult{}, fmt.Errorf("%w: FinishTimeout and FinishAttempts must not be negative", ErrInvalid)
	}
	key, err := namespacedKey(opts.Namespace, key)
	if err != nil {
		return DoResult{}, err
	}
	if len(opts.Summary) > driver.MaxSummaryBytes {
		return DoResult{}, fmt.Errorf("%w: Summary of %d bytes, at most %d", ErrInvalid, len(opts.Summary), driver.MaxSummaryBytes)
	}
	if opts.FinishTimeout == 0 {
		opts.FinishTimeout = 5 * time.Second
	}
	if opts.FinishAttempts == 0 {
		opts.FinishAttempts = 3
	}
	claim, err := g.claimFor(ctx, key, fingerprint, opts.Summary, opts.Bound)
	if err != nil {
		return DoResult{}, err
	}
	rec := claim.Record
	found := DoResult{Outcome: claim.Outcome, Record: rec, Attempt: rec.Attempt}
	switch claim.Outcome {
	case DuplicateDone:
		found.Done = Done{Status: rec.Status, Detail: rec.Detail}
		return found, nil
	case DuplicateInProgress:
		found.RetryAfter = g.ReclaimableAt(rec.LeaseUntil).Sub(g.Now())
		return found, notRun(found)
	case DuplicateFailed, Conflict:
		return found, notRun(found)
	case Waiting:
		found.NotBefore = g.ReclaimableAt(rec.LeaseUntil)
		found.Done = Done{Status: rec.Status, Detail: rec.Detail}
		found.RetryAfter = max(found.NotBefore.Sub(g.Now()), 0)
		return found, notRun(found)
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
	ran := DoResult{Outcome: claim.Outcome, Attempt: attempt}
	gen := max(rec.Generation, 1)
	done, err := fn(ctx, Run{Lease: held.get(), Reclaimed: claim.Outcome == Reclaimed, Generation: gen, History: slices.Clone(rec.History), CreatedAt: rec.CreatedAt})
	if errors.Is(context.Cause(ctx), ErrLeaseLost) {
		ran.Outcome, ran.Err = LeaseLost, fmt.Errorf("%w: taken over while the work ran; the new owner finishes", ErrLeaseLost)
		return ran, nil
	}
	state, status, detail, limit, note := driver.StateDone, done.Status, done.Detail, doneLimit, done.Note
	var wait *Wait
	var noted interface{ HistoryNote() string }
	switch {
	case err == nil:
		ran.Done = done
	case errors.As(err, &wait):
		if wait.Until.IsZero() {
			g.yield(ctx, held.get(), opts)
			ran.Outcome, ran.Err = Unfinished, fmt.Errorf("%w: a Wait without Until", ErrInvalid)
			return ran, ran.Err
		}
		ran.Outcome, ran.Done, ran.NotBefore = Waiting, Done{Status: wait.Status, Detail: wait.Detail}, g.ReclaimableAt(wait.Until)
		ran.RetryAfter = max(ran.NotBefore.Sub(g.Now()), 0)
		req, ferr := g.finishRequest(held.get(), driver.StateWaiting, wait.Status, wait.Detail, driver.MaxDetailBytes)
		if ferr == nil {
			req.NotBefore, req.ExpiresAt = wait.Until, wait.Until.Add(g.opts.Retention)
			if wait.NextGeneration {
				req.Generation = gen + 1
			}
			ferr = g.write(ctx, withNote(req, wait.Note), opts)
		}
		if ferr != nil {
			if errors.Is(ferr, ErrLeaseLost) {
				ran.Outcome, ran.Done, ran.Err = LeaseLost, Done{}, ferr
				return ran, nil
			}
			return ran, ferr
		}
		return ran, nil
	case errors.Is(err, ErrPermanent):
		ran.Outcome, ran.Err = Failed, err
		state, status, detail, limit, note = driver.StateFailed, "FAILED", err.Error(), driver.MaxDetailBytes, ""
		if errors.As(err, &noted) {
			note = noted.HistoryNote()
		}
	case errors.Is(err, ErrNotStarted):
		g.yield(ctx, held.get(), opts)
		ran.Outcome, ran.Err = Unfinished, err
		return ran, nil
	default:
		// It may have had an effect, or may still be having it: keep the
		// claim, so that no other attempt runs meanwhile; come back once
		// it has passed.
		ran.Outcome, ran.Err = Unfinished, err
		ran.RetryAfter = max(g.ReclaimableAt(held.get().Until).Sub(g.Now()), 0)
		return ran, nil
	}
	if ferr := g.record(ctx, held.get(), state, status, detail, limit, note, opts); ferr != nil {
		if errors.Is(ferr, ErrLeaseLost) {
			ran.Outcome, ran.Done, ran.Err = LeaseLost, Done{}, ferr
			return ran, nil
		}
		return ran, ferr
	}
	return ran, nil
}

// record writes the final state on a context the caller's cancellation
// does not reach, retrying while the store is unavailable.
func (g *Guard) record(ctx context.Context, l Lease, s driver.State, status, detail string, limit int, note string, opts DoOptions) error {
	req, err := g.finishRequest(l, s, status, detail, limit)
	if err != nil {
		return err
	}
	return g.write(ctx, withNote(req, note), opts)
}

// write sends req (through the delivery's binding when there is one) on a
// context the caller's cancellation does not reach, retrying while the
// store is unavailable.
func (g *Guard) write(ctx context.Context, req driver.FinishRequest, opts DoOptions) error {
	base := context.WithoutCancel(ctx)
	var err error
	for i := range opts.FinishAttempts {
		if i > 0 {
			g.pause(time.Duration(i) * 100 * time.Millisecond)
		}
		fctx, cancel := context.WithTimeout(base, opts.FinishTimeout)
		if opts.Bound == nil {
			err = g.store.Finish(fctx, req)
		} else {
			err = opts.Bound.Finish(fctx, req)
		}
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

// pause waits d between two tries of a write: on the Clock's own Sleep
// when it has one (a simulated clock moves instead of waiting), else on
// the wall clock.
func (g *Guard) pause(d time.Duration) {
	if s, ok := g.opts.Clock.(interface{ Sleep(time.Duration) }); ok {
		s.Sleep(d)
		return
	}
	time.Sleep(d)
}

// claimFor is the claim bound to the delivery, if it was made for key and
// fingerprint (taken once), else a claim of Do's own.
func (g *Guard) claimFor(ctx context.Context, key, fingerprint, summary string, b driver.Bound) (Claim, error) {
	if b != nil {
		if req, res, ok := b.Claimed(); ok && req.Key == key && req.Fingerprint == fingerprint {
			return ClaimOf(req, res), nil
		}
	}
	return g.claim(ctx, key, fingerprint, summary)
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
